"""A Job's lifecycle: the one module that creates, starts, expires, cancels and ends Jobs.

A Job is quoted, then running, then ends as exactly one of completed,
cancelled, ceiling_reached or failed (`TRANSITIONS`; anything else is
refused). Quoting records the Job with its request and cells and reserves its
Quote (`quotes.py` estimates and reserves); a Quote not started within its
lifetime expires and is released. The sensor turns running Jobs into cell
runs, and each cell run reports here when it starts, charges a Trial and
stops. When the last cell of an ended Job stops, the unspent rest of its
reservation is refunded, so for every Job reserved = charged + refunded.

What a user does to a Job (quote, start, cancel, continue) is written to the
audit log (`accounts/audit.py`) in the same transaction as the change itself.
"""

from __future__ import annotations

import contextlib
import secrets
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amber_pipeline import user_text
from amber_pipeline.accounts import audit, workspaces
from amber_pipeline.agents.specs import agent_spec
from amber_pipeline.benchmarks import registry
from amber_pipeline.benchmarks.tasks import no_benchmark, within_limits
from amber_pipeline.benchmarks.versions import BenchmarkVersion, FolderTasks, read_folder
from amber_pipeline.cells import Cell
from amber_pipeline.errors import AmberError, Forbidden, NotFound
from amber_pipeline.jobs import cell_names, history, quotes, stopping, workers
from amber_pipeline.jobs.budget import Pool
from amber_pipeline.jobs.decisions import JobDecision
from amber_pipeline.jobs.outcomes import Kind
from amber_pipeline.jobs.quotes import Quote
from amber_pipeline.jobs.records import ACTIVE_CELL, FINAL, Job, cells_of, get_job, run_dir
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.models.configurations import ModelConfiguration
from amber_pipeline.money import wallet
from amber_pipeline.money.amounts import parse_amount
from amber_pipeline.money.prices import PRICES, Prices, show, usd
from amber_pipeline.warehouse.catalog import Connection, Warehouse

if TYPE_CHECKING:  # the runner imports the proxy and aiohttp, the schemas Arrow: not for a CLI that only quotes
    from amber_pipeline.jobs.trial_runner import CellRun
    from amber_pipeline.warehouse.schemas import TrialRecord

TRANSITIONS: dict[str, set[str]] = {
    "quoted": {"running", "cancelled"},
    "running": {"completed", "cancelled", "ceiling_reached", "failed"},
    "ceiling_reached": {"running"},  # `amber job continue`, with a Quote for the missing Trials
    "cancelled": {"running"},  # likewise
}
EXPIRED = "Quote expired before the Job started"
STOPPED_EARLY = ("ceiling_reached", "cancelled")
CONTINUABLE = (*STOPPED_EARLY, "running")  # a running Job near its ceiling may be given more too


def _scalar(con: Connection, query: str, params: list) -> Any:
    row = con.execute(query, params).fetchone()
    assert row is not None, query
    return row[0]


def transition(con: Connection, job_id: str, to: str, message: str | None = None,
               at: datetime | None = None) -> None:
    """Move a Job to another state, or refuse an illegal move."""
    current = _scalar(con, "select status from jobs where id = ?", [job_id])
    if to not in TRANSITIONS.get(current, set()):
        raise AmberError(f"Job {job_id} is {current}: it cannot become {to}.")
    if to == "running":  # start_seq orders Jobs by when they started
        con.execute("update jobs set status = ?, started_at = ?, start_seq = nextval('start_seq') where id = ?",
                    [to, at or datetime.now(UTC), job_id])
    else:
        con.execute("update jobs set status = ?, message = coalesce(?, message), finished_at = ? where id = ?",
                    [to, message, at or datetime.now(UTC), job_id])


# ---- quoted ----------------------------------------------------------------------------------------------

def resolve_benchmark(wh: Warehouse, request: JobRequest, workspace: str,
                      user: str) -> tuple[BenchmarkVersion, str, str, FolderTasks | None]:
    """(version, owner, label, folder) of the request's Benchmark: a label the Workspace sees, or a folder's
    Tasks read but not yet stored (``folder``), writing nothing.

    A folder becomes a private Benchmark Version of the Workspace when its
    Quote is made; staff may register it as public instead.
    """
    if registry.is_label(request.benchmark):
        return (*registry.find(wh, request.benchmark, workspace), None)
    if wh.paths.holds(request.benchmark):  # another Workspace's stored Tasks are not a folder to quote
        raise no_benchmark(request.benchmark)
    if request.public:
        with wh.read() as con:
            if not workspaces.is_staff(con, user):
                raise Forbidden("Only Amber staff can register a public Benchmark: drop --public.")
    owner = registry.PUBLIC if request.public else workspace
    folder = read_folder(Path(request.benchmark), wh.paths.benchmarks)
    return folder.version, owner, registry.label_of(wh, folder, owner), folder


