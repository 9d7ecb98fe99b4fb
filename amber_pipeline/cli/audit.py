"""`amber audit`: who did what in the acting Workspace, and when."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from amber_pipeline.cli import options
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out
from amber_pipeline.operations.audit import MAX_ROWS

if TYPE_CHECKING:
    from amber_pipeline.accounts import audit

app = typer.Typer()


@app.command("audit")
def audit_cmd(ctx: typer.Context,
              limit: Annotated[int, typer.Option("--limit", metavar="N", help=f"The newest N rows, 1 to {MAX_ROWS}.")]
              = 50,
              everything: Annotated[bool, typer.Option("--all", help="Every Workspace's rows and every token's (Amber "
                                                                     "staff only).")] = False,
              as_json: options.Json = False) -> None:
    """Who did what in the acting Workspace, and when, newest first: Quotes, starts, cancels, continuations and
    Credits, and the tokens made or revoked that are yours."""
    from amber_pipeline.money.prices import show

    log = Context.of(ctx).call("audit_log", limit=limit, all=everything)
    if as_json:
        out.json([{"at": e.at.isoformat(), "workspace": e.workspace, "user": e.user, "action": e.action,
                   "job_id": e.job_id, "quote_id": e.quote_id, "amount": None if e.amount is None else str(e.amount),
                   "detail": e.detail, "token_id": e.token_id, "token_user": e.token_user} for e in log.entries])
        return
    title = "Audit log of every Workspace" if log.workspace is None else f"Audit log of {log.workspace}"
    out.table(["time", "Workspace", "user", "action", "what", "amount"],
              ([f"{e.at:%Y-%m-%d %H:%M:%S}", e.workspace or "", e.user, e.action, _what(e),
                "" if e.amount is None else show(e.amount)] for e in log.entries), title=title)


def _what(e: audit.Entry) -> str:
    """What the action was on, in the words of the command that did it."""
    if e.token_id is not None:
        return f"token {e.token_id} of {e.token_user}"
    if e.action == "credit":
        return e.detail or ""
    return " ".join(part for part in (e.job_id, e.quote_id) if part)
