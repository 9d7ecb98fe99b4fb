"""Four faults users met in the Dagster UI, each proved fixed through the path the UI takes.

1. `comparisons` showed only the comparisons of the Benchmark Version whose cell finished last, with no Benchmark:
   each cell run now records every comparison, each with its Benchmark Version's label.
2. Materialize on `trials` failed its step with a traceback and marked a good cell failed: Amber's run coordinator
   now refuses it before it is queued, in one sentence, and the cell keeps its state; Materialize on `rewards` and
   `cell_aggregates` (scoring the cell again) still runs.
3. A relative `benchmark:` in the launchpad was read from the install folder: it is read from the folder that holds
   AMBER_HOME, as the README says.
4. A launchpad mistake (an unknown Model Configuration) showed up only after launch, as a stack trace: the launch is
   now refused before a run is queued, with one sentence naming the field.

Launches go through Dagster's real GraphQL schema in this process (dagster_graphql's test client), against Amber's
workspace.yaml's definitions served by a code server (one for the module) and an instance of each test's own whose
run coordinator is Amber's, so what a Launch returns is what the UI receives. No daemon runs: a launch that is not
refused stays queued.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql
from helpers import free_port, funded, stop_group, submit

from amber_pipeline.cells import cell_file_id, model_name
from amber_pipeline.definitions import defs
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import cell_names, records
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trials_table
from assets.cell_job import JOB_TAG, NO_JOB, cell_scores
from assets.job_requests import launchpad_benchmark
from assets.resources import WarehouseResource

DEMO_BENCH = PROJECT_ROOT / "examples" / "demo-bench"
COORDINATOR = {"run_coordinator": {"module": "launcher.run_queue", "class": "PromptRunCoordinator"}}
REPOSITORY = {"repositoryLocationName": "amber", "repositoryName": "__repository__"}

# The UI's own mutation (its LaunchPipelineExecution), asking for what the UI shows of each result
LAUNCH = """
mutation($executionParams: ExecutionParams!) {
  launchPipelineExecution(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId status } }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message path reason } }
    ... on PythonError { message stack }
  }
}"""
PARTITIONS = """
query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode {
  assetPartitionStatuses { ... on DefaultPartitionStatuses { materializedPartitions failedPartitions } } } } }"""


def bench(where: Path, *tasks: str) -> Path:
    for name in tasks:
        shutil.copytree(DEMO_BENCH / name, where / name)
    return where


@pytest.fixture
def instance(amber_home: Path) -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test(overrides=COORDINATOR) as inst:
        yield inst


@pytest.fixture(scope="module")
def code_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Amber's code location served over gRPC for the module, as deploy/workspace.grpc.yaml serves it: the
    definitions of workspace.yaml's module under its location name, loaded once rather than by a code server of
    each test's own. It serves definitions only; each test's instance, catalog and run coordinator are its own.
    The workspace file that names it."""
    folder = tmp_path_factory.mktemp("code-server")
    port = free_port()
    with open(folder / "code-server.log", "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "dagster", "api", "grpc", "-m", "amber_pipeline.definitions", "-d",
             str(PROJECT_ROOT), "--host", "127.0.0.1", "--port", str(port), "--location-name", "amber"],
            cwd=PROJECT_ROOT, env={**os.environ, "AMBER_HOME": str(folder / "amber")}, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "Started Dagster code server" not in (said := (folder / "code-server.log").read_text()):
            assert server.poll() is None and time.monotonic() < deadline, said
            time.sleep(0.2)
        workspace = folder / "workspace.yaml"
        workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": {
            "host": "127.0.0.1", "port": port, "location_name": "amber"}}]}))
        yield workspace
    finally:
        stop_group(server)


@pytest.fixture
def ui(instance: dg.DagsterInstance, code_server: Path) -> Iterator[Any]:
    """What the webserver answers the UI with: Amber's code location, over gRPC from the module's code server."""
    with define_out_of_process_context(str(code_server), None, instance) as context:
        yield context


