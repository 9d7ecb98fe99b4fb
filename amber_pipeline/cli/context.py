"""What every command acts with: this Amber's home, the acting user and the Workspace they act in.

The root command reads `--user` and `--workspace` once and keeps them on a
:class:`Context` in Typer's context object; commands ask it for what they need
(the warehouse, the actor, the checked Workspace), so nothing lives in module
globals and every command takes the two options the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import typer

from amber_pipeline.jobs import lifecycle
from amber_pipeline.money import identity, workspaces
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse


@dataclass(frozen=True)
class Acting:
    wh: Warehouse
    actor: identity.Actor
    workspace: str


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
    def warehouse(self) -> Warehouse:
        return Warehouse(self.paths)

    @cached_property
    def actor(self) -> identity.Actor:
        return identity.resolve(self.user, self.workspace)

    def acting(self) -> Acting:
        """The warehouse, the actor and the Workspace they act in (membership checked); Quotes past their
        hour are expired first, so every command sees their reservations released."""
        workspace = workspaces.acting_workspace(self.warehouse, self.actor)
        lifecycle.expire_due(self.warehouse)
        return Acting(self.warehouse, self.actor, workspace)

    def named_workspace(self) -> str:
        """The Workspace a command names without acting in it (staff crediting a Wallet): --workspace, else the
        config's, else "default"."""
        return self.actor.workspace or identity.DEFAULT_WORKSPACE
