"""The warehouse: a catalog (DuckDB, or PostgreSQL: `postgres.py`) plus Parquet files, with the SQL views
(`views.py`) over them.

DuckDB lets one process hold a database file read-write and then refuses every
other process, even read-only ones. So the catalog is never held longer than
one short transaction, every opening takes an OS file lock first (shared for
readers, exclusive for writers), and a process waits its turn instead of
failing. On PostgreSQL (`AMBER_CATALOG_URL`) the same statements run in
transactions of the server, and writers of different Workspaces no longer wait
for each other. Trial rows, per-Task Rewards and cell aggregates are Parquet
files, each written to a temporary name then renamed, so a reader sees a whole
file or none; readers query them through an in-memory DuckDB.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import hashlib
from collections.abc import Collection, Iterator, Sequence
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import duckdb

from amber_pipeline import settings
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse import instances, sql, storage, stores
from amber_pipeline.warehouse.files import locked

if TYPE_CHECKING:  # Arrow and the views are imported where used: a command that reads the catalog needs neither
    import pyarrow as pa

    from amber_pipeline.warehouse.postgres import PostgresCatalog


class Connection(Protocol):
    """A catalog transaction: a DuckDB connection, or `postgres.PgConnection`, which speaks its dialect."""

    def execute(self, query: str, parameters: Any = None, /) -> Any: ...

    def executemany(self, query: str, parameters: Any, /) -> Any: ...

CATALOG_DDL = """
create table if not exists workspaces (
    name varchar primary key, created_by varchar not null, created_at timestamptz not null default now());
create table if not exists members (
    workspace varchar not null, user_name varchar not null, primary key (workspace, user_name));
create table if not exists staff (user_name varchar primary key);
create table if not exists operators (user_name varchar primary key);
create table if not exists users (
    user_name varchar primary key, created_by varchar not null, created_at timestamptz not null default now());
create table if not exists api_tokens (
    id varchar primary key, user_name varchar not null, hash varchar not null unique, name varchar not null,
    created_at timestamptz not null, expires_at timestamptz not null, revoked_at timestamptz);
create table if not exists benchmark_versions (
    id varchar not null, owner varchar not null, name varchar not null, number integer not null,
    label varchar not null, source_path varchar, n_tasks integer not null,
    created_at timestamptz not null default now(), primary key (id, owner), unique (owner, label));
alter table benchmark_versions add column if not exists published boolean default true;
alter table benchmark_versions add column if not exists origin varchar default 'folder';
alter table benchmark_versions add column if not exists allowed_hosts json;
create table if not exists uploads (
    id varchar primary key, workspace varchar not null, name varchar not null, uploaded_by varchar not null,
    archive varchar not null, created_at timestamptz not null, allowed_hosts json not null, checks json not null,
    status varchar not null, benchmark_version_id varchar, validation_job_id varchar,
    published_version_id varchar, validated_at timestamptz, deleted_at timestamptz);
create sequence if not exists job_seq start 1;
create sequence if not exists start_seq start 1;
create table if not exists jobs (
    id varchar primary key, seq integer not null default nextval('job_seq'), workspace varchar not null,
    submitted_by varchar not null, benchmark_version_id varchar not null, benchmark_owner varchar not null,
    trials_per_task integer not null, status varchar not null, quote_id varchar, start_seq integer,
    created_at timestamptz not null default now(), started_at timestamptz, finished_at timestamptz,
    message varchar, request json);
alter table jobs add column if not exists request json;
alter table jobs add column if not exists purpose varchar;
alter table jobs add column if not exists stop json;  -- the decision a Job stopped early on (jobs/stopping.py)
alter table workspaces add column if not exists provider_policy json;
create table if not exists job_cells (
    job_id varchar not null, cell_key varchar not null, agent varchar not null,
    model_configuration varchar not null, n_trials integer not null, status varchar not null,
    started_at timestamptz, finished_at timestamptz, message varchar,
    primary key (job_id, cell_key));
alter table job_cells add column if not exists launched_at timestamptz;
alter table job_cells add column if not exists worker varchar;  -- host/pid/start of its run (jobs/workers.py)
alter table job_cells add column if not exists engine_pool varchar;  -- where its run goes (jobs/placement.py)
alter table job_cells add column if not exists moves integer default 0;  -- times an engine that died handed it back
alter table job_cells add column if not exists rounds integer default 0;  -- times `amber job continue` ran it again
create table if not exists cell_names (cell_key varchar primary key, name varchar not null unique);
create table if not exists quotes (
    id varchar primary key, workspace varchar not null, job_id varchar not null,
    amount decimal(18, 6) not null, created_at timestamptz not null, expires_at timestamptz not null,
    detail json not null);
