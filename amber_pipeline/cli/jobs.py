"""`amber job ...` and `amber results`: quote, start, follow and read Jobs."""

from __future__ import annotations

import time
from datetime import UTC
from decimal import Decimal
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from amber_pipeline import warm_worker
from amber_pipeline.agents.catalog import DEFAULT_AGENT, agent_spec
from amber_pipeline.analysis import report, sources
from amber_pipeline.analysis.plan import detectable_change_sentence
from amber_pipeline.cli import embedded, options
from amber_pipeline.cli.context import Acting, Context
from amber_pipeline.cli.output import out
from amber_pipeline.jobs import lifecycle, quotes, records, recovery
from amber_pipeline.jobs.quotes import Quote
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money.prices import show
from amber_pipeline.sandbox import docker_engine
from amber_pipeline.warehouse.catalog import Warehouse

app = typer.Typer()
job_app = typer.Typer(no_args_is_help=True, help="Quote, start, follow and cancel Jobs.")
app.add_typer(job_app, name="job")


@job_app.command("quote")
def job_quote(ctx: typer.Context, benchmark: options.Benchmark, agent: options.Agent = DEFAULT_AGENT,
              model: options.Model = None, trials: options.Trials = 1, bounds: options.Bounds = False,
              public: options.Public = False, ceiling: options.Ceiling = None) -> None:
    """Quote a Job and reserve its amount from the Wallet; start it within the hour with `amber job start`."""
    acting = Context.of(ctx).acting()
    made = lifecycle.quote(acting.wh, acting.workspace, acting.actor.user,
                           options.job_request(benchmark, agent, model, trials, bounds, public, ceiling))
    print_quote(made)
    out.line(f"Start it within the hour with: amber job start {made.id}")


def require_docker(request: JobRequest | None) -> None:
    """Sandboxes need a Docker engine; a Job of static Tasks (the Direct Agent) runs without one."""
    if request is None or not agent_spec(request.agent).static or request.bounds:
        docker_engine.connect()


@job_app.command("start")
def job_start(ctx: typer.Context,
              quote_id: Annotated[str, typer.Argument(help="The Quote's id, or its Job's.")]) -> None:
    """Start a quoted Job; the embedded daemon starts its cell runs within seconds."""
    acting = Context.of(ctx).acting()
    made = quotes.get(acting.wh, acting.workspace, quote_id)  # an unknown Quote is the first thing to say
    require_docker(records.get_job(acting.wh, made.job_id, acting.workspace).request)
    job = lifecycle.start(acting.wh, acting.workspace, quote_id)
    launch(acting.wh, job.id)
    out.line(f"Started {job.id} over {job.benchmark_label}.")


@job_app.command("submit")
def job_submit(ctx: typer.Context, benchmark: options.Benchmark, agent: options.Agent = DEFAULT_AGENT,
               model: options.Model = None, trials: options.Trials = 1, bounds: options.Bounds = False,
               public: options.Public = False, ceiling: options.Ceiling = None,
               wait: Annotated[bool, typer.Option("--wait", help="Follow the Job with a progress bar, then print "
                                                                 "its results.")] = False) -> None:
    """Quote a Job and start it at once."""
    acting = Context.of(ctx).acting()
    request = options.job_request(benchmark, agent, model, trials, bounds, public, ceiling)
    request.check(acting.wh.paths, acting.workspace)  # a request that cannot run is the first thing to say
    require_docker(request)
    made, job = lifecycle.submit(acting.wh, acting.workspace, acting.actor.user, request)
    launch(acting.wh, job.id)
    print_quote(made)
    out.line(f"Started {job.id}.")
    if wait:
        follow(acting, job.id)


@job_app.command("cancel")
def job_cancel(ctx: typer.Context, job_id: options.JobId) -> None:
    """Stop a Job: no new Trial starts, in-flight ones stop, the unspent reservation is refunded."""
    acting = Context.of(ctx).acting()
    lifecycle.cancel(acting.wh, acting.workspace, job_id)
    recovery.recover(acting.wh)  # a cell whose run died ends now, so a stuck Job is refunded at once
    job = records.get_job(acting.wh, job_id, acting.workspace)
    out.line(f"{job.id} is {job.status}; in-flight Trials stop within seconds and the unspent reservation is "
             "refunded once they have.")


@job_app.command("status")
def job_status(ctx: typer.Context, job_id: Annotated[str | None, typer.Argument(
        help="An Amber Job id; without one, every Job of the Workspace.")] = None) -> None:
    """The state of one Job and its cells, or of every Job of the Workspace."""
    acting = Context.of(ctx).acting()
    wh = acting.wh
    recovery.recover(wh)
    if job_id is None:
        out.table(["Job", "Benchmark", "status", "Trials done", "submitted"],
                  ([j.id, j.benchmark_label, j.status,
                    f"{records.trials_finished(wh, j.id)}/{sum(c.n_trials for c in records.cells_of(wh, j.id))}",
                    f"{j.created_at:%Y-%m-%d %H:%M:%S}"] for j in records.list_jobs(wh, acting.workspace)),
                  title=f"Jobs of Workspace {acting.workspace}")
        return
    job = records.get_job(wh, job_id, acting.workspace)
    out.line(f"{job.id} over {job.benchmark_label}: {job.status}" + (f" ({job.message})" if job.message else ""))
    out.table(["cell", "status", "Trials", "note"],
              ([c.label, c.status, c.n_trials, c.message or ""] for c in records.cells_of(wh, job_id)))


