"""The SQL views over the catalog and the Parquet files: what `amber sql` and every reader query.

Each view shows only what one Workspace may see (its own rows, and public
Benchmark Versions); Amber's own processes use the unscoped views. A view over
Parquet files that do not exist yet reads an empty table of the right schema.
"""

from __future__ import annotations

import duckdb

from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse import sql
from amber_pipeline.warehouse.schemas import (
    CELL_RESULT_SCHEMA,
    COMPARISON_SCHEMA,
    EVIDENCE_SCHEMA,
    TASK_REWARD_SCHEMA,
    TRANSCRIPT_SCHEMA,
    TRIAL_SCHEMA,
)


def create_views(con: duckdb.DuckDBPyConnection, paths: AmberPaths, workspace: str | None) -> None:
    """The documented views, each showing only what ``workspace`` may see (None: everything, Amber's own)."""
    def of(column: str) -> str:
        return "true" if workspace is None else f"{column} = {sql.string(workspace)}"

    ws = of("workspace")
    scoped = {
        "workspaces": of("name"), "members": ws, "jobs": ws, "quotes": ws, "ledger": ws, "uploads": ws,
        "job_cells": f"job_id in (select id from catalog.main.jobs where {ws})",
        "benchmark_versions": f"(owner = 'public' or {of('owner')})",
    }
    for name, where in scoped.items():
        con.execute(f"create view {name} as select * from catalog.main.{name} where {where}")
    sources = {
        "trials": (paths.trials, "*/*.parquet", TRIAL_SCHEMA),
        "rewards": (paths.rewards, "*/*.parquet", TASK_REWARD_SCHEMA),
        "cell_aggregates": (paths.aggregates, "*/*.parquet", CELL_RESULT_SCHEMA),
        "comparisons": (paths.comparisons, "comparisons.parquet", COMPARISON_SCHEMA),
        "imported_trials": (paths.imports, "*.parquet", EVIDENCE_SCHEMA),
        "amber_evidence": (paths.evidence, "*/*.parquet", EVIDENCE_SCHEMA),
        "transcripts": (paths.transcripts, "*/*.parquet", TRANSCRIPT_SCHEMA),
    }
    for name, (folder, pattern, schema) in sources.items():
        if any(folder.glob(pattern)):
            source = f"read_parquet({sql.string(folder / pattern)}, union_by_name = true, hive_partitioning = false)"
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
        select a.workspace, b.label as benchmark, a.agent, a.model_configuration, a.n_tasks, a.n_trials,
               a.mean_reward, a.ci_low, a.ci_high, a.cost_usd, a.mean_duration_sec, a.errored,
               a.cell_key
        from cell_aggregates a
        left join (select distinct on (id) id, label from benchmark_versions order by id, owner = 'public')
          b on b.id = a.benchmark_version_id
        order by benchmark, a.mean_reward desc""")
