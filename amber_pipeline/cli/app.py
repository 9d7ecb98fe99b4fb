"""`amber`: the command line of the embedded Amber.

One sub-app per area (Jobs, money, reports and comparisons, SQL, the
instance), each a `typer.Typer` merged into the root here. The root reads
`--user` and `--workspace` into the context object every command acts with.
Every command works on the instance in AMBER_HOME (default ./.amber), or,
with AMBER_URL and a token (`amber login`), asks that server instead. A
problem the user can fix prints one line and exits 1, without a traceback.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from amber_pipeline.cli import account, agents, audit, benchmarks, compare, instance, jobs, models, money, report, sql
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out
from amber_pipeline.errors import AmberError


class _Group(TyperGroup):
    """The root command: an `AmberError` from any command is one line on stderr and exit status 1."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except AmberError as e:
            out.error(f"amber: {e}")
            raise typer.Exit(1) from None


app = typer.Typer(cls=_Group, no_args_is_help=True, add_completion=False,
                  help="Amber: which AI model and agent to choose, with honest uncertainty.")
for area in (jobs, benchmarks, models, agents, money, audit, report, compare, sql, instance, account):
    app.add_typer(area.app)


@app.callback()
def _root(ctx: typer.Context,
          user: Annotated[str | None, typer.Option("--user", help="Act as this user (default: your config file, "
                                                   "else your login name).")] = None,
          workspace: Annotated[str | None, typer.Option("--workspace", help="Act in this Workspace (default: your "
                                                        "config file, else 'default').")] = None) -> None:
    ctx.obj = Context(user=user, workspace=workspace)


def main() -> None:
    app()
