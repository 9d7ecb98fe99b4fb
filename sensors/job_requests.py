"""job_request_sensor: started Jobs become cell partitions and one run per cell.

The cursor is the start sequence of the last Job seen: Jobs are numbered as
they start, not as they are quoted, so a Job quoted early and started late is
still seen. Run keys are `<job>:<cell file id>`, so a replayed tick or a reset
cursor never starts a cell run twice. The catalog is read under Amber's shared
lock, so a tick waits for a writer instead of failing on DuckDB's file lock.
"""


import dagster as dg

from amber_pipeline.cells import cell_file_id
from amber_pipeline.jobs import records
from assets.cells import CELLS, JOB_TAG, cell_job, cells
from assets.resources import WarehouseResource


@dg.sensor(job=cell_job, minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts one cell run per cell of each newly started Job.")
def job_request_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
    after = int(context.cursor or 0)
    waiting = records.waiting_cells(warehouse.get(), after)
    if not waiting:
        return dg.SkipReason(f"No Job started after start #{after}.")
    known = set(context.instance.get_dynamic_partitions(CELLS))
    new_keys = sorted({c.cell_key for c in waiting} - known)
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=c.cell_key, run_key=f"{c.job_id}:{cell_file_id(c.cell_key)}",
                                    tags={JOB_TAG: c.job_id}) for c in waiting],
        dynamic_partitions_requests=[cells.build_add_request(new_keys)] if new_keys else [],
        cursor=str(max(c.start_seq for c in waiting)))