@dataclass(frozen=True)
class Estimate:
    """What a Job would cost, before anything is reserved: each cell's price and the Benchmark it runs."""

    benchmark_version_id: str
    owner: str
    label: str
    cells: list[Cell]
    quoted: list[quotes.CellQuote]
    n_tasks: int
    folder: FolderTasks | None = None  # a folder's Tasks, stored and recorded only when the Quote is made
    version: BenchmarkVersion | None = None  # what was priced: its summaries are kept when the Quote is made

    @property
    def total(self) -> Decimal:
        return sum((c.estimated for c in self.quoted), Decimal(0))


@dataclass(frozen=True)
class Validation:
    """A validation Job's Benchmark: an upload's staged Tasks, which no label finds yet."""

    version: BenchmarkVersion
    label: str  # how the Job names it, e.g. "validation of upl-1234567890"


@dataclass(frozen=True)
class _Checked:
    """A request that passed every check a Quote makes before pricing, and what they found: its Benchmark
    Version (a folder's Tasks read but not stored: ``folder``), whose it is, its label, and the Job's cells."""

    version: BenchmarkVersion
    owner: str
    label: str
    folder: FolderTasks | None
    cells: list[Cell]


@contextlib.contextmanager
def _checked(wh: Warehouse, workspace: str, user: str, request: JobRequest, *, now: datetime | None = None,
             validation: Validation | None = None) -> Iterator[_Checked]:
    """Every check that can refuse a Quote of the request but the Wallet's, in its sentence, for the block; writes
    nothing but releasing the Quotes past their hour, as every Quote does, refused or not (after the block, which
    reads: the block's reads and the checks' share one connection to the catalog)."""
    now = now or datetime.now(UTC)
    mcs = request.check(wh.paths, workspace)
    due: list[str] = []
    try:
        with wh.reading():
            due = quotes.due(wh, now)
            yield _found(wh, workspace, user, request, mcs, validation)
    finally:
        _expire(wh, due, now)


def _found(wh: Warehouse, workspace: str, user: str, request: JobRequest, mcs: list[ModelConfiguration],
           validation: Validation | None) -> _Checked:
    """The checks of `_checked` that read the request's Benchmark, its Tasks and the Workspace."""
    folder = None
    if validation is not None:
        version, owner, label = validation.version, workspace, validation.label
    else:
        version, owner, label, folder = resolve_benchmark(wh, request, workspace, user)
    within_limits(version.tasks)
    _check_fit(wh, workspace, request, version, mcs, private=owner != registry.PUBLIC)
    return _Checked(version, owner, label, folder, request.cells(version, mcs))


# How many times a request was priced (`estimate`) in the current context, when one counts (`pricings`)
_PRICINGS: ContextVar[list[int] | None] = ContextVar("amber_pricings", default=None)


@contextlib.contextmanager
def pricings() -> Iterator[Callable[[], int]]:
    """Count the pricings in the block (of a Job request, `estimate`, or of going on with a Job,
    `price_continuation`), in this context only (a run's step, a request's thread): what a launch reports of
    itself, so that a bench can see it priced a Job once."""
    counter = [0]
    token = _PRICINGS.set(counter)
    try:
        yield lambda: counter[0]
    finally:
        _PRICINGS.reset(token)


def _priced_once_more() -> None:
    if (counter := _PRICINGS.get()) is not None:
        counter[0] += 1


def estimate(wh: Warehouse, workspace: str, user: str, request: JobRequest, *, now: datetime | None = None,
             prices: Prices = PRICES, validation: Validation | None = None) -> Estimate:
    """Check a request and price each of its cells, writing and reserving nothing (a refused request raises:
    every check that can refuse a Quote but the Wallet's runs here). A validation Job's Trials are priced at
    their Tasks' time limits."""
    at_limits = validation is not None
    with _checked(wh, workspace, user, request, now=now, validation=validation) as checked:
        known = (None if at_limits else
                 quotes.known_of(wh, workspace, checked.cells, quotes.sandboxed_hashes(checked.version)))
    tasks = quotes.task_facts(checked.version, wh.paths)  # asks the Docker engine: not while holding the catalog
    _priced_once_more()
    return Estimate(checked.version.id, checked.owner, checked.label, checked.cells,
                    quotes.estimate_cells(wh, workspace, checked.cells, tasks, request.trials_per_task, prices,
                                          at_limits=at_limits, known=known),
                    len(checked.version.tasks), checked.folder, checked.version)


