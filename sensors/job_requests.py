"""job_request_sensor: new Jobs become cell partitions and one run per cell.

The cursor is the start sequence of the last Job seen (Jobs are numbered as
they start, not as they are quoted); run keys are
`<job>:<cell file id>`, so a replayed tick or a reset cursor never starts a
cell run twice. The catalog is read under Amber's shared lock, so a tick waits
for a writer instead of failing on DuckDB's file lock.
"""


import dagster as dg

from amber_pipeline.cells import cell_file_id
from amber_pipeline.jobs import lifecycle as jobs
from assets.cells import CELLS, JOB_TAG, cell_job, cells
from assets.resources import WarehouseResource


@dg.sensor(job=cell_job, minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts one cell run per cell of each newly submitted Job.")
def job_request_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
    after = int(context.cursor or 0)
    requests = jobs.new_cell_requests(warehouse.get(), after)
    if not requests:
        return dg.SkipReason(f"No Job started after start #{after}.")
    known = set(context.instance.get_dynamic_partitions(CELLS))
    new_keys = sorted({key for _, _, key in requests} - known)
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=key, run_key=f"{job_id}:{cell_file_id(key)}",
                                    tags={JOB_TAG: job_id}) for _, job_id, key in requests],
        dynamic_partitions_requests=[cells.build_add_request(new_keys)] if new_keys else [],
        cursor=str(max(seq for seq, _, _ in requests)))
