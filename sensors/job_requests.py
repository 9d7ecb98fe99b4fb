"""job_request_sensor: cells of started Jobs that no launcher took yet become cell runs.

Most cells never reach it: the CLI tells the warm worker a Job started, and
`submit_job` queues its Job's cell runs itself, both at once. The sensor is the path for Jobs
started any other way (or while no warm worker ran): each tick claims the
cells nobody claimed (`records.claim_cells`: one claim per cell, so a cell is
never launched by both). A claim whose run never appeared (its launcher died
in between) is asked again after a minute; its run key keeps it to one run.
The catalog is read under Amber's shared lock, so a tick waits for a writer
instead of failing on DuckDB's file lock.
"""

from datetime import timedelta

import dagster as dg

from amber_pipeline.jobs import records
from assets.cells import CELL_TAG, CELLS, JOB_TAG, cell_job, cells
from assets.resources import WarehouseResource
from launcher.cell_runs import run_request

STALE_CLAIM = timedelta(minutes=1)


@dg.sensor(job=cell_job, minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts one cell run per cell of each started Job that the warm worker did not launch.")
def job_request_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
    wh = warehouse.get()
    launches = records.claim_cells(wh) + _lost(context.instance, records.unstarted_claims(wh, STALE_CLAIM))
    if not launches:
        return dg.SkipReason("Every started Job's cells have their runs.")
    known = set(context.instance.get_dynamic_partitions(CELLS))
    new_names = sorted({c.cell_name for c in launches} - known)
    return dg.SensorResult(
        run_requests=[run_request(c) for c in launches],
        dynamic_partitions_requests=[cells.build_add_request(new_names)] if new_names else [])


def _lost(instance: dg.DagsterInstance, claimed: list[records.CellLaunch]) -> list[records.CellLaunch]:
    """The claimed cells that have no run."""
    if not claimed:
        return []
    runs = instance.get_run_records(dg.RunsFilter(tags={JOB_TAG: sorted({c.job_id for c in claimed})}))
    have = {(r.dagster_run.tags.get(JOB_TAG), r.dagster_run.tags.get(CELL_TAG)) for r in runs}
    return [c for c in claimed if (c.job_id, c.cell_key) not in have]