@dataclass(frozen=True)
class Priced:
    """A request priced as its Quote reserves it, before anything is: the estimate, and its cells with a ceiling
    of the user's own spread over them (`quotes.with_ceiling`)."""

    estimate: Estimate
    cells: list[quotes.CellQuote]

    @property
    def amount(self) -> Decimal:
        """What making the Quote reserves: the estimate, or the user's ceiling above it."""
        return sum((Decimal(c.total) for c in self.cells), Decimal(0))

    def shown(self, job_id: str, at: datetime | None = None) -> ShownQuote:
        """This pricing as it is shown to a user now, to be confirmed under ``job_id``."""
        return ShownQuote(job_id, self.estimate.benchmark_version_id, self.cells, at or datetime.now(UTC))


@dataclass(frozen=True)
class ShownQuote:
    """A Quote as a user was shown it, nothing reserved yet: the Job's id it was shown under, the Benchmark Version
    it priced, each cell's price as `price` made it (a ceiling of the user's own spread over them), and when.
    Confirming it (`quote` given ``shown``) reserves exactly these prices, and prices nothing again. Only the
    server makes one: a page carries it signed (`shown_tokens`), the launchpad in its run's own step output."""

    job_id: str
    benchmark_version_id: str
    cells: list[quotes.CellQuote]
    shown_at: datetime

    @property
    def amount(self) -> Decimal:
        return sum((Decimal(c.total) for c in self.cells), Decimal(0))


def price(wh: Warehouse, workspace: str, user: str, request: JobRequest, *, now: datetime | None = None,
          prices: Prices = PRICES, validation: Validation | None = None) -> Priced:
    """What a Quote of the request would reserve, per cell: the one pricing that `quote` reserves and a preview
    shows. It reserves and records nothing (like every Quote, it first releases the Quotes past their hour); a
    request a Quote would refuse is refused here in the same sentence, but for a Wallet too short."""
    priced = estimate(wh, workspace, user, request, now=now, prices=prices, validation=validation)
    return Priced(priced, quotes.with_ceiling(priced.quoted, request.ceiling_usd))


def as_shown(wh: Warehouse, workspace: str, user: str, request: JobRequest, shown: ShownQuote, *,
             now: datetime | None = None, validation: Validation | None = None) -> Priced:
    """The Quote ``shown`` to ``user``, as `quote` reserves it: every check that can refuse a Quote runs again (the
    request's own rules, the Workspace's sight of its Benchmark, its Provider policy, the Tasks' limits; the
    Wallet's when it is reserved), but nothing is priced again. Refused in one sentence, reserving nothing, once
    its hour has passed, or when the request no longer makes the Benchmark Version and cells that were priced (a
    folder edited since, an Agent updated): its price is not the price of what would run."""
    now = now or datetime.now(UTC)
    if now - shown.shown_at > quotes.LIFETIME:
        raise AmberError(f"The Quote you confirm was shown at {shown.shown_at.astimezone(UTC):%Y-%m-%d %H:%M UTC}, "
                         "more than an hour ago: see the Quote again and confirm that one.")
    with _checked(wh, workspace, user, request, now=now, validation=validation) as checked:
        pass
    if checked.version.id != shown.benchmark_version_id:
        raise AmberError(f"The Tasks of {user_text.quoted(request.benchmark)} changed since their Quote was shown, so "
                         "that price is not theirs: see the Quote again and confirm that one.")
    if [c.key for c in checked.cells] != [c.cell_key for c in shown.cells]:
        raise AmberError("This Job's cells changed since its Quote was shown (an Agent was updated), so that price "
                         "is not theirs: see the Quote again and confirm that one.")
    priced = Estimate(checked.version.id, checked.owner, checked.label, checked.cells, shown.cells,
                      len(checked.version.tasks), checked.folder, checked.version)
    return Priced(priced, quotes.with_ceiling(shown.cells, request.ceiling_usd))


def new_job_id() -> str:
    return f"job-{uuid.uuid4().hex[:10]}"