alter table quotes add column if not exists continuation boolean default false;  -- made by `amber job continue`
-- What each scored Trial attempt used, by part: the history Quotes are priced from (`jobs/history.py`).
create table if not exists trial_usage (
    trial_key varchar primary key, scope varchar not null, workspace varchar not null, task_hash varchar,
    agent_model varchar not null, image_sec double precision, environment_sec double precision,
    agent_sec double precision, verifier_sec double precision, duration_sec double precision not null,
    input_tokens bigint not null, cached_input_tokens bigint not null, output_tokens bigint not null,
    recorded_at timestamptz not null);
create table if not exists transcript_expiries (
    trial_dir varchar not null, finished_at timestamptz not null, expired_at timestamptz not null,
    bytes_freed bigint not null);
create sequence if not exists ledger_seq start 1;
create table if not exists ledger (
    seq bigint primary key default nextval('ledger_seq'), created_at timestamptz not null,
    workspace varchar not null, kind varchar not null
        check (kind in ('credit', 'reservation', 'charge', 'refund')),
    amount decimal(18, 6) not null check (amount >= 0), reason varchar, quote_id varchar, job_id varchar,
    trial_key varchar, entry_key varchar not null unique);
-- Who did what and when (`accounts/audit.py`): one row per action, written in the action's own transaction and never
-- changed. Token actions belong to no Workspace (workspace is null).
create sequence if not exists audit_seq start 1;
create table if not exists audit (
    seq bigint primary key default nextval('audit_seq'), created_at timestamptz not null, workspace varchar,
    user_name varchar not null, action varchar not null, job_id varchar, quote_id varchar,
    amount decimal(18, 6), detail varchar, token_id varchar, token_user varchar);
-- A launch from the Dagster UI behind sign-in (`accounts/launches.py`): the signed-in user it acts for, and the one run
-- that claimed it.
create table if not exists ui_launches (
    id varchar primary key, user_name varchar not null, issued_at timestamptz not null, run_id varchar);
-- What users see numbered counts within their Workspace from 1: the global sequences order the rows but are never
-- shown, since their gaps would reveal other Workspaces' activity. Computed, not stored: no ledger entry or Job is
-- ever deleted, so a row's number never changes.
create or replace view workspace_ledger as
    select row_number() over (partition by workspace order by seq) as seq, created_at, workspace, kind, amount,
           reason, quote_id, job_id, trial_key, entry_key from ledger;
create or replace view workspace_jobs as
    select row_number() over (partition by workspace order by seq) as seq, id, workspace, submitted_by,
           benchmark_version_id, benchmark_owner, trials_per_task, status, quote_id, created_at, started_at,
           finished_at, message, request, purpose, stop from jobs;
create or replace view workspace_audit as
    select row_number() over (partition by workspace order by seq) as seq, created_at, workspace, user_name, action,
           job_id, quote_id, amount, detail from audit where workspace is not null;
-- Workspace names are unique ignoring case. A catalog from before that rule may hold names equal but for case: each
-- one after the first keeps its own name in case_clash (once, here), so the index can exist; every other Workspace
-- has '' there, so no new one can take a name another has in any case.
alter table workspaces add column if not exists case_clash varchar default '';
update workspaces set case_clash = name where case_clash = '' and exists (
    select 1 from workspaces o where lower(o.name) = lower(workspaces.name)
        and (o.created_at, o.name) < (workspaces.created_at, workspaces.name));
create unique index if not exists workspaces_name_ignoring_case on workspaces (lower(name), case_clash);
"""


_schema_ready: set[tuple[Path, int]] = set()
# The catalog keeps the hash of the DDL it was last made with: a process whose DDL is the same one runs none of it
# (a CLI command would otherwise pay for the whole DDL, and a read command for a write connection to run it).
SCHEMA_HASH = hashlib.sha256(CATALOG_DDL.encode()).hexdigest()[:16]
SCHEMA_MARK = f"create or replace table catalog_schema as select {sql.string(SCHEMA_HASH)} as hash"


def _known_current(catalog: Path) -> bool:
    """Whether this process found or made the catalog file at ``catalog`` current already (the same file: one made
    anew at that path is looked at again)."""
    return catalog.exists() and (catalog, catalog.stat().st_ino) in _schema_ready


def _known_current_now(catalog: Path) -> None:
    _schema_ready.add((catalog, catalog.stat().st_ino))


def _schema_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the catalog was last made by this DDL (`SCHEMA_HASH`)."""
    try:
        row = con.execute("select hash from catalog_schema").fetchone()
    except duckdb.CatalogException:  # made before the mark, or not made yet
        return False
    return row is not None and row[0] == SCHEMA_HASH


