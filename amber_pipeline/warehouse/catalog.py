"""The warehouse: a DuckDB catalog plus Parquet files, with the SQL views (`views.py`) over them.

DuckDB lets one process hold a database file read-write and then refuses every
other process, even read-only ones. So the catalog is never held longer than
one short transaction, every opening takes an OS file lock first (shared for
readers, exclusive for writers), and a process waits its turn instead of
failing. Trial rows, per-Task Rewards and cell aggregates are Parquet files,
each written to a temporary name then renamed, so a reader sees a whole file
or none; readers query them through an in-memory DuckDB.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Collection, Iterator
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse import sql, views
from amber_pipeline.warehouse.files import locked, replacing
from amber_pipeline.warehouse.fitting import fitting
from amber_pipeline.warehouse.schemas import TRIAL_REQUIRED, TRIAL_SCHEMA

CATALOG_DDL = """
create table if not exists workspaces (
    name varchar primary key, created_by varchar not null, created_at timestamptz not null default now());
create table if not exists members (
    workspace varchar not null, user_name varchar not null, primary key (workspace, user_name));
create table if not exists staff (user_name varchar primary key);
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
alter table workspaces add column if not exists provider_policy json;
create table if not exists job_cells (
    job_id varchar not null, cell_key varchar not null, agent varchar not null,
    model_configuration varchar not null, n_trials integer not null, status varchar not null,
    started_at timestamptz, finished_at timestamptz, message varchar,
    primary key (job_id, cell_key));
alter table job_cells add column if not exists launched_at timestamptz;
alter table job_cells add column if not exists worker varchar;  -- host/pid/start of its run (jobs/workers.py)
create table if not exists cell_names (cell_key varchar primary key, name varchar not null unique);
create table if not exists quotes (
    id varchar primary key, workspace varchar not null, job_id varchar not null,
    amount decimal(18, 6) not null, created_at timestamptz not null, expires_at timestamptz not null,
    detail json not null);
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
-- What users see numbered counts within their Workspace from 1: the global sequences order the rows but are never
-- shown, since their gaps would reveal other Workspaces' activity. Computed, not stored: no ledger entry or Job is
-- ever deleted, so a row's number never changes.
create or replace view workspace_ledger as
    select row_number() over (partition by workspace order by seq) as seq, * exclude (seq) from ledger;
create or replace view workspace_jobs as
    select row_number() over (partition by workspace order by seq) as seq, * exclude (seq, start_seq) from jobs;
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


class Warehouse:
    def __init__(self, paths: AmberPaths):
        self.paths = paths.ensure()
        self._lock_path = paths.warehouse / "catalog.lock"

    # ---- catalog -------------------------------------------------------------

    @contextlib.contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One short read-write transaction on the catalog, serialized across processes."""
        with locked(self._lock_path, fcntl.LOCK_EX):
            con = duckdb.connect(str(self.paths.catalog))
            try:
                if (self.paths.catalog, self.paths.catalog.stat().st_ino) not in _schema_ready:
                    con.execute(CATALOG_DDL)  # once per process and catalog file, not on every write
                    _schema_ready.add((self.paths.catalog, self.paths.catalog.stat().st_ino))
                con.execute("begin transaction")
                yield con
                con.execute("commit")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    con.execute("rollback")
                raise
            finally:
                con.close()

    @contextlib.contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only view of the catalog; readers share, writers wait for them."""
        catalog = self.paths.catalog
        if not catalog.exists() or (catalog, catalog.stat().st_ino) not in _schema_ready:
            with self.write():  # a reader of a catalog made by an older Amber needs its new views and columns too
                pass
        with locked(self._lock_path, fcntl.LOCK_SH):
            con = duckdb.connect(str(self.paths.catalog), read_only=True)
            try:
                yield con
            finally:
                con.close()

    # ---- Parquet -------------------------------------------------------------

    def trials_file(self, cell_file_id: str, job_id: str) -> Path:
        return self.paths.trials / cell_file_id / f"{job_id}.parquet"

    def transcripts_file(self, day: date, cell_file_id: str, job_id: str) -> Path:
        return self.paths.transcripts / f"date={day.isoformat()}" / f"{cell_file_id}_{job_id}.parquet"

    def trial_files(self) -> list[tuple[Path, int, int]]:
        """Every stored Trial file (``<cell file id>/<job>.parquet``) with its size and mtime (ns), sorted.

        Files being written (``.<name>.<uuid>.tmp``) are not listed, nor files that are not Trial files
        (`fitting.py`).
        """
        out = []
        with contextlib.suppress(FileNotFoundError), os.scandir(self.paths.trials) as cells:
            for cell in cells:
                if not cell.is_dir() or cell.name.startswith("."):
                    continue
                with os.scandir(cell.path) as entries:
                    for e in entries:
                        if e.name.endswith(".parquet") and not e.name.startswith(".") and e.is_file():
                            st = e.stat()
                            out.append((Path(e.path), st.st_size, st.st_mtime_ns))
        with contextlib.closing(duckdb.connect()) as con:
            trials = set(fitting(con, [path for path, _, _ in out], TRIAL_SCHEMA, TRIAL_REQUIRED))
        return sorted(f for f in out if f[0] in trials)

    def rewards_file(self, cell_file_id: str, workspace: str) -> Path:
        return self.paths.rewards / cell_file_id / f"{_file_id(workspace)}.parquet"

    def aggregates_file(self, cell_file_id: str, workspace: str) -> Path:
        return self.paths.aggregates / cell_file_id / f"{_file_id(workspace)}.parquet"

    @staticmethod
    def write_parquet(table: pa.Table, path: Path) -> None:
        """Write an Arrow table to a temporary name in the same folder, then rename: all or nothing."""
        with replacing(path) as tmp:
            pq.write_table(table, tmp)

    # ---- SQL -----------------------------------------------------------------

    @contextlib.contextmanager
    def query(self, workspace: str | None = None,
              names: Collection[str] = views.VIEW_NAMES) -> Iterator[duckdb.DuckDBPyConnection]:
        """An in-memory DuckDB with the catalog attached read-only and the documented views (``names``: only
        those and what they read, since each view over Parquet files reads their footers to leave out files
        that are not Amber's).

        With a Workspace, every view shows only what that Workspace may see (its
        own rows, and public Benchmark Versions); None is Amber's own, unscoped view.
        """
        with self.read():
            con = duckdb.connect()
            try:
                con.execute(f"attach {sql.string(self.paths.catalog)} as {views.CATALOG} (read_only)")
                views.build(con, self.paths, workspace, views.with_dependencies(names))
                yield con
            finally:
                con.close()

def _file_id(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
