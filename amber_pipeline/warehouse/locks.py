"""The lock a Wallet write holds: its Workspace's.

On DuckDB every catalog writer holds one exclusive file lock (`catalog.py`), so a Workspace is locked
already. On PostgreSQL writers run at once, so a write that checks a Workspace's money before it moves
any holds that Workspace's row until it commits (`postgres.py`).
"""

from __future__ import annotations

from typing import Any

import duckdb


def lock_workspace(con: Any, workspace: str) -> None:
    """Hold ``workspace``'s row until the transaction ends (nothing to do on DuckDB)."""
    if not isinstance(con, duckdb.DuckDBPyConnection):
        con.execute("select 1 from workspaces where name = ? for update", [workspace])
