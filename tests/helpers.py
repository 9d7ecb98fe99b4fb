"""Shared test helpers: a funded Workspace and a submitted Job, the way a user gets them."""

from __future__ import annotations

from amber_pipeline import quotes, wallet, workspaces
from amber_pipeline.identity import DEFAULT_WORKSPACE, Actor, local_user
from amber_pipeline.jobs import Job
from amber_pipeline.warehouse import Warehouse


def funded(wh: Warehouse, workspace: str = DEFAULT_WORKSPACE, amount: str = "100") -> str:
    """A Workspace of the local (staff) user with a Credit in its Wallet."""
    actor = Actor(local_user(), workspace)
    if workspace not in [name for name, _ in workspaces.list_for(wh, actor.user)]:
        workspaces.create(wh, actor, workspace)
    wallet.add_credit(wh, actor, workspace, amount, "test credit")
    return workspace


def submit(wh: Warehouse, benchmark: str, agent: str, models: list[str], trials: int, bounds: bool = False,
           workspace: str = DEFAULT_WORKSPACE, public: bool = False) -> Job:
    """Quote and start a Job in a funded Workspace."""
    funded(wh, workspace)
    _, job = quotes.submit(wh, workspace, local_user(), benchmark, agent, models, trials, bounds=bounds,
                           public=public)
    return job
