"""Amber's schedules: Quote expiry, re-aggregation, transcript expiry and upload retention."""

from datetime import datetime

import dagster as dg

from amber_pipeline.benchmarks import uploads
from amber_pipeline.jobs import lifecycle, quotes
from amber_pipeline.warehouse import retention
from assets.comparisons import reaggregation_job
from assets.resources import WarehouseResource


@dg.op(description="Cancel Jobs whose Quote expired unstarted and refund their reservations.")
def expire_quotes(context: dg.OpExecutionContext, warehouse: WarehouseResource) -> None:
    expired = lifecycle.expire_due(warehouse.get())
    context.log.info(f"Expired {len(expired)} Quote(s): {', '.join(expired) or 'none'}")


@dg.job(description="Release the reservations of Quotes that expired before their Job started.")
def quote_expiry_job():
    expire_quotes()


@dg.schedule(job=quote_expiry_job, cron_schedule="* * * * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.RUNNING,
             description="Every minute: Quotes older than one hour that never started are released.")
def quote_expiry_schedule(context: dg.ScheduleEvaluationContext, warehouse: WarehouseResource):
    now = context.scheduled_execution_time
    if not quotes.due(warehouse.get(), now):
        return dg.SkipReason("No Quote has expired unstarted.")
    return dg.RunRequest(run_key=f"expire-quotes-{now.isoformat()}")


reaggregation_schedule = dg.ScheduleDefinition(
    name="reaggregation_schedule", job=reaggregation_job, cron_schedule="0 * * * *", execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Hourly: every cell's score and every comparison recomputed from the stored Trials.")


def _tick_time(context: dg.OpExecutionContext) -> datetime | None:
    """A scheduled run's tick time, the clock its expiry is measured by (None when run by hand: now)."""
    tags = context.run.tags
    scheduled = tags.get(".dagster/scheduled_execution_time") or tags.get("dagster/scheduled_execution_time")
    return datetime.fromisoformat(scheduled) if scheduled else None


@dg.op(description="Delete transcripts of Trials that finished more than 90 days ago; Rewards and costs stay.")
def expire_transcripts(context: dg.OpExecutionContext, warehouse: WarehouseResource) -> None:
    expired = retention.expire_transcripts(warehouse.get(), _tick_time(context))
    table = "| Trial folder | finished | bytes freed |\n|---|---|---|\n" + "\n".join(
        f"| {e.trial_dir} | {e.finished_at:%Y-%m-%d} | {e.bytes_freed} |" for e in expired)
    context.add_output_metadata({"expired": len(expired), "transcripts": dg.MetadataValue.md(table)})


@dg.job(description="Transcript expiry: transcripts are kept 90 days; Rewards, costs and aggregates are kept.")
def transcript_expiry_job():
    expire_transcripts()


transcript_expiry_schedule = dg.ScheduleDefinition(
    name="transcript_expiry_schedule", job=transcript_expiry_job, cron_schedule="30 3 * * *", execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING, description="Daily: delete transcripts older than 90 days.")


@dg.op(description="Delete the Tasks of uploads checked but not validated for 7 days, or validated but not "
                   "published for 30.")
def expire_uploads(context: dg.OpExecutionContext, warehouse: WarehouseResource) -> None:
    expired = uploads.expire(warehouse.get(), _tick_time(context))
    table = "| upload | Workspace | name | was |\n|---|---|---|---|\n" + "\n".join(
        f"| {u.id} | {u.workspace} | {u.name} | {u.status} |" for u in expired)
    context.add_output_metadata({"expired": len(expired), "uploads": dg.MetadataValue.md(table)})


@dg.job(description="Upload retention: an upload's Tasks are kept 7 days unvalidated, 30 days unpublished.")
def upload_retention_job():
    expire_uploads()


upload_retention_schedule = dg.ScheduleDefinition(
    name="upload_retention_schedule", job=upload_retention_job, cron_schedule="45 3 * * *", execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily: delete the Tasks of uploads past their retention (7 days checked, 30 days validated).")