def quote(wh: Warehouse, workspace: str, user: str, request: JobRequest, *, now: datetime | None = None,
          prices: Prices = PRICES, validation: Validation | None = None, job_id: str | None = None,
          at_most: Decimal | None = None, shown: ShownQuote | None = None, and_start: bool = False) -> Quote:
    """Record a quoted Job and reserve its Quote at once, as `user` (its submitter); it waits for `start`. Nothing
    is written unless the Quote is made: a folder's Tasks are copied aside first, and moved into the store in the
    catalog transaction that records their Version, the Job and the reservation.

    ``job_id`` makes the call idempotent: a Job of that id quoted already (by a run that died after quoting it
    and was resumed) is its Quote, and nothing more is reserved. ``at_most`` is the amount a user was shown and
    agreed to: a Quote that would reserve more is refused, reserving nothing. ``shown`` is the Quote a user was
    shown and agreed to: it is the one made, under its Job's id, its cells' prices reserved as shown and not
    priced again (`as_shown`: every check that can refuse runs again, and what no longer holds is refused).
    ``and_start`` starts the Job made in the same transaction (`submit`)."""
    if shown is not None:
        if job_id not in (None, shown.job_id):
            raise ValueError(f"job_id {job_id} is not the id {shown.job_id} the Quote was shown under")
        job_id = shown.job_id
    if job_id is not None and (made := _quote_of(wh, workspace, job_id)) is not None:
        return made
    now = now or datetime.now(UTC)
    quoted = (price(wh, workspace, user, request, now=now, prices=prices, validation=validation) if shown is None
              else as_shown(wh, workspace, user, request, shown, now=now, validation=validation))
    priced = quoted.estimate
    job_id = job_id or new_job_id()
    with _kept(priced) as keep, wh.write() as con:
        label = registry.record_folder(con, priced.folder, priced.owner) if priced.folder else priced.label
        if priced.folder:  # kept as the Version the folder became: the folder may be the server's spooled copy
            request = request.model_copy(update={"benchmark": label})
        if request.stop_when_decided and request.order_seed is None:  # the Job's order, fixed before any Trial
            request = request.model_copy(update={"order_seed": secrets.randbelow(2**63)})
        made = quotes.reserve(con, workspace, job_id, label, quoted.cells, now, request.ceiling_usd)
        con.execute("insert into jobs (id, workspace, submitted_by, benchmark_version_id, benchmark_owner, "
                    "trials_per_task, status, quote_id, created_at, request, purpose) "
                    "values (?, ?, ?, ?, ?, ?, 'quoted', ?, ?, ?, ?)",
                    [job_id, workspace, user, priced.benchmark_version_id, priced.owner, request.trials_per_task,
                     made.id, now, request.model_dump_json(), "validation" if validation else None])
        con.executemany(
            "insert into job_cells (job_id, cell_key, agent, model_configuration, n_trials, status) "
            "values (?, ?, ?, ?, ?, 'pending')",
            [[job_id, c.key, c.agent, c.model_configuration, priced.n_tasks * request.trials_per_task]
             for c in priced.cells])
        cell_names.assign(con, priced.cells, label)
        if at_most is not None and made.amount > at_most:
            raise AmberError(f"This Job's Quote is now {show(made.amount)}, more than the {show(at_most)} you were "
                             "shown: get a new Quote and confirm that one.")
        audit.record(con, "quote", user, workspace=workspace, job_id=job_id, quote_id=made.id, amount=made.amount)
        if and_start:  # a Quote just made has not expired, and its Job has not started
            transition(con, job_id, "running", at=now)
            audit.record(con, "start", user, workspace=workspace, job_id=job_id, quote_id=made.id)
        stored = keep() or priced.version  # last: a refusal above leaves the store as it was
    if stored is not None:
        quotes.remember(stored, wh.paths)  # the Quote is made: the next one of these Tasks reads none of them
    return made


@contextlib.contextmanager
def _kept(priced: Estimate) -> Iterator[Callable[[], BenchmarkVersion | None]]:
    """The step that moves a folder's Tasks into the store (`FolderTasks.staged`) and gives the stored Version;
    nothing for a label."""
    if priced.folder is None:
        yield lambda: None
        return
    with priced.folder.staged() as move_in:
        yield move_in


def missing_tasks(wh: Warehouse, workspace: str, job_id: str, prices: Prices = PRICES) -> list[quotes.MissingCell]:
    """For a Job that stopped early (ceiling_reached or cancelled), each cell's Tasks without all their scored
    Trials and what finishing them would cost; for any other Job, nothing."""
    job = get_job(wh, job_id, workspace)
    if job.status not in STOPPED_EARLY:
        return []
    version = registry.version(wh, job.benchmark_version_id, job.benchmark_owner)
    return quotes.to_finish(wh, workspace, job.id, version.id, cells_of(wh, job.id),
                            quotes.task_facts(version, wh.paths), job.trials_per_task, prices)


