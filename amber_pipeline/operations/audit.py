"""The audit log: who did what, and when (`accounts/audit.py`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from amber_pipeline.accounts import audit, workspaces
from amber_pipeline.errors import AmberError, Forbidden
from amber_pipeline.operations.operation import Acting, operation

MAX_ROWS = 1000


class AuditRequest(BaseModel):
    limit: int = Field(50, description=f"The newest this many rows, 1 to {MAX_ROWS}.")
    all: bool = Field(False, description="Every Workspace's rows and every token's (Amber staff only).")


class AuditLog(BaseModel):
    workspace: str | None  # None: every Workspace's (`all`)
    entries: list[audit.Entry]  # newest first


@operation("GET", "/audit")
def audit_log(acting: Acting, params: AuditRequest) -> AuditLog:
    """Who did what in the Workspace, and when, newest first: Quotes, starts, cancels, continuations and Credits,
    and the tokens made or revoked that are yours (Amber staff: every Workspace's and every token's, with `all`)."""
    if not 1 <= params.limit <= MAX_ROWS:
        raise AmberError(f"--limit {params.limit} is not from 1 to {MAX_ROWS}: give one in that range.")
    if params.all:
        with acting.wh.read() as con:
            if not workspaces.is_staff(con, acting.actor.user):
                raise Forbidden(f"Only Amber staff can read every Workspace's audit log, and {acting.actor.user} is "
                                "not staff: drop --all to read this Workspace's.")
    chosen = None if params.all else acting.workspace
    return AuditLog(workspace=chosen, entries=audit.entries(acting.wh, workspace=chosen, user=acting.actor.user,
                                                            limit=params.limit))
