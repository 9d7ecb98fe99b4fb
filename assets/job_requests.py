"""Launching an Amber Job from the Dagster UI.

`submit_job` takes a Job request as its run config (Workspace, Benchmark,
Agent, Model Configurations, Trials per Task) and quotes and starts it
exactly as `amber job submit` does, as the user running the UI: the Quote is
reserved from the Workspace's Wallet. `job_request_sensor` then starts one
cell run per cell within seconds.
"""


import dagster as dg

from amber_pipeline.jobs import quotes
from amber_pipeline.money import identity, workspaces
from amber_pipeline.money.identity import DEFAULT_WORKSPACE
from assets.resources import WarehouseResource


class JobRequest(dg.Config):
    workspace: str = DEFAULT_WORKSPACE
    benchmark: str = "examples/demo-bench"
    agent: str = "terminus-2"
    model_configurations: list[str] = ["replay-strong", "replay-weak"]
    trials_per_task: int = 1
    bounds: bool = True  # add oracle and nop cells as the upper and lower bounds


@dg.op(description="Record the Job request; the sensor turns it into one run per cell.")
def record_job_request(context: dg.OpExecutionContext, config: JobRequest, warehouse: WarehouseResource) -> str:
    wh = warehouse.get()
    actor = identity.resolve(None, config.workspace)
    workspace = workspaces.acting_workspace(wh, actor)
    quote, job = quotes.submit(wh, workspace, actor.user, config.benchmark, config.agent,
                               config.model_configurations, config.trials_per_task, bounds=config.bounds)
    context.add_output_metadata({"job": job.id, "benchmark": job.benchmark_label, "quote": quote.id,
                                 "reserved_usd": float(quote.amount)})
    context.log.info(f"Submitted {job.id} over {job.benchmark_label}")
    return job.id


@dg.job(description="Submit an Amber Job: a Benchmark against Agent x Model Configuration pairs.")
def submit_job():
    record_job_request()
