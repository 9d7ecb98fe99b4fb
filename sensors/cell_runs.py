"""dead_cell_sensor: a cell whose run died is ended, so its Job settles and its sandboxes go.

A cell run killed outright (SIGKILL, out of memory, its machine gone) runs no
exception handler, so its cell would stay `running` forever with its Job's
reservation held. Dagster's run monitoring (dagster.yaml) marks such a run
failed once its worker is gone; each tick this sensor ends every running cell
whose runs have all finished without success, or whose run's process on this
machine is gone, through `jobs.recovery` (finished Trials keep their Rewards
and charges; the last cell to end ends the Job and refunds the rest). It also
removes sandboxes left under the run folders of cells no longer running.
"""

import contextlib

import dagster as dg

from amber_pipeline.jobs import recovery
from assets.cells import CELL_TAG, JOB_TAG
from assets.resources import WarehouseResource

FAILED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


@dg.sensor(minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Ends the cells whose runs died (killed, out of memory), settling their Jobs.")
def dead_cell_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
    wh = warehouse.get()
    ended = [f"{job_id} {key}" for job_id, key in recovery.recover(wh)]
    running = recovery.running_cells(wh)
    if running:
        runs = context.instance.get_run_records(dg.RunsFilter(tags={JOB_TAG: sorted({j for j, _, _ in running})}))
        by_cell: dict[tuple[str | None, str | None], list[dg.RunRecord]] = {}
        for r in runs:
            by_cell.setdefault((r.dagster_run.tags.get(JOB_TAG), r.dagster_run.tags.get(CELL_TAG)), []).append(r)
        for job_id, key, _ in running:
            cell_runs = by_cell.get((job_id, key), [])
            if cell_runs and all(r.dagster_run.status in FAILED for r in cell_runs):
                last = max(cell_runs, key=lambda r: r.create_timestamp).dagster_run
                recovery.end_dead_cell(wh, job_id, key, f"its run {last.run_id[:8]} ended {last.status.value}")
                ended.append(f"{job_id} {key}")
    with contextlib.suppress(Exception):  # an engine that does not answer is swept at a later tick
        removed = recovery.sweep_sandboxes(wh)
        if removed:
            context.log.info(f"removed {len(removed)} sandboxes left by runs that died")
    if ended:
        context.log.info(f"ended the cells of runs that died: {', '.join(ended)}")
    return dg.SkipReason(f"ended {len(ended)} cells whose runs died" if ended else "every running cell's run lives")
