"""End to end through a real `amber ui`: a Job quoted by submit_job and started by start_quote over GraphQL, as
the UI's two launches do; the warm worker launches its cell run.

The server (the Dagster UI at /ui, open to the local login without sign-in), daemon and warm worker run on the
embedded instance of a temporary AMBER_HOME, started by `amber ui` itself; the cell run executes one real Trial in
a Docker sandbox.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import free_port, funded, stop_group

from amber_pipeline import embedded
from amber_pipeline.cli.client import tls
from amber_pipeline.jobs import cell_names, records
from amber_pipeline.money import wallet
from amber_pipeline.money.prices import show
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

pytestmark = [pytest.mark.dagster_ui, pytest.mark.docker]

STARTUP_BUDGET_S = 60
PIPELINE_BUDGET_S = 120
REPOSITORY = {"repositoryLocationName": "amber", "repositoryName": "__repository__"}

LOCATIONS = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
LAUNCH = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on InvalidSubsetError { message }
  }
}"""
RUN_STATUS = """
query($runId: ID!) { runOrError(runId: $runId) { __typename ... on Run { status } } }"""
# The metadata of a run's step outputs, as the run's page shows it (Quote: each value a text or a JSON)
STEP_OUTPUTS = """
query($runId: ID!) { logsForRun(runId: $runId) { ... on EventConnection { events {
  ... on ExecutionStepOutputEvent { metadataEntries {
    label ... on TextMetadataEntry { text } ... on JsonMetadataEntry { jsonString } } } } } } }"""
TERMINAL = ("SUCCESS", "FAILURE", "CANCELED")
RUNS_OF_JOB = """
query($job: String!) {
  runsOrError(filter: {tags: [{key: "amber/job", value: $job}]}) {
    ... on Runs { results { runId jobName status tags { key value } } }
  }
}"""



