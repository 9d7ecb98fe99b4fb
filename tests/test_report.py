"""Reports: cell scores and paired comparisons from Trial rows, checked against scipy."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from scipy import stats as sps

from amber_pipeline.scoring import cells as report
from amber_pipeline.warehouse.schemas import TrialRecord

T0 = datetime(2026, 12, 2, tzinfo=UTC)


def trial(mc: str, task: str, attempt: int, reward: float | None, cost: float = 0.01) -> TrialRecord:
    return TrialRecord(
        workspace="w", job_id="job-x", cell_key=f"bv=x|agent=terminus-2@1|mc={mc}", benchmark_version_id="x" * 64,
        task_name=task, attempt=attempt, trial_name=f"{task}__{attempt}", agent="terminus-2",
        agent_version="v", model_configuration=mc, outcome="errored" if reward is None else "scored",
        reward=reward, errored=reward is None, retries=2 if reward is None else 0,
        error_type="SandboxBuildFailedError" if reward is None else None, error_message=None,
        input_tokens=100, output_tokens=10, cost_usd=cost, started_at=T0, finished_at=T0,
        duration_sec=2.0, image_id=None, trial_dir="/x")


def test_cell_mean_is_per_task_then_across_tasks_and_errored_apart() -> None:
    trials = [trial("a", "t1", 1, 1.0), trial("a", "t1", 2, 0.0), trial("a", "t1", 3, 1.0),
              trial("a", "t2", 1, 0.0), trial("a", "t2", 2, None)]
    [result] = report.cell_results(trials)
    assert result.score.mean == pytest.approx((2 / 3 + 0.0) / 2)
    assert result.errored == 1 and result.n_trials == 5 and result.n_tasks == 2
    assert result.cost_usd == pytest.approx(0.05)


def test_cancelled_trials_are_not_results() -> None:
    cancelled = trial("a", "t2", 1, None).model_copy(update={"outcome": "cancelled", "errored": False})
    [result] = report.cell_results([trial("a", "t1", 1, 1.0), cancelled])
    assert result.n_trials == 1 and result.n_tasks == 1 and result.errored == 0 and result.score.mean == 1.0


def test_cell_ci_agrees_with_scipy_bootstrap() -> None:
    rng = np.random.default_rng(7)
    rewards = rng.integers(0, 2, size=40).astype(float)
    trials = [trial("a", f"t{i}", 1, float(r)) for i, r in enumerate(rewards)]
    [result] = report.cell_results(trials)
    ref = sps.bootstrap((rewards,), np.mean, method="percentile", n_resamples=10_000, rng=1)
    # Monte-Carlo error of a 2.5% quantile at B=10,000 plus one lattice step (1/40).
    assert result.score.ci95.low == pytest.approx(ref.confidence_interval.low, abs=0.05)
    assert result.score.ci95.high == pytest.approx(ref.confidence_interval.high, abs=0.05)


def test_comparison_puts_the_better_first_and_says_too_close_to_call() -> None:
    tasks = [f"t{i}" for i in range(10)]
    strong = [trial("strong", t, 1, 1.0 if i < 9 else 0.0) for i, t in enumerate(tasks)]
    weak = [trial("weak", t, 1, 1.0 if i < 2 else 0.0) for i, t in enumerate(tasks)]
    twin = [trial("twin", t, 1, 1.0 if 1 <= i < 10 else 0.0) for i, t in enumerate(tasks)]
    comps = {(c.better, c.worse): c for c in report.comparisons(report.cell_results(weak + strong + twin))}
    clear = comps[("terminus-2 / strong", "terminus-2 / weak")]
    assert clear.difference.mean_difference == pytest.approx(0.7) and not clear.difference.too_close_to_call
    close = next(c for (b, w), c in comps.items() if {b, w} == {"terminus-2 / strong", "terminus-2 / twin"})
    assert close.difference.too_close_to_call
    lines = report.comparison_lines(list(comps.values()))
    assert any("too close to call" in line for line in lines)
    assert any("terminus-2 / strong is better" in line for line in lines)
