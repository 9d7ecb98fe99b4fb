"""What every command acts with: this Amber's home or its server, the acting user and the Workspace they act in.

The root command reads `--user` and `--workspace` once and keeps them on a
:class:`Context` in Typer's context object. A command asks it to `call` an
operation (`amber_pipeline.operations`): in this process on the embedded default, or
on the server `AMBER_URL` names, as the user the token says (there `--user` is
refused: a token is the only way to be someone). Either way the record comes
back the same, so every command prints the same in both modes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import typer

from amber_pipeline.accounts import identity
from amber_pipeline.errors import AmberError
from amber_pipeline.paths import AmberPaths

if TYPE_CHECKING:  # the operations, the catalog and the HTTP client are loaded by the command that calls one
    from pydantic import BaseModel

    from amber_pipeline.cli.client import Remote
    from amber_pipeline.operations.operation import Acting
    from amber_pipeline.warehouse.catalog import Warehouse


@dataclass
class Context:
    user: str | None = None  # --user
    workspace: str | None = None  # --workspace
    paths: AmberPaths = field(default_factory=AmberPaths.from_env)

    @classmethod
    def of(cls, ctx: typer.Context) -> Context:
        found = ctx.find_root().obj
        if not isinstance(found, Context):
            raise RuntimeError("the root command did not set Amber's context")
        return found

    @cached_property
    def remote(self) -> Remote | None:
        """The server to ask, when AMBER_URL (or a saved login) names one."""
        from amber_pipeline.cli.client import Remote

        found = Remote.from_env()
        if found is not None and self.user is not None:
            raise AmberError(f"--user is for the embedded default only: against {found.url} you act as whoever "
                             "your token says, so drop --user (or sign in as the other user with `amber login`).")
        return found

    def call(self, name: str, params: BaseModel | None = None, /, **fields: Any) -> Any:
        """The record of the operation `name` (params given, or made of `fields`), acting in --workspace (else
        the config's, else the user's default)."""
        from amber_pipeline.operations import areas
        from amber_pipeline.operations.operation import call_local

        op = areas.find(name)
        chosen = params if params is not None else op.params(**fields)
        workspace = self.workspace or identity.load_config().get("workspace")
        if self.remote is not None:
            return self.remote.call(op, workspace, chosen)
        return call_local(self.warehouse, identity.Actor(self.actor.user, workspace), name, chosen)

    def host_only(self) -> None:
        """Refuse a command that works on this machine's instance itself (its daemon, its files, a folder of
        it) when the CLI is a server's client."""
        if self.remote is not None:
            raise AmberError(f"This command works on an Amber instance on this machine, not through "
                             f"{self.remote.url}: run it on the server's host, or unset AMBER_URL for the embedded "
                             "default.")

    @cached_property
    def warehouse(self) -> Warehouse:
        from amber_pipeline.warehouse.catalog import Warehouse

        self.host_only()
        return Warehouse(self.paths)

    @cached_property
    def actor(self) -> identity.Actor:
        return identity.resolve(self.user, self.workspace)

    def acting(self, *, reads: bool = False) -> Acting:
        """The warehouse, the actor and the Workspace they act in (membership checked), on this machine; for a
        command that only `reads`, a first user's default Workspace is not made."""
        from amber_pipeline.operations.operation import in_workspace

        return in_workspace(self.warehouse, self.actor, reads=reads)
