"""`amber sql`: plain SQL over the acting Workspace's views."""

from __future__ import annotations

from typing import Annotated

import duckdb
import typer

from amber_pipeline.analysis import sources
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out
from amber_pipeline.errors import AmberError

app = typer.Typer()
DERIVED_ON_READ = {"failure_causes", "amber_evidence"}  # views over evidence derived when first read


@app.command("sql")
def sql(ctx: typer.Context, query: Annotated[str, typer.Argument(
        help="One SQL query over the views: trials, rewards, cell_results, comparisons, failure_causes, "
             "imported_trials, jobs, job_cells, quotes, ledger, job_spending, ...")]) -> None:
    """SQL over the acting Workspace's views (the README lists them with their columns)."""
    acting = Context.of(ctx).acting()
    try:
        if DERIVED_ON_READ & {name.lower() for name in duckdb.get_table_names(query)}:
            sources.refresh(acting.wh)
        with acting.wh.query(acting.workspace) as con:
            cursor = con.execute(query)
            columns = [d[0] for d in cursor.description or []]
            rows = cursor.fetchall()
    except duckdb.Error as e:
        raise AmberError(f"The query failed: {str(e).splitlines()[0]}") from None
    out.table(columns, rows)
