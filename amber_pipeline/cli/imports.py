"""`amber import-harbor DIR`: bring a Harbor job folder into the acting Workspace.

`register(app, acting)` adds the command; `acting` is the CLI's `_acting()`
(warehouse, user, Workspace), passed in so this module need not import cli.py.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from amber_pipeline.analysis import sources
from amber_pipeline.money.identity import Actor
from amber_pipeline.warehouse.catalog import Warehouse

console = Console(width=None if sys.stdout.isatty() else 120)


def register(app: typer.Typer, acting: Callable[[], tuple[Warehouse, Actor, str]]) -> None:
    @app.command("import-harbor")
    def import_harbor(folder: Annotated[Path, typer.Argument(
            help="A job folder `harbor run` wrote (jobs/<job name>).")]) -> None:
        """Import a Harbor job folder's finished trials for reports and `amber sql` (table imported_trials)."""
        wh, _, workspace = acting()
        name, rows = sources.import_harbor(wh, workspace, folder)
        console.print(f"Imported {name}: {rows} Trials into Workspace {workspace}. Query them with "
                      f"amber sql \"select * from imported_trials where source = '{name}'\"", highlight=False)
