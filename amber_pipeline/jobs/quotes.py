"""Quotes: the estimated cost of a Job, and its reservation from the Wallet.

Per cell: Tasks x Trials per Task x estimated cost per Trial. The cost per
Trial is the measured mean of this Workspace's earlier scored Trials of the
same cell when there are some; otherwise a prior for the Agent (expected
tokens at the Model Configuration's prices, plus expected sandbox time at the
sandbox price). Either way a headroom of 25% is added, because the Quote is
also the Job's spending ceiling and a ceiling at the mean would stop half of
all Jobs early. Each cell says which estimate it used.

This module only estimates and reserves; the Job's lifecycle (`lifecycle.py`)
decides when a Quote is made, started, expired or released.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from decimal import Decimal

import duckdb

from amber_pipeline.cells import NO_MODEL, Cell
from amber_pipeline.errors import AmberError
from amber_pipeline.models.configurations import model_configuration
from amber_pipeline.money import wallet
from amber_pipeline.money.prices import PRICES, Prices, usd
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
UNKNOWN_PRIOR = Prior(10_000, 1_000, 30.0)


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


def estimate_cell(wh: Warehouse, workspace: str, cell: Cell, n_tasks: int, trials_per_task: int,
                  prices: Prices = PRICES) -> CellQuote:
    """The cell's estimate, from this Workspace's own earlier scored Trials of the cell, else a prior."""
    with wh.query(workspace) as con:
        row = con.execute("select count(*), avg(cost_usd) from trials where cell_key = ? and outcome = 'scored'",
                          [cell.key]).fetchone()
    assert row is not None
    measured, mean = row
    if measured:
        per_trial = usd(mean)
        basis = f"measured mean of {measured} earlier Trials of this cell"
    else:
        prior = PRIORS.get(cell.agent, UNKNOWN_PRIOR)
        mc = model_configuration(cell.model_configuration) if cell.model_configuration != NO_MODEL else None
        per_trial = prices.trial_cost(mc, prior.input_tokens, prior.output_tokens, prior.sandbox_sec)
        basis = (f"prior for {cell.agent}: {prior.input_tokens:,} input and {prior.output_tokens:,} output tokens, "
                 f"{prior.sandbox_sec:g} s of sandbox per Trial")
    per_trial = usd(per_trial * HEADROOM)
    total = per_trial * n_tasks * trials_per_task
    return CellQuote(cell.key, cell.label, n_tasks, trials_per_task, str(per_trial), basis, str(total))


def reserve(con: duckdb.DuckDBPyConnection, workspace: str, job_id: str, benchmark_label: str,
            cells: list[CellQuote], now: datetime) -> Quote:
    """Record the Quote and reserve its amount, inside the caller's catalog transaction (or refuse it)."""
    amount = sum((Decimal(c.total) for c in cells), Decimal(0))
    quote = Quote(f"quote-{uuid.uuid4().hex[:10]}", workspace, job_id, benchmark_label, amount, now,
                  now + LIFETIME, cells)
    con.execute("insert into quotes values (?, ?, ?, ?, ?, ?, ?)",
                [quote.id, workspace, job_id, amount, now, quote.expires_at, json.dumps([asdict(c) for c in cells])])
    wallet.reserve(con, workspace, quote.id, job_id, amount, now)
    return quote


def get(wh: Warehouse, workspace: str, quote_or_job_id: str) -> Quote:
    """A Quote of the Workspace, by its id or its Job's."""
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


def due(wh: Warehouse, now: datetime) -> list[str]:
    """Quotes past their expiry whose Job never started."""
    with wh.read() as con:
        return [q for (q,) in con.execute("""select q.id from quotes q join jobs j on j.id = q.job_id
                                             where j.status = 'quoted' and q.expires_at <= ?""", [now]).fetchall()]
