"""The cost-versus-score frontier (analysis/frontier.py) and the plots drawn from it."""

from __future__ import annotations

import math
import random
from pathlib import Path

from amber_pipeline.analysis import plots
from amber_pipeline.analysis.frontier import Point, on_frontier


def test_frontier_by_hand() -> None:
    points = [Point("cheap-weak", 0.01, 0.40), Point("mid", 0.02, 0.70), Point("pricey-one-point-more", 0.04, 0.71),
              Point("dominated", 0.03, 0.60), Point("tie-of-mid", 0.02, 0.70), Point("unscored", 0.001, math.nan)]
    assert on_frontier(points) == [True, True, True, False, True, False]
    # Twice the price for the same score is never on it.
    assert on_frontier([Point("a", 0.01, 0.5), Point("b", 0.02, 0.5)]) == [True, False]


def test_frontier_matches_a_brute_force_definition() -> None:
    rng = random.Random(7)
    for _ in range(200):
        points = [Point(str(i), rng.choice([0.01, 0.02, 0.03, 0.05]), rng.choice([0.1, 0.4, 0.5, 0.9]))
                  for i in range(rng.randint(1, 8))]
        # On the frontier: no other point is at least as good in both and better in one (Pareto-optimal).
        want = [not any((q.cost_usd <= p.cost_usd and q.score >= p.score) and (q.cost_usd, q.score)
                        != (p.cost_usd, p.score) for q in points) for p in points]
        assert on_frontier(points) == want


def test_a_report_plot_adds_cost_and_score_when_models_are_compared(tmp_path: Path) -> None:
    report = {"title": "t", "cells": [
        {"route": "a", "model": "m1", "mean_reward": 0.6, "ci95": [0.4, 0.8], "cost_usd": 0.4, "n_trials": 8},
        {"route": "b", "model": "m2", "mean_reward": 0.7, "ci95": [0.5, 0.9], "cost_usd": 1.6, "n_trials": 8},
        {"route": "oracle", "model": None, "mean_reward": 1.0, "ci95": [1.0, 1.0], "cost_usd": 0.0, "n_trials": 8}]}
    written = plots.report_plots(report, tmp_path / "r.png")
    assert written == [tmp_path / "r.png", tmp_path / "r-cost.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)
    report["cells"] = report["cells"][:1] + report["cells"][2:]  # one model: nothing to weigh
    assert plots.report_plots(report, tmp_path / "s.png") == [tmp_path / "s.png"]
