"""The one way commands print: plain lines, tables, or JSON.

Everything a user typed or a Trial produced (names, reasons, messages) is
printed as text, never parsed as Rich markup, so a reason like "[/]" prints
as itself instead of breaking the command. It is also printed inert: a
control character, a terminal escape or a bidi override that one member
typed into a name or a reason would otherwise act on every other member's
terminal (recolour it, retitle its window, reverse the text after it), so
each is shown escaped, as `user_text.quoted` escapes it (`\\u001b`). Tables go
to a console as wide as the terminal (`COLUMNS`, else 120 columns, when
piped), and a cell too long for its column folds onto the next line rather
than being cut, so no value is lost; JSON is printed whole, NaN-free, and
ASCII-only, so it escapes the same characters itself.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

_RIGHT = ("#", "amount", "Tasks", "Trials", "Trials/Task", "per Trial", "total", "mean Reward", "95% CI",
          "cost (USD)", "mean duration", "Errored", "members", "pass rate")

# C0 (newline and tab too: a value is one cell or one line), DEL, C1 (CSI U+009B is ESC [ in one character),
# the bidi marks, embeddings, overrides and isolates, and the line and paragraph separators.
_ACTIVE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def inert(text: str) -> str:
    """`text` with every character that acts on a terminal escaped as JSON writes it; everything else as typed."""
    return _ACTIVE.sub(lambda found: json.dumps(found.group())[1:-1], text)


class Output:
    def __init__(self) -> None:
        piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
        self.console = Console(width=120 if piped else None, highlight=False)
        self.errors = Console(stderr=True, highlight=False, soft_wrap=True)

    def line(self, text: str = "", *, style: str | None = None) -> None:
        """One line of plain text (no markup, inert), optionally styled as a whole."""
        self.console.print(Text(inert(text), style=style or ""), soft_wrap=True)

    def lines(self, text: str) -> None:
        """A text of several lines (a report, a TOML file), each line printed as `line` prints one."""
        for each in text.splitlines():
            self.line(each)

    def error(self, text: str) -> None:
        """One line on stderr (a refusal, or a note beside the output), as `line` prints one."""
        self.errors.print(Text(inert(text)))

    def rule(self, title: str) -> None:
        self.console.rule(Text(inert(title)))

    def table(self, columns: Sequence[str], rows: Iterable[Sequence[object]], title: str | None = None) -> None:
        """A table; numeric-looking columns are right-aligned, every cell (and heading) printed as inert text."""
        table = Table(title=Text(inert(title)) if title else None)
        for column in columns:
            table.add_column(Text(inert(column)), justify="right" if column in _RIGHT else "left", overflow="fold")
        for row in rows:
            table.add_row(*(Text("" if v is None else inert(str(v))) for v in row))
        self.console.print(table)

    def json(self, data: Any) -> None:
        """JSON for scripts: printed whole with plain print, so no console wrapping touches it."""
        print(json.dumps(data, indent=2, allow_nan=False, default=str))


out = Output()
