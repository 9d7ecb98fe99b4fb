"""`amber job ...` and `amber results`: quote, start, follow and read Jobs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from datetime import UTC
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from amber_pipeline.agents.specs import DEFAULT_AGENT
from amber_pipeline.cli import options
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import inert, out

if TYPE_CHECKING:
    from amber_pipeline.jobs import records
    from amber_pipeline.jobs.quotes import Quote
    from amber_pipeline.jobs.request import JobRequest
    from amber_pipeline.operations.jobs import Progress, QuoteRequest

app = typer.Typer()
job_app = typer.Typer(no_args_is_help=True, help="Quote, start, follow and cancel Jobs.")
app.add_typer(job_app, name="job")


@job_app.command("quote")
def job_quote(ctx: typer.Context, benchmark: options.Benchmark, agent: options.Agent = DEFAULT_AGENT,
              model: options.Model = None, trials: options.Trials = 1, bounds: options.Bounds = False,
              public: options.Public = False, ceiling: options.Ceiling = None,
              stop: options.StopWhenDecided = False, margin: options.Margin = None,
              seed: options.OrderSeed = None) -> None:
    """Quote a Job and reserve its amount from the Wallet; start it within the hour with `amber job start`."""
    c = Context.of(ctx)
    with sent(c, options.job_request(benchmark, agent, model, trials, bounds, public, ceiling, stop, margin,
                                     seed)) as request:
        made = c.call("job_quote", request)
    print_quote(made)
    out.line(f"Start it within the hour with: amber job start {made.id}")


@job_app.command("start")
def job_start(ctx: typer.Context,
              quote_id: Annotated[str, typer.Argument(help="The Quote's id, or its Job's.")]) -> None:
    """Start a quoted Job; the embedded daemon starts its cell runs within seconds."""
    started = Context.of(ctx).call("job_start", quote_id=quote_id)
    print_notice(started.notice)
    out.line(f"Started {started.job.id} over {started.job.benchmark_label}.")


@job_app.command("submit")
def job_submit(ctx: typer.Context, benchmark: options.Benchmark, agent: options.Agent = DEFAULT_AGENT,
               model: options.Model = None, trials: options.Trials = 1, bounds: options.Bounds = False,
               public: options.Public = False, ceiling: options.Ceiling = None,
               stop: options.StopWhenDecided = False, margin: options.Margin = None,
               seed: options.OrderSeed = None,
               wait: Annotated[bool, typer.Option("--wait", help="Follow the Job with a progress bar, then print "
                                                                 "its results.")] = False) -> None:
    """Quote a Job and start it at once."""
    c = Context.of(ctx)
    with sent(c, options.job_request(benchmark, agent, model, trials, bounds, public, ceiling, stop, margin,
                                     seed)) as request:
        started = c.call("job_submit", request)
    print_notice(started.notice)
    print_quote(started.quote)
    out.line(f"Started {started.job.id}.")
    if wait:
        follow(c, started.job.id)


@job_app.command("continue")
def job_continue(ctx: typer.Context, job_id: options.JobId,
                 amount: Annotated[str | None, typer.Option("--amount", metavar="USD", help=(
                     "Dollars to reserve instead of the estimate of the missing Trials (a plain amount, like "
                     "12.50)."))] = None) -> None:
    """Go on with a Job past its ceiling (or cancelled, or running near its ceiling): reserve what its missing
    Trials need and run them in the same Job."""
    from amber_pipeline.money.prices import show

    started = Context.of(ctx).call("job_continue", job_id=job_id, amount=amount)
    made = started.quote
    assert made is not None
    print_notice(started.notice)
    out.table(["cell", "Tasks missing a Trial", "per Trial", "estimate", "sources"],
              ([c.label, c.n_tasks, show(Decimal(c.cost_per_trial)), show(c.estimated), c.basis] for c in made.cells),
              title=f"Missing Trials of {made.job_id} on {made.benchmark_label}")
    out.line(f"Reserved {show(made.amount)} more from Workspace {made.workspace}'s Wallet ({made.id}); "
             f"{started.job.id} is {started.job.status} and runs its missing Trials.")


@job_app.command("cancel")
def job_cancel(ctx: typer.Context, job_id: options.JobId) -> None:
    """Stop a Job: no new Trial starts, in-flight ones stop, the unspent reservation is refunded."""
    job = Context.of(ctx).call("job_cancel", job_id=job_id)
    out.line(f"{job.id} is {job.status}; in-flight Trials stop within seconds and the unspent reservation is "
             "refunded once they have.")


@job_app.command("status")
def job_status(ctx: typer.Context, job_id: Annotated[str | None, typer.Argument(
        help="An Amber Job id; without one, every Job of the Workspace.")] = None) -> None:
    """The state of one Job and its cells, or of every Job of the Workspace."""
    c = Context.of(ctx)
    if job_id is None:
        listed = c.call("job_list")
        out.table(["Job", "Benchmark", "status", "Trials done", "submitted"],
                  ([p.job.id, p.job.benchmark_label, p.job.status, f"{p.finished}/{p.total}",
                    f"{p.job.created_at:%Y-%m-%d %H:%M:%S}"] for p in listed.jobs),
                  title=f"Jobs of Workspace {listed.workspace}")
        return
    found = c.call("job_status", job_id=job_id)
    job = found.job
    out.line(f"{job.id} over {job.benchmark_label}: {job.status}" + (f" ({job.message})" if job.message else ""))
    out.table(["cell", "status", "Trials", "note"],
              ([cell.label, cell.status, cell.n_trials, cell.message or ""] for cell in found.cells))
    print_notice(found.notice)


@job_app.command("wait")
def job_wait(ctx: typer.Context, job_id: options.JobId) -> None:
    """Follow a Job with a progress bar until it ends, then print its results."""
    follow(Context.of(ctx), job_id)


@app.command("results")
def results(ctx: typer.Context, job_id: options.JobId, as_json: options.Json = False) -> None:
    """The cells of a Job's report: each cell's score with its 95% bootstrap CI, and the paired comparisons; for a
    Job that stopped early (ceiling_reached or cancelled), also the Tasks it left without a scored Trial; for one
    run with --stop-when-decided, each comparison's anytime-valid interval and verdict, and what stopping saved."""
    from amber_pipeline.analysis import render_report, sources
    from amber_pipeline.cli.results import print_cells, shown_report

    found = Context.of(ctx).call("job_results", job_id=job_id)
    job = found.job
    if found.report is None and found.missing_tasks is None:
        raise sources.NoTrials(f"Job {job.id}")
    shown = shown_report(found)
    if as_json:
        out.json(shown.model_dump(mode="json"))
        return
    out.line(f"{job.id} on {job.benchmark_label}" + (f": {job.status} ({job.message})"
                                                     if job.status != "completed" and job.message else ""))
    if shown.cells:
        print_cells(shown)
    else:
        out.line("No Trial of it has a result.")
        for line in render_report.render_missing(shown.missing_tasks):
            out.line(line)


