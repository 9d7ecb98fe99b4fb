"""Amber's schedules: Quote expiry, re-aggregation and transcript expiry."""

from datetime import datetime

import dagster as dg

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


@dg.op(description="Delete transcripts of Trials that finished more than 90 days ago; Rewards and costs stay.")
def expire_transcripts(context: dg.OpExecutionContext, warehouse: WarehouseResource) -> None:
    tags = context.run.tags  # a scheduled run knows its tick's time: the clock expiry is measured by
    scheduled = tags.get(".dagster/scheduled_execution_time") or tags.get("dagster/scheduled_execution_time")
    now = datetime.fromisoformat(scheduled) if scheduled else None
    expired = retention.expire_transcripts(warehouse.get(), now)
    table = "| Trial folder | finished | bytes freed |\n|---|---|---|\n" + "\n".join(
        f"| {e.trial_dir} | {e.finished_at:%Y-%m-%d} | {e.bytes_freed} |" for e in expired)
    context.add_output_metadata({"expired": len(expired), "transcripts": dg.MetadataValue.md(table)})


@dg.job(description="Transcript expiry: transcripts are kept 90 days; Rewards, costs and aggregates are kept.")
def transcript_expiry_job():
    expire_transcripts()


transcript_expiry_schedule = dg.ScheduleDefinition(
    name="transcript_expiry_schedule", job=transcript_expiry_job, cron_schedule="30 3 * * *", execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING, description="Daily: delete transcripts older than 90 days.")
