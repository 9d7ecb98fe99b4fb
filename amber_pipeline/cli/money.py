"""`amber workspace`, `amber credit` and `amber wallet`: who owns what, and the money."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from amber_pipeline.money import identity, wallet, workspaces
from amber_pipeline.warehouse.catalog import Warehouse

console = Console(width=None if sys.stdout.isatty() else 120)


def register(app: typer.Typer, acting: Callable[[], tuple[Warehouse, identity.Actor, str]],
             wh_factory: Callable[[], Warehouse], actor_factory: Callable[[], identity.Actor]) -> None:
    workspace_app = typer.Typer(no_args_is_help=True, help="Workspaces and their members.")
    credit_app = typer.Typer(no_args_is_help=True, help="Credits: money staff add to a Wallet by hand.")
    app.add_typer(workspace_app, name="workspace")
    app.add_typer(credit_app, name="credit")

    @workspace_app.command("create")
    def workspace_create(name: str) -> None:
        """Create a Workspace; you become its first member. Its Wallet starts empty."""
        wh, actor = wh_factory(), actor_factory()
        workspaces.create(wh, actor, name)
        console.print(f"Created Workspace {name}; its Wallet is empty until staff add a Credit.")

    @workspace_app.command("add-member")
    def workspace_add_member(name: str, user: str) -> None:
        """Add a user to a Workspace you belong to."""
        workspaces.add_member(wh_factory(), actor_factory(), name, user)
        console.print(f"{user} is a member of {name}.")

    @workspace_app.command("list")
    def workspace_list() -> None:
        """The Workspaces you belong to."""
        actor = actor_factory()
        table = Table(title=f"Workspaces of {actor.user}")
        table.add_column("Workspace")
        table.add_column("members", justify="right")
        for name, members in workspaces.list_for(wh_factory(), actor.user):
            table.add_row(name, str(members))
        console.print(table)

    @workspace_app.command("use")
    def workspace_use(name: str) -> None:
        """Make a Workspace your default (in your config file)."""
        wh, actor = wh_factory(), actor_factory()
        workspaces.acting_workspace(wh, identity.Actor(actor.user, name))
        identity.save_config({"workspace": name})
        console.print(f"You now act in Workspace {name} by default ({identity.config_path()}).")

    @credit_app.command("add")
    def credit_add(workspace: Annotated[str, typer.Option(help="The Workspace to credit.")],
                   amount: Annotated[str, typer.Option(help="US dollars, e.g. 100 or 12.50.")],
                   reason: Annotated[str, typer.Option(help="Why (required).")] = "") -> None:
        """Add a Credit to a Workspace's Wallet (staff only, with a reason)."""
        entry = wallet.add_credit(wh_factory(), actor_factory(), workspace, amount, reason)
        console.print(f"Credited {wallet.show(entry)} to Workspace {workspace}.")

    @app.command("wallet")
    def wallet_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
        """The Wallet of the acting Workspace: balance, reserved, available, and its ledger."""
        wh, _, workspace = acting()
        state, lines = wallet.read(wh, workspace)
        if as_json:
            print(json.dumps(wallet.to_json(state, lines), indent=2))
            return
        print_wallet(state, lines)


def print_wallet(state: wallet.WalletState, lines: list[wallet.Entry], last: int | None = None) -> None:
    console.print(f"Wallet of {state.workspace}: balance {wallet.show(state.balance)}, reserved "
                  f"{wallet.show(state.reserved)}, available [bold]{wallet.show(state.available)}[/]")
    table = Table()
    for col in ("#", "time", "entry", "amount", "for"):
        table.add_column(col, justify="right" if col in ("#", "amount") else "left")
    for e in lines[-last:] if last else lines:
        target = {"credit": e.reason, "reservation": f"{e.quote_id} of {e.job_id}",
                  "charge": f"Trial {e.trial_key}", "refund": f"{e.reason} ({e.quote_id})"}[e.kind]
        table.add_row(str(e.seq), f"{e.at:%Y-%m-%d %H:%M:%S}", e.kind, wallet.show(e.amount), target)
    console.print(table)
