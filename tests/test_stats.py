"""Tests for amber_pipeline.stats: every number against an independent computation.

How the tolerances are derived (B = 10,000 resamples on each side):

* A Monte-Carlo p-quantile from B draws has standard error
  ``sqrt(p (1 - p) / B) / f(q_p)``. The bootstrap distribution of a mean is
  close to Normal(mean, sigma*), ``sigma* = sd_plugin(x) / sqrt(n)``, so
  ``f(q_p) = phi(z_p) / sigma*`` and, for p = 0.025,
  ``SE = 2.67 * sigma* / sqrt(B)``. Ours and SciPy's are independent, so their
  difference has SE ``sqrt(2)`` times that; we allow ``K_SIGMA = 4`` of them.
* Means of 0/1 (or other grid) data live on a lattice of step ``g / n``.
  Both quantiles are lattice points (np.quantile's linear interpolation only
  leaves the lattice when the level falls exactly at a CDF step), and
  independent noise can put them on neighbouring points. So one lattice step
  is added. That step is what dominates for 0/1 data: 1/30 = 0.033 at
  n = 30, which is why a flat 0.02 would not be an honest bound there.
* A second, distribution-free check works in probability units: the fraction
  of SciPy's bootstrap distribution at or below our endpoint must bracket
  the nominal level within ``K_SIGMA * sqrt(2 p (1 - p) / B)`` (0.0088).
"""

from __future__ import annotations

import itertools
import math
import time
import tracemalloc
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from amber_pipeline.scoring.bootstrap import (
    DEFAULT_SEED,
    N_RESAMPLES,
    Interval,
    bootstrap_mean_ci,
    cell_score,
    paired_difference,
    per_task_means,
)

K_SIGMA = 4.0
TAIL = 0.025


def quantile_mc_tolerance(x: np.ndarray, lattice_step: float, b: int = N_RESAMPLES) -> float:
    """K_SIGMA standard errors of the difference of two MC quantiles, plus a lattice step."""
    sigma_star = float(np.std(x)) / math.sqrt(x.size)
    density_at_z = float(sps.norm.pdf(sps.norm.ppf(TAIL)))  # phi(1.96) = 0.0584
    se_one = sigma_star * math.sqrt(TAIL * (1 - TAIL)) / density_at_z
    return K_SIGMA * math.sqrt(2.0) * se_one / math.sqrt(b) + lattice_step


def level_tolerance(p: float, b: int = N_RESAMPLES) -> float:
    return K_SIGMA * math.sqrt(2.0 * p * (1 - p) / b)


def assert_level_bracketed(dist: np.ndarray, endpoint: float, p: float) -> None:
    """The ECDF of ``dist`` just below / at ``endpoint`` brackets level ``p``."""
    below, at_or_below = np.mean(dist < endpoint), np.mean(dist <= endpoint)
    tol = level_tolerance(p)
    assert below - tol <= p <= at_or_below + tol, (below, at_or_below, p)


def scipy_mean_bootstrap(x: np.ndarray, seed: int) -> Any:  # scipy's BootstrapResult
    return sps.bootstrap(
        (x,),
        np.mean,
        method="percentile",
        n_resamples=N_RESAMPLES,
        confidence_level=0.95,
        rng=np.random.default_rng(seed),
    )


def _data(kind: str) -> tuple[np.ndarray, float]:
    """A named test sample and the lattice step of its bootstrap means."""
    rng = np.random.default_rng(7)
    if kind.startswith("binary"):
        n, p = {
            "binary8": (8, 0.5),
            "binary30": (30, 0.6),
            "binary30_skew": (30, 0.9),
            "binary200": (200, 0.45),
        }[kind]
        return rng.binomial(1, p, n).astype(float), 1.0 / n
    if kind == "uniform50":
        return rng.uniform(0, 1, 50), 0.0
    # 60 Tasks, each the mean of 3 Trials with 0/1 rewards: grid 1/3
    return rng.binomial(3, 0.55, 60) / 3.0, 1.0 / (3 * 60)


CASES = ["binary8", "binary30", "binary30_skew", "binary200", "uniform50", "thirds60"]


