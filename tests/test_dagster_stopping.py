"""A Job that stops once its comparison is decided, in the Dagster UI: the launchpad takes stop_when_decided and a
margin (its run config is the Job request; a bad combination is refused before launch with the other launchpad
mistakes, in `test_dagster_ui_faults`), submit_job then start_quote make a Job that stops once decided, and a cell
run of such a Job shows, on the cell's score, where the Job's comparisons stand and what stopping saved, as
`amber report` prints it.

Launches go through Dagster's GraphQL schema as the UI's Launch does (`test_dagster_ui_faults`); the stopping Jobs
are real (`stopping_data`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg
from helpers import funded
from stopping_data import run_job, stopping_request, yes_no_bench
from test_dagster import quote_shown, start_quote
from test_dagster_ui_faults import bench, code_server, instance, launch, submit_config, ui  # noqa: F401 - the fixtures

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, Actor, local_user
from amber_pipeline.analysis.render_report import render_stopping
from amber_pipeline.definitions import defs
from amber_pipeline.jobs import cell_names, records
from amber_pipeline.jobs.decisions import Stopping
from amber_pipeline.jobs.records import Job
from amber_pipeline.operations.areas import OPERATIONS
from amber_pipeline.operations.operation import acting
from amber_pipeline.warehouse.catalog import Warehouse
from assets.cell_job import CELL_AGGREGATES, JOB_TAG, cell_scores
from assets.resources import WarehouseResource

MODELS = ["replay-strong", "replay-weak"]


# ---- the launchpad --------------------------------------------------------------------------------------------------

def test_a_launchpad_config_that_stops_once_decided_is_queued_as_typed(
        amber_home: Path, warehouse: Warehouse, instance: dg.DagsterInstance, ui: Any) -> None:  # noqa: F811 - the imported fixtures
    funded(warehouse)
    bench(amber_home.parent / "mini-bench", "fix-off-by-one")
    launched = launch(ui, "submit_job", submit_config(model_configurations=MODELS, stop_when_decided=True,
                                                      margin_points=5.0, order_seed=7))
    assert launched["__typename"] == "LaunchRunSuccess" and launched["run"]["status"] == "QUEUED", launched
    [run] = instance.get_runs()
    config = run.run_config["ops"]["quote_job"]["config"]  # type: ignore[index]
    assert (config["stop_when_decided"], config["margin_points"], config["order_seed"]) == (True, 5.0, 7)


def test_submit_job_then_start_quote_make_a_job_that_stops_once_decided(
        amber_home: Path, warehouse: Warehouse, instance: dg.DagsterInstance) -> None:  # noqa: F811 - the imported fixtures
    funded(warehouse)
    folder = bench(amber_home.parent / "mini-bench", "fix-off-by-one", "ini-port-change")
    quoted = defs.resolve_job_def("submit_job").execute_in_process(run_config={"ops": {"quote_job": {"config": {
        "benchmark": str(folder), "agent": "terminus-2", "model_configurations": MODELS, "stop_when_decided": True,
        "margin_points": 5.0}}}}, instance=instance)
    shown = quote_shown(quoted)
    assert shown["quote"]["request"]["stop_when_decided"] is True
    assert shown["quote"]["request"]["margin_points"] == 5.0
    assert start_quote(instance, shown["quote_id"]).success
    [job] = records.list_jobs(warehouse, DEFAULT_WORKSPACE)
    assert job.request is not None and job.request.stop_when_decided and job.request.margin_points == 5.0
    assert job.request.order_seed is not None  # the Tasks' order, fixed as the Quote was made


# ---- a cell run's score ---------------------------------------------------------------------------------------------

def rescored(wh: Warehouse, dagster: dg.DagsterInstance, job: Job,
             tags: dict[str, str]) -> Mapping[str, dg.MetadataValue]:
    """The metadata of the Job's first cell's `cell_aggregates`, materialized by its cell_scores step under `tags`
    (a cell run of the Job carries the Job's tag; a re-score from the UI carries none)."""
    cell = records.cells_of(wh, job.id)[0]
    [name] = cell_names.read(wh, [cell.cell_key]).values()
    dagster.add_dynamic_partitions("cells", [name])
    result = dg.materialize([cell_scores], partition_key=name, instance=dagster,
                            resources={"warehouse": WarehouseResource()}, tags=tags)
    [aggregates] = [m for m in result.get_asset_materialization_events() if m.asset_key == CELL_AGGREGATES.key]
    return aggregates.materialization.metadata


def test_a_stopping_jobs_cell_run_shows_the_jobs_decision_and_savings(
        tmp_path: Path, warehouse: Warehouse, instance: dg.DagsterInstance) -> None:  # noqa: F811 - the imported fixtures
    with yes_no_bench(tmp_path, warehouse) as folder:
        stopped = run_job(warehouse, stopping_request(folder, ["sharp", "shaky"]))
        plain = run_job(warehouse, stopping_request(folder, ["sharp", "shaky"], stop=False))
    op = OPERATIONS["job_results"]
    results = op.run(acting(warehouse, Actor(local_user(), DEFAULT_WORKSPACE), op), op.params(job_id=stopped.id))
    stopping = results.stopping
    assert isinstance(stopping, Stopping) and stopping.stopped_early

    shown = rescored(warehouse, instance, stopped, {JOB_TAG: stopped.id})["job_decision"]
    assert isinstance(shown, dg.MarkdownMetadataValue)
    lines = shown.value.splitlines()
    assert lines[0] == "```text" and lines[-1] == "```"  # a code block: labels are never read as Markdown
    assert lines[1:-1] == render_stopping(stopping)[1:]  # the words of `amber report`
    d = stopping.decision
    assert lines[1].startswith(f"Stopped early after {d.tasks_seen} of {d.tasks_total} Tasks")
    assert f"  {d.pairs[0].sentence()}" in lines
    assert (f"  Ran {stopping.trials_run} of {stopping.trials_planned} Trials ({stopping.trials_saved} not run); "
            f"charged {stopping.charged_usd:.6f} of {stopping.reserved_usd:.6f} USD reserved, "
            f"{stopping.refunded_usd:.6f} USD refunded") in lines

    assert "job_decision" not in rescored(warehouse, instance, plain, {JOB_TAG: plain.id})  # no flag, no decision
    assert "job_decision" not in rescored(warehouse, instance, stopped, {})  # a re-score names no Job
