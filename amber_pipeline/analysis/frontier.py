"""The cost-versus-score frontier: the cells no other cell beats on both.

A cell twice the price for one point more is the choice people get wrong; the
frontier is the set worth choosing from. A cell is on it unless another cell
costs no more and scores no less, and is strictly better in one of the two.
Cells without a score (no Task scored) are on no frontier. Only cells with a
Model Configuration belong here: the bounds (oracle, nop) cost nothing and
would dominate every real choice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    label: str
    cost_usd: float  # mean cost per Trial
    score: float  # mean Reward
    low: float = math.nan  # its 95% CI
    high: float = math.nan

    @classmethod
    def of_cell(cls, label: str, cost_usd: float, n_trials: int, score: float, low: float, high: float) -> Point:
        """A cell's point: cells of different Trial counts compare by their cost per Trial."""
        return cls(label, cost_usd / n_trials, score, low, high)


def dominated(a: Point, b: Point) -> bool:
    """Whether b beats a: it costs no more, scores no less, and is strictly better in one."""
    return (b.cost_usd <= a.cost_usd and b.score >= a.score
            and (b.cost_usd < a.cost_usd or b.score > a.score))


def on_frontier(points: Sequence[Point]) -> list[bool]:
    """For each point, whether no other point beats it (a point without a score or cost is on none)."""
    scored = [p for p in points if math.isfinite(p.score) and math.isfinite(p.cost_usd)]
    return [p in scored and not any(dominated(p, q) for q in scored) for p in points]