@pytest.mark.parametrize("kind", CASES)
def test_bootstrap_mean_ci_matches_scipy(kind: str) -> None:
    x, step = _data(kind)
    assert 0 < x.mean() < 1  # not a degenerate sample
    ours = bootstrap_mean_ci(x)
    ref = scipy_mean_bootstrap(x, seed=99)
    tol = quantile_mc_tolerance(x, step)
    assert ours.low == pytest.approx(ref.confidence_interval.low, abs=tol)
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=tol)
    assert_level_bracketed(ref.bootstrap_distribution, ours.low, TAIL)
    assert_level_bracketed(ref.bootstrap_distribution, ours.high, 1 - TAIL)


@pytest.mark.parametrize("kind", ["binary8", "binary30", "binary30_skew", "binary200"])
def test_binary_bootstrap_matches_exact_binomial(kind: str) -> None:
    """For 0/1 data the exact bootstrap distribution of the mean is Binomial(n, p_hat) / n."""
    x, step = _data(kind)
    n, p_hat = x.size, float(x.mean())
    ours = bootstrap_mean_ci(x)
    exact_low = sps.binom.ppf(TAIL, n, p_hat) / n
    exact_high = sps.binom.ppf(1 - TAIL, n, p_hat) / n
    # one MC draw against the exact value: at most one lattice step away
    assert abs(ours.low - exact_low) <= step + 1e-12
    assert abs(ours.high - exact_high) <= step + 1e-12


def test_tiny_sample_against_full_enumeration() -> None:
    """n = 3: all 27 resamples equally likely; the 10 distinct ones weighted by multinomials."""
    x = np.array([0.0, 1.0, 4.0])  # chosen so the 10 multiset means are all distinct
    atoms: dict[float, float] = {}
    for combo in itertools.combinations_with_replacement(range(3), 3):
        counts = np.bincount(combo, minlength=3)
        weight = math.factorial(3) / math.prod(math.factorial(int(c)) for c in counts)
        m = float(x[list(combo)].mean())
        atoms[m] = atoms.get(m, 0.0) + weight / 27.0
    support = np.array(sorted(atoms))
    cdf = np.cumsum([atoms[m] for m in support])
    assert len(support) == 10 and cdf[-1] == pytest.approx(1.0)

    def exact_quantile(p: float) -> float:
        return float(support[np.searchsorted(cdf, p)])  # inf{t : F(t) >= p}

    for confidence in (0.95, 0.80, 0.60):
        for p in ((1 - confidence) / 2, (1 + confidence) / 2):
            # Precondition: the level is > 5 MC standard errors from every CDF
            # step, so an MC quantile lands on the exact atom with certainty
            # for practical purposes; then "within MC error" means equal.
            assert np.min(np.abs(cdf - p)) > 5 * math.sqrt(p * (1 - p) / N_RESAMPLES)
        for seed in range(5):
            ci = bootstrap_mean_ci(x, seed=seed, confidence=confidence)
            assert ci.low == pytest.approx(exact_quantile((1 - confidence) / 2), abs=1e-12)
            assert ci.high == pytest.approx(exact_quantile((1 + confidence) / 2), abs=1e-12)


@pytest.mark.parametrize("n", [40, 150])
def test_paired_difference_matches_scipy_paired(n: int) -> None:
    rng = np.random.default_rng(n)
    skill = rng.uniform(0, 1, n)  # per-Task difficulty shared by both cells
    a = (rng.uniform(0, 1, n) < skill + 0.1).astype(float)
    b = (rng.uniform(0, 1, n) < skill).astype(float)
    names = [f"task-{i:03d}" for i in range(n)]
    res = paired_difference(dict(zip(names, a, strict=True)), dict(zip(names, b, strict=True)))
    ref = sps.bootstrap(
        (a, b),
        lambda u, v, axis=-1: np.mean(u - v, axis=axis),
        paired=True,
        vectorized=True,
        method="percentile",
        n_resamples=N_RESAMPLES,
        rng=np.random.default_rng(5),
    )
    d = a - b
    tol = quantile_mc_tolerance(d, 1.0 / n)
    assert res.n_shared_tasks == n
    assert res.mean_difference == pytest.approx(d.mean(), abs=1e-12)
    assert res.ci95.low == pytest.approx(ref.confidence_interval.low, abs=tol)
    assert res.ci95.high == pytest.approx(ref.confidence_interval.high, abs=tol)
    assert_level_bracketed(ref.bootstrap_distribution, res.ci95.low, TAIL)
    assert_level_bracketed(ref.bootstrap_distribution, res.ci95.high, 1 - TAIL)
    assert res.too_close_to_call == res.ci95.contains(0.0)


