"""The catalog and the Wallet's ledger on PostgreSQL (``AMBER_CATALOG_URL=postgresql://...``).

The same DDL and the same statements as the DuckDB catalog run here, through a connection that speaks the
DuckDB client's dialect of parameters (``?``); what differs is how writers wait for each other:

- DuckDB: one exclusive file lock for every write of every Workspace.
- PostgreSQL: READ COMMITTED transactions. A write of one Workspace (`Warehouse.write(workspace)`) holds a
  row lock on that Workspace (``select ... for update``) and shares a global advisory lock; a write that
  names no Workspace takes the advisory lock exclusively, as the file lock did. So Wallet writes of
  different Workspaces run at once, and one Workspace's are in order, which is what keeps "is enough
  available" and the write one step.

The ledger and the audit log are append-only in the database itself: triggers refuse UPDATE, DELETE and
TRUNCATE, whoever asks.

Amber's readers (`Warehouse.query`) and `amber sql` are DuckDB; there the catalog's tables are copied into
an in-memory database named like the attached DuckDB file, so the views are the same over either catalog.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import zlib
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import duckdb
import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras
import pyarrow as pa

from amber_pipeline.errors import AmberError
from amber_pipeline.settings import shown
from amber_pipeline.warehouse.locks import lock_workspace

_GLOBAL = zlib.crc32(b"amber catalog writers")  # the advisory lock every writer takes (shared or exclusive)
_SCHEMA = zlib.crc32(b"amber catalog schema")  # serializes the DDL of processes starting at once

# Refused in the database, by whoever asks: a bug, a script or a person with the password cannot rewrite what
# a Workspace was charged, nor who did what (an owner can drop a trigger; Amber's role never does). The tables
# kept append-only, each with its name for people, which the trigger passes to the one function.
APPEND_ONLY = {"ledger": "ledger", "audit": "audit log"}
LEDGER_GUARD = """
create or replace function amber_ledger_is_append_only() returns trigger language plpgsql as $$
begin
    raise exception 'the % is append-only: % of an entry is refused', tg_argv[0], tg_op
        using errcode = 'insufficient_privilege';
end $$;
""" + "".join(f"""drop trigger if exists {table}_append_only on {table};
create trigger {table}_append_only before update or delete on {table}
    for each row execute function amber_ledger_is_append_only('{name}');
drop trigger if exists {table}_no_truncate on {table};
create trigger {table}_no_truncate before truncate on {table}
    for each statement execute function amber_ledger_is_append_only('{name}');
