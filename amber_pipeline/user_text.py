"""What a user typed, shown back to them in a refusal.

A refused name, id or amount is quoted so its edges show (a trailing space
is visible), on one line (a newline or other control character is escaped,
so the refusal stays one line), and otherwise exactly as typed: no Python
repr, and never read as Rich markup (the CLI prints text, not markup).

A refusal is bounded whatever it was sent: past `SHOWN_CHARACTERS`, only the
start of a text is shown, then its length, so a name of ten megabytes never
comes back as an error of ten megabytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable

SHOWN_CHARACTERS = 200  # enough to recognize what was sent


def quoted(text: str) -> str:
    """`text` in double quotes on one line: control characters, quotes and backslashes escaped, the rest as typed
    (past `SHOWN_CHARACTERS`, its start and then its length)."""
    return _bounded(text, lambda shown: json.dumps(shown, ensure_ascii=False))


def clipped(text: str) -> str:
    """`text` as it is, bounded as `quoted` bounds it: for a sentence that may carry what a user sent."""
    return _bounded(text, str)


def _bounded(text: str, show: Callable[[str], str]) -> str:
    if len(text) <= SHOWN_CHARACTERS:
        return show(text)
    return f"{show(text[:SHOWN_CHARACTERS] + '…')} ({len(text):,} characters)"