def test_clearly_better_is_called_and_near_identical_is_not() -> None:
    rng = np.random.default_rng(3)
    names = [f"t{i}" for i in range(100)]
    strong = dict(zip(names, rng.binomial(1, 0.85, 100).astype(float), strict=True))
    weak = dict(zip(names, rng.binomial(1, 0.35, 100).astype(float), strict=True))
    better = paired_difference(strong, weak)
    assert better.mean_difference > 0.3
    assert better.ci95.low > 0 and not better.too_close_to_call

    twin = dict(strong)
    ones = [t for t in names if strong[t] == 1.0][:2]
    zeros = [t for t in names if strong[t] == 0.0][:2]
    for t in ones:
        twin[t] = 0.0
    for t in zeros:
        twin[t] = 1.0
    close = paired_difference(strong, twin)
    assert close.mean_difference == 0.0
    assert close.ci95.low < 0 < close.ci95.high and close.too_close_to_call


def test_paired_uses_only_shared_tasks() -> None:
    a = {"x": 1.0, "y": 0.5, "z": 0.0, "only_a": 1.0}
    b = {"y": 0.0, "x": 0.0, "z": 0.5, "only_b": 0.0}
    res = paired_difference(a, b)
    assert res.n_shared_tasks == 3
    assert res.mean_difference == pytest.approx((1.0 + 0.5 - 0.5) / 3)
    expected = bootstrap_mean_ci(np.array([1.0, 0.5, -0.5]))  # sorted x, y, z
    assert res.ci95 == expected


def test_no_shared_tasks_is_too_close_to_call() -> None:
    res = paired_difference({"a": 1.0}, {"b": 0.0})
    assert res.n_shared_tasks == 0 and res.too_close_to_call
    assert math.isnan(res.mean_difference)
    assert math.isnan(res.ci95.low) and math.isnan(res.ci95.high)
    assert paired_difference({}, {}).too_close_to_call


def test_single_shared_task_is_too_close_to_call() -> None:
    res = paired_difference({"a": 1.0}, {"a": 0.0})
    assert res.ci95 == Interval(1.0, 1.0) and res.too_close_to_call
    two = paired_difference({"a": 1.0, "b": 1.0}, {"a": 0.0, "b": 0.0})
    assert two.ci95 == Interval(1.0, 1.0) and not two.too_close_to_call
    tie = paired_difference({"a": 0.5, "b": 1.0}, {"a": 0.5, "b": 1.0})
    assert tie.ci95 == Interval(0.0, 0.0) and tie.too_close_to_call


@pytest.mark.parametrize(
    ("values", "expected"),
    [([0.7], 0.7), ([0.1] * 7, 0.1), ([0.0] * 25, 0.0), ([1.0] * 25, 1.0)],
    ids=["one-task", "all-equal", "all-zeros", "all-ones"],
)
def test_degenerate_samples_give_exact_point_interval(values: list[float], expected: float) -> None:
    ci = bootstrap_mean_ci(np.array(values))
    assert ci == Interval(expected, expected)  # exact, not approximately
    score = cell_score({f"t{i}": v for i, v in enumerate(values)})
    assert score.n_tasks == len(values) and score.ci95 == ci
    assert score.mean == pytest.approx(expected)


def test_empty_input() -> None:
    ci = bootstrap_mean_ci(np.array([]))
    assert math.isnan(ci.low) and math.isnan(ci.high)
    assert not ci.contains(0.0)
    score = cell_score({})
    assert math.isnan(score.mean) and score.n_tasks == 0 and math.isnan(score.ci95.low)


