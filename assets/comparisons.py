"""Comparisons: every cell re-scored and every pair of Model Configurations compared.

Non-partitioned: it reads every stored Trial of every cell. Materialized
hourly by `reaggregation_schedule` (and on demand from the UI), so a fix to
the statistics or late-arriving Trials reach every report; it writes nothing
when nothing changed. It also derives the evidence of Trials that have none
yet, so the `failure_causes` view is ready before anyone asks.
"""

import dagster as dg

from amber_pipeline.analysis import plots, sources
from amber_pipeline.scoring import store
from assets.cells import CELL_AGGREGATES
from assets.resources import WarehouseResource


@dg.asset(deps=[CELL_AGGREGATES], group_name="amber", kinds={"parquet"})
def comparisons(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """Paired comparisons: for each Workspace, Benchmark Version and Agent Version, every two Model
    Configurations compared by a paired bootstrap of the mean per-Task Reward difference over their shared
    Tasks; "too close to call" when its 95% interval contains zero. Also re-scores every cell from its stored
    Trials."""
    wh = warehouse.get()
    result = store.reaggregate(wh)
    evidence_files = sources.refresh(wh)
    with wh.query() as con:
        rows = con.execute("""select workspace, agent, better, worse, mean_difference, ci_low, ci_high,
                                     n_shared_tasks, too_close_to_call from comparisons
                              order by workspace, agent, better, worse""").fetchall()
    md = "| Workspace | Agent | better | worse | difference | 95% CI | shared Tasks | verdict |\n"
    md += "|---|---|---|---|---|---|---|---|\n"
    md += "\n".join(f"| {w} | {a} | {b} | {x} | {d:+.3f} | [{lo:+.3f}, {hi:+.3f}] | {n} | "
                    f"{'too close to call' if tc else b + ' is better'} |"
                    for w, a, b, x, d, lo, hi, n, tc in rows)
    metadata: dict[str, dg.RawMetadataValue] = {
        "changed": result.changed, "cells": result.cells, "comparisons": result.comparisons,
        "seconds": round(result.seconds, 2), "trial_files_with_evidence": evidence_files,
        "table": dg.MetadataValue.md(md)}
    if rows:
        differences = [plots.Row(f"{b} - {x} ({a})", d, lo, hi) for _, a, b, x, d, lo, hi, _, _ in rows]
        metadata["plot"] = dg.MetadataValue.md(plots.markdown_image(
            lambda path: plots.forest([], differences, path, title="Paired differences in mean Reward")))
    return dg.MaterializeResult(metadata=metadata)


reaggregation_job = dg.define_asset_job(
    "reaggregation_job", selection=[comparisons],
    description="Re-aggregation: every cell's score and every comparison, recomputed from the stored Trials.")

