"""Quotes and Jobs: quote, start, submit, cancel and follow (a Job's results are `results.py`'s)."""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

from pydantic import BaseModel, Field

from amber_pipeline import embedded, worker_socket
from amber_pipeline.accounts.identity import SIGNED_IN
from amber_pipeline.agents.specs import agent_spec
from amber_pipeline.analysis import plan
from amber_pipeline.benchmarks import registry
from amber_pipeline.benchmarks.intake.archive import unpack
from amber_pipeline.benchmarks.tasks import no_benchmark
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import lifecycle, quotes, records, recovery, shown_tokens
from amber_pipeline.jobs.quotes import Quote
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money import wallet
from amber_pipeline.money.amounts import Amount, AtMost, Ceiling, as_text, parse_amount
from amber_pipeline.operations.operation import Acting, operation
from amber_pipeline.warehouse.catalog import Warehouse

NO_DAEMON = ("No Amber daemon runs on this instance: start one with `amber daemon start` (or `amber ui`) so the "
             "Job's cells run.")


class JobRef(BaseModel):
    job_id: str = Field(description="An Amber Job id (job-...).")


class QuoteRef(BaseModel):
    quote_id: str = Field(description="The Quote's id, or its Job's.")


class Started(BaseModel):
    job: records.Job
    quote: Quote | None = None
    notice: str | None = None  # a sentence the user should read: no daemon runs the Job's cells


class Progress(BaseModel):
    job: records.Job
    cells: list[records.JobCell]
    finished: int  # Trials with a result so far
    total: int
    notice: str | None = None  # a sentence the user should read: no daemon runs the Job's cells
    started_by: str | None = None  # the user who started it (None: not started, or started before the audit log)
    reserved_usd: Decimal = Decimal(0)  # over all its Quotes
    charged_usd: Decimal = Decimal(0)
    refunded_usd: Decimal = Decimal(0)

    @property
    def settled(self) -> bool:
        """Ended, and no cell still runs."""
        return self.job.ended and not any(c.status == "running" for c in self.cells)


def require_docker(request: JobRequest | None) -> None:
    """Sandboxes need a Docker engine; a Job of static Tasks (the Direct Agent) runs without one."""
    if request is None or not agent_spec(request.agent).static or request.bounds:
        from amber_pipeline.sandbox import docker_engine  # the Docker SDK: only for a Job that needs an engine

        docker_engine.connect()


def launch(wh: Warehouse, job_id: str) -> str | None:
    """Have the warm worker launch the started Job's cell runs now (else the sensor does at its next tick); the
    sentence to show when no daemon runs them."""
    if worker_socket.start_cell_runs(wh.paths, job_id):
        return None
    return NO_DAEMON if embedded.daemon_pid(wh.paths) is None else None


FOLDER_SUFFIX = ".tar.gz"


class QuoteRequest(JobRequest):
    ceiling_usd: Ceiling | None = Field(  # type: ignore[assignment]  # the text typed; the Job keeps its float
        None, description=f"{JobRequest.model_fields['ceiling_usd'].description} A plain decimal string, like "
                          "\"12.50\".")
    folder: str | None = Field(None, description="When `benchmark` names a folder of Tasks: the folder, sent as "
                                                 "the request's file: NAME.tar.gz holding the folder NAME.")
    at_most: AtMost | None = Field(None, description="The amount you were shown and agreed to (a preview's): a "
                                                     "Quote that would now reserve more is refused, reserving "
                                                     "nothing. A plain decimal string, like \"12.50\".")
    shown: str | None = Field(None, max_length=shown_tokens.MAX_CHARS,
                              description="The token of the Quote a preview showed you (`job_preview`'s `shown`): "
                                          "the Quote made is that one, each cell's price reserved as shown and not "
                                          "priced again, under the Job id it was shown under (confirming twice makes "
                                          "one Job). Refused if it was altered, made for another user, Workspace or "
                                          "request, is over an hour old, or its Benchmark's Tasks changed since.")

    @classmethod
    def of(cls, request: JobRequest, folder: str | None = None) -> QuoteRequest:
        """`request` as the API takes it: its ceiling as the plain text of its amount."""
        ceiling = None if request.ceiling_usd is None else as_text(request.ceiling_usd)
        return cls(**(request.model_dump() | {"ceiling_usd": ceiling}), folder=folder)


@operation("POST", "/quotes", uploads=("folder",))
def job_quote(acting: Acting, params: QuoteRequest) -> Quote:
    """Quote a Job and reserve its amount from the Wallet; start it within the hour.

    A Benchmark folder becomes a private Benchmark Version of the Workspace with its Quote (public, for staff
    asking so); through the API its Tasks come as the request's file, unpacked under the same checks as an
    upload's archive.
    """
    shown = _shown(acting, params)
    with _read(params) as request:
        return lifecycle.quote(acting.wh, acting.workspace, acting.actor.user, request, at_most=_at_most(params),
                               shown=shown)