def _check_fit(wh: Warehouse, workspace: str, request: JobRequest, version: BenchmarkVersion,
               mcs: list[ModelConfiguration], *, private: bool) -> None:
    """Refuse a Job whose Agent cannot run the Benchmark's Tasks, or that would send a private Benchmark to a
    Provider the Workspace's policy does not list."""
    spec = agent_spec(request.agent)
    n_static = sum(t.static is not None for t in version.tasks)
    if spec.static and n_static < len(version.tasks):
        raise AmberError(f"The {spec.name} Agent runs only static Tasks, and {len(version.tasks) - n_static} of "
                         f"this Benchmark's {len(version.tasks)} Tasks have an Environment: pick another Agent.")
    if n_static and not spec.static:
        raise AmberError(f"This Benchmark has {n_static} static Tasks, which only the Direct Agent runs: "
                         "use --agent direct.")
    if n_static and request.bounds:
        raise AmberError("Static Tasks have no oracle or nop bounds: drop --bounds.")
    policy = workspaces.provider_policy(wh, workspace) if private else None
    for mc in mcs:
        if policy is not None and mc.served_by not in policy:
            allowed = ", ".join(sorted(policy)) or "no Provider"
            raise AmberError(f"Workspace {workspace} sends its private Benchmarks only to {allowed}, and "
                             f"{mc.name} is served by {mc.served_by}: pick another Model Configuration or change "
                             "the policy with `amber workspace provider-policy`.")


def start(wh: Warehouse, workspace: str, quote_or_job_id: str, now: datetime | None = None, *,
          by: str | None = None) -> Job:
    """quoted -> running, unless the Quote has expired (then its reservation is released); the audit log names
    ``by`` (default: the user the running action is for, `audit.actor`)."""
    now = now or datetime.now(UTC)
    expire_due(wh, now)
    made = quotes.get(wh, workspace, quote_or_job_id)
    job = get_job(wh, made.job_id, workspace)
    if job.status == "cancelled" and job.message == EXPIRED:
        raise AmberError(f"Quote {made.id} expired at {made.expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S UTC}: "
                         "make a new one with `amber job quote`.")
    if job.status in STOPPED_EARLY:
        raise AmberError(f"Job {job.id} started already and is {job.status}: go on with `amber job continue "
                         f"{job.id}`.")
    with wh.write(workspace) as con:
        transition(con, job.id, "running", at=now)
        audit.record(con, "start", by or audit.actor(), workspace=workspace, job_id=job.id, quote_id=made.id)
    return get_job(wh, job.id, workspace)


def submit(wh: Warehouse, workspace: str, user: str, request: JobRequest, *, now: datetime | None = None,
           validation: Validation | None = None, job_id: str | None = None,
           at_most: Decimal | None = None, shown: ShownQuote | None = None) -> tuple[Quote, Job]:
    """Quote a Job and start it at once, as `user`: what `amber job submit`, the UI's start_quote and the New Job
    page's Confirm do; idempotent given ``job_id`` (or ``shown``'s), refused above ``at_most``, reserving the
    Quote ``shown`` as shown (see `quote`)."""
    made = quote(wh, workspace, user, request, now=now, validation=validation, job_id=job_id, at_most=at_most,
                 shown=shown, and_start=True)  # one transaction quotes and starts; a Job quoted earlier starts here
    job = get_job(wh, made.job_id, workspace)
    return made, (start(wh, workspace, made.id, now=now, by=user) if job.status == "quoted" else job)


def _quote_of(wh: Warehouse, workspace: str, job_id: str) -> Quote | None:
    try:
        return quotes.get(wh, workspace, job_id)
    except NotFound:
        return None


@dataclass(frozen=True)
class Continuation:
    """What going on with a Job past its ceiling would reserve, before anything is: each cell's missing Trials and
    what finishing them is estimated at, what the Job's pool has left, and the amount to reserve."""

    job: Job
    missing: list[quotes.MissingCell]
    estimate: Decimal
    left: Decimal
    amount: Decimal


