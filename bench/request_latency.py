"""From a request to its first Trial running, from the CLI and from the UI, with the daemon up.

On a fresh embedded Amber (a temporary AMBER_HOME) with `amber ui` running
(webserver, daemon and warm worker), N one-cell nop Jobs of a one-Task
Benchmark are requested one after another, each way:

- CLI: the clock starts when `amber job submit` is run (interpreter start
  included);
- UI: it starts when the launchpad's request is posted (the `launchRun`
  mutation the UI sends for submit_job).

It stops when Docker reports the start of the Job's first sandbox (a container
labelled with a Trial folder under the Job's run folder): the Trial is
running. Each Job is waited for before the next. Prints each latency, the
median and p90 per path, and FIGURE lines.

    .venv/bin/python bench/request_latency.py [--n 10]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.sandbox import docker_engine
from amber_pipeline.sandbox.environment import TRIAL_DIR_LABEL

AMBER = str(Path(sys.executable).parent / "amber")
TASK = PROJECT_ROOT / "examples" / "demo-bench" / "fix-off-by-one"
LAUNCH = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } }
}"""
RUN_TAGS = """
query($runId: ID!) { runOrError(runId: $runId) { ... on Run { status tags { key value } } } }"""


class SandboxStarts:
    """Docker's start events of Trial sandboxes, by the Job whose run folder holds the Trial."""

    def __init__(self, runs: Path):
        self.runs = f"{runs.resolve()}/"
        self.first: dict[str, float] = {}
        self._seen = threading.Condition()
        self._events = docker_engine.connect().events(
            decode=True, filters={"type": "container", "event": "start", "label": TRIAL_DIR_LABEL})
        threading.Thread(target=self._follow, daemon=True).start()

    def _follow(self) -> None:
        for event in self._events:
            trial_dir = event.get("Actor", {}).get("Attributes", {}).get(TRIAL_DIR_LABEL, "")
            if trial_dir.startswith(self.runs):
                job = trial_dir[len(self.runs):].split("/", 1)[0]
                with self._seen:
                    self.first.setdefault(job, event["timeNano"] / 1e9)
                    self._seen.notify_all()

    def wait(self, job: str, timeout: float) -> float:
        with self._seen:
            if not self._seen.wait_for(lambda: job in self.first, timeout):
                raise SystemExit(f"no sandbox of {job} started within {timeout} s")
            return self.first[job]

    def close(self) -> None:
        self._events.close()


def run(cmd: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stdout}{done.stderr}")
    return done.stdout


def job_of_run(client: httpx.Client, run_id: str) -> str:
    """The Amber Job a submit_job run started: its tag amber/job."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run = client.post("/graphql", json={"query": RUN_TAGS, "variables": {"runId": run_id}}).json()["data"]
        tags = {t["key"]: t["value"] for t in run["runOrError"]["tags"]}
        if "amber/job" in tags:
            return tags["amber/job"]
        if run["runOrError"]["status"] in ("FAILURE", "CANCELED"):
            raise SystemExit(f"the submit_job run {run_id} ended {run['runOrError']['status']}")
        time.sleep(0.1)
    raise SystemExit(f"the submit_job run {run_id} started no Job within 60 s")


def wait_job(env: dict[str, str], job: str) -> None:
    run([AMBER, "job", "wait", job], env)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(0.9 * len(s)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10, help="Jobs per path (default 10)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="amber-latency-") as tmp:
        root = Path(tmp)
        bench = root / "one-task"
        shutil.copytree(TASK, bench / TASK.name)
        env = {**os.environ, "AMBER_HOME": str(root / "amber"), "AMBER_CONFIG": str(root / "config.toml")}
        paths = AmberPaths(root / "amber")
        run([AMBER, "wallet"], env)
        run([AMBER, "credit", "add", "--amount", "10", "--reason", "latency bench"], env)
        port = free_port()
        ui = subprocess.Popen([AMBER, "ui", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, trust_env=False)
        starts = SandboxStarts(paths.runs)
        try:
            _wait_ui(client, ui)
            # warm-up: builds the Task's image and loads every path once
            run([AMBER, "job", "submit", str(bench), "--agent", "nop", "--wait"], env)
            cli, via_ui = [], []
            for _ in range(args.n):
                t0 = time.time()
                out = run([AMBER, "job", "submit", str(bench), "--agent", "nop"], env)
                job = next(w.rstrip(".") for w in out.split() if w.startswith("job-"))
                cli.append(starts.wait(job, 120) - t0)
                wait_job(env, job)
            for _ in range(args.n):
                t0 = time.time()
                job = job_of_run(client, _launch(client, str(bench)))
                via_ui.append(starts.wait(job, 120) - t0)
                wait_job(env, job)
        finally:
            starts.close()
            client.close()
            os.killpg(ui.pid, signal.SIGTERM)
            ui.wait(timeout=60)
    print(f"request to first Trial running, {args.n} one-cell nop Jobs per path, daemon up")
    print(f"{'':6}{'median s':>10}{'p90 s':>10}{'min s':>10}{'max s':>10}   each")
    for label, xs in (("CLI", cli), ("UI", via_ui)):
        print(f"{label:6}{statistics.median(xs):10.2f}{p90(xs):10.2f}{min(xs):10.2f}{max(xs):10.2f}   "
              + " ".join(f"{x:.2f}" for x in xs))
    both = cli + via_ui
    print(f"FIGURE request_to_trial_median_s {statistics.median(both):.2f} s")
    print(f"FIGURE request_to_trial_p90_s {p90(both):.2f} s")
    for label, xs in (("cli", cli), ("ui", via_ui)):
        print(f"FIGURE request_to_trial_{label}_median_s {statistics.median(xs):.2f} s")
        print(f"FIGURE request_to_trial_{label}_p90_s {p90(xs):.2f} s")


def _wait_ui(client: httpx.Client, ui: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if ui.poll() is not None:
            raise SystemExit("amber ui exited at start")
        try:
            body = client.post("/graphql", json={"query": "{ workspaceOrError { ... on Workspace { "
                                                            "locationEntries { loadStatus } } } }"}).json()
            entries = body["data"]["workspaceOrError"]["locationEntries"]
            if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                return
        except (httpx.TransportError, KeyError, TypeError):
            pass
        time.sleep(0.5)
    raise SystemExit("the UI did not load its code location within 120 s")


def _launch(client: httpx.Client, bench: str) -> str:
    params = {"selector": {"repositoryLocationName": "amber", "repositoryName": "__repository__",
                           "jobName": "submit_job"},
              "runConfigData": {"ops": {"quote_job": {"config": {"benchmark": bench, "agent": "nop"}}}},
              "mode": "default"}
    body = client.post("/graphql", json={"query": LAUNCH, "variables": {"params": params}}).json()
    launched = body["data"]["launchRun"]
    if launched["__typename"] != "LaunchRunSuccess":
        raise SystemExit(f"launchRun: {body}")
    return launched["run"]["runId"]


if __name__ == "__main__":
    main()
