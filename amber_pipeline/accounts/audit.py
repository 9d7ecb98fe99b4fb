"""Who did what, and when: the audit log of the actions that move a Workspace's money or let someone in.

Seven actions are logged: a Quote made (`quote`), a Job started (`start`), cancelled (`cancel`) or continued
past its ceiling (`continue`), a Credit added (`credit`), and an API token made (`token_create`) or revoked
(`token_revoke`). Each row is written at the one place its action happens (`jobs/lifecycle.py`,
`money/wallet.py`, `accounts/tokens.py`), inside that action's own catalog transaction, so there is never an
action without its row nor a row without its action. Rows are appended, never changed.

Who acted: where the function doing the action is told its user (a Quote's, a Credit's, the user revoking a
token), that user; else the user the running operation or Dagster run acts for, bound with `acting_as` by
whatever runs it (every API operation, called by the CLI in its own process or by the server over HTTP; the
Dagster jobs that act for a user); else, with nothing bound, the embedded default's user.

Who sees what: a Workspace's members see its rows (the SQL view `audit`, numbered within the Workspace as the
ledger is; `amber audit`). Token actions belong to no Workspace: `amber audit` shows a user those of their own
tokens, and staff see every row (`amber audit --all`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Literal

from amber_pipeline.accounts import identity
from amber_pipeline.warehouse.catalog import Connection, Warehouse

Action = Literal["quote", "start", "cancel", "continue", "credit", "token_create", "token_revoke"]
ACTING: ContextVar[str | None] = ContextVar("amber_acting", default=None)  # the user the running action is for

_COLUMNS = "created_at, workspace, user_name, action, job_id, quote_id, amount, detail, token_id, token_user"


@dataclass(frozen=True)
class Entry:
    at: datetime
    workspace: str | None  # None: a token's action, which belongs to no Workspace
    user: str  # who acted
    action: Action
    job_id: str | None
    quote_id: str | None
    amount: Decimal | None  # a Quote's or a continuation's reservation, a Credit
    detail: str | None  # a Credit's reason
    token_id: str | None
    token_user: str | None  # whose token


@contextlib.contextmanager
def acting_as(user: str) -> Iterator[None]:
    """Take the actions in the block for `user` (the log's who, for a function not told its user)."""
    bound = ACTING.set(user)
    try:
        yield
    finally:
        ACTING.reset(bound)


def actor() -> str:
    """Who the running action is taken by: the user bound with `acting_as`, else the one signed in to the API,
    else the embedded default's user (the config's, else the local login)."""
    return ACTING.get() or identity.SIGNED_IN.get() or identity.resolve(None, None).user


def record(con: Connection, action: Action, user: str, *, workspace: str | None = None, job_id: str | None = None,
           quote_id: str | None = None, amount: Decimal | None = None, detail: str | None = None,
           token_id: str | None = None, token_user: str | None = None) -> None:
    """Append one row inside the caller's transaction: it commits, or rolls back, with the action."""
    con.execute(f"insert into audit ({_COLUMNS}) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [datetime.now(UTC), workspace, user, action, job_id, quote_id, amount, detail, token_id,
                 token_user])


def entries(wh: Warehouse, *, workspace: str | None, user: str, limit: int) -> list[Entry]:
    """The newest ``limit`` rows, newest first: ``workspace``'s and those of ``user``'s own tokens (made or revoked
    by them, or theirs); with no Workspace, every row (for staff: the caller checks)."""
    where, params = ("true", []) if workspace is None else (
        "workspace = ? or (workspace is null and (user_name = ? or token_user = ?))", [workspace, user, user])
    with wh.read() as con:
        rows = con.execute(f"select {_COLUMNS} from audit where {where} order by seq desc limit ?",
                           [*params, limit]).fetchall()
    return [Entry(*row) for row in rows]
