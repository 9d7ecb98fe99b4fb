"""From a request to its first Trial running, from the CLI and from the UI, with the daemon up.

On a fresh embedded Amber (a temporary AMBER_HOME) with `amber ui` running
(its server with the Dagster UI at /ui, daemon and warm worker), N one-cell nop Jobs of a one-Task
Benchmark are requested one after another, each way. The request is the
user's commit to the Job, the moment money is reserved:

- CLI: the clock starts when `amber job submit` is run (interpreter start
  included; it prices the Job and starts it in one command);
- UI: the launchpad's two launches through Dagster's GraphQL API, as the
  Dagster UI sends them (the `launchRun` mutation): submit_job, which prices
  the Job and shows the Quote, reserving nothing, then start_quote with the
  Quote's id as soon as that run has succeeded, which reserves the Quote shown
  and starts the Job. `UI launch` (`FIGURE ui_request_to_trial_median_s`)
  runs from submit_job's launch to the first Trial: the whole wait of a user
  who confirms at once. `UI` runs from start_quote's launch (the user's
  commit), and `UI quote` is the submit_job run's own time, launch to end.

Each launch's runs say how many times they priced the request (the
`pricings` entry of their step output's metadata, counted where the Job is
priced, `lifecycle.pricings`); the bench reads them back through GraphQL and
prints the most any launch took (`FIGURE ui_pricings_per_launch`: it must be 1,
the Quote shown being the one started).

It stops when Docker reports the start of the Job's first sandbox (a container
labelled with a Trial folder under the Job's run folder): the Trial is
running. One Job each way warms up first (the Task's image, each path's
first load); each Job is waited for before the next. Prints each latency,
the median and p90 per path, and FIGURE lines. `--smoke` requests one Job
each way with no warm-up (for the test suite: the first CLI Job builds the
Task's image if it is missing, and each figure is a cold one).

    .venv/bin/python bench/request_latency.py [--n 10] [--smoke]
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
from dataclasses import dataclass
from pathlib import Path

import httpx

from amber_pipeline.cli.client import tls
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.sandbox import docker_engine
from amber_pipeline.sandbox.container import TRIAL_DIR_LABEL

AMBER = str(Path(sys.executable).parent / "amber")
TASK = PROJECT_ROOT / "examples" / "demo-bench" / "fix-off-by-one"
LAUNCH = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } }
}"""
RUN_TAGS = """
query($runId: ID!) { runOrError(runId: $runId) { ... on Run { status tags { key value } } } }"""
OUTPUT_METADATA = """
query($runId: ID!) { logsForRun(runId: $runId) { ... on EventConnection { events { __typename
  ... on ExecutionStepOutputEvent { metadataEntries { label ... on IntMetadataEntry { intValue } } } } } } }"""


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


