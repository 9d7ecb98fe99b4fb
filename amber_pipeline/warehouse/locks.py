"""The locks catalog writes hold beyond their transaction's own rows: their Workspace's, and the names that are
unique across Workspaces.

On DuckDB every catalog writer holds one exclusive file lock (`catalog.py`), so a Workspace is locked
already. On PostgreSQL writers of different Workspaces run at once (`postgres.py`), so a write that checks a
Workspace's money before it moves any holds that Workspace's row until it commits, and a write that gives out
a name unique across the catalog (a cell's, `jobs/cell_names.py`) holds that name space while it looks for a
free one and takes it.
"""

from __future__ import annotations

import zlib
from typing import Any

import duckdb

from amber_pipeline.warehouse import sql

LOCK_WORKSPACE = "select 1 from workspaces where name = ? for update"
NAMES = {"cell_names": zlib.crc32(b"amber cell names")}  # the advisory lock of each name space


def _postgres(con: Any) -> bool:
    return not isinstance(con, duckdb.DuckDBPyConnection | sql.Literals)


def lock_workspace(con: Any, workspace: str) -> None:
    """Hold ``workspace``'s row until the transaction ends (nothing to do on DuckDB)."""
    if _postgres(con):
        con.execute(LOCK_WORKSPACE, [workspace])


def lock_names(con: Any, space: str) -> None:
    """Hold the name space ``space`` (a key of `NAMES`) until the transaction ends, so two writes of different
    Workspaces never both find a name free and both take it (nothing to do on DuckDB). Statements after it see
    what a write that held it before committed (PostgreSQL's READ COMMITTED: each statement reads anew)."""
    if _postgres(con):
        con.execute("select pg_advisory_xact_lock(?)", [NAMES[space]])