""" for table, name in APPEND_ONLY.items())


# The digest of the DDL the schema was last made from (one row): a process whose DDL has that digest runs none.
SCHEMA_TABLE = "\ncreate table if not exists amber_schema (digest varchar not null);\n"
SCHEMA_ATTEMPTS = 3


def _schema_digest(cur: psycopg2.extensions.cursor) -> str | None:
    """The digest the schema was made from; None before any was recorded."""
    cur.execute("select to_regclass('amber_schema') is not null")
    if not cur.fetchone()[0]:
        return None
    cur.execute("select digest from amber_schema")
    row = cur.fetchone()
    return row[0] if row else None


def _dialect(query: str) -> str:
    """A statement with DuckDB's ``?`` parameters in psycopg2's ``%s`` style (``%`` doubled); string literals
    are left as they are."""
    out, quoted = [], False
    for ch in query:
        if ch == "'":
            quoted = not quoted
        if ch == "%":
            out.append("%%")
        elif ch == "?" and not quoted:
            out.append("%s")
        else:
            out.append(ch)
    return "".join(out)


class PgConnection:
    """One catalog transaction on PostgreSQL, with the DuckDB connection's calls that Amber uses:
    ``execute(query, params)`` returning itself, then ``fetchone`` / ``fetchall``."""

    def __init__(self, cursor: psycopg2.extensions.cursor):
        self._cursor = cursor

    def execute(self, query: str, parameters: Sequence[Any] | None = None) -> PgConnection:
        self._cursor.execute(_dialect(query), list(parameters or []))
        return self

    def executemany(self, query: str, parameters: Sequence[Sequence[Any]]) -> PgConnection:
        psycopg2.extras.execute_batch(self._cursor, _dialect(query), [list(p) for p in parameters])
        return self

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._cursor.fetchone()

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._cursor.fetchall()

    @property
    def description(self) -> Any:
        return self._cursor.description


class PostgresCatalog:
    """Transactions on one PostgreSQL catalog; the schema is made (or brought up to date) once per process."""

    _ready: set[str] = set()
    _ready_lock = threading.Lock()

    def __init__(self, url: str, ddl: str):
        self.url = url
        self._ddl = ddl

    def _connect(self) -> psycopg2.extensions.connection:
        try:
            conn = psycopg2.connect(self.url, connect_timeout=10, application_name="amber")
        except psycopg2.OperationalError as e:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else "no answer"
            raise AmberError(f"The catalog at {shown(self.url)} is not answering ({reason}): start PostgreSQL "
                             "or fix AMBER_CATALOG_URL, and try again.") from None
        # json stays text, as DuckDB gives it: every reader parses it itself
        psycopg2.extras.register_default_json(conn, loads=lambda text: text)
        psycopg2.extras.register_default_jsonb(conn, loads=lambda text: text)
        return conn

    def _ensure_schema(self, conn: psycopg2.extensions.connection) -> None:
        """Make the schema, or bring it up to date, unless the catalog already has this DDL's digest.

        The DDL locks every table it names (the ledger's triggers exclusively), so run by each new process it
        deadlocked with other processes' reads and writes: a cell run failed that way at its first read. It
        now runs only when the schema changes (the first process of a new Amber), and a deadlock with a
        process that is not Amber's is retried.
        """
        if self.url in self._ready:
            return
        digest = hashlib.sha256((self._ddl + LEDGER_GUARD).encode()).hexdigest()
        with self._ready_lock:
            for attempt in range(SCHEMA_ATTEMPTS):
                try:
                    with conn.cursor() as cur:
                        if _schema_digest(cur) != digest:
                            cur.execute("select pg_advisory_xact_lock(%s)", [_SCHEMA])
                            if _schema_digest(cur) != digest:  # not made by a process that held the lock first
                                cur.execute(self._ddl + LEDGER_GUARD + SCHEMA_TABLE)
                                cur.execute("delete from amber_schema; insert into amber_schema values (%s)",
                                            [digest])
                    conn.commit()
                    break
                except psycopg2.errors.DeadlockDetected:
                    conn.rollback()
                    if attempt + 1 == SCHEMA_ATTEMPTS:
                        raise
            self._ready.add(self.url)

    @contextlib.contextmanager
    def write(self, workspace: str | None, job: str | None) -> Iterator[PgConnection]:
        """A transaction holding one Workspace's row (``workspace``, or ``job``'s), or every writer out."""
        conn = self._connect()
        try:
            self._ensure_schema(conn)
            with conn.cursor() as cur:
                pg = PgConnection(cur)
                if workspace is None and job is None:
                    pg.execute("select pg_advisory_xact_lock(?)", [_GLOBAL])
                else:
                    pg.execute("select pg_advisory_xact_lock_shared(?)", [_GLOBAL])
                    if workspace is None:
                        row = pg.execute("select workspace from jobs where id = ?", [job]).fetchone()
                        workspace = row[0] if row else None
                    if workspace is not None:
                        lock_workspace(pg, workspace)
                yield pg
            conn.commit()
        except BaseException:
            with contextlib.suppress(psycopg2.Error):
                conn.rollback()
            raise
        finally:
            conn.close()

    @contextlib.contextmanager
    def read(self) -> Iterator[PgConnection]:
        """One snapshot: every statement of the block sees the same committed catalog."""
        conn = self._connect()
        try:
            self._ensure_schema(conn)
            conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
            with conn.cursor() as cur:
                yield PgConnection(cur)
            conn.rollback()
        finally:
            conn.close()

    def copy_into(self, con: duckdb.DuckDBPyConnection, into: str, tables: Collection[str],
                  workspace: str | None) -> None:
        """Copy ``tables`` (only ``workspace``'s rows of those that have a workspace column, when one is given)
        into the DuckDB database ``into``, whose tables were made by the same DDL."""
        with self.read() as pg:
            for table in tables:
                columns = [r[0] for r in pg.execute(
                    "select column_name from information_schema.columns where table_schema = current_schema() "
                    "and table_name = ? order by ordinal_position", [table]).fetchall()]
                where = " where workspace = ?" if workspace is not None and "workspace" in columns else ""
                rows = pg.execute(f"select * from {table}{where}", [workspace] if where else []).fetchall()
                if not rows:
                    continue
                arrow = pa.table({c: [r[i] for r in rows] for i, c in enumerate(columns)})
                con.register("_pg_rows", arrow)
                try:
                    con.execute(f"insert into {into}.main.{table} by name select * from _pg_rows")
                finally:
                    con.unregister("_pg_rows")

