"""The warehouse: a DuckDB catalog plus Parquet files, and the SQL views over them.

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
import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.schemas import (
    CELL_RESULT_SCHEMA,
    COMPARISON_SCHEMA,
    EVIDENCE_SCHEMA,
    TASK_REWARD_SCHEMA,
    TRIAL_SCHEMA,
    TrialRecord,
)

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
create sequence if not exists job_seq start 1;
create sequence if not exists start_seq start 1;
create table if not exists jobs (
    id varchar primary key, seq integer not null default nextval('job_seq'), workspace varchar not null,
    submitted_by varchar not null, benchmark_version_id varchar not null, benchmark_owner varchar not null,
    trials_per_task integer not null, status varchar not null, quote_id varchar, start_seq integer,
    created_at timestamptz not null default now(), started_at timestamptz, finished_at timestamptz,
    message varchar);
create table if not exists job_cells (
    job_id varchar not null, cell_key varchar not null, agent varchar not null,
    model_configuration varchar not null, n_trials integer not null, status varchar not null,
    started_at timestamptz, finished_at timestamptz, message varchar,
    primary key (job_id, cell_key));
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
        with self._locked(fcntl.LOCK_EX):
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
        if not self.paths.catalog.exists():
            with self.write():
                pass
        with self._locked(fcntl.LOCK_SH):
            con = duckdb.connect(str(self.paths.catalog), read_only=True)
            try:
                yield con
            finally:
                con.close()

    @contextlib.contextmanager
    def _locked(self, mode: int) -> Iterator[None]:
        with open(self._lock_path, "a+") as f:
            fcntl.flock(f, mode)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # ---- Parquet -------------------------------------------------------------

    def trials_file(self, cell_file_id: str, job_id: str) -> Path:
        return self.paths.trials / cell_file_id / f"{job_id}.parquet"

    def rewards_file(self, cell_file_id: str, workspace: str) -> Path:
        return self.paths.rewards / cell_file_id / f"{_file_id(workspace)}.parquet"

    def aggregates_file(self, cell_file_id: str, workspace: str) -> Path:
        return self.paths.aggregates / cell_file_id / f"{_file_id(workspace)}.parquet"

    @property
    def imports(self) -> Path:
        """Imported Harbor job folders: one Parquet file per (Workspace, folder)."""
        return self.paths.warehouse / "imports"

    @property
    def evidence(self) -> Path:
        """Evidence of Amber's own Trials (trajectory flags, failure causes), one file per Job and cell."""
        return self.paths.warehouse / "evidence"

    @staticmethod
    def write_parquet(table: pa.Table, path: Path) -> None:
        """Write to a temporary name in the same folder, then rename: all or nothing."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            pq.write_table(table, tmp)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    # ---- SQL -----------------------------------------------------------------

    @contextlib.contextmanager
    def query(self, workspace: str | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """An in-memory DuckDB with the catalog attached read-only and the documented views.

        With a Workspace, every view shows only what that Workspace may see (its
        own rows, and public Benchmark Versions); None is Amber's own, unscoped view.
        """
        with self.read():
            con = duckdb.connect()
            try:
                con.execute(f"attach '{_sql_str(self.paths.catalog)}' as catalog (read_only)")
                self._create_views(con, workspace)
                yield con
            finally:
                con.close()

    def trial_records(self, *, job_id: str | None = None, cell_key: str | None = None,
                      workspace: str | None = None) -> list[TrialRecord]:
        """The stored Trials of a Job, of a cell, or of both (of one Workspace, or of all)."""
        with self.query(workspace) as con:
            table = con.execute(
                "select * from trials where (?::varchar is null or job_id = ?) "
                "and (?::varchar is null or cell_key = ?) order by task_name, attempt, job_id",
                [job_id, job_id, cell_key, cell_key]).fetch_arrow_table()
        return [TrialRecord.model_validate(row) for row in table.to_pylist()]

    def _create_views(self, con: duckdb.DuckDBPyConnection, workspace: str | None) -> None:
        def of(column: str) -> str:
            return "true" if workspace is None else f"{column} = '{workspace.replace(chr(39), chr(39) * 2)}'"

        ws = of("workspace")
        scoped = {
            "workspaces": of("name"), "members": ws, "jobs": ws, "quotes": ws, "ledger": ws,
            "job_cells": f"job_id in (select id from catalog.main.jobs where {ws})",
            "benchmark_versions": f"(owner = 'public' or {of('owner')})",
        }
        for name, where in scoped.items():
            con.execute(f"create view {name} as select * from catalog.main.{name} where {where}")
        sources = {
            "trials": (self.paths.trials, "*/*.parquet", TRIAL_SCHEMA),
            "rewards": (self.paths.rewards, "*/*.parquet", TASK_REWARD_SCHEMA),
            "cell_aggregates": (self.paths.aggregates, "*/*.parquet", CELL_RESULT_SCHEMA),
            "comparisons": (self.paths.warehouse / "comparisons", "comparisons.parquet", COMPARISON_SCHEMA),
            "imported_trials": (self.imports, "*.parquet", EVIDENCE_SCHEMA),
            "amber_evidence": (self.evidence, "*.parquet", EVIDENCE_SCHEMA),
        }
        for name, (folder, pattern, schema) in sources.items():
            if any(folder.glob(pattern)):
                source = f"read_parquet('{_sql_str(folder / pattern)}', union_by_name = true)"
            else:
                con.register(f"_{name}_empty", schema.empty_table())
                source = f"_{name}_empty"
            con.execute(f"create view {name} as select * from {source} where {ws}")
        con.execute("""
            create view failure_causes as
            select workspace, source, agent, model, task_name, trial_name, attempt, outcome, cause
            from (select * from imported_trials union all by name select * from amber_evidence)
            where outcome <> 'passed'""")
        con.execute("""
            create view job_spending as
            select j.id as job_id, j.workspace, j.status, q.id as quote_id,
                   coalesce(sum(l.amount) filter (where l.kind = 'reservation'), 0) as reserved,
                   coalesce(sum(l.amount) filter (where l.kind = 'charge'), 0) as charged,
                   coalesce(sum(l.amount) filter (where l.kind = 'refund'), 0) as refunded,
                   reserved = charged + refunded as settled
            from jobs j join quotes q on q.job_id = j.id left join ledger l on l.quote_id = q.id
            group by all""")
        con.execute("""
            create view cell_results as
            select b.label as benchmark, a.agent, a.model_configuration, a.n_tasks, a.n_trials,
                   a.mean_reward, a.ci_low, a.ci_high, a.cost_usd, a.mean_duration_sec, a.errored,
                   a.cell_key
            from cell_aggregates a
            left join (select distinct on (id) id, label from benchmark_versions order by id, owner = 'public')
              b on b.id = a.benchmark_version_id
            order by benchmark, a.mean_reward desc""")


def _file_id(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _sql_str(path: Path) -> str:
    return str(path).replace("'", "''")
