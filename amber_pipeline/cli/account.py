"""`amber serve`, `amber login`, `amber whoami`, `amber user ...` and `amber token ...`: the hosted Amber.

The first staff user is made on the server's host, where the local login is
staff as on every embedded instance: `amber user add alice --staff`, then
`amber token create --for alice` prints her token once. From then on she (and
whoever she makes a token for) works from anywhere with `amber login`.
"""

from __future__ import annotations

from datetime import UTC
from typing import Annotated

import typer

from amber_pipeline.accounts import tokens
from amber_pipeline.cli import client
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out
from amber_pipeline.errors import AmberError

app = typer.Typer()
user_app = typer.Typer(no_args_is_help=True, help="Users of a hosted Amber and their roles (staff only).")
token_app = typer.Typer(no_args_is_help=True, help="Personal API tokens: shown once, stored as hashes, revocable, "
                                                   "expiring.")
app.add_typer(user_app, name="user")
app.add_typer(token_app, name="token")


@app.command("serve")
def serve(ctx: typer.Context,
          host: Annotated[str, typer.Option("--host", help="The address to serve on.")] = "127.0.0.1",
          port: Annotated[int, typer.Option("--port", help="The port to serve on.")] = 8000,
          public_url: Annotated[str | None, typer.Option(
              "--public-url", help="The URL people open the server at (e.g. https://amber.example.com, behind a "
                                   "proxy), which every redirect names; default: a redirect names its path "
                                   "alone, never the Host a request sent.")] = None) -> None:
    """Serve the hosted API (OpenAPI at /docs, the Dagster UI for staff at /ui) and run the daemon (Ctrl-C stops
    both)."""
    from amber_pipeline import embedded

    c = Context.of(ctx)
    c.host_only()
    out.line(f"Amber API: http://{host}:{port}/v1 (documented at /docs; the Dagster UI at /ui) (Ctrl-C stops it)")
    raise typer.Exit(embedded.run_api(c.paths, host, port, public_url))


@app.command("login")
def login(url: Annotated[str | None, typer.Option("--url", help="The server (default: AMBER_URL).")] = None,
          token: Annotated[str | None, typer.Option(
              "--token", help="The token (default: asked for, not echoed). Prefer the prompt: a token on a "
                              "command line shows in the process list.")] = None) -> None:
    """Sign in to a hosted Amber: check the token with the server, then keep it in a file only you can read."""
    from amber_pipeline.operations import areas
    from amber_pipeline.operations.operation import NoParams

    url = url or client.server_url()
    if not url:
        raise AmberError("Name the server with --url URL (or set AMBER_URL).")
    secret = token or typer.prompt("API token", hide_input=True)
    me = client.Remote(url.rstrip("/"), secret.strip()).call(areas.find("whoami"), None, NoParams())
    path = client.save_token(url.rstrip("/"), secret.strip())
    out.line(f"Signed in to {url} as {me.user}{' (staff)' if me.staff else ''}; the token is in {path}.")


@app.command("logout")
def logout() -> None:
    """Forget the token `amber login` kept."""
    path = client.token_path()
    out.line(f"Removed {path}." if path.exists() else "No token was kept.")
    path.unlink(missing_ok=True)


@app.command("whoami")
def whoami(ctx: typer.Context) -> None:
    """Who you act as, and your roles."""
    me = Context.of(ctx).call("whoami")
    roles = [r for r, held in (("staff", me.staff), ("operator", me.operator)) if held]
    out.line(me.user + (f" ({', '.join(roles)})" if roles else ""))


@user_app.command("add")
def user_add(ctx: typer.Context, name: Annotated[str, typer.Argument(help="The user's name.")],
             staff: Annotated[bool, typer.Option("--staff", help="Give the staff role.")] = False,
             operator: Annotated[bool, typer.Option("--operator", help="Give the operator role (acts in the "
                                                                       "Dagster UI).")] = False) -> None:
    """Add a user (or give one more roles); then make them a token with `amber token create --for NAME`."""
    made = Context.of(ctx).call("user_add", name=name, staff=staff, operator=operator)
    out.line(f"User {made.name}" + _roles(made.staff, made.operator) + ".")


@user_app.command("list")
def user_list(ctx: typer.Context) -> None:
    """Every user and their roles."""
    out.table(["user", "staff", "operator"], ([u.name, "yes" if u.staff else "", "yes" if u.operator else ""]
                                              for u in Context.of(ctx).call("user_list")))


def _roles(staff: bool, operator: bool) -> str:
    held = [r for r, given in (("staff", staff), ("operator", operator)) if given]
    return f", {' and '.join(held)}" if held else ""


@token_app.command("create")
def token_create(ctx: typer.Context,
                 user: Annotated[str | None, typer.Option("--for", help="Whose token (staff only; default: "
                                                                        "yours).")] = None,
                 name: Annotated[str, typer.Option("--name", help="A name to tell it apart.")] = "",
                 days: Annotated[int, typer.Option("--days", help="Days until it expires.")] = tokens.DEFAULT_DAYS
                 ) -> None:
    """Make a personal API token; it is shown this once and stored only as its hash."""
    made = Context.of(ctx).call("token_create", user=user, name=name, days=days)
    out.line(made.secret)
    expires = made.token.expires_at.astimezone(UTC)
    out.line(f"Token {made.token.id} of {made.token.user}, expires {expires:%Y-%m-%d %H:%M} UTC. It is shown only "
             "now: keep it like a password.")


@token_app.command("list")
def token_list(ctx: typer.Context) -> None:
    """Your tokens: ids, names, expiry and state (never the tokens themselves)."""
    out.table(["token", "name", "created", "expires", "state"],
              ([t.id, t.name, f"{t.created_at.astimezone(UTC):%Y-%m-%d %H:%M}",
                f"{t.expires_at.astimezone(UTC):%Y-%m-%d %H:%M}", t.state]
               for t in Context.of(ctx).call("token_list")))


@token_app.command("revoke")
def token_revoke(ctx: typer.Context,
                 token_id: Annotated[str, typer.Argument(help="The token's id (tok...), from `amber token list`.")]
                 ) -> None:
    """Revoke a token: every request with it is refused from now on."""
    shown = Context.of(ctx).call("token_revoke", token_id=token_id)
    out.line(f"Token {shown.id} of {shown.user} is revoked.")
