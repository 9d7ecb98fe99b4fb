"""What the UI shows of scores: tables and plots in the metadata of the cell and comparison assets, and the
decision of a Job that stops once decided.

Tables are Dagster table metadata, which the UI shows inline (Markdown sits
behind a "Show Markdown" button). Plots are inline PNGs in Markdown: Dagster
1.13 has no image metadata type, so they are the one thing a click away.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import dagster as dg

from amber_pipeline.analysis import frontier
from amber_pipeline.analysis.render_report import render_stopping
from amber_pipeline.jobs.decisions import Stopping
from amber_pipeline.warehouse.catalog import Warehouse

if TYPE_CHECKING:  # the scores' type only: the engine (numpy, Arrow) is the cell run's, not every code server's
    from amber_pipeline.scoring import engine

CELL_COLUMNS = dg.TableSchema(columns=[
    dg.TableColumn("this", "bool", description="the cell this run scored"),
    dg.TableColumn("workspace", "string"), dg.TableColumn("cell", "string"),
    dg.TableColumn("tasks", "int"), dg.TableColumn("trials", "int"),
    dg.TableColumn("mean_reward", "float"), dg.TableColumn("ci95", "string", description="95% bootstrap CI"),
    dg.TableColumn("cost_usd", "float"), dg.TableColumn("mean_duration_s", "float"),
    dg.TableColumn("errored", "int")])
REWARD_COLUMNS = dg.TableSchema(columns=[
    dg.TableColumn("workspace", "string"), dg.TableColumn("task", "string"), dg.TableColumn("trials", "int"),
    dg.TableColumn("errored", "int"), dg.TableColumn("mean_reward", "float")])


def cells(scores: list[engine.CellScore], names: dict[str, str], this: str) -> dg.TableMetadataValue:
    """Every cell of a Benchmark Version with its score and 95% CI, the one just scored marked."""
    return dg.MetadataValue.table([_cell_record(c, names[c.cell], c.cell == this) for c in scores],
                                  schema=CELL_COLUMNS)


def rewards(scores: list[engine.CellScore]) -> dg.TableMetadataValue:
    """Each Task's Trials, Errored Trials and mean Reward, for the cell's Workspaces."""
    return dg.MetadataValue.table(
        [dg.TableRecord({"workspace": c.scope, "task": task, "trials": n, "errored": errored,
                         "mean_reward": math.nan if mean is None else round(mean, 3)})
         for c in scores for task, n, errored, mean in zip(
             *(c.task_rewards[k].to_pylist() for k in ("task", "n_trials", "n_errored", "mean_reward")), strict=True)],
        schema=REWARD_COLUMNS)


def _cell_record(c: engine.CellScore, name: str, this: bool) -> dg.TableRecord:
    return dg.TableRecord({
        "this": this, "workspace": c.scope, "cell": name, "tasks": c.n_tasks, "trials": c.n_trials,
        "mean_reward": round(float(c.mean), 3), "ci95": f"[{c.ci95.low:.3f}, {c.ci95.high:.3f}]",
        "cost_usd": round(c.cost_usd, 6), "mean_duration_s": round(float(c.mean_duration_sec), 1),
        "errored": c.errored})


def decision(stopping: Stopping) -> dg.MarkdownMetadataValue:
    """Where a stopping Job's comparisons stand and what stopping saved, as `amber report` prints it (so the UI and
    the CLI say the same thing in the same words), in a code block: the labels in it are shown as typed, never read
    as Markdown or HTML."""
    text = "\n".join(render_stopping(stopping)).strip("\n")
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", text)), default=0))
    return dg.MetadataValue.md(f"{fence}text\n{text}\n{fence}")


def version_plots(cells: list[engine.CellScore], names: dict[str, str]) -> str:
    """The forest plot of a Benchmark Version's cells and, when two or more have a Model Configuration, their
    cost-versus-score plot with its frontier; as inline Markdown images."""
    from amber_pipeline.analysis import plots  # matplotlib: imported where drawn, not by every code server

    one_scope = len({c.scope for c in cells}) == 1

    def label(c: engine.CellScore) -> str:
        return names[c.cell] if one_scope else f"{c.scope}: {names[c.cell]}"

    rows = [plots.Row(label(c), c.mean, c.ci95.low, c.ci95.high) for c in cells]
    shown = plots.markdown_image(lambda path: plots.forest(rows, [], path, title="Cells of this Benchmark Version"),
                                 "forest plot")
    priced = [frontier.Point.of_cell(label(c), c.cost_usd, c.n_trials, c.mean, c.ci95.low, c.ci95.high)
              for c in cells if c.model is not None and c.n_trials]
    if len(priced) > 1:
        shown += "\n\n" + plots.markdown_image(
            lambda path: plots.cost_score(priced, path, title="Cost and score of this Benchmark Version's cells"),
            "cost and score")
    return shown


def comparisons(wh: Warehouse) -> dict[str, dg.RawMetadataValue]:
    """Every stored comparison as a table, each with its Benchmark Version's label as its Workspace sees it (the
    Version's short id where none is stored), and their forest plot. Always all of them: a materialization of
    `comparisons` is the asset's whole value, and the UI shows the latest one alone."""
    with wh.query(names={"comparisons", "benchmark_versions"}) as con:
        rows = con.execute("""select c.workspace,
                                     coalesce((select b.label from benchmark_versions b
                                               where b.id = c.benchmark_version_id
                                                 and b.owner in (c.workspace, 'public')
                                               order by b.owner = 'public' limit 1),
                                              left(c.benchmark_version_id, 12)) as benchmark,
                                     c.agent, c.better, c.worse, c.mean_difference, c.ci_low, c.ci_high,
                                     c.n_shared_tasks, c.too_close_to_call
                              from comparisons c
                              order by c.workspace, benchmark, c.agent, c.better, c.worse""").fetchall()
    table = dg.MetadataValue.table([dg.TableRecord({
        "workspace": w, "benchmark": v, "agent": a, "better": b, "worse": x, "difference": round(d, 3),
        "ci95": f"[{lo:+.3f}, {hi:+.3f}]", "shared_tasks": n,
        "verdict": "too close to call" if close else f"{b} is better"})
        for w, v, a, b, x, d, lo, hi, n, close in rows], schema=COMPARISON_COLUMNS)
    metadata: dict[str, dg.RawMetadataValue] = {"comparisons": len(rows), "table": table}
    if rows:
        from amber_pipeline.analysis import plots  # as in version_plots

        differences = [plots.Row(f"{v}: {b} - {x} ({a})", d, lo, hi) for _, v, a, b, x, d, lo, hi, _, _ in rows]
        metadata["plot"] = dg.MetadataValue.md(plots.markdown_image(
            lambda path: plots.forest([], differences, path, title="Paired differences in mean Reward"),
            "forest plot"))
    return metadata


COMPARISON_COLUMNS = dg.TableSchema(columns=[
    dg.TableColumn(name, kind) for name, kind in (
        ("workspace", "string"), ("benchmark", "string"), ("agent", "string"), ("better", "string"),
        ("worse", "string"),
        ("difference", "float"), ("ci95", "string"), ("shared_tasks", "int"), ("verdict", "string"))])


