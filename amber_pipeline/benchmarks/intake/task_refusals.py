"""Task refusals: how a per-Task check says no, shared by `checks`, `dockerfiles` and `compose`.

A check that fails raises `Refused` with its one sentence; `checks` catches it
and makes that sentence the Task's reason, so one bad Task never stops the
others. The rules read files a Task brings (task.toml, docker-compose.yaml)
whose tables may have any shape, so `table_at` reads a nested table without
trusting it. Both live here, below the three modules, so none of them has to
import another one that imports it back.
"""

from __future__ import annotations

from typing import Any


class Refused(Exception):
    """A check failed: its one sentence."""


def table_at(raw: Any, *keys: str) -> dict[str, Any]:
    """The table at `keys` under `raw`, or an empty one when any level is missing or not a table."""
    for key in keys:
        raw = raw.get(key) if isinstance(raw, dict) else None
    return raw if isinstance(raw, dict) else {}