@contextlib.contextmanager
def sent(c: Context, request: JobRequest) -> Iterator[QuoteRequest]:
    """The request as a Quote takes it: through the API, a Benchmark folder here travels as NAME.tar.gz of it."""
    from amber_pipeline.benchmarks import registry
    from amber_pipeline.cli.client import folder_archive
    from amber_pipeline.operations.jobs import QuoteRequest

    folder = Path(request.benchmark)
    if c.remote is None or registry.is_label(request.benchmark) or not folder.is_dir():
        yield QuoteRequest.of(request)
        return
    with folder_archive(folder) as archive:
        yield QuoteRequest.of(request, str(archive))


def print_quote(made: Quote | None) -> None:
    from amber_pipeline.analysis.plan import detectable_change_sentence
    from amber_pipeline.money.prices import show

    if made is None:
        return
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


def print_notice(notice: str | None) -> None:
    if notice:
        out.line(notice)


# What reading a finished Job's results imports on this machine, beyond what following it did: the scoring engine
# and the warehouse's views its report reads, and pandas, which DuckDB loads for them (half a second together).
RESULTS_IMPORTS = ("pandas", "amber_pipeline.scoring.engine", "amber_pipeline.warehouse.views")


def follow(c: Context, job_id: str) -> None:
    """A progress bar over the Job's Trials until it has ended and no cell still runs; then its results.

    On this machine, what its results need is made ready while the Job runs (`_ready_for_results`), so they print
    as soon as it ends."""
    from amber_pipeline.analysis import render_report
    from amber_pipeline.cli.results import print_cells, shown_report

    job = watch(c, job_id, meanwhile=None if c.remote is not None else _ready_for_results)
    if job.status != "completed":
        out.line(f"{job_id} ended {job.status}" + (f": {job.message}" if job.message else "."))
    found = c.call("job_results", job_id=job_id)
    if found.report is None:
        out.line(f"{job_id} has no results: no Trial of it ran.")
        for line in render_report.render_missing(found.missing_tasks):
            out.line(line)
        return
    print_cells(shown_report(found))


