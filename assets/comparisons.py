"""Comparisons: every cell re-scored and every pair of Model Configurations compared.

Non-partitioned: it reads every stored Trial of every cell. Each cell run
records a materialization of it as its cell finishes (its Benchmark Version
compared again, and every comparison shown, each with its Benchmark Version:
the latest materialization is what the UI shows as the asset's value);
`reaggregation_schedule` materializes it hourly (and anyone
on demand from the UI), so a fix to the statistics or late-arriving Trials
reach every report; it writes nothing when nothing changed. It also derives
the evidence of Trials that have none yet, so the `failure_causes` view is
ready before anyone asks.
"""

import dagster as dg

from assets import metadata_tables
from assets.cell_job import CELL_AGGREGATES
from assets.resources import WarehouseResource


@dg.asset(deps=[CELL_AGGREGATES], group_name="amber", kinds={"parquet"})
def comparisons(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """Paired comparisons: for each Workspace, Benchmark Version and Agent Version, every two Model
    Configurations compared by a paired bootstrap of the mean per-Task Reward difference over their shared
    Tasks; "too close to call" when its 95% interval contains zero. Also re-scores every cell from its stored
    Trials."""
    from amber_pipeline.analysis import sources  # imported where run, as the cell run's code is (`cell_job.py`)
    from amber_pipeline.scoring import store

    wh = warehouse.get()
    result = store.reaggregate(wh)
    evidence_files = sources.refresh(wh)
    return dg.MaterializeResult(metadata={
        "changed": result.changed, "cells": result.cells, "seconds": round(result.seconds, 2),
        "trial_files_with_evidence": evidence_files, **metadata_tables.comparisons(wh)})


reaggregation_job = dg.define_asset_job(
    "reaggregation_job", selection=[comparisons],
    description="Re-aggregation: every cell's score and every comparison, recomputed from the stored Trials.")

