"""What the plots of a report show, apart from how they are drawn: the rows of its forest plot and the points of its
cost-versus-score plot.

Both the matplotlib files (``plots``) and the web app's inline SVG draw from here, so a cell is labelled, ordered
and left out the same way in either picture. No drawing library is imported: the web app should not load
matplotlib to draw a few lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from amber_pipeline.analysis import frontier
from amber_pipeline.analysis.report import RoundReport
from amber_pipeline.analysis.statistics import Bounds


@dataclass(frozen=True)
class Row:
    """One line of a forest plot: an estimate and its 95% interval (NaN where undefined)."""

    label: str
    estimate: float
    low: float
    high: float
    too_close_to_call: bool = False  # a paired difference whose interval includes 0


def num(x: float | None) -> float:
    """A report's undefined number (None) as NaN, which every drawing skips."""
    return math.nan if x is None else x


def row(label: str, estimate: float | None, ci95: Bounds, *, too_close_to_call: bool = False) -> Row:
    return Row(label, num(estimate), num(ci95[0]), num(ci95[1]), too_close_to_call)


def pair_label(better: str, worse: str) -> str:
    """'agent/a' and 'agent/b' (or 'agent / a') read as 'a - b (agent)'."""
    a_agent, _, a_model = better.replace(" / ", "/").rpartition("/")
    b_agent, _, b_model = worse.replace(" / ", "/").rpartition("/")
    if a_agent and a_agent == b_agent:
        return f"{a_model} - {b_model} ({a_agent})"
    return f"{better} - {worse}"


def best_first(rows: list[Row]) -> list[Row]:
    """The rows the highest estimate first (undefined ones last), ties by label, so the best reads first."""
    return sorted(rows, key=lambda r: (-(r.estimate if math.isfinite(r.estimate) else -math.inf), r.label))


def cell_rows(report: RoundReport) -> list[Row]:
    """Each cell of the report: its mean Reward and 95% bootstrap interval."""
    return [row(c.route, c.mean_reward, c.ci95) for c in report.cells]


def difference_rows(report: RoundReport) -> list[Row]:
    """Each paired comparison: better minus worse, marked when its interval includes 0."""
    return [row(pair_label(c.better, c.worse), c.mean_difference, c.ci95, too_close_to_call=c.too_close_to_call)
            for c in report.comparisons]


def cost_points(report: RoundReport) -> list[frontier.Point]:
    """The cells weighed on cost against score: those with a Model Configuration (the bounds cost nothing and
    would dominate every real choice) and at least one Trial (a cost per Trial needs one)."""
    return [frontier.Point.of_cell(c.route, c.cost_usd, c.n_trials, num(c.mean_reward), num(c.ci95[0]),
                                   num(c.ci95[1]))
            for c in report.cells if c.model and c.n_trials]