class Dagster:
    def __init__(self, client: httpx.Client, proc: subprocess.Popen, log: Path):
        self.client, self.proc, self.log = client, proc, log

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.client.post("/graphql", json={"query": query, "variables": variables or {}})
        response.raise_for_status()
        body = response.json()
        assert "errors" not in body, body["errors"]
        return body["data"]

    def wait(self, what: str, budget: float, check) -> Any:
        deadline = time.monotonic() + budget
        while True:
            assert self.proc.poll() is None, f"amber ui exited while waiting for {what}:\n{self.tail()}"
            try:
                value = check()
            except httpx.TransportError:
                value = None
            if value:
                return value
            assert time.monotonic() < deadline, f"no {what} within {budget} s:\n{self.tail()}"
            time.sleep(0.5)

    def launch(self, job: str, op: str, config: dict[str, Any]) -> str:
        """Launch `job` with `op`'s config, as the launchpad's Launch Run does; the run's id."""
        params = {"selector": {**REPOSITORY, "jobName": job}, "runConfigData": {"ops": {op: {"config": config}}}}
        launched = self.graphql(LAUNCH, {"params": params})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        return str(launched["run"]["runId"])

    def ended(self, what: str, run_id: str, budget: float) -> str:
        """The run's status once it has ended."""
        def done() -> str | None:
            status = self.graphql(RUN_STATUS, {"runId": run_id})["runOrError"]["status"]
            return status if status in TERMINAL else None
        return str(self.wait(f"{what} run end", budget, done))

    def shown(self, run_id: str) -> dict[str, Any]:
        """What the run's step output shows (a submit_job run's: the Quote), by label; JSON values parsed."""
        events = self.graphql(STEP_OUTPUTS, {"runId": run_id})["logsForRun"]["events"]
        return {m["label"]: json.loads(m["jsonString"]) if "jsonString" in m else m.get("text")
                for e in events for m in e.get("metadataEntries", [])}

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@pytest.fixture
def dagster_dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Dagster]:
    home = tmp_path / "amber"
    monkeypatch.setenv("AMBER_HOME", str(home))
    port = free_port()
    log = tmp_path / "amber-ui.log"
    amber = str(Path(sys.executable).parent / "amber")
    with open(log, "wb") as out:
        proc = subprocess.Popen([amber, "ui", "--host", "127.0.0.1", "--port", str(port)], cwd=PROJECT_ROOT,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    # `amber ui` serves Amber's web app at / and the Dagster UI under /ui, with no sign-in on the host
    client = httpx.Client(verify=tls(), base_url=f"http://127.0.0.1:{port}/ui", timeout=10, trust_env=False)
    try:
        yield Dagster(client, proc, log)
    finally:
        client.close()
        _stop_group(proc)


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop `amber ui` as Ctrl-C would: it stops the server and the daemon it started."""
    if proc.poll() is not None:
        return
    stop_group(proc)
    assert embedded.daemon_pid(AmberPaths.from_env()) is None, "amber ui left its daemon running"


@pytest.mark.slow
def test_submit_job_quotes_and_start_quote_runs_its_cell_through_graphql(dagster_dev: Dagster,
                                                                          tmp_path: Path) -> None:
    started = time.monotonic()
    client = dagster_dev.client
    dagster_dev.wait("/server_info 200", STARTUP_BUDGET_S, lambda: client.get("/server_info").status_code == 200)

    def amber_loaded() -> bool:
        entries = dagster_dev.graphql(LOCATIONS)["workspaceOrError"]["locationEntries"]
        return any(e["name"] == "amber" and e["loadStatus"] == "LOADED" for e in entries)

    dagster_dev.wait("LOADED code location", STARTUP_BUDGET_S - (time.monotonic() - started), amber_loaded)

    wh = Warehouse(AmberPaths.from_env())
    funded(wh)  # the Job's Quote is reserved from this Wallet
    bench = tmp_path / "one-task-bench"
    shutil.copytree(PROJECT_ROOT / "examples" / "demo-bench" / "fix-off-by-one", bench / "fix-off-by-one")
    deadline = time.monotonic() + PIPELINE_BUDGET_S

    def left() -> float:
        return deadline - time.monotonic()

    # ---- submit_job shows the Quote, and reserves and starts nothing
    quote_run = dagster_dev.launch("submit_job", "quote_job", {
        "benchmark": str(bench), "agent": "nop", "model_configurations": [], "trials_per_task": 1, "bounds": False})
    assert dagster_dev.ended("submit_job", quote_run, left()) == "SUCCESS"
    assert records.list_jobs(wh, "default") == []
    quote = dagster_dev.shown(quote_run)
    job_id = quote["quote_id"]
    assert job_id.startswith("job-") and quote["ceiling_usd"].startswith("$")
    assert f"launch start_quote with quote_id {job_id}" in quote["next_step"]

    # ---- start_quote with its id reserves it and starts the Job
    start_run = dagster_dev.launch("start_quote", "confirm_quote", {"quote_id": job_id})
    assert dagster_dev.ended("start_quote", start_run, left()) == "SUCCESS"
    [job] = records.list_jobs(wh, "default")
    assert (job.id, job.benchmark_label) == (job_id, "one-task-bench@1")
    with wh.read() as con:
        reserved, _, _ = wallet.quote_totals(con, job.quote_id)
    assert show(reserved) == quote["ceiling_usd"] and reserved == Decimal(quote["quote"]["reserves"])  # as shown
    [cell] = records.cells_of(wh, job.id)

    def cell_runs() -> list[dict[str, Any]]:
        found = dagster_dev.graphql(RUNS_OF_JOB, {"job": job.id})["runsOrError"]["results"]
        return [r for r in found if r["jobName"] == "cell_job"]

    [run] = dagster_dev.wait("cell run", left(), cell_runs)
    # The Job's runs are found by its tag: the submit_job run that quoted it and the start_quote run carry it too.
    job_runs = dagster_dev.graphql(RUNS_OF_JOB, {"job": job.id})["runsOrError"]["results"]
    assert {quote_run, start_run} <= {r["runId"] for r in job_runs}
    tags = {t["key"]: t["value"] for t in run["tags"]}
    [name] = cell_names.read(wh, [cell.cell_key]).values()
    assert tags["dagster/partition"] == name == "one-task-bench@1/nop"
    assert tags["amber/cell"] == cell.cell_key

    assert dagster_dev.ended("cell run", run["runId"], left()) == "SUCCESS"
    [run] = cell_runs()
    assert {t["key"]: t["value"] for t in run["tags"]}["amber/worker_pid"].isdigit()  # Amber's run launcher
    job = records.get_job(wh, job.id, None)
    assert job.status == "completed", job
    with wh.query() as con:
        rows = con.execute("select agent, n_trials, mean_reward from cell_results").fetchall()
    assert rows == [("nop", 1, 0.0)]
    with wh.read() as con:
        reserved, charged, refunded = wallet.quote_totals(con, job.quote_id)
    assert charged > 0 and reserved == charged + refunded
