"""Quotes: the estimated cost of a Job, reserved from the Wallet before it starts.

Per cell: Tasks x Trials per Task x estimated cost per Trial. The cost per
Trial is the measured mean of earlier scored Trials of the same cell when
there are some; otherwise a prior for the Agent (expected tokens at the Model
Configuration's price, plus expected sandbox time at its price). Either way a
headroom of 25% is added, because the Quote is also the Job's spending ceiling
and a ceiling at the mean would stop half of all Jobs early. Each cell says
which estimate it used. A Quote expires after one hour; its reservation is
then released by a refund entry.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from amber_pipeline.cells import NO_MODEL, Cell
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import lifecycle as jobs
from amber_pipeline.jobs.trial_runner import SANDBOX_USD_PER_HOUR
from amber_pipeline.models import configurations as model_configs
from amber_pipeline.money import wallet
from amber_pipeline.warehouse.catalog import Warehouse

LIFETIME = timedelta(hours=1)
HEADROOM = Decimal("1.25")


@dataclass(frozen=True)
class Prior:
    input_tokens: int
    output_tokens: int
    sandbox_sec: float


# Per Trial on small terminal Tasks; replaced by measured means as soon as a cell has Trials.
PRIORS = {"terminus-2": Prior(6_000, 400, 15.0), "oracle": Prior(0, 0, 5.0), "nop": Prior(0, 0, 3.0)}


@dataclass(frozen=True)
class CellQuote:
    cell_key: str
    label: str
    n_tasks: int
    trials_per_task: int
    cost_per_trial: str  # Decimal as text, exact
    basis: str
    total: str


@dataclass(frozen=True)
class Quote:
    id: str
    workspace: str
    job_id: str
    benchmark_label: str
    amount: Decimal
    created_at: datetime
    expires_at: datetime
    cells: list[CellQuote]


def estimate_cell(wh: Warehouse, workspace: str, cell: Cell, n_tasks: int, trials_per_task: int) -> CellQuote:
    """The cell's Quote, from this Workspace's own earlier scored Trials of the cell, else a prior."""
    with wh.query(workspace) as con:
        row = con.execute("select count(*), avg(cost_usd) from trials where cell_key = ? and outcome = 'scored'",
                          [cell.key]).fetchone()
    assert row is not None
    measured, mean = row
    if measured:
        per_trial = wallet.usd(mean)
        basis = f"measured mean of {measured} earlier Trials of this cell"
    else:
        prior = PRIORS.get(cell.agent, Prior(10_000, 1_000, 30.0))
        model_cost = Decimal(0)
        if cell.model_configuration != NO_MODEL:
            mc = model_configs.get(cell.model_configuration)
            model_cost = wallet.usd(mc.cost_usd(prior.input_tokens, prior.output_tokens))
        per_trial = model_cost + wallet.usd(prior.sandbox_sec / 3600 * SANDBOX_USD_PER_HOUR)
        basis = (f"prior for {cell.agent}: {prior.input_tokens:,} input and {prior.output_tokens:,} output tokens, "
                 f"{prior.sandbox_sec:g} s of sandbox per Trial")
    per_trial = wallet.usd(per_trial * HEADROOM)
    total = per_trial * n_tasks * trials_per_task
    return CellQuote(cell.key, cell.label, n_tasks, trials_per_task, str(per_trial), basis, str(total))


def create(wh: Warehouse, workspace: str, user: str, benchmark_ref: str, agent: str, models: list[str],
           trials_per_task: int, *, bounds: bool = False, public: bool = False,
           now: datetime | None = None) -> Quote:
    """Quote a Job and reserve its amount at once; the Job waits in state quoted."""
    now = now or datetime.now(UTC)
    jobs.check_trials(trials_per_task)
    expire_due(wh, now)
    version, owner, label = jobs.resolve_benchmark(wh, benchmark_ref, workspace, user, public=public)
    cells = jobs.plan_cells(version, agent, models, bounds)
    cell_quotes = [estimate_cell(wh, workspace, c, len(version.tasks), trials_per_task) for c in cells]
    amount = sum((Decimal(c.total) for c in cell_quotes), Decimal(0))
    quote_id = f"quote-{uuid.uuid4().hex[:10]}"
    expires = now + LIFETIME
    with wh.write() as con:
        job_id = jobs.insert_job(con, workspace, user, version, owner, cells, trials_per_task, quote_id, now)
        con.execute("insert into quotes values (?, ?, ?, ?, ?, ?, ?)",
                    [quote_id, workspace, job_id, amount, now, expires,
                     json.dumps([asdict(c) for c in cell_quotes])])
        wallet.reserve(con, workspace, quote_id, job_id, amount, now)
    return Quote(quote_id, workspace, job_id, label, amount, now, expires, cell_quotes)


def get(wh: Warehouse, workspace: str, quote_or_job_id: str) -> Quote:
    with wh.read() as con:
        row = con.execute("""select q.id, q.workspace, q.job_id, b.label, q.amount, q.created_at, q.expires_at, q.detail
                             from quotes q join jobs j on j.id = q.job_id
                             join benchmark_versions b on b.id = j.benchmark_version_id and b.owner = j.benchmark_owner
                             where q.workspace = ? and (q.id = ? or q.job_id = ?)""",
                          [workspace, quote_or_job_id, quote_or_job_id]).fetchone()
    if row is None:
        raise AmberError(f"No Quote {quote_or_job_id} in Workspace {workspace}: "
                         "make one with `amber job quote`.")
    quote_id, ws, job_id, label, amount, created_at, expires_at, detail = row
    return Quote(quote_id, ws, job_id, label, amount, created_at, expires_at,
                 [CellQuote(**c) for c in json.loads(detail)])


def start(wh: Warehouse, workspace: str, quote_or_job_id: str, now: datetime | None = None) -> jobs.Job:
    """quoted -> running, unless the Quote has expired (then its reservation is released)."""
    now = now or datetime.now(UTC)
    expire_due(wh, now)
    quote = get(wh, workspace, quote_or_job_id)
    job = jobs.get_job(wh, quote.job_id, workspace)
    if job.status == "cancelled" and job.message == EXPIRED:
        raise AmberError(f"Quote {quote.id} expired at {quote.expires_at.astimezone(UTC):%H:%M:%S UTC}: "
                         "make a new one with `amber job quote`.")
    with wh.write() as con:
        jobs.transition(con, job.id, "running", at=now)
    return jobs.get_job(wh, job.id, workspace)


EXPIRED = "Quote expired before the Job started"


def expire_due(wh: Warehouse, now: datetime | None = None) -> list[str]:
    """Cancel Jobs whose Quote expired unstarted and release their reservations; idempotent."""
    expired = due(wh, now or datetime.now(UTC))
    if not expired:
        return []
    with wh.write() as con:
        for quote_id in expired:
            row = con.execute("select j.id, j.workspace, j.status from quotes q join jobs j on j.id = q.job_id "
                              "where q.id = ?", [quote_id]).fetchone()
            assert row is not None
            job_id, workspace, status = row
            if status == "quoted":
                jobs.transition(con, job_id, "cancelled", message=EXPIRED, at=now)
                wallet.release(con, workspace, quote_id, job_id, EXPIRED)
    return expired


def due(wh: Warehouse, now: datetime) -> list[str]:
    """Quotes past their expiry whose Job never started."""
    with wh.read() as con:
        return [q for (q,) in con.execute("""select q.id from quotes q join jobs j on j.id = q.job_id
                                             where j.status = 'quoted' and q.expires_at <= ?""", [now]).fetchall()]



def submit(wh: Warehouse, workspace: str, user: str, benchmark_ref: str, agent: str, models: list[str],
           trials_per_task: int, *, bounds: bool = False, public: bool = False,
           now: datetime | None = None) -> tuple[Quote, jobs.Job]:
    """Quote a Job and start it at once: what `amber job submit` and the UI's submit_job do."""
    quote = create(wh, workspace, user, benchmark_ref, agent, models, trials_per_task, bounds=bounds,
                   public=public, now=now)
    return quote, start(wh, workspace, quote.id, now=now)
