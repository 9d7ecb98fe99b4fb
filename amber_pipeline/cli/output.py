"""The one way commands print: plain lines, tables, or JSON.

Everything a user typed or a Trial produced (names, reasons, messages) is
printed as text, never parsed as Rich markup, so a reason like "[/]" prints
as itself instead of breaking the command. Tables go to a console as wide as
the terminal (`COLUMNS`, else 120 columns, when piped), and a cell too long
for its column folds onto the next line rather than being cut, so no value is
lost; JSON is printed whole, NaN-free.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

_RIGHT = ("#", "amount", "Tasks", "Trials", "Trials/Task", "per Trial", "total", "mean Reward", "95% CI",
          "cost (USD)", "mean duration", "Errored", "members", "pass rate")


class Output:
    def __init__(self) -> None:
        piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
        self.console = Console(width=120 if piped else None, highlight=False)

    def line(self, text: str = "", *, style: str | None = None) -> None:
        """One line of plain text (no markup), optionally styled as a whole."""
        self.console.print(Text(text, style=style or ""), soft_wrap=True)

    def rule(self, title: str) -> None:
        self.console.rule(Text(title))

    def table(self, columns: Sequence[str], rows: Iterable[Sequence[object]], title: str | None = None) -> None:
        """A table; numeric-looking columns are right-aligned, every cell printed as text."""
        table = Table(title=Text(title) if title else None)
        for column in columns:
            table.add_column(column, justify="right" if column in _RIGHT else "left", overflow="fold")
        for row in rows:
            table.add_row(*(Text("" if v is None else str(v)) for v in row))
        self.console.print(table)

    def json(self, data: Any) -> None:
        """JSON for scripts: printed whole with plain print, so no console wrapping touches it."""
        print(json.dumps(data, indent=2, allow_nan=False, default=str))


out = Output()