@job_app.command("wait")
def job_wait(ctx: typer.Context, job_id: options.JobId) -> None:
    """Follow a Job with a progress bar until it ends, then print its results."""
    follow(Context.of(ctx).acting(), job_id)


@app.command("results")
def results(ctx: typer.Context, job_id: options.JobId, as_json: options.Json = False) -> None:
    """The cells of a Job's report: each cell's score with its 95% bootstrap CI, and the paired comparisons; for a
    Job that stopped early (ceiling_reached or cancelled), also the Tasks it left without a scored Trial."""
    acting = Context.of(ctx).acting()
    job = records.get_job(acting.wh, job_id, acting.workspace)
    try:
        found = _job_report(acting, job.id)
    except sources.NoTrials:
        missing = job_record(acting, job.id)["missing_tasks"]
        if missing is None:
            raise
        found = {"cells": [], "comparisons": [], "missing_tasks": missing}  # no Trial ran: only what is missing
    if as_json:
        out.json({"job": job.id, "benchmark": job.benchmark_label, "status": job.status, "message": job.message,
                  "cells": found["cells"],
                  "comparisons": found["comparisons"],
                  "metering_disagreements": found.get("metering_disagreements", [])}
                 | ({"missing_tasks": found["missing_tasks"]} if "missing_tasks" in found else {}))
        return
    out.line(f"{job.id} on {job.benchmark_label}" + (f": {job.status} ({job.message})"
                                                     if job.status != "completed" and job.message else ""))
    if found["cells"]:
        _print_cells(found)
    else:
        out.line("No Trial of it has a result.")
        for line in report.render_missing(found):
            out.line(line)


def _job_report(acting: Acting, job_id: str) -> dict:
    """The report of a Job: the one path `results` and `job wait` take."""
    record = job_record(acting, job_id)
    found = report.build_report(sources.load(acting.wh, acting.workspace, job_id),
                                missing_tasks=record["missing_tasks"])
    return found | {"metering_disagreements": record["metering_disagreements"]}


def job_record(acting: Acting, job_id: str) -> dict:
    """What a Job's record adds to the report of its Trials: for a Job that stopped early (ceiling_reached or
    cancelled), its Tasks without a scored Trial per cell (`quotes.MissingCell`, as JSON; else None), and where an
    Agent's own token count disagrees with what the model proxy metered."""
    job = records.get_job(acting.wh, job_id, acting.workspace)
    missing = ([m.as_json() for m in lifecycle.missing_tasks(acting.wh, acting.workspace, job.id)]
               if job.status in lifecycle.STOPPED_EARLY else None)
    return {"missing_tasks": missing,
            "metering_disagreements": records.metering_disagreements(acting.wh, acting.workspace, job.id)}


def _print_cells(found: dict) -> None:
    for line in report.render_cells(found) + report.render_metering(found):
        out.line(line)


def print_quote(made: Quote) -> None:
    out.table(["cell", "Tasks", "Trials/Task", "per Trial", "total", "estimate"],
              ([c.label, c.n_tasks, c.trials_per_task, show(Decimal(c.cost_per_trial)), show(Decimal(c.total)),
                c.basis] for c in made.cells),
              title=f"Quote {made.id} for {made.job_id} on {made.benchmark_label}")
    out.line(f"Reserved {show(made.amount)} from Workspace {made.workspace}'s Wallet as the Job's spending ceiling; "
             f"the Quote expires at {made.expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC.")
    if made.amount > made.estimate:
        out.line(f"That is your ceiling: the estimate is {show(made.estimate)}, and the extra "
                 f"{show(made.amount - made.estimate)} is spread over the cells in proportion to their estimates.")
    out.line(detectable_change_sentence(max((c.n_tasks for c in made.cells), default=0)))


def follow(acting: Acting, job_id: str) -> None:
    """A progress bar over the Job's Trials until it has ended and no cell still runs; then its results."""
    job = watch(acting, job_id)
    if job.status != "completed":
        out.line(f"{job_id} ended {job.status}" + (f": {job.message}" if job.message else "."))
    try:
        found = _job_report(acting, job_id)
    except sources.NoTrials:
        out.line(f"{job_id} has no results: no Trial of it ran.")
        for line in report.render_missing({"missing_tasks": job_record(acting, job_id)["missing_tasks"]}):
            out.line(line)
        return
    _print_cells(found)


def watch(acting: Acting, job_id: str) -> records.Job:
    """A progress bar over the Job's Trials until it has ended and no cell still runs; the ended Job."""
    wh = acting.wh
    total = sum(c.n_trials for c in records.cells_of(wh, records.get_job(wh, job_id, acting.workspace).id))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=out.console, transient=False) as progress:
        bar = progress.add_task(f"{job_id} Trials", total=total)
        while True:
            recovery.recover(wh)  # a run that died on this machine ends its cell, so the wait ends
            job = records.get_job(wh, job_id, acting.workspace)
            progress.update(bar, completed=records.trials_finished(wh, job_id))
            if job.ended and not any(c.status == "running" for c in records.cells_of(wh, job_id)):
                return job
            time.sleep(1)


def launch(wh: Warehouse, job_id: str) -> None:
    """Have the warm worker launch the started Job's cell runs now (else the sensor does at its next tick), or
    say that no daemon runs them."""
    if warm_worker.announce_start(wh.paths, job_id):
        return
    if embedded.daemon_pid(wh.paths) is None:
        out.line("No Amber daemon runs on this instance: start one with `amber daemon start` (or `amber ui`) so "
                 "the Job's cells run.")
