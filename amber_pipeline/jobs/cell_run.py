"""The steps of one cell run, as plain functions the Dagster assets call.

trials -> rewards -> cell aggregates. Each step reads what the step before it
stored and writes one Parquet file, so any step can be re-run alone and the
Dagster layer stays a thin shell around these calls.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from amber_pipeline.analysis import sources
from amber_pipeline.cells import cell_file_id
from amber_pipeline.jobs import lifecycle as jobs
from amber_pipeline.jobs.outcomes import Kind
from amber_pipeline.jobs.trial_runner import run_cell
from amber_pipeline.scoring import bootstrap as stats
from amber_pipeline.scoring import cells as report
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import CELL_RESULT_SCHEMA, TASK_REWARD_SCHEMA, TrialRecord, trials_table


def run_trials(wh: Warehouse, job_id: str, cell_key: str,
               on_trial_done: Callable[[TrialRecord], None] | None = None) -> list[TrialRecord]:
    """Run the Job's Trials of one cell and store them; the cell is marked done or failed."""
    run = jobs.cell_run(wh, job_id, cell_key)
    if not jobs.start_cell(wh, job_id, cell_key):  # cancelled or at its ceiling before this run began
        return []

    def finished(record: TrialRecord) -> None:
        if record.outcome == Kind.SCORED:  # Errored and cancelled Trials are not charged
            charge = jobs.charge_trial(wh, job_id, record.key, record.cost_usd)
            if charge.earlier is not None:  # a restarted run: the row shows what the ledger charged
                record.cost_usd = float(charge.earlier)
        if on_trial_done is not None:
            on_trial_done(record)

    try:
        records = run_cell(run, on_trial_done=finished, keep_going=lambda: jobs.is_running(wh, job_id))
        wh.write_parquet(trials_table(records), wh.trials_file(run.cell.file_id, job_id))
        sources.store_amber_evidence(wh, run.workspace, job_id, cell_key, run.run_dir)
    except BaseException as exc:
        jobs.mark_cell(wh, job_id, cell_key, "failed", str(exc).splitlines()[0][:300] if str(exc) else None)
        raise
    jobs.mark_cell(wh, job_id, cell_key, "done")
    return records


def _by_workspace(trials: list[TrialRecord]) -> dict[str, list[TrialRecord]]:
    grouped: dict[str, list[TrialRecord]] = {}
    for t in report.results_only(trials):
        grouped.setdefault(t.workspace, []).append(t)
    return grouped


def write_rewards(wh: Warehouse, cell_key: str) -> pa.Table:
    """Per-Task Rewards of the cell, per Workspace, over all its Trials: Trials, Errored, mean Reward.

    A cell can be run by several Workspaces (a public Benchmark); each sees only
    what its own Trials say, so each gets its own file.
    """
    tables = []
    for workspace, trials in _by_workspace(wh.trial_records(cell_key=cell_key)).items():
        means = stats.per_task_means([t.task_name for t in trials], [t.reward for t in trials])
        rows = []
        for task in sorted({t.task_name for t in trials}):
            of_task = [t for t in trials if t.task_name == task]
            rows.append({"workspace": workspace, "cell_key": cell_key, "task_name": task, "n_trials": len(of_task),
                         "n_errored": sum(t.errored for t in of_task), "mean_reward": means.get(task)})
        table = pa.Table.from_pylist(rows, schema=TASK_REWARD_SCHEMA)
        wh.write_parquet(table, wh.rewards_file(cell_file_id(cell_key), workspace))
        tables.append(table)
    return pa.concat_tables(tables) if tables else TASK_REWARD_SCHEMA.empty_table()


def write_aggregates(wh: Warehouse, cell_key: str) -> list[tuple[str, report.CellResult]]:
    """The cell's score per Workspace over all its Trials, with its bootstrap interval."""
    results = []
    for workspace, trials in _by_workspace(wh.trial_records(cell_key=cell_key)).items():
        result = report.cell_result(trials)
        row = {"workspace": workspace, "cell_key": cell_key, "benchmark_version_id": trials[0].benchmark_version_id,
               "agent": result.agent, "model_configuration": result.model_configuration,
               "n_tasks": result.n_tasks, "n_trials": result.n_trials, "mean_reward": result.score.mean,
               "ci_low": result.score.ci95.low, "ci_high": result.score.ci95.high, "cost_usd": result.cost_usd,
               "mean_duration_sec": result.mean_duration_sec, "errored": result.errored}
        wh.write_parquet(pa.Table.from_pylist([row], schema=CELL_RESULT_SCHEMA),
                         wh.aggregates_file(cell_file_id(cell_key), workspace))
        results.append((workspace, result))
    return results
