"""SQL over the Workspace's views, confined to them (`warehouse/confined.py`), with a row cap, a byte cap and a
time limit."""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from amber_pipeline.accounts.identity import SIGNED_IN
from amber_pipeline.analysis import sources
from amber_pipeline.errors import AmberError
from amber_pipeline.operations.operation import Acting, operation
from amber_pipeline.warehouse import confined

DERIVED_ON_READ = {"failure_causes", "amber_evidence"}  # views over evidence derived when first read
MAX_TIMEOUT_S = 3600.0
MAX_API_TIMEOUT_S = 300.0  # through the API: a query holds one of the server's workers while it runs
JSON_NATIVE = (str, int, float, bool, type(None))


class Query(BaseModel):
    query: str = Field(description="One SQL query over the views: trials, rewards, cell_results, comparisons, "
                                   "failure_causes, imported_trials, jobs, job_cells, quotes, ledger, "
                                   "job_spending, ...")
    timeout: float = Field(confined.TIMEOUT_S, description="Stop the query after this many seconds.")


class Rows(BaseModel):
    columns: list[str]
    rows: list[list[str | int | float | bool | None]]  # a time, a decimal or a list as the text DuckDB's Python gives


@operation("POST", "/sql")
def sql(acting: Acting, params: Query) -> Rows:
    """One SQL query over the Workspace's views (the README lists them with their columns)."""
    most = MAX_TIMEOUT_S if SIGNED_IN.get() is None else MAX_API_TIMEOUT_S
    if not (math.isfinite(params.timeout) and 0 < params.timeout <= most):
        raise AmberError(f"--timeout {params.timeout:g} is not a number of seconds from 0 to {most:g}: "
                         "give one in that range.")
    if DERIVED_ON_READ & confined.views_named(params.query):
        sources.refresh(acting.wh)
    result = confined.run(acting.wh, acting.workspace, params.query, timeout_s=params.timeout)
    return Rows(columns=list(result.columns),
                rows=[[_cell(v) for v in row] for row in result.rows])


def _cell(value: object) -> str | int | float | bool | None:
    """A value as JSON has it, else (a time, a decimal, a list, NaN) the text the CLI always printed for it."""
    if isinstance(value, JSON_NATIVE) and not (isinstance(value, float) and not math.isfinite(value)):
        return value  # type: ignore[return-value]
    return str(value)
