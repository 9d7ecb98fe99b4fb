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

Connections are pooled per process (`Pool`): a new one costs a few milliseconds and its first statements more
(the server process loads the catalog's metadata), several times per API request otherwise. Reads and writes
have pools of their own, neither bounded, so a read never waits for a connection a write holds; a connection
goes back only between transactions (committed or rolled back), and one that failed or broke is closed.

Amber's readers (`Warehouse.query`) and `amber sql` are DuckDB; there the catalog's tables are copied into
an in-memory database named like the attached DuckDB file, so the views are the same over either catalog.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import select
import threading
import zlib
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

import duckdb
import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras
import pyarrow as pa

from amber_pipeline.errors import AmberError
from amber_pipeline.settings import shown
from amber_pipeline.warehouse import sql
from amber_pipeline.warehouse.locks import LOCK_WORKSPACE, lock_workspace

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


@functools.lru_cache(maxsize=2048)
def _dialect(query: str) -> str:
    """A statement with DuckDB's ``?`` parameters (`sql.parameters`) in psycopg2's ``%s`` style, ``%`` doubled.
    Kept per statement text: Amber's are a few hundred constants, and reading one character by character cost
    more of a request's time than any other step but the database's own."""
    return "%s".join(piece.replace("%", "%%") for piece in sql.parameters(query))


class PgConnection:
    """One catalog transaction on PostgreSQL, with the DuckDB connection's calls that Amber uses:
    ``execute(query, params)`` returning itself, then ``fetchone`` / ``fetchall``.

    Round trips are few, since a transaction's locks are held through each and a server's thread waits for its
    interpreter after each. The connection is in autocommit mode and the transaction is begun by ``begin``, sent
    with the first statement (psycopg2 would send its BEGIN alone first), so a block that runs no statement opens
    none. With ``defer`` (a write's), an INSERT whose result nobody reads (no RETURNING) is sent with the next
    statement, or the COMMIT: its rows are the transaction's either way, and an error of it ends the transaction
    just the same, raised by that next call."""

    def __init__(self, cursor: psycopg2.extensions.cursor, begin: str, defer: bool = False):
        self._cursor = cursor
        self._begin: str | None = begin  # None once sent
        self._defer = defer
        self._pending: list[bytes] = []  # deferred INSERTs, their parameters written in (`mogrify`)

    @property
    def began(self) -> bool:
        return self._begin is None

    def execute(self, query: str, parameters: Sequence[Any] | None = None) -> PgConnection:
        statement = self._cursor.mogrify(_dialect(query), list(parameters or []))
        if self._defer and _deferrable(query):
            self._pending.append(statement)
        else:
            self._send(statement)
        return self

    def executemany(self, query: str, parameters: Sequence[Sequence[Any]]) -> PgConnection:
        rows = [list(p) for p in parameters]
        if self._defer and _deferrable(query):
            self._pending += [self._cursor.mogrify(_dialect(query), row) for row in rows]
            return self
        self._send(None)
        psycopg2.extras.execute_batch(self._cursor, _dialect(query), rows)
        return self

    def _send(self, statement: bytes | None) -> None:
        """``statement`` (None: none), after the BEGIN and the deferred INSERTs not sent yet, in one round trip."""
        parts = ([] if self._begin is None else [self._begin.encode()]) + self._pending
        parts += [] if statement is None else [statement]
        self._begin, self._pending = None, []
        if parts:
            self._cursor.execute(b"; ".join(parts))

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._cursor.fetchone()

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._cursor.fetchall()

    @property
    def description(self) -> Any:
        return self._cursor.description

    def end(self, outcome: str) -> None:
        """``commit`` (with what is deferred) or ``rollback`` (what was deferred is dropped) the transaction, if
        one was begun."""
        if outcome == "commit" and self._pending:
            self._send(b"commit")
            return
        self._pending = []
        if self.began:
            self._cursor.execute(outcome)


def _deferrable(query: str) -> bool:
    """An INSERT that returns nothing: nobody reads its result, so it may wait for the next round trip."""
    text = query.lstrip().lower()
    return text.startswith("insert ") and "returning" not in text


BEGIN_WRITE = "begin"  # READ COMMITTED: each statement sees what other writers committed before it
BEGIN_READ = "begin isolation level repeatable read read only"  # one snapshot for the block

IDLE_KEPT = 16  # connections a pool keeps open between transactions; more are opened while more are in use


class Pool:
    """Open connections of one kind (reads or writes) to one catalog, kept between transactions in this process.

    Unbounded: a transaction never waits for another's connection (the number in use is the number of
    transactions running at once, which the process's threads bound); at most `IDLE_KEPT` stay open idle. A
    connection is handed back only idle (its transaction committed or rolled back) and whole; one that broke
    (`conn.closed`) or whose server spoke while it was idle (a restart or a terminated session: its socket is
    readable) is closed and another opened. A forked child never uses its parent's: it starts with none.
    """

    def __init__(self, connect: Callable[[], psycopg2.extensions.connection]) -> None:
        self._connect = connect
        self._idle: list[psycopg2.extensions.connection] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.opened = 0  # connections opened over the pool's life (for tests and benches)
        with _POOLS_LOCK:
            if not _POOLS:
                os.register_at_fork(after_in_child=_after_fork)  # once per process: its first pool
            _POOLS.add(self)

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg2.extensions.connection]:
        """A connection not in a transaction, for one transaction: the block commits or rolls back before it
        ends; if it leaves one open (an error on the way), it is rolled back here, and closed if that fails."""
        conn = self._take()
        try:
            yield conn
        finally:
            self._give_back(conn)

    def _take(self) -> psycopg2.extensions.connection:
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the connections are the parent's
                self._forget()
            while self._idle:
                conn = self._idle.pop()
                if _usable(conn):
                    return conn
                _close(conn)
            self.opened += 1
        return self._connect()

    def _give_back(self, conn: psycopg2.extensions.connection) -> None:
        if not conn.closed and conn.info.transaction_status != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
            with contextlib.suppress(psycopg2.Error), conn.cursor() as cur:
                cur.execute("rollback")
        idle = not conn.closed and conn.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_IDLE
        with self._lock:
            if idle and self._pid == os.getpid() and len(self._idle) < IDLE_KEPT:
                self._idle.append(conn)
                return
        _close(conn)

    @property
    def idle(self) -> int:
        return len(self._idle)

    def close(self) -> None:
        """Close every idle connection (those in use close when handed back past `IDLE_KEPT`)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            _close(conn)

    def _forget(self) -> None:
        """In a forked child: drop the parent's connections without a word to their server. Closing one would send
        its session's end over the socket the parent still uses, so each socket is first replaced in this process
        by /dev/null."""
        null = os.open(os.devnull, os.O_RDWR)
        try:
            for conn in self._idle:
                with contextlib.suppress(OSError, psycopg2.Error):
                    os.dup2(null, conn.fileno())
                _close(conn)
        finally:
            os.close(null)
        self._idle, self._pid = [], os.getpid()


_POOLS: set[Pool] = set()  # every pool of the process (a handful: two per catalog URL), for `_after_fork`
_POOLS_LOCK = threading.Lock()


def _after_fork() -> None:
    """In a forked child: every pool emptied, and the locks remade, since a thread the child does not have may have
    held one at the fork."""
    global _POOLS_LOCK
    _POOLS_LOCK = threading.Lock()
    PostgresCatalog._pools_lock = threading.Lock()
    for pool in list(_POOLS):
        pool._lock = threading.Lock()
        pool._forget()


def _usable(conn: psycopg2.extensions.connection) -> bool:
    """Open, and its server silent since its last transaction: anything to read now on an idle connection is
    its end (the server restarted, or the session was terminated)."""
    if conn.closed:
        return False
    try:
        poll = select.poll()  # not select(): a server's sockets may be numbered past its limit of 1024
        poll.register(conn.fileno(), select.POLLIN)
        return not poll.poll(0)
    except (OSError, ValueError, psycopg2.Error):
        return False


def _close(conn: psycopg2.extensions.connection) -> None:
    with contextlib.suppress(psycopg2.Error):
        conn.close()


class PostgresCatalog:
    """Transactions on one PostgreSQL catalog, on pooled connections (`Pool`, one pair per URL and process); the
    schema is made (or brought up to date) once per process."""

    _ready: set[str] = set()
    _ready_lock = threading.Lock()
    _pools: dict[tuple[str, str], Pool] = {}
    _pools_lock = threading.Lock()

    def __init__(self, url: str, ddl: str):
        self.url = url
        self._ddl = ddl

    def pool(self, kind: str) -> Pool:
        """This process's pool of ``kind`` ("read" or "write") connections to the catalog."""
        with self._pools_lock:
            found = self._pools.get((self.url, kind))
            if found is None:
                found = self._pools[(self.url, kind)] = Pool(self._connect)
            return found

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
        self._ensure_schema(conn)
        conn.autocommit = True  # each transaction is begun with its first statement (`PgConnection`)
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
        with self.pool("write").connection() as conn, conn.cursor() as cur:
            pg = PgConnection(cur, BEGIN_WRITE, defer=True)
            try:
                if workspace is None and job is None:
                    pg.execute("select pg_advisory_xact_lock(?)", [_GLOBAL])
                elif workspace is not None:  # both locks in the round trip that begins the transaction
                    pg.execute(f"select pg_advisory_xact_lock_shared(?); {LOCK_WORKSPACE}", [_GLOBAL, workspace])
                else:
                    pg.execute("select pg_advisory_xact_lock_shared(?)", [_GLOBAL])
                    row = pg.execute("select workspace from jobs where id = ?", [job]).fetchone()
                    if row is not None:
                        lock_workspace(pg, row[0])
                yield pg
                pg.end("commit")
            except BaseException:
                with contextlib.suppress(psycopg2.Error):
                    pg.end("rollback")
                raise

    @contextlib.contextmanager
    def read(self) -> Iterator[PgConnection]:
        """One snapshot: every statement of the block sees the same committed catalog."""
        with self.pool("read").connection() as conn, conn.cursor() as cur:
            pg = PgConnection(cur, BEGIN_READ)
            try:
                yield pg
            finally:
                with contextlib.suppress(psycopg2.Error):
                    pg.end("rollback")

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

