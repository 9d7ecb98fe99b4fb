"""The Wallet: a Workspace's prepaid balance, kept as an append-only ledger.

Four kinds of entry, all with non-negative amounts:
- credit: money staff add by hand, with a reason (balance goes up);
- reservation: a Quote's amount set aside for its Job (the Job's ceiling);
- charge: what one Trial attempt cost, drawn from its Job's reservations;
- refund: the unspent rest of a Job's reservations, released when the Job
  ends or its Quote expires (Amber's "release" is a refund entry).

A Job's reservations are one pool, its spending ceiling: its Quote's, and
those of the Quotes that continue it past a ceiling (`amber job continue`).
A charge draws on the pool, whichever cell it is for, and never past it.

    balance   = credits - charges
    reserved  = reservations - charges - refunds
    available = balance - reserved

No entry is ever updated or deleted (on PostgreSQL the database refuses it);
every entry has a unique `entry_key` (a charge's is its Trial attempt), so a
retried write, a restarted run or two racing processes write it once. Every
write holds its Workspace's lock (`warehouse/locks.py`), so the check "is
enough available" and the write are one step and the available amount never
goes below zero.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from amber_pipeline.accounts import audit, workspaces
from amber_pipeline.accounts.identity import Actor
from amber_pipeline.errors import AmberError, Forbidden, NotFound
from amber_pipeline.money.amounts import parse_amount
from amber_pipeline.money.prices import show
from amber_pipeline.warehouse.catalog import Connection, Warehouse
from amber_pipeline.warehouse.locks import lock_workspace


@dataclass(frozen=True)
class Entry:
    seq: int  # counts this Workspace's entries from 1 (the catalog's `workspace_ledger`): no other Workspace's gaps
    at: datetime
    kind: str
    amount: Decimal
    reason: str | None
    quote_id: str | None
    job_id: str | None
    trial_key: str | None


@dataclass(frozen=True)
class WalletState:
    workspace: str
    balance: Decimal
    reserved: Decimal
    available: Decimal


_SUMS = """select
    coalesce(sum(amount) filter (where kind = 'credit'), cast(0 as decimal(18, 6))),
    coalesce(sum(amount) filter (where kind = 'reservation'), cast(0 as decimal(18, 6))),
    coalesce(sum(amount) filter (where kind = 'charge'), cast(0 as decimal(18, 6))),
    coalesce(sum(amount) filter (where kind = 'refund'), cast(0 as decimal(18, 6)))
    from ledger where {where}"""


def state(con: Connection, workspace: str) -> WalletState:
    credit, reservation, charge, refund = _sums(con, "workspace = ?", [workspace])
    balance = credit - charge
    reserved = reservation - charge - refund
    return WalletState(workspace, balance, reserved, balance - reserved)


def entries(con: Connection, workspace: str) -> list[Entry]:
    rows = con.execute("select seq, created_at, kind, amount, reason, quote_id, job_id, trial_key "
                       "from workspace_ledger where workspace = ? order by seq", [workspace]).fetchall()
    return [Entry(*r) for r in rows]


def job_remaining(con: Connection, job_id: str) -> Decimal:
    """What is left of a Job's pool: reserved - charged - refunded over all its Quotes."""
    reservation, charge, refund = job_totals(con, job_id)
    return reservation - charge - refund


def latest_quote(con: Connection, job_id: str) -> str | None:
    """The Quote whose reservation a Job made last: its charges and its next refund name it."""
    row = con.execute("select quote_id from ledger where job_id = ? and kind = 'reservation' order by seq desc "
                      "limit 1", [job_id]).fetchone()
    return row[0] if row else None


def job_totals(con: Connection, job_id: str) -> tuple[Decimal, Decimal, Decimal]:
    """(reserved, charged, refunded) of one Job, over all its Quotes."""
    _, reservation, charge, refund = _sums(con, "job_id = ?", [job_id])
    return reservation, charge, refund


def quote_totals(con: Connection, quote_id: str) -> tuple[Decimal, Decimal, Decimal]:
    """(reserved, charged, refunded) of the entries that name one Quote (a Job's charges name its latest)."""
    _, reservation, charge, refund = _sums(con, "quote_id = ?", [quote_id])
    return reservation, charge, refund


def _sums(con: Connection, where: str, params: list) -> tuple[Decimal, ...]:
    row = con.execute(_SUMS.format(where=where), params).fetchone()
    assert row is not None
    return tuple(Decimal(v) for v in row)


def _append(con: Connection, *, workspace: str, kind: str, amount: Decimal, entry_key: str,
            reason: str | None = None, quote_id: str | None = None, job_id: str | None = None,
            trial_key: str | None = None, at: datetime | None = None) -> bool:
    """Append one entry unless its key is already there; True when written."""
    written = con.execute(
        "insert into ledger (created_at, workspace, kind, amount, reason, quote_id, job_id, trial_key, entry_key) "
        "values (?, ?, ?, ?, ?, ?, ?, ?, ?) on conflict (entry_key) do nothing returning seq",
        [at or datetime.now(UTC), workspace, kind, amount, reason, quote_id, job_id, trial_key, entry_key]).fetchall()
    return bool(written)


def credit(con: Connection, workspace: str, amount: Decimal, reason: str, entry_key: str) -> None:
    if not reason.strip():
        raise AmberError("A Credit needs a reason: give --reason \"...\".")
    lock_workspace(con, workspace)
    _append(con, workspace=workspace, kind="credit", amount=amount, reason=reason.strip(), entry_key=entry_key)


