"""The cost-versus-score frontier (analysis/frontier.py) and the plots drawn from it."""

from __future__ import annotations

import math
import random
from pathlib import Path

from amber_pipeline.analysis import plots
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.frontier import Point, on_frontier
from amber_pipeline.analysis.report import build_report


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


def attempt(task: str, model: str | None, reward: float, cost: float) -> TrialEvidence:
    return TrialEvidence(
        source="job-f", trial_name=f"{task}__{model}", task_name=task, agent="oracle" if model is None else "t2",
        model=model, attempt=1, reward=reward, errored=False, exception_type=None, started_at=None, finished_at=None,
        agent_duration_sec=None, agent_timeout_sec=None, input_tokens=10, output_tokens=5, cost_usd=cost,
        model_used=True, trajectory_steps=1, trajectory_ended_with_error=False, repeated_tool_error=False,
        tests_passed=None, tests_total=None, trial_dir=None)


def test_a_report_plot_adds_cost_and_score_when_models_are_compared(tmp_path: Path) -> None:
    tasks = [f"t{i}" for i in range(8)]
    cheap = [attempt(t, "m1", float(i < 5), 0.05) for i, t in enumerate(tasks)]
    dear = [attempt(t, "m2", float(i < 6), 0.2) for i, t in enumerate(tasks)]
    oracle = [attempt(t, None, 1.0, 0.0) for t in tasks]
    written = plots.report_plots(build_report(cheap + dear + oracle), tmp_path / "r.png", title="t")
    assert written == [tmp_path / "r.png", tmp_path / "r-cost.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)
    # one model: nothing to weigh
    assert plots.report_plots(build_report(cheap + oracle), tmp_path / "s.png") == [tmp_path / "s.png"]