def test_interval_contains_is_closed() -> None:
    iv = Interval(-0.1, 0.2)
    assert iv.contains(-0.1) and iv.contains(0.2) and iv.contains(0.0)
    assert not iv.contains(0.21) and not iv.contains(-0.11)


def test_per_task_means_leaves_out_errored_trials() -> None:
    names = ["t1", "t1", "t1", "t2", "t2", "t3", "t3"]
    rewards: list[float | None] = [1.0, None, 0.0, 0.25, 0.75, None, None]
    means = per_task_means(names, rewards)
    assert means == {"t1": 0.5, "t2": 0.5}  # t3 only Errored: absent; None is not 0
    assert per_task_means([], []) == {}


def test_per_task_means_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        per_task_means(["a", "b"], [1.0])
    with pytest.raises(ValueError):
        per_task_means(["a"], [float("nan")])


def test_cell_score_is_mean_of_task_means_not_of_trials() -> None:
    names = ["a"] * 4 + ["b"]
    rewards: list[float | None] = [1.0, 1.0, 1.0, 1.0, 0.0]
    score = cell_score(per_task_means(names, rewards))
    assert score.mean == pytest.approx(0.5)  # trial mean would be 0.8
    assert score.n_tasks == 2
    assert score.ci95 == Interval(0.0, 1.0)  # 4 equally likely resamples: 0, .5, .5, 1


def test_cell_score_independent_of_mapping_order() -> None:
    rng = np.random.default_rng(11)
    items = [(f"task-{i}", float(v)) for i, v in enumerate(rng.uniform(0, 1, 30))]
    forward, backward = cell_score(dict(items)), cell_score(dict(reversed(items)))
    assert forward == backward
    assert forward.mean == pytest.approx(np.mean([v for _, v in items]))


def test_determinism_and_seed_sensitivity() -> None:
    x = np.random.default_rng(1).uniform(0, 1, 50)
    first = bootstrap_mean_ci(x)
    assert bootstrap_mean_ci(x) == first
    assert bootstrap_mean_ci(x, seed=DEFAULT_SEED) == first
    assert bootstrap_mean_ci(x.copy(), seed=DEFAULT_SEED) == first
    assert bootstrap_mean_ci(x, seed=DEFAULT_SEED + 1) != first  # continuous data


@pytest.mark.parametrize("bad", [0, 1, 999])
def test_too_few_resamples_rejected(bad: int) -> None:
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_mean_ci(np.array([0.0, 1.0]), n_resamples=bad)
    with pytest.raises(ValueError, match="n_resamples"):
        cell_score({"a": 1.0}, n_resamples=bad)
    with pytest.raises(ValueError, match="n_resamples"):
        paired_difference({}, {}, n_resamples=bad)
    bootstrap_mean_ci(np.array([0.0, 1.0]), n_resamples=1000)  # the floor is allowed


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, 95.0])
def test_bad_confidence_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_mean_ci(np.array([0.0, 1.0]), confidence=bad)


def test_non_finite_or_2d_values_rejected() -> None:
    with pytest.raises(ValueError):
        bootstrap_mean_ci(np.array([0.0, np.nan]))
    with pytest.raises(ValueError):
        bootstrap_mean_ci(np.zeros((2, 2)))


def test_coverage_of_true_mean() -> None:
    """200 datasets of 40 Bernoulli(0.6) Tasks: the 95% interval covers 0.6 in 88-99%."""
    start = time.perf_counter()
    rng = np.random.default_rng(2026)
    covered = 0
    for i in range(200):
        x = rng.binomial(1, 0.6, 40).astype(float)
        covered += bootstrap_mean_ci(x, n_resamples=2000, seed=i).contains(0.6)
    assert 0.88 <= covered / 200 <= 0.99, covered
    assert time.perf_counter() - start < 5.0


def test_memory_is_bounded_for_2000_tasks() -> None:
    x = np.random.default_rng(0).binomial(1, 0.5, 2000).astype(float)
    tracemalloc.start()
    try:
        ci = bootstrap_mean_ci(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20, peak
    assert ci.low < x.mean() < ci.high
    assert ci.low == pytest.approx(sps.binom.ppf(TAIL, 2000, x.mean()) / 2000, abs=2 / 2000)
