"""`amber sql`: plain SQL over the acting Workspace's views, confined to them (`warehouse/confined.py`)."""

from __future__ import annotations

from typing import Annotated

import typer

from amber_pipeline.cli.context import Context
from amber_pipeline.cli.output import out
from amber_pipeline.warehouse import confined

app = typer.Typer()


@app.command("sql")
def sql(ctx: typer.Context, query: Annotated[str, typer.Argument(
        help="One SQL query over the views: trials, rewards, cell_results, comparisons, failure_causes, "
             "imported_trials, jobs, job_cells, quotes, ledger, job_spending, ...")],
        timeout: Annotated[float, typer.Option(
            "--timeout", metavar="SECONDS", help="Stop the query after this many seconds.")] = confined.TIMEOUT_S,
        ) -> None:
    """SQL over the acting Workspace's views (the README lists them with their columns)."""
    result = Context.of(ctx).call("sql", query=query, timeout=timeout)
    out.table(result.columns, result.rows)