def succeeded(client: httpx.Client, run_id: str, job_name: str) -> dict[str, str]:
    """The tags of a run once it has succeeded."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run = client.post("/graphql", json={"query": RUN_TAGS, "variables": {"runId": run_id}}).json()["data"]
        status = run["runOrError"]["status"]
        if status == "SUCCESS":
            return {t["key"]: t["value"] for t in run["runOrError"]["tags"]}
        if status in ("FAILURE", "CANCELED"):
            raise SystemExit(f"the {job_name} run {run_id} ended {status}")
        time.sleep(0.1)
    raise SystemExit(f"the {job_name} run {run_id} did not succeed within 60 s")


@dataclass(frozen=True)
class UiLaunch:
    """A Job requested through the UI: its id, its two runs, and when submit_job and start_quote were launched."""

    job: str
    quote_run: str
    start_run: str
    asked: float  # submit_job's launch
    shown: float  # its run's success seen: start_quote's launch

    def pricings(self, client: httpx.Client) -> int:
        """How many times the launch priced the request, as its two runs recorded it, once both have succeeded."""
        succeeded(client, self.start_run, "start_quote")
        return sum(_pricings(client, run, job) for run, job in ((self.quote_run, "submit_job"),
                                                                 (self.start_run, "start_quote")))


def ui_request(client: httpx.Client, bench: str) -> UiLaunch:
    """A Job requested through the UI: quoted by submit_job, then confirmed by start_quote with the Quote's id
    (the submit_job run's tag amber/job, once it has succeeded: start_quote confirms only such a Quote)."""
    asked = time.time()
    quote_run = _launch(client, "submit_job", "quote_job", {"benchmark": bench, "agent": "nop"})
    job = succeeded(client, quote_run, "submit_job").get("amber/job")
    if job is None:
        raise SystemExit(f"the submit_job run {quote_run} showed no Quote (no tag amber/job)")
    shown = time.time()
    return UiLaunch(job, quote_run, _launch(client, "start_quote", "confirm_quote", {"quote_id": job}), asked, shown)


def _pricings(client: httpx.Client, run_id: str, job_name: str) -> int:
    """The `pricings` its step output recorded (`lifecycle.pricings`); a run that recorded none fails the bench."""
    body = client.post("/graphql", json={"query": OUTPUT_METADATA, "variables": {"runId": run_id}}).json()
    for event in body["data"]["logsForRun"].get("events") or []:
        for entry in event.get("metadataEntries") or []:
            if entry.get("label") == "pricings" and entry.get("intValue") is not None:
                return int(entry["intValue"])
    raise SystemExit(f"the {job_name} run {run_id} recorded no pricings in its output's metadata")


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
    parser.add_argument("--smoke", action="store_true", help="one Job per path, no warm-up (for the test suite)")
    args = parser.parse_args()
    n = 1 if args.smoke else args.n
    with tempfile.TemporaryDirectory(prefix="amber-latency-") as tmp:
        root = Path(tmp)
        bench = root / "one-task"
        shutil.copytree(TASK, bench / TASK.name)
        env = {**os.environ, "AMBER_HOME": str(root / "amber"), "AMBER_CONFIG": str(root / "config.toml")}
        paths = AmberPaths(root / "amber")
        run([AMBER, "workspace", "create", "default"], env)  # a read (`amber wallet`) makes no Workspace
        run([AMBER, "credit", "add", "--amount", "10", "--reason", "latency bench"], env)
        port = free_port()
        ui = subprocess.Popen([AMBER, "ui", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
        client = httpx.Client(verify=tls(), base_url=f"http://127.0.0.1:{port}/ui", timeout=30,  # Dagster's
                              trust_env=False)
        starts = SandboxStarts(paths.runs)
        try:
            _wait_ui(client, ui)
            if not args.smoke:  # warm-up: builds the Task's image and loads every path once
                run([AMBER, "job", "submit", str(bench), "--agent", "nop", "--wait"], env)
                warm = ui_request(client, str(bench))
                warm.pricings(client)
                wait_job(env, warm.job)
            cli, via_ui, quoting, launched, priced = [], [], [], [], []
            for _ in range(n):
                t0 = time.time()
                out = run([AMBER, "job", "submit", str(bench), "--agent", "nop"], env)
                job = next(w.rstrip(".") for w in out.split() if w.startswith("job-"))
                cli.append(starts.wait(job, 120) - t0)
                wait_job(env, job)
            for _ in range(n):
                asked = ui_request(client, str(bench))
                first = starts.wait(asked.job, 120)
                quoting.append(asked.shown - asked.asked)
                via_ui.append(first - asked.shown)
                launched.append(first - asked.asked)
                priced.append(asked.pricings(client))
                wait_job(env, asked.job)
        finally:
            starts.close()
            client.close()
            os.killpg(ui.pid, signal.SIGTERM)
            ui.wait(timeout=60)
    print(f"request to first Trial running, {n} one-cell nop Jobs per path, daemon up (UI launch: from submit_job's "
          "launch; UI: from start_quote's launch; UI quote: submit_job's run, before it)")
    print(f"{'':10}{'median s':>10}{'p90 s':>10}{'min s':>10}{'max s':>10}   each")
    for label, xs in (("CLI", cli), ("UI launch", launched), ("UI", via_ui), ("UI quote", quoting)):
        print(f"{label:10}{statistics.median(xs):10.2f}{p90(xs):10.2f}{min(xs):10.2f}{max(xs):10.2f}   "
              + " ".join(f"{x:.2f}" for x in xs))
    print("pricings of the request per UI launch (submit_job's and start_quote's, as their runs recorded them): "
          + " ".join(str(p) for p in priced))
    both = cli + via_ui
    print(f"FIGURE request_to_trial_median_s {statistics.median(both):.2f} s")
    print(f"FIGURE request_to_trial_p90_s {p90(both):.2f} s")
    for label, xs in (("cli", cli), ("ui", via_ui)):
        print(f"FIGURE request_to_trial_{label}_median_s {statistics.median(xs):.2f} s")
        print(f"FIGURE request_to_trial_{label}_p90_s {p90(xs):.2f} s")
    print(f"FIGURE ui_quote_median_s {statistics.median(quoting):.2f} s")
    print(f"FIGURE ui_request_to_trial_median_s {statistics.median(launched):.2f} s")
    print(f"FIGURE ui_pricings_per_launch {max(priced)} pricings")


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


def _launch(client: httpx.Client, job: str, op: str, config: dict[str, str]) -> str:
    """Launch `job` with `op`'s config, as the launchpad's Launch Run does; the run's id."""
    params = {"selector": {"repositoryLocationName": "amber", "repositoryName": "__repository__", "jobName": job},
              "runConfigData": {"ops": {op: {"config": config}}}, "mode": "default"}
    body = client.post("/graphql", json={"query": LAUNCH, "variables": {"params": params}}).json()
    launched = body["data"]["launchRun"]
    if launched["__typename"] != "LaunchRunSuccess":
        raise SystemExit(f"launchRun of {job}: {body}")
    return str(launched["run"]["runId"])


if __name__ == "__main__":
    main()
