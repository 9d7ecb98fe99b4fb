"""The SQL views over the catalog and the Parquet files: what `amber sql` and every reader query.

Each view shows only what one Workspace may see (its own rows, and public
Benchmark Versions); Amber's own processes use the unscoped views. A view over
Parquet files that do not exist yet reads an empty table of the right schema.

The definitions live here once and are built two ways: as views over the
catalog attached read-only (`Warehouse.query`, Amber's own readers), or as
in-memory tables holding one Workspace's rows (`confined.py`, `amber sql`),
so what a user's query can reach is exactly what the views show and no more.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse import sql, storage
from amber_pipeline.warehouse.fitting import fitting
from amber_pipeline.warehouse.schemas import (
    CELL_RESULT_SCHEMA,
    COMPARISON_SCHEMA,
    EVIDENCE_SCHEMA,
    TASK_REWARD_SCHEMA,
    TRANSCRIPT_SCHEMA,
    TRIAL_REQUIRED,
    TRIAL_SCHEMA,
)

CATALOG = "catalog"  # the name the catalog file is attached under while views or tables are built from it

CATALOG_TABLES = ("workspaces", "members", "jobs", "job_cells", "quotes", "ledger", "uploads", "benchmark_versions",
                  "audit")


@dataclass(frozen=True)
class ParquetSource:
    """A view over Parquet files: where they are, and the schema it has while there are none."""

    name: str
    folder: Callable[[AmberPaths], Path]
    pattern: str
    schema: pa.Schema
    required: tuple[str, ...] = ("workspace",)  # the columns a file must have to be read (`fitting.py`)

    @property
    def empty_name(self) -> str:
        """The name its empty table is registered under while there are no files."""
        return f"_{self.name}_empty"

    @property
    def files_name(self) -> str:
        """The name its files are registered under when DuckDB cannot read them itself (`s3_store.S3Store`)."""
        return f"_{self.name}_files"


PARQUET_SOURCES = (
    ParquetSource("trials", lambda p: p.trials, "*/*.parquet", TRIAL_SCHEMA, TRIAL_REQUIRED),
    ParquetSource("rewards", lambda p: p.rewards, "*/*.parquet", TASK_REWARD_SCHEMA),
    ParquetSource("cell_aggregates", lambda p: p.aggregates, "*/*.parquet", CELL_RESULT_SCHEMA),
    ParquetSource("comparisons", lambda p: p.comparisons, "comparisons.parquet", COMPARISON_SCHEMA),
    ParquetSource("imported_trials", lambda p: p.imports, "*.parquet", EVIDENCE_SCHEMA),
    ParquetSource("amber_evidence", lambda p: p.evidence, "*/*.parquet", EVIDENCE_SCHEMA),
    ParquetSource("transcripts", lambda p: p.transcripts, "*/*.parquet", TRANSCRIPT_SCHEMA),
)


@dataclass(frozen=True)
class DerivedView:
    """A view over other views (never over files or the catalog), so it is the same over views or tables."""

    name: str
    reads: tuple[str, ...]
    select: str


DERIVED_VIEWS = (
    DerivedView("failure_causes", ("imported_trials", "amber_evidence"), """
        select workspace, source, agent, model, task_name, trial_name, attempt, outcome, cause
        from (select * from imported_trials union all by name select * from amber_evidence)
        where outcome <> 'passed'"""),
    DerivedView("job_spending", ("jobs", "ledger"), """
        select j.id as job_id, j.workspace, j.status, j.quote_id,
               coalesce(sum(l.amount) filter (where l.kind = 'reservation'), 0) as reserved,
               coalesce(sum(l.amount) filter (where l.kind = 'charge'), 0) as charged,
               coalesce(sum(l.amount) filter (where l.kind = 'refund'), 0) as refunded,
               reserved = charged + refunded as settled
        from jobs j left join ledger l on l.job_id = j.id
        where j.quote_id is not null
        group by all"""),
    DerivedView("job_decisions", ("jobs",), """
        select j.id as job_id, j.workspace, j.status,
               cast(j.stop ->> '$.tasks_seen' as integer) as tasks_seen,
               cast(j.stop ->> '$.tasks_total' as integer) as tasks_total,
               cast(j.stop ->> '$.tasks_seen' as integer) < cast(j.stop ->> '$.tasks_total' as integer)
                   as stopped_early,
               p ->> '$.a' as a, p ->> '$.b' as b, p ->> '$.verdict' as verdict,
               cast(p ->> '$.lower_points' as double) as lower_points,
               cast(p ->> '$.upper_points' as double) as upper_points,
               cast(j.stop ->> '$.margin_points' as double) as margin_points,
               cast(j.stop ->> '$.alpha' as double) as alpha
        from jobs j, unnest(cast(j.stop -> '$.pairs' as json[])) as t(p)
        where j.stop is not null"""),
    DerivedView("cell_results", ("cell_aggregates", "benchmark_versions"), """
        select a.workspace, b.label as benchmark, a.agent, a.model_configuration, a.n_tasks, a.n_trials,
               a.mean_reward, a.ci_low, a.ci_high, a.cost_usd, a.mean_duration_sec, a.errored,
               a.cell_key
        from cell_aggregates a
        left join (select distinct on (id) id, label from benchmark_versions order by id, owner = 'public')
          b on b.id = a.benchmark_version_id
        order by benchmark, a.mean_reward desc"""),
)

VIEW_NAMES = frozenset(CATALOG_TABLES) | {s.name for s in PARQUET_SOURCES} | {d.name for d in DERIVED_VIEWS}


def with_dependencies(names: Collection[str]) -> frozenset[str]:
    """The views among ``names`` and every view the derived ones among them read."""
    wanted = {n for n in names if n in VIEW_NAMES}
    return frozenset(wanted.union(*(d.reads for d in DERIVED_VIEWS if d.name in wanted)))


def catalog_sources(names: Collection[str]) -> list[str]:
    """The catalog's tables the catalog views among ``names`` read (`_catalog_select`)."""
    tables = [n for n in CATALOG_TABLES if n in names]
    return tables + ["jobs"] if "job_cells" in tables and "jobs" not in tables else tables


