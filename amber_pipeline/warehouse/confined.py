"""A user's SQL, confined to what their Workspace may see: the engine of `amber sql`.

The views of `Warehouse.query` are not a boundary: the catalog attached beside
them can be named directly, and DuckDB reads and writes any file it is pointed
at. So a user's query runs in a DuckDB of its own that holds nothing but copies
of the acting Workspace's rows of the views the query names, with no catalog
attached, no file system, no extension loading, and a configuration locked so
that `set`, `reset` and `pragma` cannot undo any of it. The catalog's shared
lock is held only while its rows are copied, so a long query keeps no writer
waiting, and a timer interrupts a query that runs past its time limit.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

import duckdb

from amber_pipeline.errors import AmberError
from amber_pipeline.warehouse.catalog import Warehouse

TIMEOUT_S = 30.0
MEMORY_LIMIT = "1GB"
MAX_ROWS = 100_000  # the rows a result may have: DuckDB's memory limit does not bound their Python copies
MAX_RESULT_BYTES = 64_000_000  # the size a result may have (`_fetch`): nor does it bound a few long values
FETCH_ROWS = 2048  # the most rows fetched at once: one of DuckDB's vectors, which it held anyway
SCALAR_BYTES = 16  # what `_fetch` counts for a value that is not a text or a nested one

# Set when the connection opens: nothing spills to disk (no temporary folder), nothing is fetched or loaded on
# its own, a name in the query never reaches a Python variable, and no setting shows a folder of the server's
# (DuckDB makes secret_directory of the home folder).
_OPENING: dict[str, str | int | float | list[str]] = {
    "temp_directory": "",
    "home_directory": "/",
    "threads": 2,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "allow_persistent_secrets": False,
    "python_enable_replacements": False,
    "python_scan_all_frames": False,
}
# Set once the rows are loaded (the load itself reads the catalog and the files), the lock last.
_LOCKDOWN = (
    "set enable_external_access = false",
    "set disabled_filesystems = 'LocalFileSystem'",
    "set lock_configuration = true",
)


@dataclass(frozen=True)
class QueryResult:
    columns: tuple[str, ...]
    rows: list[tuple[object, ...]]


def views_named(query: str) -> frozenset[str]:
    """The documented views a query may read: every view whose name appears in it as a word.

    A word anywhere counts (in a string too, as `query_table('ledger')` reads a view named in one), so a
    view is never missing; one named in passing is only loaded for nothing. DuckDB's own
    `get_table_names` parses more precisely but fails to bind queries such as `a join b using (c)`.
    """
    from amber_pipeline.warehouse import views  # the views and Arrow: loaded by a query, not by its CLI options

    return frozenset(re.findall(r"[a-z_][a-z0-9_]*", query.lower())) & views.VIEW_NAMES


def run(wh: Warehouse, workspace: str, query: str, *, timeout_s: float = TIMEOUT_S,
        memory_limit: str = MEMORY_LIMIT) -> QueryResult:
    """Run one user's SQL over the rows of ``workspace``, confined; every failure is one sentence.

    Only the views the query names (and what the derived ones among them read) are loaded, so a query
    of `ledger` reads no Trial file.
    """
    from amber_pipeline.warehouse import views

    con = duckdb.connect(config={**_OPENING, "memory_limit": memory_limit})
    done, stopped = threading.Event(), threading.Event()

    def watch() -> None:
        if done.wait(timeout_s):
            return
        stopped.set()
        while True:  # again and again: an interrupt that lands between two statements is lost
            con.interrupt()
            if done.wait(0.1):
                return

    watcher = threading.Thread(target=watch, name="amber-sql-timeout", daemon=True)
    watcher.start()
    try:
        _load(con, wh, workspace, views.with_dependencies(views_named(query)))
        for statement in _LOCKDOWN:
            con.execute(statement)
        cursor = con.execute(query)
        if cursor is None:  # DuckDB's answer to a query of only blanks, comments and semicolons
            raise AmberError("The query has no statement: give one, like `select * from jobs limit 5`.")
        columns = tuple(d[0] for d in cursor.description or [])
        rows = _fetch(cursor)
    except duckdb.Error as e:
        raise _sentence(e, stopped.is_set(), timeout_s, memory_limit) from None
    finally:
        done.set()
        watcher.join()
        con.close()
    return QueryResult(columns, rows)


def _fetch(cursor: duckdb.DuckDBPyConnection) -> list[tuple[object, ...]]:
    """The rows of a result, or one sentence once they pass MAX_ROWS or MAX_RESULT_BYTES.

    DuckDB streams a result, so it is fetched a row, then as many rows as fit in what is left of the
    budget at their mean size so far (at most FETCH_ROWS), and refused as soon as the budget is crossed:
    an oversized result is never held whole in Python, nor sent. A single value is as large as DuckDB
    lets it be (its memory limit does not count strings being built), and is refused once fetched.
    """
    rows: list[tuple[object, ...]] = []
    size, wanted = 0, 1
    while fetched := cursor.fetchmany(wanted):
        rows += fetched
        size += sum(map(_size, fetched))
        if len(rows) > MAX_ROWS:
            raise AmberError(f"The query returned more than {MAX_ROWS:,} rows: aggregate them, filter them or add "
                             "a limit.")
        if size > MAX_RESULT_BYTES:
            raise AmberError(f"The query returned more than {MAX_RESULT_BYTES // 1_000_000} MB: select fewer or "
                             "shorter columns, filter the rows or add a limit.")
        fitting = (MAX_RESULT_BYTES - size) * len(rows) // max(size, 1)
        wanted = max(1, min(fitting, FETCH_ROWS, MAX_ROWS + 1 - len(rows)))
    return rows


def _size(value: Any) -> int:
    """About the bytes a value takes in a result: a text's characters, a list's or a struct's parts, and
    SCALAR_BYTES for any other value (a number, a time, a decimal: all short). Types are compared exactly,
    not with isinstance: DuckDB gives these very types, and this runs for every value of every result."""
    kind = type(value)
    if kind is str or kind is bytes:
        return len(value)
    if kind is list or kind is tuple:
        return sum(map(_size, value)) + SCALAR_BYTES
    if kind is dict:
        return sum(map(_size, value.keys())) + sum(map(_size, value.values())) + SCALAR_BYTES
    return SCALAR_BYTES


def _load(con: duckdb.DuckDBPyConnection, wh: Warehouse, workspace: str, names: frozenset[str]) -> None:
    """Copy the Workspace's rows of the named views into ``con``: the catalog's under its shared lock only."""
    from amber_pipeline.warehouse import views

    from_catalog = names & set(views.CATALOG_TABLES)
    if from_catalog:
        with wh.attached(con, from_catalog, workspace):
            views.build(con, wh.paths, wh.store, workspace, from_catalog, as_tables=True)
    views.build(con, wh.paths, wh.store, workspace, names - from_catalog, as_tables=True)


def _sentence(e: duckdb.Error, timed_out: bool, timeout_s: float, memory_limit: str) -> AmberError:
    if timed_out and isinstance(e, duckdb.InterruptException):
        return AmberError(f"The query ran longer than {timeout_s:g} s and was stopped: narrow it with a filter "
                          "or a limit, or allow it more time (amber sql --timeout SECONDS).")
    if isinstance(e, duckdb.OutOfMemoryException):
        return AmberError(f"The query needed more than {memory_limit} of memory and was stopped: narrow it with "
                          "a filter or a limit, or aggregate before joining.")
    if isinstance(e, duckdb.PermissionException):
        return AmberError("The query was refused: amber sql reads only your Workspace's views (the README lists "
                          "them), never files, extensions or other databases.")
    return AmberError(f"The query failed: {str(e).splitlines()[0]}")