def price_continuation(wh: Warehouse, workspace: str, job_id: str, amount: str | None = None, *,
                       prices: Prices = PRICES) -> Continuation:
    """Price going on with a Job past its ceiling (see `continue_job`), reserving and writing nothing; refused in
    one sentence where `continue_job` would be."""
    extra = parse_amount(amount, "--amount") if amount is not None else None
    job = get_job(wh, job_id, workspace)
    if job.status not in CONTINUABLE:
        raise AmberError(f"Job {job.id} is {job.status}: only a Job that stopped at its ceiling, was cancelled, or "
                         "still runs can go on; submit a new Job instead.")
    cells = cells_of(wh, job.id)
    if job.status != "running" and any(c.status == "running" for c in cells):
        raise AmberError(f"Job {job.id} is still stopping its Trials: continue it once `amber job status "
                         f"{job.id}` shows no cell running.")
    version = registry.version(wh, job.benchmark_version_id, job.benchmark_owner)
    _priced_once_more()
    missing = quotes.to_finish(wh, workspace, job.id, version.id, cells, quotes.task_facts(version, wh.paths),
                               job.trials_per_task, prices)
    if not missing:
        raise AmberError(f"Every Trial of Job {job.id} has its Reward: there is nothing to continue.")
    estimate = sum((m.cost_usd for m in missing), Decimal(0))
    left = pool_left(wh, job.id) if job.status == "running" else Decimal(0)
    reserve = extra if extra is not None else max(estimate - left, Decimal(0))
    if reserve <= 0:
        raise AmberError(f"Job {job.id} has {show(left)} of its reservation left, which covers its missing Trials "
                         f"(estimated at {show(estimate)}): nothing needs adding; give --amount to add more anyway.")
    return Continuation(job, missing, estimate, left, reserve)


def continue_job(wh: Warehouse, workspace: str, job_id: str, amount: str | None = None, *,
                 now: datetime | None = None, prices: Prices = PRICES, quote_id: str | None = None,
                 at_most: Decimal | None = None) -> Quote:
    """Go on with a Job past its ceiling: price its missing Trials (those `amber results` lists), reserve that
    (or ``amount``, dollars as typed) into its pool with a Quote of its own, and run them in the same Job, so
    its report is one Job whose cells hold every Trial. A Job that stopped (ceiling_reached or cancelled)
    runs again; a running one near its ceiling is given more (then what its pool has left counts). Refused,
    changing nothing, for a Job that completed, failed or is not the Workspace's, for an amount that is not
    plain, for a Wallet too short, and above ``at_most`` (the amount a user was shown and agreed to).
    ``quote_id`` makes the call idempotent: a continuation made already under that id (by a run that died
    after making it and was resumed) is returned, and nothing more is reserved."""
    now = now or datetime.now(UTC)
    if amount is not None:
        parse_amount(amount, "--amount")  # a malformed amount is the first thing to say
    job = get_job(wh, job_id, workspace)
    if quote_id is not None and (made := _quote_of(wh, workspace, quote_id)) is not None and made.job_id == job.id:
        return made
    priced = price_continuation(wh, workspace, job.id, amount, prices=prices)
    if at_most is not None and priced.amount > at_most:
        raise AmberError(f"Going on with Job {job.id} now needs {show(priced.amount)}, more than the "
                         f"{show(at_most)} you were shown: price it again and confirm that.")
    with wh.write(workspace) as con:
        status = _scalar(con, "select status from jobs where id = ?", [job.id])
        if status != priced.job.status:  # it moved meanwhile: what was priced may no longer be what is missing
            raise AmberError(f"Job {job.id} became {status} meanwhile: run `amber job continue {job.id}` again.")
        made = quotes.continuation(con, workspace, job.id, job.benchmark_label, [m.quote for m in priced.missing],
                                   priced.amount, now, quote_id)
        if status != "running":
            transition(con, job.id, "running", at=now)
            con.execute("update jobs set message = null, finished_at = null where id = ?", [job.id])
            con.execute("update job_cells set status = 'pending', launched_at = null, started_at = null, "
                        "finished_at = null, worker = null, engine_pool = null, message = null, "
                        "rounds = coalesce(rounds, 0) + 1 where job_id = ? and cell_key in (select unnest(?))",
                        [job.id, [m.cell_key for m in priced.missing]])
        audit.record(con, "continue", audit.actor(), workspace=workspace, job_id=job.id, quote_id=made.id,
                     amount=made.amount)
    return made


def expire_due(wh: Warehouse, now: datetime | None = None) -> list[str]:
    """Cancel the Jobs whose Quote expired unstarted and release their reservations; idempotent."""
    now = now or datetime.now(UTC)
    return _expire(wh, quotes.due(wh, now), now)


def _expire(wh: Warehouse, expired: list[str], now: datetime) -> list[str]:
    """Cancel the Jobs of the ``expired`` Quotes that never started and release their reservations."""
    if not expired:
        return []
    with wh.write() as con:
        for quote_id in expired:
            row = con.execute("select j.id, j.workspace, j.status from quotes q join jobs j on j.id = q.job_id "
                              "where q.id = ?", [quote_id]).fetchone()
            assert row is not None
            job_id, workspace, status = row
            if status == "quoted":
                transition(con, job_id, "cancelled", message=EXPIRED, at=now)
                wallet.release(con, workspace, quote_id, job_id, EXPIRED)
    return expired


