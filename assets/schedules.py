"""Quote expiry: a Quote not started within the hour releases its reservation."""

import dagster as dg

from amber_pipeline import quotes
from assets.resources import WarehouseResource


@dg.op(description="Cancel Jobs whose Quote expired unstarted and refund their reservations.")
def expire_quotes(context: dg.OpExecutionContext, warehouse: WarehouseResource) -> None:
    expired = quotes.expire_due(warehouse.get())
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
