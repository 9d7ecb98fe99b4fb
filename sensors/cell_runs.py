"""dead_cell_sensor: a cell whose run died is ended, so its Job settles and its sandboxes go.

A cell run killed outright (SIGKILL, out of memory, its machine gone) runs no
exception handler, so its cell would stay `running` forever with its Job's
reservation held. Dagster's run monitoring (dagster.yaml) marks such a run
failed once its worker is gone; each tick this sensor ends every running cell
whose runs have all finished without success, or whose run's process on this
machine is gone, through `jobs.recovery` (finished Trials keep their Rewards
and charges; the last cell to end ends the Job and refunds the rest). It also
removes sandboxes left under the run folders of cells no longer running.

With run retries on (deploy/dagster.postgres.yaml), Dagster runs a crashed
cell run again as a new run of the same cell, so a cell is not dead while a
run of it may still run: one queued or running, or a failed one that Dagster
will retry. The retry takes the cell over and runs its Trials again; each is
charged once, since a charge is keyed by its Trial. The sensor then waits for
run monitoring to judge a worker that died rather than judging it by its pid,
and ends the cell only when no run of it will run again.
"""

import contextlib

import dagster as dg
from dagster._core.events import RunFailureReason
from dagster._core.execution.retries import auto_reexecution_should_retry_run
from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG, RUN_FAILURE_REASON_TAG, WILL_RETRY_TAG

from amber_pipeline.jobs import recovery, workers
from assets.cells import CELL_TAG, JOB_TAG
from assets.resources import WarehouseResource

FAILED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


@dg.sensor(minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Ends the cells whose runs died (killed, out of memory), settling their Jobs.")
def dead_cell_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
    wh = warehouse.get()
    instance = context.instance
    running = recovery.running_cells(wh)
    by_cell: dict[tuple[str | None, str | None], list[dg.RunRecord]] = {}
    if running:
        for r in instance.get_run_records(dg.RunsFilter(tags={JOB_TAG: sorted({j for j, _, _ in running})})):
            by_cell.setdefault((r.dagster_run.tags.get(JOB_TAG), r.dagster_run.tags.get(CELL_TAG)), []).append(r)
    retries = instance.run_retries_enabled and instance.run_monitoring_enabled
    ended = []
    for job_id, key, worker in running:
        reason = death(instance, by_cell.get((job_id, key), []), worker, retries)
        if reason is not None and recovery.end_dead_cell(wh, job_id, key, reason) is not None:
            ended.append(f"{job_id} {key}")
    with contextlib.suppress(Exception):  # an engine that does not answer is swept at a later tick
        removed = recovery.sweep_sandboxes(wh)
        if removed:
            context.log.info(f"removed {len(removed)} sandboxes left by runs that died")
    if ended:
        context.log.info(f"ended the cells of runs that died: {', '.join(ended)}")
    return dg.SkipReason(f"ended {len(ended)} cells whose runs died" if ended else "every running cell's run lives")


def death(instance: dg.DagsterInstance, records: list[dg.RunRecord], worker: str | None,
          retries: bool) -> str | None:
    """Why a running cell is dead, or None while it lives (or may run again).

    Without retries a worker gone from this machine is dead at once, before run monitoring says so. With
    them, run monitoring judges the worker (it is on for retries to be on): a cell with a run that may still
    run is left alone, whatever its last worker's pid says.
    """
    runs = [r.dagster_run for r in records]
    if retries and any(may_run_again(instance, r) for r in runs):
        return None
    if workers.is_dead(worker):
        return "its run's process died"
    if runs and all(r.status in FAILED for r in runs):
        last = max(records, key=lambda r: r.create_timestamp).dagster_run
        return f"its run {last.run_id[:8]} ended {last.status.value}"
    return None


def may_run_again(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether Dagster may still run this cell run: it has not finished, or it failed and will be retried."""
    if not run.is_finished:
        return True
    if run.status != dg.DagsterRunStatus.FAILURE or run.tags.get(AUTO_RETRY_RUN_ID_TAG):
        return False  # a retry launched already is a run of its own, judged by itself
    if WILL_RETRY_TAG in run.tags:
        return run.is_complete_and_waiting_to_retry
    # Dagster stores a failure a moment before it tags whether the run will retry: decide as it will.
    reason = run.tags.get(RUN_FAILURE_REASON_TAG)
    return bool(auto_reexecution_should_retry_run(instance, run, RunFailureReason(reason) if reason else None))