# ---- running: what a cell run reports ----------------------------------------------------------------------

def open_cell_run(wh: Warehouse, job_id: str, cell_key: str, prices: Prices = PRICES) -> CellRun:
    """Everything a cell run needs to run the Job's Trials of one cell, read on one connection to the catalog (the
    run's first Trial waits for these reads)."""
    from amber_pipeline.jobs.trial_runner import CellRun

    with wh.reading():
        job = get_job(wh, job_id, None)
        matches = [c for c in cells_of(wh, job_id) if c.cell_key == cell_key]
        if not matches:
            raise AmberError(f"Job {job_id} has no cell {cell_key}: launch cells through `amber job submit`.")
        jc = matches[0]
        version = registry.version(wh, job.benchmark_version_id, job.benchmark_owner)
        cell = Cell(version.id, jc.agent, agent_spec(jc.agent).spec_id, jc.model_configuration)
        if cell.key != cell_key:
            raise AmberError(f"The Agent {jc.agent} changed since Job {job_id} was submitted: submit the Job again.")
        pool = Pool(lambda: pool_left(wh, job_id)) if job.quote_id else None
        policy = workspaces.provider_policy(wh, job.workspace) if job.private else None
        limits = ({f.name: quotes.validation_stop_seconds(f) for f in quotes.task_facts(version, wh.paths)}
                  if job.purpose == "validation" else None)
        return CellRun(job_id, cell, version, job.trials_per_task, run_dir(wh, job_id, cell.key), job.workspace,
                       private=job.private, prices=prices, pool=pool, allowed_providers=policy, paths=wh.paths,
                       time_limits=limits, engine_pool=jc.engine_pool,
                       stopping=stopping.StoppingRule.of(job, [t.name for t in version.tasks]))


def pool_left(wh: Warehouse, job_id: str) -> Decimal:
    """What is left of the Job's pool: its reservations less its charges and refunds."""
    with wh.read() as con:
        return wallet.job_remaining(con, job_id)


def is_running(wh: Warehouse, job_id: str) -> bool:
    with wh.read() as con:
        return _scalar(con, "select status from jobs where id = ?", [job_id]) == "running"


def start_cell(wh: Warehouse, job_id: str, cell_key: str) -> bool:
    """Mark a cell running, in one step with the check that its Job still runs and the cell was not stopped."""
    with wh.write(job=job_id) as con:
        if _scalar(con, "select status from jobs where id = ?", [job_id]) == "running":
            updated = con.execute("update job_cells set status = 'running', started_at = now(), worker = ? "
                                  "where job_id = ? and cell_key = ? and status in ('pending', 'running') "
                                  "returning 1", [workers.this_process(), job_id, cell_key]).fetchall()
            if updated:
                return True
        con.execute("update job_cells set status = 'cancelled', finished_at = now(), message = ? "
                    "where job_id = ? and cell_key = ? and status in ('pending', 'running')",
                    ["the Job stopped before this cell began", job_id, cell_key])
        _end_if_idle(con, job_id)
        return False


def charge_trial(wh: Warehouse, job_id: str, trial_key: str, cost: float) -> wallet.Charge:
    """Charge one Trial attempt to its Job's pool; at the ceiling the Job ends ceiling_reached."""
    return charge_trials(wh, job_id, [(trial_key, cost)])[0]


def charge_trials(wh: Warehouse, job_id: str, costs: list[tuple[str, float]],
                  used: Sequence[TrialRecord] = ()) -> list[wallet.Charge]:
    """Charge Trial attempts (key, cost) in one transaction, in order, and keep what the scored Trials among
    ``used`` used (`history.record`), in the same one; at the ceiling the Job ends ceiling_reached."""
    if not costs:
        return []
    with wh.write(job=job_id) as con:
        row: tuple[str, str | None, str, str] | None = con.execute(
            "select workspace, quote_id, status, benchmark_owner from jobs where id = ?", [job_id]).fetchone()
        workspace, quote_id, status, owner = row or ("", None, "", "")
        if quote_id is None:
            return [wallet.Charge(Decimal(0), ceiling_reached=False) for _ in costs]
        results = wallet.charge_many(con, workspace, wallet.latest_quote(con, job_id) or quote_id, job_id,
                                     [(key, usd(cost)) for key, cost in costs])
        history.record(con, workspace, owner, used)
    if any(r.ceiling_reached for r in results) and status == "running":
        reach_ceiling(wh, job_id, "the Job's charges reached its Quote")
    return results


