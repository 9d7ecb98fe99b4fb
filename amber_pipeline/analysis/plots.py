"""Plots: forest plots of each cell's mean Reward with its 95% CI and of the paired differences, and the
cost-versus-score plot with its frontier.

Drawn with matplotlib's Agg backend (no screen needed), sorted so the best
cell is on top; the difference panel marks zero and, when given, the margin,
so "too close to call" is visible as an interval crossing the zero line.
"""

from __future__ import annotations

import base64
import math
import tempfile
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: called from the CLI, Dagster runs and tests

import matplotlib.pyplot as plt  # noqa: E402

from amber_pipeline.analysis import frontier  # noqa: E402
from amber_pipeline.analysis.plot_rows import Row, best_first, cell_rows, cost_points, difference_rows  # noqa: E402
from amber_pipeline.analysis.report import RoundReport  # noqa: E402

__all__ = ["Row", "cost_score", "forest", "forest_plot", "markdown_image", "report_plots"]  # Row: for cli/compare

REPORT_TITLE = "Amber report"


def forest(cells: list[Row], differences: list[Row], path: Path, *, title: str,
           margin: float | None = None, cell_axis: str = "mean Reward", difference_axis: str = "difference") -> Path:
    """Write a PNG with a panel of cells and, when there are any, a panel of paired differences."""
    panels = [p for p in ((cells, cell_axis, False), (differences, difference_axis, True)) if p[0]]
    if not panels:
        raise ValueError("nothing to plot")
    heights = [max(1.5, 0.45 * len(rows) + 0.9) for rows, _, _ in panels]
    longest = max(len(r.label) for rows, _, _ in panels for r in rows)
    fig, axes = plt.subplots(len(panels), 1, figsize=(min(18, 5 + 0.08 * longest), sum(heights) + 0.6), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, (rows, axis_label, is_difference) in zip(axes[:, 0], panels, strict=True):
        ordered = best_first(rows)[::-1]  # matplotlib counts rows upwards: the best on top
        ys = range(len(ordered))
        for y, row in zip(ys, ordered, strict=True):
            if math.isfinite(row.low) and math.isfinite(row.high):
                ax.hlines(y, row.low, row.high, color="#1f4e79", linewidth=2)
            if math.isfinite(row.estimate):
                ax.plot(row.estimate, y, "o", color="#1f4e79", markersize=7)
        ax.set_yticks(list(ys), [r.label for r in ordered])
        ax.set_xlabel(axis_label + " (95% CI)")
        ax.grid(axis="x", alpha=0.3)
        if is_difference:
            ax.axvline(0, color="black", linewidth=1)
            if margin:
                for m in (-margin, margin):
                    ax.axvline(m, color="#b22222", linestyle="--", linewidth=1)
        elif all(r.low >= 0 and r.high <= 1 for r in rows if math.isfinite(r.low) and math.isfinite(r.high)):
            ax.set_xlim(-0.05, 1.05)  # Rewards live in [0, 1]: keep the scale honest
    fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def forest_plot(report: RoundReport, path: Path, margin: float | None = None, *, title: str = REPORT_TITLE) -> Path:
    """The forest plot of a report: its cells, and its comparisons when it has any."""
    return forest(cell_rows(report), difference_rows(report), path, title=title, margin=margin,
                  difference_axis="difference in mean Reward")


def report_plots(report: RoundReport, path: Path, *, title: str = REPORT_TITLE) -> list[Path]:
    """A report's plots: its forest plot at ``path`` and, when two or more cells have a Model Configuration,
    their cost-versus-score plot beside it (``<name>-cost.png``). The paths written."""
    written = [forest_plot(report, path, title=title)]
    points = cost_points(report)
    if len(points) > 1:
        written.append(cost_score(points, path.with_stem(path.stem + "-cost"), title=title))
    return written


def markdown_image(draw: Callable[[Path], object], alt: str) -> str:
    """A Markdown image carrying a drawn PNG inline, for UIs that show Markdown but serve no files."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plot.png"
        draw(path)
        data = base64.b64encode(path.read_bytes()).decode()
    return f"![{alt}](data:image/png;base64,{data})"


def cost_score(points: list[frontier.Point], path: Path, *, title: str) -> Path:
    """Write a PNG of each cell's mean Reward (with its 95% CI) against its cost per Trial, the cells on the
    frontier (none cheaper and better) filled and joined by a line, the others hollow."""
    if not points:
        raise ValueError("nothing to plot")
    marks = frontier.on_frontier(points)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for point, best in zip(points, marks, strict=True):
        if math.isfinite(point.low) and math.isfinite(point.high):
            ax.vlines(point.cost_usd, point.low, point.high, color="#1f4e79" if best else "#999999", linewidth=1.5)
        ax.plot(point.cost_usd, point.score, "o", markersize=8, color="#1f4e79",
                markerfacecolor="#1f4e79" if best else "white")
        ax.annotate(point.label, (point.cost_usd, point.score), textcoords="offset points", xytext=(6, 4), fontsize=8)
    line = sorted((p.cost_usd, p.score) for p, best in zip(points, marks, strict=True) if best)
    if len(line) > 1:
        ax.plot(*zip(*line, strict=True), color="#1f4e79", linewidth=1, alpha=0.6, label="frontier")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("cost per Trial (USD)")
    ax.set_ylabel("mean Reward (95% CI)")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.set_title(title + "\nfilled: on the frontier (no other cell is cheaper and better)", fontsize=9, loc="left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
