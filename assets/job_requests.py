"""Launching an Amber Job from the Dagster UI, and going on with one past its ceiling.

`submit_job`'s run config is the Job request itself (`jobs.request.JobRequest`:
the launchpad shows its fields and their descriptions), the Workspace to act
in, and `quote_only`. Its first step prices each cell and shows the Quote (per
cell, the total, and the smallest change the Job can detect) before any money
moves; unless `quote_only`, its second step quotes and starts the Job exactly
as `amber job submit` does, as the user running the UI (the Quote is reserved
from the Workspace's Wallet), tags the run with the Job, and queues the cell
runs itself (it runs in a warm process with Dagster at hand).
"""


from decimal import Decimal

import dagster as dg
from pydantic import Field

from amber_pipeline.analysis.plan import detectable_change_sentence
from amber_pipeline.jobs import lifecycle, quotes, records
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money import identity, workspaces
from amber_pipeline.money.identity import DEFAULT_WORKSPACE
from amber_pipeline.money.prices import show
from assets.cells import JOB_TAG
from assets.resources import WarehouseResource
from launcher import cell_runs

QUOTE_TAG = "amber/quote"  # the Quote a continue_job run makes


class SubmitJobConfig(JobRequest, dg.Config):
    workspace: str = Field(DEFAULT_WORKSPACE, description="The Workspace whose Wallet pays for the Job.")
    quote_only: bool = Field(False, description="Show the Quote and stop: nothing is reserved or started.")

    def request(self) -> JobRequest:
        return JobRequest.model_validate(self.model_dump(exclude={"workspace", "quote_only"}))


# What the launchpad opens with: the demo Job (the schema mixes in dg.Config, so it is built by validation)
DEMO_REQUEST = SubmitJobConfig.model_validate({"benchmark": "examples/demo-bench", "bounds": True,
                                               "model_configurations": ["replay-strong", "replay-weak"]})
QUOTE_COLUMNS = dg.TableSchema(columns=[
    dg.TableColumn(name, kind) for name, kind in (
        ("cell", "string"), ("tasks", "int"), ("trials_per_task", "int"), ("per_trial_usd", "string"),
        ("estimate_usd", "string"), ("basis", "string"))])


@dg.op(description="Price each cell and show the Quote; nothing is reserved yet.",
       out={"quote": dg.Out(dict, description="The Quote shown: its total and each cell's price."),
            "request": dg.Out(dict, is_required=False, description="The request to start, unless quote_only.")})
def quote_job(context: dg.OpExecutionContext, config: SubmitJobConfig, warehouse: WarehouseResource):
    wh = warehouse.get()
    actor = identity.resolve(None, config.workspace)
    workspace = workspaces.acting_workspace(wh, actor)
    priced = lifecycle.estimate(wh, workspace, actor.user, config.request())
    detectable = detectable_change_sentence(priced.n_tasks)
    context.log.info(f"Quote for {priced.label}: {show(priced.total)} over {len(priced.cells)} cells. {detectable}")
    yield dg.Output({"benchmark": priced.label, "estimate_usd": str(priced.total)}, "quote", metadata={
        "benchmark": priced.label, "estimate_usd": show(priced.total), "detectable_change": detectable,
        "cells": dg.MetadataValue.table([dg.TableRecord({
            "cell": c.label, "tasks": c.n_tasks, "trials_per_task": c.trials_per_task,
            "per_trial_usd": show(Decimal(c.cost_per_trial)), "estimate_usd": show(c.estimated), "basis": c.basis})
            for c in priced.quoted], schema=QUOTE_COLUMNS)})
    if config.quote_only:
        context.log.info("quote_only: nothing reserved, no Job started.")
        return
    yield dg.Output(config.model_dump(), "request")


@dg.op(description="Quote and start the Job, reserving its Quote; its cell runs start at once.")
def start_job(context: dg.OpExecutionContext, request: dict, warehouse: WarehouseResource) -> str:
    wh = warehouse.get()
    config = SubmitJobConfig.model_validate(request)
    actor = identity.resolve(None, config.workspace)
    workspace = workspaces.acting_workspace(wh, actor)
    # The Job's id goes on the run before the Job is made: a run resumed after its worker died submits the
    # same Job, not a second one.
    job_id = context.run.tags.get(JOB_TAG) or lifecycle.new_job_id()
    context.instance.add_run_tags(context.run_id, {JOB_TAG: job_id})
    quote, job = lifecycle.submit(wh, workspace, actor.user, config.request(), job_id=job_id)
    cell_runs.submit(context.instance, records.claim_cells(wh, job.id))  # now, not at the sensor's next tick
    context.add_output_metadata({"job": job.id, "benchmark": job.benchmark_label, "quote": quote.id,
                                 "reserved_usd": float(quote.amount)})
    context.log.info(f"Submitted {job.id} over {job.benchmark_label}: {show(quote.amount)} reserved")
    return job.id


@dg.job(description="Submit an Amber Job: a Benchmark against Agent x Model Configuration pairs. Its Quote is "
                    "shown before anything is reserved; set quote_only to stop there.",
        executor_def=dg.in_process_executor,
        config=dg.RunConfig(ops={"quote_job": DEMO_REQUEST}))
def submit_job():
    _, request = quote_job()
    start_job(request)


class ContinueJobConfig(dg.Config):
    workspace: str = Field(DEFAULT_WORKSPACE, description="The Workspace of the Job, whose Wallet pays.")
    job_id: str = Field(description="The Job to go on with (job-...): one that stopped at its ceiling, was "
                                    "cancelled, or runs near its ceiling.")
    amount: str | None = Field(None, description="Dollars to reserve instead of the estimate of the missing "
                                                 "Trials: a plain amount, like 12.50.")


@dg.op(description="Reserve what the Job's missing Trials need and run them in the same Job.")
def continue_amber_job(context: dg.OpExecutionContext, config: ContinueJobConfig,
                       warehouse: WarehouseResource) -> str:
    wh = warehouse.get()
    actor = identity.resolve(None, config.workspace)
    workspace = workspaces.acting_workspace(wh, actor)
    # The continuation's id goes on the run before it is made: a resumed run reserves once (see start_job).
    quote_id = context.run.tags.get(QUOTE_TAG) or quotes.new_quote_id()
    context.instance.add_run_tags(context.run_id, {JOB_TAG: config.job_id, QUOTE_TAG: quote_id})
    made = lifecycle.continue_job(wh, workspace, config.job_id, config.amount, quote_id=quote_id)
    cell_runs.submit(context.instance, records.claim_cells(wh, made.job_id))  # now, not at the sensor's next tick
    context.add_output_metadata({"job": made.job_id, "quote": made.id, "reserved_usd": float(made.amount),
                                 "cells": ", ".join(c.label for c in made.cells)})
    context.log.info(f"Continued {made.job_id}: {show(made.amount)} reserved for its missing Trials")
    return made.job_id


@dg.job(description="Go on with an Amber Job past its ceiling (or after a cancel): its missing Trials are priced, "
                    "reserved from the Wallet and run in the same Job, as `amber job continue` does.",
        executor_def=dg.in_process_executor)
def continue_job():
    continue_amber_job()