def charge_records(wh: Warehouse, job_id: str, records: list[TrialRecord]) -> bool:
    """Charge the scored Trials among ``records`` (each attempt once), keep what they used for later Quotes, and
    make each row show what the ledger took: less at the ceiling, an earlier charge on a restart. Whether any
    row's cost changed."""
    scored = [r for r in records if r.outcome == Kind.SCORED]  # Errored and cancelled Trials are not charged
    changed = False
    charges = charge_trials(wh, job_id, [(r.key, r.cost_usd) for r in scored], scored)
    for record, charge in zip(scored, charges, strict=True):
        charged = float(charge.earlier if charge.earlier is not None else charge.amount)
        changed |= charged != record.cost_usd
        record.cost_usd = charged
    return changed


def reach_ceiling(wh: Warehouse, job_id: str, message: str) -> None:
    """The Job stops at its ceiling: no new Trial starts, pending cells are cancelled."""
    with wh.write(job=job_id) as con:
        if _scalar(con, "select status from jobs where id = ?", [job_id]) == "running":
            transition(con, job_id, "ceiling_reached", message=message)
            con.execute("update job_cells set status = 'cancelled', finished_at = now() "
                        "where job_id = ? and status = 'pending'", [job_id])


def end_cell(wh: Warehouse, job_id: str, cell_key: str, status: str, message: str | None = None) -> None:
    """Record that a cell stopped (done or failed); when the last cell stops, end the Job and refund the rest.
    A cell that already stopped (cancelled before it began) keeps its status."""
    with wh.write(job=job_id) as con:
        con.execute("update job_cells set status = ?, message = ?, finished_at = now() "
                    "where job_id = ? and cell_key = ? and status in ('pending', 'running')",
                    [status, message, job_id, cell_key])
        _end_if_idle(con, job_id)


def move_cell(wh: Warehouse, job_id: str, cell_key: str, reason: str) -> None:
    """Hand a running cell back to be placed on another engine (`placement.py`): its engine stopped answering.
    Its finished Trials keep their rows and charges. A Job that stopped meanwhile ends the cell instead."""
    with wh.write(job=job_id) as con:
        if _scalar(con, "select status from jobs where id = ?", [job_id]) == "running":
            con.execute("update job_cells set status = 'pending', launched_at = null, started_at = null, "
                        "engine_pool = null, worker = null, moves = coalesce(moves, 0) + 1, message = ? "
                        "where job_id = ? and cell_key = ? and status = 'running'", [reason, job_id, cell_key])
            return
        con.execute("update job_cells set status = 'cancelled', finished_at = now(), message = ? "
                    "where job_id = ? and cell_key = ? and status in ('pending', 'running')",
                    [reason, job_id, cell_key])
        _end_if_idle(con, job_id)


def cancel(wh: Warehouse, workspace: str, job_id: str) -> Job:
    """Stop scheduling; running cells stop their in-flight Trials and the rest is refunded when they have. The
    audit log names the user the running action is for (`audit.actor`)."""
    get_job(wh, job_id, workspace)
    with wh.write(workspace) as con:
        transition(con, job_id, "cancelled", message="cancelled by a user")
        audit.record(con, "cancel", audit.actor(), workspace=workspace, job_id=job_id)
        con.execute("update job_cells set status = 'cancelled', finished_at = now() "
                    "where job_id = ? and status = 'pending'", [job_id])
        _end_if_idle(con, job_id)
    return get_job(wh, job_id, workspace)


def _end_if_idle(con: Connection, job_id: str) -> None:
    """With no cell left pending or running: a running Job ends (failed if a cell failed), and an ended
    Job's unspent reservation is refunded (once: the refund is keyed by its Quote)."""
    rows = con.execute("select status, message from job_cells where job_id = ? order by cell_key",
                       [job_id]).fetchall()
    if any(s in ACTIVE_CELL for s, _ in rows):
        return
    row: tuple[str, str, str | None, str | None] | None = con.execute(
        "select status, workspace, quote_id, stop from jobs where id = ?", [job_id]).fetchone()
    job_status, workspace, quote_id, stop = row or ("", "", None, None)
    if job_status == "running":
        failed = [m for s, m in rows if s == "failed"]
        job_status = "failed" if failed else "completed"
        reason = f": {failed[0]}" if failed and failed[0] else ""
        decided = JobDecision.model_validate_json(stop).sentence() if stop else None
        transition(con, job_id, job_status,
                   f"{len(failed)} of {len(rows)} cells could not finish{reason}" if failed else decided)
    if job_status in FINAL and quote_id:
        wallet.release(con, workspace, wallet.latest_quote(con, job_id) or quote_id, job_id,
                       f"unspent when the Job ended {job_status}")