@operation("POST", "/quotes/{quote_id}/start")
def job_start(acting: Acting, params: QuoteRef) -> Started:
    """Start a quoted Job; the daemon starts its cell runs within seconds."""
    made = quotes.get(acting.wh, acting.workspace, params.quote_id)  # an unknown Quote is the first thing to say
    require_docker(records.get_job(acting.wh, made.job_id, acting.workspace).request)
    job = lifecycle.start(acting.wh, acting.workspace, params.quote_id)
    return Started(job=job, notice=launch(acting.wh, job.id))


@operation("POST", "/jobs", uploads=("folder",))
def job_submit(acting: Acting, params: QuoteRequest) -> Started:
    """Quote a Job and start it at once (a Benchmark folder comes as for a Quote); given a preview's `shown`, the
    Quote it showed is the one made and started, not priced again."""
    params.check(acting.wh.paths, acting.workspace)  # a request that cannot run is the first thing to say
    require_docker(params)
    shown = _shown(acting, params)
    with _read(params) as request:
        made, job = lifecycle.submit(acting.wh, acting.workspace, acting.actor.user, request,
                                     at_most=_at_most(params), shown=shown)
    return Started(job=job, quote=made, notice=launch(acting.wh, job.id))


class Preview(BaseModel):
    """What a Quote of the request would reserve, priced now as `job_quote` prices it; nothing is reserved and no
    Quote or Job is recorded."""

    workspace: str
    benchmark_label: str  # a folder's Tasks: the label they would get
    n_tasks: int
    trials_per_task: int
    cells: list[quotes.CellQuote]  # each cell's price per Trial, total and the sources of its estimate
    estimate: Decimal
    amount: Decimal  # what confirming reserves: the estimate, or a ceiling of your own above it
    available: Decimal  # what the Wallet has available now
    shortfall: str | None = Field(description="The sentence a Quote would be refused with now, the Wallet too "
                                              "short for it; null when it fits.")
    detectable_change_points: float | None = Field(description="The smallest change, in points, the Job detects "
                                                               "with 80% power against a round on other Tasks; "
                                                               "null when it detects none.")
    detectable_change: str  # that, in the sentence a Quote prints
    shown: str = Field(description="This Quote as shown, signed by this Amber for you, this Workspace and this "
                                   "request: give it to `job_submit` (or `job_quote`) to make exactly this Quote "
                                   "within the hour, not priced again.")


@operation("POST", "/quotes/preview", uploads=("folder",))
def job_preview(acting: Acting, params: QuoteRequest) -> Preview:
    """Price a Job as its Quote would, per cell, without reserving anything or recording a Quote.

    The same checks as a Quote refuse a request that cannot run, in the same sentences; a Wallet too short is
    not refused but said (`shortfall`), since the price is what a user needs to ask for a Credit. Confirm with
    `job_submit` (or `job_quote`) giving the same request and `shown`, the token of this Quote: it is the Quote
    made, as shown.
    """
    with _read(params) as request:
        priced = lifecycle.price(acting.wh, acting.workspace, acting.actor.user, request)
    shown = priced.shown(lifecycle.new_job_id())
    available = wallet.read(acting.wh, acting.workspace)[0].available
    points = plan.quote_detectable_change(priced.estimate.n_tasks) if priced.estimate.n_tasks else math.nan
    return Preview(workspace=acting.workspace, benchmark_label=priced.estimate.label,
                   n_tasks=priced.estimate.n_tasks, trials_per_task=request.trials_per_task, cells=priced.cells,
                   estimate=priced.estimate.total, amount=priced.amount, available=available,
                   shortfall=wallet.shortfall(acting.workspace, available, priced.amount),
                   detectable_change_points=None if math.isnan(points) else points,
                   detectable_change=plan.detectable_change_sentence(priced.estimate.n_tasks),
                   shown=shown_tokens.seal(acting.wh.paths, acting.workspace, acting.actor.user, _asked(params),
                                           shown))


def _at_most(params: QuoteRequest) -> Decimal | None:
    return None if params.at_most is None else parse_amount(params.at_most, "at_most")


def _asked(params: QuoteRequest) -> JobRequest:
    """The Job request as the user asked it (a folder by the name they gave it): what a shown Quote is bound to."""
    return JobRequest.model_validate(params.model_dump(exclude={"folder", "at_most", "shown"}))


def _shown(acting: Acting, params: QuoteRequest) -> lifecycle.ShownQuote | None:
    """The Quote a preview showed, from its token, if the request brings one (refused if it is not this
    request's, this user's, in this Workspace, as this Amber signed it)."""
    if params.shown is None:
        return None
    return shown_tokens.unseal(acting.wh.paths, params.shown, acting.workspace, acting.actor.user, _asked(params))


