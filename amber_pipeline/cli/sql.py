"""`amber sql`: plain SQL over the acting Workspace's views, confined to them (`warehouse/confined.py`)."""

from __future__ import annotations

import math
from typing import Annotated

import typer

from amber_pipeline.analysis import sources
from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out
from amber_pipeline.errors import AmberError
from amber_pipeline.warehouse import confined

app = typer.Typer()
DERIVED_ON_READ = {"failure_causes", "amber_evidence"}  # views over evidence derived when first read
MAX_TIMEOUT_S = 3600.0


@app.command("sql")
def sql(ctx: typer.Context, query: Annotated[str, typer.Argument(
        help="One SQL query over the views: trials, rewards, cell_results, comparisons, failure_causes, "
             "imported_trials, jobs, job_cells, quotes, ledger, job_spending, ...")],
        timeout: Annotated[float, typer.Option(
            "--timeout", metavar="SECONDS", help="Stop the query after this many seconds.")] = confined.TIMEOUT_S,
        ) -> None:
    """SQL over the acting Workspace's views (the README lists them with their columns)."""
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        raise AmberError(f"--timeout {timeout:g} is not a number of seconds from 0 to {MAX_TIMEOUT_S:g}: "
                         "give one in that range.")
    acting = Context.of(ctx).acting()
    if DERIVED_ON_READ & confined.views_named(query):
        sources.refresh(acting.wh)
    result = confined.run(acting.wh, acting.workspace, query, timeout_s=timeout)
    out.table(result.columns, result.rows)
