"""Forest plots: each cell's mean Reward with its 95% CI, and the paired differences.

Drawn with matplotlib's Agg backend (no screen needed), sorted so the best
cell is on top; the difference panel marks zero and, when given, the margin,
so "too close to call" is visible as an interval crossing the zero line.
"""

from __future__ import annotations

import base64
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: called from the CLI, Dagster runs and tests

import matplotlib.pyplot as plt  # noqa: E402


@dataclass(frozen=True)
class Row:
    label: str
    estimate: float
    low: float
    high: float


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
        ordered = sorted(rows, key=lambda r: (-_finite(r.estimate), r.label))[::-1]
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


def _finite(x: float) -> float:
    return x if math.isfinite(x) else -math.inf


def _num(x: object) -> float:
    return float(x) if isinstance(x, int | float) else math.nan


def _pair_label(better: str, worse: str) -> str:
    """'agent/a' and 'agent/b' (or 'agent / a') read as 'a - b (agent)'."""
    a_agent, _, a_model = better.replace(" / ", "/").rpartition("/")
    b_agent, _, b_model = worse.replace(" / ", "/").rpartition("/")
    if a_agent and a_agent == b_agent:
        return f"{a_model} - {b_model} ({a_agent})"
    return f"{better} - {worse}"


def forest_plot(report: dict, path: Path, margin: float | None = None) -> Path:
    """The forest plot of a report dict: its `cells`, and its `comparisons` when it has any."""
    cells = [Row(c.get("route") or c.get("agent", "?"), _num(c.get("mean_reward")),
                 _num(c["ci95"][0]), _num(c["ci95"][1])) for c in report.get("cells", [])]
    differences = [Row(_pair_label(c["better"], c["worse"]), _num(c.get("mean_difference")),
                       _num(c["ci95"][0]), _num(c["ci95"][1])) for c in report.get("comparisons", [])]
    return forest(cells, differences, path, title=report.get("title", "Amber report"), margin=margin,
                  difference_axis="difference in mean Reward")


def markdown_image(draw: Callable[[Path], object]) -> str:
    """A Markdown image carrying a drawn PNG inline, for UIs that show Markdown but serve no files."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plot.png"
        draw(path)
        data = base64.b64encode(path.read_bytes()).decode()
    return f"![forest plot](data:image/png;base64,{data})"