def reserve(con: Connection, workspace: str, quote_id: str, job_id: str, amount: Decimal,
            at: datetime) -> None:
    """Set a Quote's amount aside (once), or refuse with the amount missing."""
    lock_workspace(con, workspace)
    if con.execute("select 1 from ledger where entry_key = ?", [f"reservation:{quote_id}"]).fetchone():
        return
    missing = shortfall(workspace, state(con, workspace).available, amount)
    if missing is not None:
        raise AmberError(missing)
    _append(con, workspace=workspace, kind="reservation", amount=amount, reason="Quote", quote_id=quote_id,
            job_id=job_id, entry_key=f"reservation:{quote_id}", at=at)


def shortfall(workspace: str, available: Decimal, amount: Decimal) -> str | None:
    """The sentence refusing a Quote of ``amount`` when the Wallet has only ``available``; None when it fits."""
    if amount <= available:
        return None
    return (f"Workspace {workspace} has {show(available)} available but this Quote needs {show(amount)}: "
            f"{show(amount - available)} is missing; ask Amber staff for a Credit.")


@dataclass(frozen=True)
class Charge:
    amount: Decimal  # what was charged now (0 when this attempt was charged before)
    ceiling_reached: bool
    earlier: Decimal | None = None  # what this attempt was charged before, when it was (a restarted run)


def charge(con: Connection, workspace: str, quote_id: str, job_id: str, trial_key: str,
           cost: Decimal) -> Charge:
    """Charge one Trial attempt, once, and never past its Job's pool: the Job's ceiling."""
    return charge_many(con, workspace, quote_id, job_id, [(trial_key, cost)])[0]


def charge_many(con: Connection, workspace: str, quote_id: str, job_id: str,
                costs: list[tuple[str, Decimal]]) -> list[Charge]:
    """Charge Trial attempts (key, cost) in order, each once, and never past the Job's pool: its ceiling. The
    entries name ``quote_id``, the Job's latest Quote.

    One read of the pool's remainder and of earlier charges, then one insert, so a batch of a thousand
    static Trials costs one round trip, not a thousand."""
    lock_workspace(con, workspace)
    remaining = job_remaining(con, job_id)
    keys = [f"charge:{key}" for key, _ in costs]
    earlier = dict(con.execute("select entry_key, amount from ledger where entry_key in (select unnest(?))",
                               [keys]).fetchall()) if keys else {}
    now = datetime.now(UTC)
    results, rows = [], []
    for (trial_key, cost), entry_key in zip(costs, keys, strict=True):
        if entry_key in earlier:  # a restarted run: charged before, never twice
            results.append(Charge(Decimal(0), ceiling_reached=remaining <= 0, earlier=earlier[entry_key]))
            continue
        if cost <= 0:  # nothing spent: no entry, and no ceiling unless it was reached before
            results.append(Charge(Decimal(0), ceiling_reached=remaining <= 0))
            continue
        amount = min(cost, remaining)
        if amount <= 0:
            results.append(Charge(Decimal(0), ceiling_reached=True))
            continue
        earlier[entry_key] = amount
        rows.append([now, workspace, "charge", amount, "Trial", quote_id, job_id, trial_key, entry_key])
        remaining -= amount
        results.append(Charge(amount, ceiling_reached=remaining <= 0 or cost > amount))
    if rows:  # one statement: DuckDB runs executemany row by row, a millisecond each
        values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(rows))
        con.execute("insert into ledger (created_at, workspace, kind, amount, reason, quote_id, job_id, trial_key, "
                    f"entry_key) values {values}", [v for row in rows for v in row])
    return results


def release(con: Connection, workspace: str, quote_id: str, job_id: str, reason: str) -> Decimal:
    """Refund what is left of a Job's pool, once per ``quote_id`` (the Job's latest Quote: a Job continued
    past its end is refunded again when it ends again)."""
    lock_workspace(con, workspace)
    left = job_remaining(con, job_id)
    if left <= 0:
        return Decimal(0)
    _append(con, workspace=workspace, kind="refund", amount=left, reason=reason, quote_id=quote_id,
            job_id=job_id, entry_key=f"refund:{quote_id}")
    return left


# ---- what the CLI and the UI call ---------------------------------------------------

def add_credit(wh: Warehouse, actor: Actor, workspace: str, amount: str, reason: str) -> Decimal:
    """Staff add money to a Workspace's Wallet, with a reason; the audit log names who, in the same transaction."""
    value = parse_amount(amount, "--amount")
    with wh.write(workspace) as con:
        if not workspaces.is_staff(con, actor.user):
            raise Forbidden(f"Only Amber staff can add a Credit, and {actor.user} is not staff: "
                            "contact Amber staff to have one added.")
        if con.execute("select 1 from workspaces where name = ?", [workspace]).fetchone() is None:
            raise NotFound(f"No Workspace {workspace}: check the name with `amber workspace list`.")
        credit(con, workspace, value, reason, entry_key=f"credit:{uuid.uuid4().hex}")
        audit.record(con, "credit", actor.user, workspace=workspace, amount=value, detail=reason.strip())
    return value


def read(wh: Warehouse, workspace: str) -> tuple[WalletState, list[Entry]]:
    with wh.read() as con:
        return state(con, workspace), entries(con, workspace)


def to_json(wallet_state: WalletState, lines: list[Entry]) -> dict:
    return {
        "workspace": wallet_state.workspace, "balance": str(wallet_state.balance),
        "reserved": str(wallet_state.reserved), "available": str(wallet_state.available),
        "ledger": [{"seq": e.seq, "at": e.at.isoformat(), "kind": e.kind, "amount": str(e.amount),
                    "reason": e.reason, "quote_id": e.quote_id, "job_id": e.job_id, "trial_key": e.trial_key}
                   for e in lines],
    }
