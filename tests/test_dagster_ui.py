"""End to end through a real `amber ui`: submit a Job over GraphQL, the warm worker launches its cell run.

The webserver, daemon and warm worker run on the embedded instance of a temporary AMBER_HOME, started by
`amber ui` itself; the cell run executes one real Trial in a Docker sandbox.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import free_port, funded, stop_group

from amber_pipeline import embedded
from amber_pipeline.jobs import cell_names, records
from amber_pipeline.money import wallet
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
            assert self.proc.poll() is None, f"dagster dev exited while waiting for {what}:\n{self.tail()}"
            try:
                value = check()
            except httpx.TransportError:
                value = None
            if value:
                return value
            assert time.monotonic() < deadline, f"no {what} within {budget} s:\n{self.tail()}"
            time.sleep(0.5)

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
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10, trust_env=False)
    try:
        yield Dagster(client, proc, log)
    finally:
        client.close()
        _stop_group(proc)


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop `amber ui` as Ctrl-C would: it stops the webserver and the daemon it started."""
    if proc.poll() is not None:
        return
    stop_group(proc)
    assert embedded.daemon_pid(AmberPaths.from_env()) is None, "amber ui left its daemon running"


def test_submit_job_through_graphql_runs_its_cell(dagster_dev: Dagster, tmp_path: Path) -> None:
    started = time.monotonic()
    client = dagster_dev.client
    dagster_dev.wait("/server_info 200", STARTUP_BUDGET_S, lambda: client.get("/server_info").status_code == 200)

    def amber_loaded() -> bool:
        entries = dagster_dev.graphql(LOCATIONS)["workspaceOrError"]["locationEntries"]
        return any(e["name"] == "amber" and e["loadStatus"] == "LOADED" for e in entries)

    dagster_dev.wait("LOADED code location", STARTUP_BUDGET_S - (time.monotonic() - started), amber_loaded)

    funded(Warehouse(AmberPaths.from_env()))  # the Job's Quote is reserved from this Wallet
    bench = tmp_path / "one-task-bench"
    shutil.copytree(PROJECT_ROOT / "examples" / "demo-bench" / "fix-off-by-one", bench / "fix-off-by-one")
    params = {
        "selector": {**REPOSITORY, "jobName": "submit_job"},
        "runConfigData": {"ops": {"quote_job": {"config": {
            "benchmark": str(bench), "agent": "nop", "model_configurations": [], "trials_per_task": 1,
            "bounds": False}}}},
    }
    launched = dagster_dev.graphql(LAUNCH, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    deadline = time.monotonic() + PIPELINE_BUDGET_S

    def left() -> float:
        return deadline - time.monotonic()

    def submit_done() -> str | None:
        status = dagster_dev.graphql(RUN_STATUS, {"runId": run_id})["runOrError"]["status"]
        return status if status in ("SUCCESS", "FAILURE", "CANCELED") else None

    assert dagster_dev.wait("submit_job run end", left(), submit_done) == "SUCCESS"
    wh = Warehouse(AmberPaths.from_env())
    [job] = records.list_jobs(wh, "default")
    assert job.benchmark_label == "one-task-bench@1"
    [cell] = records.cells_of(wh, job.id)

    def cell_runs() -> list[dict[str, Any]]:
        found = dagster_dev.graphql(RUNS_OF_JOB, {"job": job.id})["runsOrError"]["results"]
        return [r for r in found if r["jobName"] == "cell_job"]

    [run] = dagster_dev.wait("cell run", left(), cell_runs)
    # The Job's runs are found by its tag: the submit_job run carries it too.
    job_runs = dagster_dev.graphql(RUNS_OF_JOB, {"job": job.id})["runsOrError"]["results"]
    assert run_id in {r["runId"] for r in job_runs}
    tags = {t["key"]: t["value"] for t in run["tags"]}
    [name] = cell_names.read(wh, [cell.cell_key]).values()
    assert tags["dagster/partition"] == name == "one-task-bench@1/nop"
    assert tags["amber/cell"] == cell.cell_key

    def cell_run_done() -> str | None:
        status = dagster_dev.graphql(RUN_STATUS, {"runId": run["runId"]})["runOrError"]["status"]
        return status if status in ("SUCCESS", "FAILURE", "CANCELED") else None

    assert dagster_dev.wait("cell run end", left(), cell_run_done) == "SUCCESS"
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
