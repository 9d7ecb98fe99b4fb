"""dead_cell_sensor: a cell whose run died for good is ended, so its Job settles and its sandboxes go.

A cell run killed outright (SIGKILL, out of memory, its machine restarted)
runs no exception handler, so its cell would stay `running` forever with its
Job's reservation held. Dagster's run monitoring (dagster.yaml) notices the
worker gone and resumes the run with a new worker, twice at most; the resumed
run keeps the Trials stored and runs the rest (`jobs.cell_run`). Only when
monitoring gives up does it mark the run failed. Each tick this sensor ends
every running cell whose latest run so ended (or, for a cell run that no
Dagster run started, whose process on this machine is gone), through
`jobs.recovery` (finished Trials keep their Rewards and charges; the last
cell to end ends the Job and refunds the rest). It also removes sandboxes
left under the run folders of cells no longer running.
"""

import contextlib

import dagster as dg

from amber_pipeline.jobs import recovery, workers
from assets.cell_job import CELL_TAG, JOB_TAG
from assets.resources import WarehouseResource

FAILED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


@dg.sensor(minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Ends the cells whose runs died for good (run monitoring resumes a dead worker twice), "
                       "settling their Jobs.")
def dead_cell_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
    wh = warehouse.get()
    instance = context.instance
    running = recovery.running_cells(wh)
    by_cell: dict[tuple[str | None, str | None], list[dg.RunRecord]] = {}
    if running:
        for r in instance.get_run_records(dg.RunsFilter(tags={JOB_TAG: sorted({j for j, _, _ in running})})):
            by_cell.setdefault((r.dagster_run.tags.get(JOB_TAG), r.dagster_run.tags.get(CELL_TAG)), []).append(r)
    ended = []
    for job_id, key, worker in running:
        reason = death(instance, by_cell.get((job_id, key), []), worker)
        if reason is not None and recovery.end_dead_cell(wh, job_id, key, reason) is not None:
            ended.append(f"{job_id} {key}")
    with contextlib.suppress(Exception):  # an engine that does not answer is swept at a later tick
        removed = recovery.sweep_sandboxes(wh)
        if removed:
            context.log.info(f"removed {len(removed)} sandboxes left by runs that died")
    if ended:
        context.log.info(f"ended the cells of runs that died: {', '.join(ended)}")
    return dg.SkipReason(f"ended {len(ended)} cells whose runs died" if ended else "every running cell's run lives")


def death(instance: dg.DagsterInstance, records: list[dg.RunRecord], worker: str | None) -> str | None:
    """Why a running cell is dead, or None while it lives (or may run again).

    A cell is judged by its latest run (an earlier one may be of an earlier round, before `amber job continue`,
    or of an engine that handed the cell back): once that run failed or was cancelled, no one will run the cell.
    While it has not finished, run monitoring judges its worker and resumes it; only an instance without run
    monitoring is judged by the worker's pid. A cell run that no Dagster run started is judged by its pid.
    """
    if not records:
        return "its run's process died" if workers.is_dead(worker) else None
    last = max(records, key=lambda r: r.create_timestamp).dagster_run
    if last.status in FAILED:
        resumed = instance.count_resume_run_attempts(last.run_id)
        again = f", resumed {resumed} times after its worker died" if resumed else ""
        return f"its run {last.run_id[:8]} ended {last.status.value}{again}"
    if not last.is_finished and not instance.run_monitoring_enabled and workers.is_dead(worker):
        return "its run's process died"
    return None
