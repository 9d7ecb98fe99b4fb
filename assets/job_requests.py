"""Launching an Amber Job from the Dagster UI.

`submit_job`'s run config is the Job request itself (`jobs.request.JobRequest`:
the launchpad shows its fields and their descriptions) plus the Workspace to
act in. Launching quotes and starts the Job exactly as `amber job submit` does,
as the user running the UI: the Quote is reserved from the Workspace's Wallet.
`job_request_sensor` then starts one cell run per cell within seconds.
"""


import dagster as dg
from pydantic import Field

from amber_pipeline.jobs import lifecycle
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money import identity, workspaces
from amber_pipeline.money.identity import DEFAULT_WORKSPACE
from assets.resources import WarehouseResource


class SubmitJobConfig(JobRequest, dg.Config):
    workspace: str = Field(DEFAULT_WORKSPACE, description="The Workspace whose Wallet pays for the Job.")


# What the launchpad opens with: the demo Job (the schema mixes in dg.Config, so it is built by validation)
DEMO_REQUEST = SubmitJobConfig.model_validate({"benchmark": "examples/demo-bench", "bounds": True,
                                               "model_configurations": ["replay-strong", "replay-weak"]})


@dg.op(description="Quote and start the Job; the sensor turns it into one run per cell.")
def record_job_request(context: dg.OpExecutionContext, config: SubmitJobConfig, warehouse: WarehouseResource) -> str:
    wh = warehouse.get()
    actor = identity.resolve(None, config.workspace)
    workspace = workspaces.acting_workspace(wh, actor)
    request = JobRequest.model_validate(config.model_dump(exclude={"workspace"}))
    quote, job = lifecycle.submit(wh, workspace, actor.user, request)
    context.add_output_metadata({"job": job.id, "benchmark": job.benchmark_label, "quote": quote.id,
                                 "reserved_usd": float(quote.amount)})
    context.log.info(f"Submitted {job.id} over {job.benchmark_label}")
    return job.id


@dg.job(description="Submit an Amber Job: a Benchmark against Agent x Model Configuration pairs.",
        config=dg.RunConfig(ops={"record_job_request": DEMO_REQUEST}))
def submit_job():
    record_job_request()
