"""`amber`: the command line of the embedded Amber.

One sub-app per area (Jobs, money, reports and comparisons, SQL, the
instance), each a `typer.Typer` whose commands the root serves as its own.
A command's module is imported only when that command runs: the root lists
them from an index (`command_index.py`), so `amber --help` loads none and
`amber job status` loads the Jobs area alone. The root reads `--user` and
`--workspace` into the context object every command acts with. Every command
works on the instance in AMBER_HOME (default ./.amber), or, with AMBER_URL and
a token (`amber login`), asks that server instead. A problem the user can fix
prints one line and exits 1, without a traceback.
"""

from __future__ import annotations

import functools
import importlib
from typing import Annotated, Any

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from amber_pipeline.cli.command_index import COMMANDS
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out
from amber_pipeline.errors import AmberError


class _Group(TyperGroup):
    """The root command: its commands loaded from their area when run, listed from the index when its help is
    shown; an `AmberError` from any command is one line on stderr and exit status 1."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        area, help_text = COMMANDS[cmd_name]
        if self._listing:  # what the help's list reads of a command: its name and help
            return TyperCommand(cmd_name, help=help_text)
        return _area(area).get_command(ctx, cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except AmberError as e:
            out.error(f"amber: {e}")
            raise typer.Exit(1) from None


@functools.cache
def _area(area: str) -> TyperGroup:
    group = typer.main.get_group(importlib.import_module(f"amber_pipeline.cli.{area}").app)
    assert isinstance(group, TyperGroup)
    return group


app = typer.Typer(cls=_Group, no_args_is_help=True, add_completion=False,
                  help="Amber: which AI model and agent to choose, with honest uncertainty.")


@app.callback()
def _root(ctx: typer.Context,
          user: Annotated[str | None, typer.Option("--user", help="Act as this user (default: your config file, "
                                                   "else your login name).")] = None,
          workspace: Annotated[str | None, typer.Option("--workspace", help="Act in this Workspace (default: your "
                                                        "config file, else 'default').")] = None) -> None:
    ctx.obj = Context(user=user, workspace=workspace)


def main() -> None:
    app()
