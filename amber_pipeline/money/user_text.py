"""What a user typed, shown back to them in a refusal.

A refused name, id or amount is quoted so its edges show (a trailing space
is visible), on one line (a newline or other control character is escaped,
so the refusal stays one line), and otherwise exactly as typed: no Python
repr, and never read as Rich markup (the CLI prints text, not markup).
"""

from __future__ import annotations

import json


def quoted(text: str) -> str:
    """`text` in double quotes on one line: control characters, quotes and backslashes escaped, the rest as typed."""
    return json.dumps(text, ensure_ascii=False)