@contextlib.contextmanager
def _read(params: QuoteRequest) -> Iterator[JobRequest]:
    """The Job request, its Benchmark a label or a folder: on this machine as named, through the API the folder
    the request brought (unpacked for the call, under the checks of an upload's archive). A signed-in user never
    names a path of the server's."""
    request = _asked(params)
    if params.folder is None:
        if SIGNED_IN.get() is not None and not registry.is_label(request.benchmark):
            raise no_benchmark(request.benchmark)
        yield request
        return
    with folder_sent(Path(params.folder)) as folder:
        try:
            yield request.model_copy(update={"benchmark": str(folder)})
        except AmberError as e:  # a sentence about the folder names it as its user did, not as unpacked here
            e.args = (str(e).replace(str(folder), request.benchmark),)
            raise


@contextlib.contextmanager
def folder_sent(archive: Path) -> Iterator[Path]:
    """The folder a client sent as NAME.tar.gz, unpacked for the call under the checks of an upload's archive
    (limits, no links, no paths out) but read as a folder here would be."""
    name = archive.name.removesuffix(FOLDER_SUFFIX)
    with tempfile.TemporaryDirectory(prefix="amber-folder-") as spool:
        unpack(archive, Path(spool) / "folder", as_is=True)
        folder = Path(spool) / "folder" / name
        if not name or not folder.is_dir():
            raise no_benchmark(name)
        yield folder


@operation("POST", "/jobs/{job_id}/cancel")
def job_cancel(acting: Acting, params: JobRef) -> records.Job:
    """Stop a Job: no new Trial starts, in-flight ones stop, the unspent reservation is refunded."""
    lifecycle.cancel(acting.wh, acting.workspace, params.job_id)
    recovery.recover(acting.wh, params.job_id)  # a cell whose run died ends now: the cancelled Job is refunded
    return records.get_job(acting.wh, params.job_id, acting.workspace)


class ContinueRequest(BaseModel):
    job_id: str = Field(description="An Amber Job id (job-...).")
    amount: Amount | None = Field(None, description="Dollars to reserve instead of the estimate of the missing "
                                                    "Trials: a plain decimal string, like \"12.50\".")


@operation("POST", "/jobs/{job_id}/continue")
def job_continue(acting: Acting, params: ContinueRequest) -> Started:
    """Go on with a Job past its ceiling: reserve what its missing Trials need (or `amount`) and run them in it.

    For a Job that stopped at its ceiling or was cancelled, and for a running Job near its ceiling. The missing
    Trials are those `results` lists; they run in the same Job, so its report holds every Trial.
    """
    job = records.get_job(acting.wh, params.job_id, acting.workspace)  # an unknown Job is the first thing to say
    require_docker(job.request)
    made = lifecycle.continue_job(acting.wh, acting.workspace, job.id, params.amount)
    return Started(job=records.get_job(acting.wh, job.id, acting.workspace), quote=made,
                   notice=launch(acting.wh, job.id))


class Jobs(BaseModel):
    workspace: str
    jobs: list[Progress]


@operation("GET", "/jobs")
def job_list(acting: Acting) -> Jobs:
    """Every Job of the Workspace, with its Trials done so far."""
    return Jobs(workspace=acting.workspace,
                jobs=[_progress(acting, job) for job in records.list_jobs(acting.wh, acting.workspace)])


@operation("GET", "/jobs/{job_id}")
def job_status(acting: Acting, params: JobRef) -> Progress:
    """The state of one Job, its cells, and its Trials done so far.

    It only reads: a cell whose run died is resumed by the daemon's run monitoring, or ended by it when that
    gives up, never by a read; with no daemon running, a running Job says so.
    """
    return _progress(acting, records.get_job(acting.wh, params.job_id, acting.workspace))


def _progress(acting: Acting, job: records.Job) -> Progress:
    cells = records.cells_of(acting.wh, job.id)
    notices = [NO_DAEMON] if job.status == "running" and embedded.daemon_pid(acting.wh.paths) is None else []
    notices += [f"Cell {cell}: its run's process is gone; the daemon resumes the run (its stored Trials kept), or "
                "ends the cell if it cannot." for cell in recovery.dead_cells(acting.wh, job.id)]
    money = records.job_money(acting.wh, job.id)
    return Progress(job=job, cells=cells, finished=records.trials_finished(acting.wh, job.id),
                    total=sum(c.n_trials for c in cells), notice=" ".join(notices) or None,
                    started_by=money.started_by, reserved_usd=money.reserved, charged_usd=money.charged,
                    refunded_usd=money.refunded)