def build(con: duckdb.DuckDBPyConnection, paths: AmberPaths, store: storage.LocalStore, workspace: str | None,
          names: Collection[str], *, as_tables: bool = False) -> None:
    """Create the views among ``names`` (derived ones last, after what they read).

    ``as_tables`` copies the rows ``workspace`` may see into in-memory tables instead, so nothing is read
    from the catalog or the files afterwards; a catalog table needs the catalog attached as ``catalog``
    while it is built. Derived views are views either way.
    """
    kind = "table" if as_tables else "view"
    for name in CATALOG_TABLES:
        if name in names:
            con.execute(f"create {kind} {name} as {_catalog_select(name, workspace)}")
    for source in PARQUET_SOURCES:
        if source.name in names:
            con.execute(f"create {kind} {source.name} as {_parquet_select(con, paths, store, source, workspace)}")
            if as_tables:  # nothing that could read the files, or other Workspaces' rows, stays behind
                con.unregister(source.empty_name)  # unregistering a name never registered is a no-op
                con.unregister(source.files_name)
    for view in DERIVED_VIEWS:
        if view.name in names:
            con.execute(f"create view {view.name} as {view.select}")


def _of(column: str, workspace: str | None) -> str:
    return "true" if workspace is None else f"{column} = {sql.string(workspace)}"


def _catalog_select(name: str, workspace: str | None) -> str:
    """The rows of one catalog table that ``workspace`` may see."""
    ws = _of("workspace", workspace)
    where = {
        "workspaces": _of("name", workspace),
        "job_cells": f"job_id in (select id from {CATALOG}.main.jobs where {ws})",
        "benchmark_versions": f"(owner = 'public' or {_of('owner', workspace)})",
    }.get(name, ws)
    # Users see numbers counted within their Workspace (`workspace_ledger`, `workspace_jobs`, `workspace_audit`),
    # never the global sequences, and not the catalog's own bookkeeping columns.
    source = {"ledger": "workspace_ledger", "jobs": "workspace_jobs", "audit": "workspace_audit"}.get(name, name)
    columns = {"workspaces": "* exclude (case_clash)",
               "job_cells": "* exclude (worker, engine_pool, moves, rounds)",
               # The folder's name, as its user gave it: the path is the server's (through the API, the spool the
               # folder was unpacked in; for an import or an adaptation, a scratch folder).
               "benchmark_versions": "* replace (regexp_extract(source_path, '[^/]*$') as source_path)"}.get(name, "*")
    return f"select {columns} from {CATALOG}.main.{source} where {where}"


def _parquet_select(con: duckdb.DuckDBPyConnection, paths: AmberPaths, store: storage.LocalStore,
                    source: ParquetSource, workspace: str | None) -> str:
    """The rows of one Parquet source that ``workspace`` may see (from an empty table while there are no files)."""
    listed = [f.path for f in store.files(source.folder(paths), source.pattern)]
    found = fitting(con, listed, source.schema, source.required, store)
    if found:
        files = store.scan(con, found, source.schema, source.files_name)
    else:
        con.register(source.empty_name, source.schema.empty_table())
        files = source.empty_name
    return f"select * from {files} where {_of('workspace', workspace)}"
