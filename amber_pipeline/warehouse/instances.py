"""The DuckDB instances a process reuses, lent one block at a time.

Making a DuckDB instance costs about 10 ms of CPU, even in memory (DuckDB registers every built-in function
in each), while attaching a database file to one that exists costs about 2 ms. The catalog is opened for
every short transaction (`catalog.py`), and a CLI command, an API request or a sensor tick opens it several
times: making an instance each time was most of what a catalog read cost. So the process keeps a few
in-memory instances and lends one per block, with the block's database attached to it as the default of its
connection; the database is detached when the block ends, so an instance holds no file open (and no lock,
nor view or table of a block) between blocks.

A catalog block's instance runs one thread. Its statements are small (a few rows read or written): each of DuckDB's
pipelines woke the instance's second thread for nothing (a futex wake and a cross-core interrupt), and that thread,
idle again, trimmed the whole process's heap (glibc's malloc_trim), whose pages were then faulted back in. A
scratch block's instance keeps DuckDB's threads: its queries scan Parquet files, which a second core speeds.

An instance is used by one block at a time; a block nested in another, or one in another thread, is lent
another. A forked child never uses its parent's instances (DuckDB's threads do not survive a fork): it makes
its own.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import duckdb

from amber_pipeline.warehouse import sql

FILE = "amber_file"  # the alias of a block's database file
SCRATCH = "amber_scratch"  # the alias of a block's own in-memory database
_IDLE_KEPT = 4  # more idle of a kind than this are closed: a burst of threads does not keep its instances
# An instance keeps a little memory of every database it attached (5 MB after 5,000), given back when it closes:
# it is closed after this many blocks, and a new one made (10 ms, once per so many).
LENDS = 1000

# The storage format a block that writes gives its file. DuckDB writes in the format of v1.0 unless told otherwise,
# which stores each column's statistics (a HyperLogLog sketch) in an older layout that every opening converts: a
# third of the CPU of opening the catalog, which Amber does for every short transaction. From v1.2 the sketch is
# stored as DuckDB holds it. A file of the older format is rewritten in this one at its first write's checkpoint,
# with everything in it; DuckDB 1.2 and later read it.
STORAGE_VERSION = "v1.2.0"

# Each kind's instances' config: a catalog block's on one thread (see above), a scratch block's as DuckDB makes them.
_CONFIG: dict[str, dict[str, str | bool | int | float | list[str]]] = {FILE: {"threads": 1}, SCRATCH: {}}
_idle: dict[str, list[tuple[duckdb.DuckDBPyConnection, int]]] = {FILE: [], SCRATCH: []}  # with their blocks so far
_idle_lock = threading.Lock()
_forked_away: list[tuple[duckdb.DuckDBPyConnection, int]] = []  # a parent's, never closed in its child (_after_fork)


@contextlib.contextmanager
def attached(path: Path, *, read_only: bool) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose default database is the DuckDB file at ``path``, attached for the block. The block only
    runs statements: it registers no Python object and makes no temporary table (those would outlive it)."""
    options = " (read_only)" if read_only else f" (storage_version {sql.string(STORAGE_VERSION)})"
    with _lent(f"attach {sql.string(path)} as {FILE}{options}", FILE, temporaries=False) as con:
        yield con


@contextlib.contextmanager
def scratch() -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose default database is an empty in-memory one of the block's own: what the block makes
    there, registers or makes temporary is gone when it ends."""
    with _lent(f"attach ':memory:' as {SCRATCH}", SCRATCH, temporaries=True) as con:
        yield con


@contextlib.contextmanager
def _lent(attach: str, alias: str, *, temporaries: bool) -> Iterator[duckdb.DuckDBPyConnection]:
    with _idle_lock:
        idle = _idle[alias]
        con, lends = idle.pop() if idle else (None, 0)
    if con is None:
        con = duckdb.connect(config=_CONFIG[alias])
    try:
        con.execute(attach)
    except BaseException:
        _give_back(con, alias, lends + 1)
        raise
    try:
        con.execute(f"use {alias}")
        yield con
    finally:
        if _detached(con, alias) and (not temporaries or _without_temporaries(con)):
            _give_back(con, alias, lends + 1)
        else:  # left in a state it cannot leave (a transaction open, say): not lent again
            con.close()


def _detached(con: duckdb.DuckDBPyConnection, alias: str) -> bool:
    try:
        con.execute("use memory")
        con.execute(f"detach {alias}")
    except duckdb.Error:
        return False
    return True


def _without_temporaries(con: duckdb.DuckDBPyConnection) -> bool:
    """Forget the Python objects the block registered (`views.py` registers Arrow tables and datasets); whether no
    temporary table or view is left. All three belong to the connection, not to a database, so the next block
    would see them."""
    try:
        for (name,) in con.execute("select view_name from duckdb_views() where database_name = 'temp'").fetchall():
            con.unregister(name)
        [left] = con.execute("select (select count(*) from duckdb_views() where database_name = 'temp') + "
                             "(select count(*) from duckdb_tables() where database_name = 'temp')").fetchone() or (0,)
    except duckdb.Error:
        return False
    return left == 0


def _give_back(con: duckdb.DuckDBPyConnection, alias: str, lends: int) -> None:
    if lends < LENDS:
        with _idle_lock:
            if len(_idle[alias]) < _IDLE_KEPT:
                _idle[alias].append((con, lends))
                return
    con.close()


def _after_fork() -> None:
    """In a forked child the parent's instances have no threads: never closed (closing would wait for them), never
    lent; kept referenced so that no collection closes them either."""
    for idle in _idle.values():
        _forked_away.extend(idle)
        idle.clear()
    global _idle_lock
    _idle_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
