"""job_request_sensor: cells of started Jobs that no run took yet become cell runs.

Most cells never reach it: whoever starts a Job asks the warm worker for its
cell runs at once (`amber_pipeline.worker_socket.start_cell_runs`). Each tick
asks Dagster for the runs of the cells nobody launched (a Job started while no
warm worker ran) and of claims whose run never appeared (their launcher died
in between), as the one place that makes cell runs says (`launcher/cell_runs.py`).
"""

import dagster as dg

from assets.cell_job import CELLS, cell_job, cells
from assets.resources import WarehouseResource
from launcher.cell_runs import requests, run_request


@dg.sensor(job=cell_job, minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts one cell run per cell of each started Job that the warm worker did not launch.")
def job_request_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
    launches = requests(context.instance, warehouse.get())
    if not launches:
        return dg.SkipReason("Every started Job's cells have their runs.")
    known = set(context.instance.get_dynamic_partitions(CELLS))
    new_names = sorted({c.cell_name for c in launches} - known)
    return dg.SensorResult(
        run_requests=[run_request(c) for c in launches],
        dynamic_partitions_requests=[cells.build_add_request(new_names)] if new_names else [])