def launch(ui: Any, job: str, run_config: dict[str, Any] | None = None, assets: list[str] | None = None,
           tags: dict[str, str] | None = None) -> dict[str, Any]:
    """Launch as the UI's Launch (or Materialize) button does; the mutation's result."""
    selector: dict[str, Any] = {**REPOSITORY, "pipelineName": job}
    if assets is not None:
        selector["assetSelection"] = [{"path": [a]} for a in assets]
    params = {"selector": selector, "runConfigData": run_config or {}, "mode": "default",
              "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]}}
    result = execute_dagster_graphql(ui, LAUNCH, {"executionParams": params})
    assert not result.errors, result.errors
    return result.data["launchPipelineExecution"]


# ---- 1. comparisons: every Benchmark Version's, each with its Benchmark ------------------------------------------

def scored_trials(wh: Warehouse, job_id: str, tasks: tuple[str, ...]) -> None:
    """Store a scored Trial of each Task of each of the Job's cells, as its cell run would: replay-strong solves
    every Task, replay-weak none."""
    job = records.get_job(wh, job_id, None)
    at = datetime(2026, 12, 2, tzinfo=UTC)
    for cell in records.cells_of(wh, job_id):
        model = model_name(cell.model_configuration)  # as a cell run stores it: the name
        rows = [TrialRecord(
            workspace="default", job_id=job_id, cell_key=cell.cell_key, benchmark_version_id=job.benchmark_version_id,
            task_name=task, attempt=1, trial_name=f"{task}__1", agent=cell.agent, agent_version="v1",
            model_configuration=model, outcome="scored", reward=1.0 if "strong" in model else 0.0, errored=False,
            retries=0, error_type=None, error_message=None, input_tokens=10, output_tokens=5, cost_usd=0.001,
            started_at=at, finished_at=at, duration_sec=1.0, image_id=None, trial_dir=f"/x/{task}")
            for task in tasks]
        wh.write_parquet(trials_table(rows), wh.trials_file(cell_file_id(cell.cell_key), job_id))


def test_each_cell_run_records_every_comparison_with_its_benchmark(
        tmp_path: Path, warehouse: Warehouse, instance: dg.DagsterInstance) -> None:
    models = ["replay-strong", "replay-weak"]
    benches = {"alpha-bench": ("fix-off-by-one", "ini-port-change"),
               "beta-bench": ("count-log-errors", "organize-inbox")}
    jobs = [submit(warehouse, str(bench(tmp_path / name, *tasks)), "terminus-2", models, 1)
            for name, tasks in benches.items()]
    labels = [records.get_job(warehouse, job.id, None).benchmark_label for job in jobs]
    assert labels == ["alpha-bench@1", "beta-bench@1"]
    for job, tasks in zip(jobs, benches.values(), strict=True):
        scored_trials(warehouse, job.id, tasks)
        for cell in records.cells_of(warehouse, job.id):  # each cell's run, the last one of beta-bench's
            [name] = cell_names.read(warehouse, [cell.cell_key]).values()
            instance.add_dynamic_partitions("cells", [name])
            ran = dg.materialize([cell_scores], partition_key=name, instance=instance,
                                 resources={"warehouse": WarehouseResource()}, tags={JOB_TAG: job.id})
            assert ran.success

    latest = instance.get_latest_materialization_event(dg.AssetKey("comparisons"))
    assert latest is not None and latest.asset_materialization is not None
    metadata = latest.asset_materialization.metadata
    rows = [r.data for r in metadata["table"].records]  # type: ignore[attr-defined]
    assert metadata["comparisons"].value == 2
    assert [(r["benchmark"], r["agent"], r["better"], r["worse"]) for r in rows] == [
        (label, "terminus-2", "replay-strong", "replay-weak") for label in labels]
    assert all(r["difference"] == 1.0 and r["workspace"] == "default" for r in rows)
    assert "benchmark" in [c.name for c in metadata["table"].schema.columns]  # type: ignore[attr-defined]

    # The hourly (or on demand) materialization of `comparisons` holds the same rows.
    again = dg.materialize([defs.get_assets_def("comparisons")], instance=instance,
                           resources={"warehouse": WarehouseResource()})
    [mat] = again.get_asset_materialization_events()
    assert [r.data for r in mat.materialization.metadata["table"].records] == rows  # type: ignore[attr-defined]


# ---- 2. Materialize on a cell asset ----------------------------------------------------------------------------------

def partitions(ui: Any, asset: str) -> dict[str, list[str]]:
    node = execute_dagster_graphql(ui, PARTITIONS, {"key": {"path": [asset]}}).data["assetNodeOrError"]
    return node["assetPartitionStatuses"]


def test_materialize_on_trials_is_refused_in_one_sentence_and_the_cell_stays_good(
        warehouse: Warehouse, instance: dg.DagsterInstance, ui: Any) -> None:
    job = submit(warehouse, str(DEMO_BENCH), "nop", [], 1)
    [cell] = records.cells_of(warehouse, job.id)
    [name] = cell_names.read(warehouse, [cell.cell_key]).values()
    instance.add_dynamic_partitions("cells", [name])
    instance.report_runless_asset_event(dg.AssetMaterialization("trials", partition=name))  # a good cell
    assert partitions(ui, "trials") == {"materializedPartitions": [name], "failedPartitions": []}

    # The asset's Materialize (the implicit asset job), and cell_job itself for the same asset, one partition.
    for job_name in ("__ASSET_JOB", "cell_job"):
        for assets in (["trials"], ["trials", "rewards", "cell_aggregates"]):
            refused = launch(ui, job_name, assets=assets, tags={"dagster/partition": name})
            assert refused == {"__typename": "InvalidSubsetError", "message": NO_JOB}, (job_name, assets)
    assert NO_JOB.count(". ") == 0 and NO_JOB.endswith(".")  # one sentence
    assert instance.get_runs() == []  # no run was queued, none failed
    assert partitions(ui, "trials") == {"materializedPartitions": [name], "failedPartitions": []}
    assert records.get_job(warehouse, job.id, None).status == "running"  # and the Job was not touched

    # Scoring the cell again needs no Job: Materialize on rewards and cell_aggregates is queued.
    scored = launch(ui, "__ASSET_JOB", assets=["rewards", "cell_aggregates"], tags={"dagster/partition": name})
    assert scored["__typename"] == "LaunchRunSuccess" and scored["run"]["status"] == "QUEUED", scored
    # A cell run of a Job (as the warm worker and the sensor make them) is queued as before.
    ran = launch(ui, "cell_job", tags={"dagster/partition": name, JOB_TAG: job.id})
    assert ran["__typename"] == "LaunchRunSuccess", ran


def test_a_cell_run_without_a_job_still_fails_its_step_where_no_coordinator_stands_guard(
        warehouse: Warehouse, instance: dg.DagsterInstance) -> None:
    """In process (`dagster asset materialize`, a test), no run coordinator is asked: the step refuses itself."""
    job = submit(warehouse, str(DEMO_BENCH), "nop", [], 1)
    [cell] = records.cells_of(warehouse, job.id)
    instance.add_dynamic_partitions("cells", [cell.cell_key])
    result = defs.resolve_job_def("cell_job").execute_in_process(
        partition_key=cell.cell_key, instance=instance, raise_on_error=False)
    assert not result.success
    assert records.get_job(warehouse, job.id, None).status == "running"


# ---- 3. a relative `benchmark:` in the launchpad -----------------------------------------------------------------

def test_a_relative_benchmark_is_read_from_the_folder_that_holds_amber_home(amber_home: Path) -> None:
    paths = AmberPaths.from_env()
    assert launchpad_benchmark("mini-bench", paths) == str(amber_home.parent / "mini-bench")
    assert launchpad_benchmark("benches/mini-bench", paths) == str(amber_home.parent / "benches" / "mini-bench")
    assert launchpad_benchmark("/abs/bench", paths) == "/abs/bench"
    assert launchpad_benchmark("demo-bench@1", paths) == "demo-bench@1"  # a label, no folder by that name
    (amber_home.parent / "odd@1").mkdir(parents=True)
    assert launchpad_benchmark("odd@1", paths) == str(amber_home.parent / "odd@1")  # a folder, as the CLI reads it


def test_submit_job_quotes_a_relative_folder_from_the_amber_home_not_the_install_folder(
        amber_home: Path, warehouse: Warehouse, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    funded(warehouse)
    bench(amber_home.parent / "mini-bench", "fix-off-by-one")
    monkeypatch.chdir(PROJECT_ROOT)  # where Dagster runs a step: the install folder
    submit_job = defs.resolve_job_def("submit_job")

    def quote(benchmark: str) -> dg.ExecuteInProcessResult:
        return submit_job.execute_in_process(run_config={"ops": {"quote_job": {"config": {
            "benchmark": benchmark, "agent": "nop"}}}}, instance=instance, raise_on_error=False)

    quoted = quote("mini-bench")
    assert quoted.success
    [output] = [e for e in quoted.all_events if e.event_type == dg.DagsterEventType.STEP_OUTPUT]
    assert output.step_output_data.metadata["benchmark"].value == "mini-bench@1"

    # A folder only the install folder has is not read from there.
    refused = quote("examples/demo-bench")
    assert not refused.success
    [failure] = [e for e in refused.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    said = failure.step_failure_data.user_failure_data
    assert said is not None and str(said.description).startswith(
        f"No Benchmark at {amber_home.parent / 'examples' / 'demo-bench'}:")

    # The launchpad opens with the demo Job, which holds wherever AMBER_HOME is.
    default = submit_job.run_config["ops"]["quote_job"]["config"]  # type: ignore[index]
    assert Path(default["benchmark"]) == DEMO_BENCH


# ---- 4. launchpad mistakes, refused before launch ------------------------------------------------------------------

def submit_config(**fields: Any) -> dict[str, Any]:
    return {"ops": {"quote_job": {"config": {"benchmark": "mini-bench", "agent": "terminus-2",
                                             "model_configurations": ["replay-strong"], **fields}}}}


@pytest.mark.parametrize(("fields", "field", "says"), [
    ({"model_configurations": ["no-such-model"]}, "model_configurations",
     "Unknown Model Configuration 'no-such-model'"),
    ({"trials_per_task": 11}, "trials_per_task", "Trials per Task must be from 1 to 10, not 11"),
    ({"agent": "no-such-agent"}, "agent", "Unknown Agent 'no-such-agent'"),
    ({"agent": "nop"}, "model_configurations", "nop calls no model"),
    ({"ceiling_usd": 1e-9}, "ceiling_usd", "--ceiling"),
    ({"benchmark": "no-such-folder"}, "benchmark", "No Benchmark at "),
    ({"model_configurations": ["replay-strong", "replay-weak"], "margin_points": 5.0}, "margin_points",
     "A margin decides when a Job stops: add --stop-when-decided, or drop --margin-points."),
    ({"model_configurations": ["replay-strong", "replay-weak"], "order_seed": 7}, "order_seed",
     "Only a Job that stops once decided runs its Tasks in a seeded order"),
    ({"stop_when_decided": True}, "stop_when_decided",
     "A Job stops once its comparison is decided, so it needs two Model Configurations to compare"),
    ({"model_configurations": ["replay-strong", "replay-weak"], "stop_when_decided": True, "margin_points": 60.0},
     "margin_points", "The margin must be from 0 to 50 points, not 60: pick a number in that range."),
])
def test_a_launchpad_mistake_is_refused_before_launch_naming_the_field(
        tmp_path: Path, amber_home: Path, warehouse: Warehouse, instance: dg.DagsterInstance, ui: Any,
        fields: dict[str, Any], field: str, says: str) -> None:
    funded(warehouse)
    bench(amber_home.parent / "mini-bench", "fix-off-by-one")
    refused = launch(ui, "submit_job", submit_config(**fields))
    assert refused["__typename"] == "RunConfigValidationInvalid", refused
    [error] = refused["errors"]
    assert error["message"].startswith(f"{field}: ") and says in error["message"], error
    assert error["path"] == ["ops", "quote_job", "config", field]
    assert "\n" not in error["message"] and "Traceback" not in error["message"]
    assert instance.get_runs() == []  # nothing queued, nothing failed
    assert records.list_jobs(warehouse, "default") == []


def test_a_good_launchpad_config_is_queued(amber_home: Path, warehouse: Warehouse, instance: dg.DagsterInstance,
                                          ui: Any) -> None:
    funded(warehouse)
    bench(amber_home.parent / "mini-bench", "fix-off-by-one")
    launched = launch(ui, "submit_job", submit_config())
    assert launched["__typename"] == "LaunchRunSuccess" and launched["run"]["status"] == "QUEUED", launched
    assert launch(ui, "submit_job")["__typename"] == "LaunchRunSuccess"  # the launchpad's default, the demo Job


def test_continue_job_and_start_quote_mistakes_are_refused_before_launch(
        warehouse: Warehouse, instance: dg.DagsterInstance, ui: Any) -> None:
    refused = launch(ui, "continue_job", {"ops": {"quote_continuation": {"config": {
        "job_id": "job-0", "amount": "1e3"}}}})
    assert refused["__typename"] == "RunConfigValidationInvalid", refused
    assert refused["errors"][0]["message"].startswith("amount: ")
    refused = launch(ui, "start_quote", {"ops": {"confirm_quote": {"config": {"quote_id": "job-never-shown"}}}})
    assert refused["__typename"] == "RunConfigValidationInvalid", refused
    assert refused["errors"][0]["message"] == ("quote_id: No Quote job-never-shown was shown: launch submit_job (or "
                                               "continue_job) and start the id it shows.")
    assert instance.get_runs() == []


def test_each_refusal_of_a_request_names_its_field(amber_home: Path) -> None:
    """The same rules the CLI and API apply (`JobRequest.check`), each refusal saying which field it is about."""
    paths = AmberPaths.from_env()
    cases = {"trials_per_task": JobRequest(benchmark="b", agent="nop", trials_per_task=0),
             "agent": JobRequest(benchmark="b", agent="nobody"),
             "model_configurations": JobRequest(benchmark="b", agent="terminus-2", model_configurations=["nope"]),
             "ceiling_usd": JobRequest(benchmark="b", agent="nop", ceiling_usd=-5)}
    for field, request in cases.items():
        with pytest.raises(AmberError) as refused:
            request.check(paths, "default")
        assert refused.value.field == field, (field, str(refused.value))
    assert os.environ["AMBER_HOME"] == str(amber_home)
