"""Amber's Dagster definitions: the only module of amber_pipeline that imports dagster."""

import dagster as dg

from assets.benchmark_versions import benchmark_versions
from assets.cell_job import cell_job, cell_scores, trials
from assets.comparisons import comparisons, reaggregation_job
from assets.job_requests import continue_job, start_quote, submit_job
from assets.resources import WarehouseResource
from assets.schedules import (
    quote_expiry_job,
    quote_expiry_schedule,
    reaggregation_schedule,
    transcript_expiry_job,
    transcript_expiry_schedule,
    upload_retention_job,
    upload_retention_schedule,
)
from launcher import migration_scripts
from sensors.benchmark_versions import benchmark_version_sensor
from sensors.dead_cells import dead_cell_sensor
from sensors.started_jobs import job_request_sensor

# Every process that loads this code location opens Dagster's SQLite storage again and again (a code server makes
# an instance at each sensor tick); each opening reads its migration scripts unless they are shared.
migration_scripts.share()

defs = dg.Definitions(
    assets=[trials, cell_scores, comparisons, benchmark_versions],
    jobs=[cell_job, submit_job, start_quote, continue_job, quote_expiry_job, reaggregation_job, transcript_expiry_job,
          upload_retention_job],
    sensors=[job_request_sensor, benchmark_version_sensor, dead_cell_sensor],
    schedules=[quote_expiry_schedule, reaggregation_schedule, transcript_expiry_schedule, upload_retention_schedule],
    resources={"warehouse": WarehouseResource()},
)
