"""`amber workspace ...`, `amber credit add` and `amber wallet`: who owns what, and the money."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from amber_pipeline.cli import options
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out

if TYPE_CHECKING:
    from amber_pipeline.money import wallet

app = typer.Typer()
workspace_app = typer.Typer(no_args_is_help=True, help="Workspaces and their members.")
credit_app = typer.Typer(no_args_is_help=True, help="Credits: money Amber staff add to a Wallet by hand.")
app.add_typer(workspace_app, name="workspace")
app.add_typer(credit_app, name="credit")

WorkspaceName = Annotated[str, typer.Argument(help="The Workspace's name: letters, digits, '.', '_' and '-'.")]


@workspace_app.command("create")
def workspace_create(ctx: typer.Context, name: WorkspaceName) -> None:
    """Create a Workspace; you become its first member. Its Wallet starts empty."""
    Context.of(ctx).call("workspace_create", name=name)
    out.line(f"Created Workspace {name}; its Wallet is empty until staff add a Credit.")


@workspace_app.command("add-member")
def workspace_add_member(ctx: typer.Context, name: WorkspaceName,
                         user: Annotated[str, typer.Argument(help="The user to add.")]) -> None:
    """Add a user to a Workspace you belong to."""
    Context.of(ctx).call("workspace_add_member", name=name, user=user)
    out.line(f"{user} is a member of {name}.")


@workspace_app.command("list")
def workspace_list(ctx: typer.Context) -> None:
    """The Workspaces you belong to, with their member counts."""
    found = Context.of(ctx).call("workspace_list")
    out.table(["Workspace", "members"], ([m.workspace, m.members] for m in found.workspaces),
              title=f"Workspaces of {found.user}")


@workspace_app.command("use")
def workspace_use(ctx: typer.Context, name: WorkspaceName) -> None:
    """Make a Workspace your default (in your config file)."""
    from amber_pipeline.accounts import identity

    c = Context.of(ctx)
    c.workspace = name
    c.call("workspace_show")  # a member of it, or refused
    identity.save_config({"workspace": name})
    out.line(f"You now act in Workspace {name} by default ({identity.config_path()}).")


@workspace_app.command("provider-policy")
def workspace_provider_policy(
        ctx: typer.Context,
        providers: Annotated[list[str] | None, typer.Argument(
            help="The Providers (as `amber model list` names them: anthropic, openai, an OpenRouter upstream "
                 "such as deepinfra, or an endpoint's host) its private Benchmarks may be sent to.")] = None,
        any_provider: Annotated[bool, typer.Option("--any", help="Drop the policy: any Provider.")] = False) -> None:
    """Show or set the Providers the acting Workspace's private Benchmarks may be sent to."""
    policy = Context.of(ctx).call("workspace_provider_policy", providers=providers, any_provider=any_provider)
    shown = "any Provider" if policy.providers is None else ", ".join(policy.providers)
    out.line(f"Workspace {policy.workspace} sends its private Benchmarks to: {shown}.")


@credit_app.command("add")
def credit_add(ctx: typer.Context,
               amount: Annotated[str, typer.Option("--amount", help="US dollars, e.g. 100 or 12.50.")],
               reason: Annotated[str, typer.Option("--reason", help="Why the Credit is given (required).")] = "",
               ) -> None:
    """Add a Credit to the Wallet of the Workspace named by --workspace (staff only, with a reason)."""
    from amber_pipeline.money.prices import show

    credited = Context.of(ctx).call("credit_add", amount=amount, reason=reason)
    out.line(f"Credited {show(credited.amount)} to Workspace {credited.workspace}.")


@app.command("wallet")
def wallet_cmd(ctx: typer.Context, as_json: options.Json = False) -> None:
    """The Wallet of the acting Workspace: balance, reserved, available, and its ledger."""
    from amber_pipeline.money import wallet

    found = Context.of(ctx).call("wallet_read")
    if as_json:
        out.json(wallet.to_json(found.state, found.entries))
        return
    print_wallet(found.state, found.entries)


def print_wallet(state: wallet.WalletState, entries: list[wallet.Entry], last: int | None = None) -> None:
    from amber_pipeline.money.prices import show

    out.line(f"Wallet of {state.workspace}: balance {show(state.balance)}, reserved {show(state.reserved)}, "
             f"available {show(state.available)}")
    targets = {"credit": lambda e: e.reason, "reservation": lambda e: f"{e.quote_id} of {e.job_id}",
               "charge": lambda e: f"Trial {e.trial_key}", "refund": lambda e: f"{e.reason} ({e.quote_id})"}
    out.table(["#", "time", "entry", "amount", "for"],
              ([e.seq, f"{e.at:%Y-%m-%d %H:%M:%S}", e.kind, show(e.amount), targets[e.kind](e)]
               for e in (entries[-last:] if last else entries)))