def _ready_for_results(found: Progress) -> None:
    """What the Job's results will need, made while it runs: their imports, and the resample rows of its report's
    intervals (`bootstrap.prepare`), drawn for as many Tasks as each cell has (a cell's interval resamples its
    scored Tasks: all of them, unless some Task has no scored Trial, which then draws its rows as before)."""
    import importlib

    for module in RESULTS_IMPORTS:
        importlib.import_module(module)
    from amber_pipeline.scoring import bootstrap

    for n in sorted({c.n_trials // found.job.trials_per_task for c in found.cells}):
        bootstrap.prepare(n)


POLL_SEC = 1.0  # the longest a follower goes without reading the Job's state
CHANGE_POLL_SEC = 0.01  # how often a follower on this machine looks whether the catalog changed: a stat, no read


def watch(c: Context, job_id: str, meanwhile: Callable[[Progress], None] | None = None) -> records.Job:
    """A progress bar over the Job's Trials until it has ended and no cell still runs; the ended Job. ``meanwhile``
    runs once, at the first wait, given the Job's state then (a change during it is seen right after it).

    On this machine's DuckDB catalog the Job's state is read again as soon as the catalog's files change (every
    step of a Job is a catalog write: a batch of Trials charged, a cell ended), so the bar follows the Trials and
    the wait ends when the last cell's results are stored, not a poll interval later; at least every
    :data:`POLL_SEC` it is read anyway. Through a server, or on PostgreSQL, it is read every :data:`POLL_SEC`.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    changed = _catalog_changes(c)
    seen = changed()
    found = c.call("job_status", job_id=job_id)
    print_notice(found.notice)
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=out.console, transient=False) as progress:
        bar = progress.add_task(inert(f"{job_id} Trials"), total=found.total)
        while True:
            progress.update(bar, completed=found.finished)
            if found.settled:
                return found.job
            if meanwhile is not None:
                meanwhile(found)
                meanwhile = None
            seen = _wait_for_change(changed, seen)
            found = c.call("job_status", job_id=job_id)


def _catalog_changes(c: Context) -> Callable[[], object]:
    """What tells that the catalog may have changed: the size, time and inode of this machine's DuckDB catalog file
    and of its write-ahead log (a commit changes one of them); a constant where there is no file to look at."""
    import os

    from amber_pipeline import settings

    if c.remote is not None:
        return lambda: None
    kind, location = settings.catalog_url(c.paths)
    if kind != "duckdb":
        return lambda: None
    files = (location, f"{location}.wal")

    def signature() -> object:
        stats: list[tuple[int, int, int] | None] = []
        for name in files:
            try:
                st = os.stat(name)
            except FileNotFoundError:
                stats.append(None)
            else:
                stats.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(stats)

    return signature


def _wait_for_change(changed: Callable[[], object], seen: object) -> object:
    """Wait until ``changed()`` differs from ``seen``, or :data:`POLL_SEC` has passed; its value then (taken
    before the read that follows, so a change during that read is not missed)."""
    deadline = time.monotonic() + POLL_SEC
    while True:
        now = changed()
        if now != seen or time.monotonic() >= deadline:
            return now
        time.sleep(CHANGE_POLL_SEC)