class Warehouse:
    def __init__(self, paths: AmberPaths):
        self.paths = paths.ensure()
        self._lock_path = paths.warehouse / "catalog.lock"
        kind, location = settings.catalog_url(paths)
        self._postgres: PostgresCatalog | None = None
        if kind == "postgresql":
            from amber_pipeline.warehouse.postgres import PostgresCatalog

            self._postgres = PostgresCatalog(location, CATALOG_DDL)
        self._catalog = Path(location)
        self._storage = stores.Location.configured()  # opened at first use: S3 is asked whether it answers
        # the connection `reading` shares among the reads of its block, in its thread and context only
        self._shared: contextvars.ContextVar[sql.Literals | None] = contextvars.ContextVar(
            f"amber_shared_read_{id(self)}", default=None)

    # ---- catalog -------------------------------------------------------------

    @contextlib.contextmanager
    def write(self, workspace: str | None = None, *, job: str | None = None) -> Iterator[Connection]:
        """One short read-write transaction on the catalog.

        A write that touches one Workspace's Jobs and money names it (or the Job, whose Workspace never
        changes): on PostgreSQL it then waits only for writes of that Workspace (`postgres.py`). One that
        names neither waits for every other writer, as every writer does on DuckDB, whose file lock
        serializes them across processes.
        """
        if self._postgres is not None:
            with self._postgres.write(workspace, job) as pg:
                yield pg
            return
        if self._shared.get() is not None:  # its own shared lock would make it wait forever
            raise RuntimeError("A catalog write inside `Warehouse.reading()`: that block may only read.")
        with locked(self._lock_path, fcntl.LOCK_EX), instances.attached(self._catalog, read_only=False) as con:
            try:
                if not _known_current(self._catalog):
                    if not _schema_current(con):  # once per process and catalog file, not on every write
                        con.execute(CATALOG_DDL)
                        con.execute(SCHEMA_MARK)  # no parameter: DuckDB would import pandas to bind it
                    _known_current_now(self._catalog)
                con.execute("begin transaction")
                yield sql.Literals(con)
                con.execute("commit")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    con.execute("rollback")
                raise

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only view of the catalog; on DuckDB readers share, writers wait for them."""
        if self._postgres is not None:
            with self._postgres.read() as pg:
                yield pg
            return
        shared = self._shared.get()
        if shared is not None:
            with contextlib.closing(shared.cursor()) as cursor:  # its own results: a read never ends another's
                cursor.execute(f"use {instances.FILE}")  # a cursor starts on the instance's own database
                yield sql.Literals(cursor)
            return
        catalog = self._catalog
        if not catalog.exists():
            with self.write():  # made, with its schema
                pass
        with contextlib.ExitStack() as held:
            held.enter_context(locked(self._lock_path, fcntl.LOCK_SH))
            con = held.enter_context(instances.attached(catalog, read_only=True))
            if not _known_current(catalog) and not _schema_current(con):
                held.close()  # made by an older Amber: its new views and columns first, under the writers' lock
                with self.write():
                    pass
                held.enter_context(locked(self._lock_path, fcntl.LOCK_SH))
                con = held.enter_context(instances.attached(catalog, read_only=True))
            _known_current_now(catalog)
            yield sql.Literals(con)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Every `read` of the block, in this thread, on one read-only connection to the DuckDB catalog, opened once:
        a page that reads the catalog a dozen times pays for one connection, not twelve, and sees one state of it.
        Only for a block that never writes (a write inside it is refused rather than left waiting for the block's
        own shared lock). On PostgreSQL each read keeps its own snapshot."""
        if self._postgres is not None or self._shared.get() is not None:
            yield
            return
        with self.read() as con:
            token = self._shared.set(con)  # type: ignore[arg-type]  # a DuckDB connection here, as `read` gives it
            try:
                yield
            finally:
                self._shared.reset(token)

    @contextlib.contextmanager
    def attached(self, con: duckdb.DuckDBPyConnection, tables: Collection[str],
                 workspace: str | None = None) -> Iterator[None]:
        """The catalog in an in-memory DuckDB as ``catalog`` (`views.CATALOG`) for the block: the DuckDB file
        attached read-only under the shared lock, or, from PostgreSQL, ``tables`` (only ``workspace``'s rows
        where they have a workspace column) copied into a database made by the same DDL."""
        from amber_pipeline.warehouse import views

        if self._postgres is None:
            catalog = self._catalog
            if not _known_current(catalog):
                with self.read():  # the catalog made, or given this DDL's views and columns, first
                    pass
            with locked(self._lock_path, fcntl.LOCK_SH):  # the lock a read holds, without a second opening
                con.execute(f"attach {sql.string(catalog)} as {views.CATALOG} (read_only)")
                try:
                    yield
                finally:
                    con.execute(f"detach {views.CATALOG}")
            return
        con.execute(f"attach ':memory:' as {views.CATALOG}")
        try:
            [default] = con.execute("select current_database()").fetchone() or ("memory",)
            con.execute(f"use {views.CATALOG}")
            con.execute(CATALOG_DDL)
            con.execute(f"use {default}")
            self._postgres.copy_into(con, views.CATALOG, views.catalog_sources(tables), workspace)
            yield
        finally:
            con.execute(f"detach {views.CATALOG}")

    # ---- Parquet -------------------------------------------------------------

    def trials_file(self, cell_file_id: str, job_id: str) -> Path:
        return self.paths.trials / cell_file_id / f"{job_id}.parquet"

    def transcripts_file(self, day: date, cell_file_id: str, job_id: str) -> Path:
        return self.paths.transcripts / f"date={day.isoformat()}" / f"{cell_file_id}_{job_id}.parquet"

    @property
    def store(self) -> storage.LocalStore:
        """Where the Parquet files, Trial folders and Benchmark snapshots are (`storage.py`, AMBER_STORAGE_URL)."""
        return stores.opened(self.paths.home, self._storage)

    def trial_files(self) -> list[tuple[Path, int, int]]:
        """Every stored Trial file (``<cell file id>/<job>.parquet``) with its size and mtime (ns), sorted.

        Files being written (``.<name>.<uuid>.tmp``) are not listed, nor files that are not Trial files
        (`fitting.py`).
        """
        from amber_pipeline.warehouse.fitting import fitting
        from amber_pipeline.warehouse.schemas import TRIAL_REQUIRED, TRIAL_SCHEMA

        found = self.store.files(self.paths.trials, "*/*.parquet")
        with instances.scratch() as con:
            trials = set(fitting(con, [f.path for f in found], TRIAL_SCHEMA, TRIAL_REQUIRED, self.store))
        return [(f.path, f.size, f.mtime_ns) for f in found if f.path in trials]

    def read_parquet(self, path: Path, columns: Sequence[str] | None = None) -> pa.Table | None:
        """A stored Parquet file's rows (``columns`` only, if given), or None when it is not stored."""
        return self.store.read_table(path, columns)

    def rewards_file(self, cell_file_id: str, workspace: str) -> Path:
        return self.paths.rewards / cell_file_id / f"{_file_id(workspace)}.parquet"

    def aggregates_file(self, cell_file_id: str, workspace: str) -> Path:
        return self.paths.aggregates / cell_file_id / f"{_file_id(workspace)}.parquet"

    def write_parquet(self, table: pa.Table, path: Path) -> None:
        """One whole file at ``path`` in the store, all or nothing: a local file written to a temporary name
        then renamed, or one object on S3."""
        self.store.write_table(table, path)

    # ---- SQL -----------------------------------------------------------------

    @contextlib.contextmanager
    def query(self, workspace: str | None = None,
              names: Collection[str] | None = None) -> Iterator[sql.Literals]:
        """An in-memory DuckDB with the catalog attached read-only and the documented views (``names``: only
        those and what they read, since each view over Parquet files reads their footers to leave out files
        that are not Amber's); its parameters are written into its statements, so it imports no pandas.

        With a Workspace, every view shows only what that Workspace may see (its
        own rows, and public Benchmark Versions); None is Amber's own, unscoped view.
        """
        from amber_pipeline.warehouse import views

        names = views.with_dependencies(views.VIEW_NAMES if names is None else names)
        with instances.scratch() as con, self.attached(con, names, workspace):
            views.build(con, self.paths, self.store, workspace, names)
            yield sql.Literals(con)


def _file_id(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
