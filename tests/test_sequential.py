"""Tests for amber_pipeline.scoring.sequential: the anytime-valid interval of a Job that stops once decided.

Independent references:
* the construction -> a direct, one-value-at-a-time implementation of the module docstring's formulas
  written here (plain loops and ``math``): the bets, the noise bound, both capitals, the logical bounds;
  every reported end must be rejected by it just below and not just beyond (so it is the exact end);
* noiseless Rewards -> confseq's ``betting_cs`` with N (the papers' WoR hedged CS, on a grid of 1/1000)
  and ``lambda_predmix_eb`` (the bets), when confseq imports: its last release (0.0.11) does not build on
  Python 3.12 (pybind11 2.6) nor import with NumPy 2 (``np.float_``), so the check is skipped there;
* validity -> seeded simulations: under the null of equal per-Task success probabilities no more than
  alpha of Jobs stop with a "better" verdict, and the interval covers the Version's expected difference
  at the stop, including a null where every Task differs but the Version's mean is 0.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from amber_pipeline.scoring import sequential as sq

try:
    from confseq import betting as confseq_betting
    from confseq import betting_strategies as confseq_bets
except (ImportError, AttributeError):  # AttributeError: confseq 0.0.11 under NumPy 2
    confseq_betting = confseq_bets = None


# --- the direct implementation ----------------------------------------------------------------------------------


def naive_bets(y: list[float], alpha_capital: float) -> list[float]:
    """lam_t, t = 1..T, from y_1..y_{t-1} only."""
    bets = []
    for t in range(1, len(y) + 1):
        var_before = 0.25
        if t > 1:
            squares = 0.0
            for i in range(1, t):
                mean_i = min(1.0, (0.5 + sum(y[:i])) / (i + 1))
                squares += (y[i - 1] - mean_i) ** 2
            var_before = (0.25 + squares) / t
        bets.append(math.sqrt(2 * math.log(2 / alpha_capital) / (var_before * t * math.log(1 + t))))
    return bets


def naive_bound(t: int, n: int, attempts: float, alpha_noise: float) -> float:
    """b_t: the normal-mixture bound on |E_t|, variance proxy 1/(8k) per Task."""
    if t == 0 or math.isinf(attempts):
        return 0.0
    s2 = 1 / (8 * attempts)
    rho = sq.RHO_SHARE * n * s2
    v = t * s2
    return math.sqrt((v + rho) * math.log((v + rho) / (rho * alpha_noise**2)))


def naive_rejected(d: list[float], n: int, alpha: float, attempts: float, difference: float, t: int,
                   side: str) -> bool:
    """Is the difference rejected from ``side`` ("below": too small, "above": too big) by time t?"""
    y = [(x + 1) / 2 for x in d]
    m = (difference + 1) / 2
    alpha_noise = sq.NOISE_ALPHA_SHARE * alpha if math.isfinite(attempts) else 0.0
    alpha_capital = alpha - alpha_noise
    bets = naive_bets(y, alpha_capital)
    c = sq.TRUNCATION
    log_k = 0.0
    for j in range(1, t + 1):
        before = sum(y[:j - 1])
        centre = (n * m - before) / (n - j + 1)
        beta = naive_bound(j - 1, n, attempts, alpha_noise) / (n - j + 1)
        if side == "below":
            if centre + beta < 0:
                return True
            u = min(centre + beta, 1.0)
            bet = min(bets[j - 1], c / u) if u > 0 else bets[j - 1]
            log_k += math.log(1 + bet * (y[j - 1] - u))
        else:
            if centre - beta > 1:
                return True
            low = max(centre - beta, 0.0)
            bet = min(bets[j - 1], c / (1 - low)) if low < 1 else bets[j - 1]
            log_k += math.log(1 - bet * (y[j - 1] - low))
        if log_k >= math.log(2 / alpha_capital):
            return True
        seen, b = sum(y[:j]), naive_bound(j, n, attempts, alpha_noise)
        if side == "below" and m < (seen - b) / n:
            return True
        if side == "above" and m > (seen + b + n - j) / n:
            return True
    return False


def noisy_job(rng: np.random.Generator, n: int, attempts: int, shift: float = 0.0) -> np.ndarray:
    p = rng.beta(0.5, 0.5, n)
    p_a = np.clip(p + shift, 0, 1)
    return (rng.binomial(attempts, p_a) - rng.binomial(attempts, p)) / attempts


# --- against the direct implementation --------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "t", "attempts", "alpha", "shift", "seed"), [
    (12, 12, 3, 0.05, 0.3, 1),
    (30, 18, 2, 0.1, 0.4, 2),
    (25, 25, math.inf, 0.05, 0.2, 3),
    (40, 15, 1, 0.2, -0.5, 4),
])
def test_ends_are_exact_under_the_direct_implementation(n: int, t: int, attempts: float, alpha: float,
                                                        shift: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = noisy_job(rng, n, 3, shift)[:t] if math.isfinite(attempts) else rng.uniform(-1, 1, n)[:t] / 2 + shift
    lower, upper = sq.confidence_sequence(d, n, alpha, attempts)
    eps = 1e-9
    for s in range(t + 1):
        dl = list(d)
        if lower[s] > -1:
            assert naive_rejected(dl, n, alpha, attempts, lower[s] - eps, s, "below")
        assert not naive_rejected(dl, n, alpha, attempts, lower[s] + eps, s, "below")
        if upper[s] < 1:
            assert naive_rejected(dl, n, alpha, attempts, upper[s] + eps, s, "above")
        assert not naive_rejected(dl, n, alpha, attempts, upper[s] - eps, s, "above")
    assert np.any(lower[1:] > -1) and np.any(upper[1:] < 1)  # the cases do shrink the interval


def test_plugin_bets_match_the_direct_implementation() -> None:
    y = list(np.random.default_rng(5).uniform(0, 1, 30))
    assert sq.plugin_bets(np.array(y), 0.05) == pytest.approx(naive_bets(y, 0.05), rel=1e-12)


@pytest.mark.skipif(confseq_betting is None, reason="confseq does not import here (0.0.11: Python < 3.12, NumPy < 2)")
@pytest.mark.parametrize(("n", "t", "seed"), [(50, 50, 1), (200, 120, 2)])
def test_noiseless_matches_confseq_wor_betting_cs(n: int, t: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.beta(0.7, 0.5, n)[:t]  # on [0, 1]
    lower, upper = sq.confidence_sequence(2 * x - 1, n, 0.05, math.inf)
    low, high = (lower[1:] + 1) / 2, (upper[1:] + 1) / 2
    breaks = 1000
    ref_low, ref_high = confseq_betting.betting_cs(x, alpha=0.05, N=n, breaks=breaks, running_intersection=True,
                                                   trunc_scale=sq.TRUNCATION)
    # confseq keeps the grid points not rejected and widens by one step: its ends bracket the exact ones
    assert np.all(ref_low <= low + 1e-12) and np.all(low <= ref_low + 1 / breaks + 1e-12)
    assert np.all(high <= ref_high + 1e-12) and np.all(ref_high - 1 / breaks - 1e-12 <= high)
    assert sq.plugin_bets(x, 0.05) == pytest.approx(confseq_bets.lambda_predmix_eb(x, alpha=0.025), rel=1e-12)


# --- edge cases --------------------------------------------------------------------------------------------------


def test_no_task_gives_the_whole_range() -> None:
    lower, upper = sq.confidence_sequence(np.zeros(0), 10, attempts=3)
    assert (lower.tolist(), upper.tolist()) == ([-1.0], [1.0])
    state = sq.sequential_state(np.zeros(0), 10, attempts=3, margin=0.05)
    assert state == sq.SequentialState(-1.0, 1.0, 0, 10, "undecided")


@pytest.mark.parametrize("value", [-1.0, -0.25, 0.0, 0.5, 1.0])
def test_one_task_version_noiseless_is_its_value(value: float) -> None:
    lower, upper = sq.confidence_sequence(np.array([value]), 1, attempts=math.inf)
    assert (lower[1], upper[1]) == pytest.approx((value, value), abs=1e-11)


@pytest.mark.parametrize("attempts", [1, 3, math.inf])
@pytest.mark.parametrize("value", [-1.0, 0.0, 1 / 3, 1.0])
def test_all_differences_equal(value: float, attempts: float) -> None:
    n = 40
    lower, upper = sq.confidence_sequence(np.full(n, value), n, attempts=attempts)
    assert np.all(lower <= value + 1e-11) and np.all(value - 1e-11 <= upper)  # never rejects the common value
    if math.isinf(attempts):
        assert (lower[-1], upper[-1]) == pytest.approx((value, value), abs=1e-11)  # t = N: the realized mean


@pytest.mark.parametrize("attempts", [1, 3, 10])
def test_at_n_the_interval_is_the_realized_mean_within_the_noise_bound(attempts: int) -> None:
    n = 60
    d = noisy_job(np.random.default_rng(6), n, attempts, 0.1)
    lower, upper = sq.confidence_sequence(d, n, attempts=attempts)
    slack = 2 * naive_bound(n, n, attempts, sq.NOISE_ALPHA_SHARE * sq.ALPHA) / n  # on the D scale
    assert d.mean() - slack - 1e-9 <= lower[-1] <= upper[-1] <= d.mean() + slack + 1e-9


def test_running_intersection_shrinks_monotonically() -> None:
    rng = np.random.default_rng(7)
    d = np.stack([noisy_job(rng, 80, 3, s) for s in (-0.3, 0.0, 0.2, 0.6)])
    lower, upper = sq.confidence_sequence(d, 80, attempts=3)
    assert lower.shape == upper.shape == (4, 81)
    assert np.all(np.diff(lower, axis=1) >= 0) and np.all(np.diff(upper, axis=1) <= 0)
    assert np.all(lower >= -1) and np.all(lower <= upper) and np.all(upper <= 1)
    one = sq.confidence_sequence(d[2], 80, attempts=3)  # a Job alone or among others: the same interval
    assert np.array_equal(one[0], lower[2]) and np.array_equal(one[1], upper[2])


def test_state_is_the_last_interval_of_the_sequence() -> None:
    d = noisy_job(np.random.default_rng(8), 100, 3, 0.5)[:70]
    lower, upper = sq.confidence_sequence(d, 100, attempts=3)
    state = sq.sequential_state(d, 100, attempts=3, margin=0.02)
    assert (state.lower, state.upper, state.tasks_seen, state.tasks_total) == (lower[-1], upper[-1], 70, 100)
    assert state.verdict == sq.verdict(lower[-1], upper[-1], 0.02) == "a_better"


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"differences": np.array([1.5]), "n_tasks": 3}, "within"),
    ({"differences": np.array([np.nan]), "n_tasks": 3}, "within"),
    ({"differences": np.zeros(4), "n_tasks": 3}, "n_tasks"),
    ({"differences": np.zeros(2), "n_tasks": 3, "alpha": 1.0}, "alpha"),
    ({"differences": np.zeros(2), "n_tasks": 3, "attempts": 0}, "attempts"),
    ({"differences": np.zeros((2, 2, 2)), "n_tasks": 3}, "shape"),
])
def test_bad_input_is_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sq.confidence_sequence(**kwargs)


def test_more_noise_means_a_wider_interval() -> None:
    d = noisy_job(np.random.default_rng(9), 100, 2, 0.2)
    widths = [np.subtract(*sq.confidence_sequence(d, 100, attempts=k)[::-1])[-1] for k in (1, 2, 8, math.inf)]
    assert widths == sorted(widths, reverse=True)


# --- the verdict rule table ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("lower", "upper", "margin", "expected"), [
    (0.01, 0.30, 0.0, "a_better"),             # excludes 0 above
    (-0.30, -0.01, 0.0, "b_better"),           # excludes 0 below
    (-0.10, 0.20, 0.0, "undecided"),           # contains 0
    (0.0, 0.20, 0.0, "undecided"),             # touches 0: not excluded
    (-0.01, 0.01, 0.0, "undecided"),           # no margin: never too close to matter
    (0.06, 0.30, 0.05, "a_better"),            # above the margin
    (0.02, 0.30, 0.05, "undecided"),           # excludes 0 but not the margin
    (-0.30, -0.06, 0.05, "b_better"),
    (-0.30, -0.02, 0.05, "undecided"),
    (-0.04, 0.04, 0.05, "too_close_to_matter"),  # wholly inside (-M, M)
    (-0.05, 0.04, 0.05, "undecided"),          # touches -M: not inside
    (-0.04, 0.06, 0.05, "undecided"),          # crosses M
    (0.01, 0.04, 0.05, "too_close_to_matter"),  # excludes 0 yet too close to matter
    (0.30, 0.20, 0.0, "a_better"),             # empty (lower > upper) but above: still one side
    (0.05, -0.05, 0.0, "undecided"),           # empty and on both sides: no verdict
    (0.02, -0.02, 0.05, "too_close_to_matter"),
])
def test_verdict_rule_table(lower: float, upper: float, margin: float, expected: str) -> None:
    assert sq.verdict(lower, upper, margin) == expected


def test_verdict_refuses_a_negative_margin() -> None:
    with pytest.raises(ValueError, match="margin"):
        sq.verdict(-0.1, 0.1, -0.01)


# --- Bonferroni ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("alpha", "pairs", "expected"), [(0.05, 1, 0.05), (0.05, 3, 0.05 / 3), (0.1, 10, 0.01)])
def test_family_alpha_is_bonferroni(alpha: float, pairs: int, expected: float) -> None:
    assert sq.family_alpha(alpha, pairs) == pytest.approx(expected)


@pytest.mark.parametrize(("alpha", "pairs"), [(0.05, 0), (0.0, 2), (1.0, 2)])
def test_family_alpha_refuses_nonsense(alpha: float, pairs: int) -> None:
    with pytest.raises(ValueError):
        sq.family_alpha(alpha, pairs)


# --- the fast simulation path agrees with the sequence ------------------------------------------------------------


@pytest.mark.parametrize(("shift", "margin", "attempts"), [(0.0, 0.0, 3), (0.35, 0.0, 3), (-0.6, 0.05, 2),
                                                           (0.3, 0.1, math.inf), (0.0, 0.25, 3)])
def test_stopped_jobs_match_the_sequence_and_the_verdict(shift: float, margin: float, attempts: float) -> None:
    rng = np.random.default_rng(10)
    n, jobs = 100, 5
    d = np.stack([noisy_job(rng, n, 3, shift) for _ in range(jobs)])
    truth = d.mean(axis=1) + rng.uniform(-0.05, 0.05, jobs)  # any value: only the two paths are compared
    stopped = sq.stopped_jobs(d, truth, attempts=attempts, margin=margin)
    lower, upper = sq.confidence_sequence(d, n, attempts=attempts)
    for j in range(jobs):
        verdicts = [sq.verdict(lo, up, margin) for lo, up in zip(lower[j, 1:], upper[j, 1:], strict=True)]
        decided = [i for i, v in enumerate(verdicts) if v != "undecided"]
        stop = decided[0] if decided else n - 1
        assert stopped.tasks_seen[j] == stop + 1
        assert sq.VERDICTS[stopped.verdicts[j]] == verdicts[stop]
        assert stopped.covered[j] == (lower[j, stop + 1] <= truth[j] <= upper[j, stop + 1])
    assert np.any(stopped.verdicts != 0) == (shift != 0 or margin > 0)


# --- validity, by simulation --------------------------------------------------------------------------------------


def wrong_better(jobs: sq.SimulatedJobs) -> float:
    return float(np.isin(jobs.verdicts, [1, 2]).mean())


@pytest.mark.parametrize(("n", "attempts"), [(100, 3), (300, 1)])
def test_null_jobs_rarely_stop_with_a_better_verdict(n: int, attempts: int) -> None:
    jobs = sq.simulate_stopped_jobs(0, n, attempts, jobs=400, seed=11)
    assert wrong_better(jobs) <= sq.ALPHA  # the guarantee; in fact about 0
    assert jobs.covered.mean() >= 1 - sq.ALPHA


def test_the_realized_mean_pitfall_is_real_and_avoided() -> None:
    # The papers' WoR CS reading noisy differences as exact (attempts = inf) targets the realized mean
    rng = np.random.default_rng(12)
    d, theta = sq.simulated_differences(rng, 0.0, 200, 3, 400)
    naive = sq.stopped_jobs(d, theta, attempts=math.inf)
    assert wrong_better(naive) > 0.3
    assert wrong_better(sq.stopped_jobs(d, theta, attempts=3)) <= sq.ALPHA


def test_worst_case_noise_null() -> None:
    # every Task at p = 1/2 in both cells: the most Trial noise there is
    rng = np.random.default_rng(13)
    for attempts in (1, 3):
        d = (rng.binomial(attempts, 0.5, (400, 150)) - rng.binomial(attempts, 0.5, (400, 150))) / attempts
        jobs = sq.stopped_jobs(d, np.zeros(400), attempts=attempts)
        assert wrong_better(jobs) <= sq.ALPHA and jobs.covered.mean() >= 1 - sq.ALPHA


def test_covers_a_zero_mean_version_whose_tasks_all_differ() -> None:
    # Not the strict null: A solves half the Tasks, B the other half; the Version's mean is 0
    rng = np.random.default_rng(14)
    n, jobs = 120, 400
    p_a = np.tile(np.r_[np.full(n // 2, 0.9), np.full(n // 2, 0.1)], (jobs, 1))
    order = rng.permuted(np.tile(np.arange(n), (jobs, 1)), axis=1)
    p_a = np.take_along_axis(p_a, order, axis=1)
    d = (rng.binomial(3, p_a) - rng.binomial(3, 1 - p_a)) / 3
    result = sq.stopped_jobs(d, np.zeros(jobs), attempts=3)
    assert wrong_better(result) <= sq.ALPHA and result.covered.mean() >= 1 - sq.ALPHA


def test_noise_bound_holds_for_the_worst_case_noise() -> None:
    # |E_t| < b_t for all t with chance >= 1 - alpha_2, for fair coins: y's noise from 2k Rewards
    rng = np.random.default_rng(15)
    n, k, alpha_noise = 300, 3, 0.05
    noise = ((rng.binomial(k, 0.5, (4000, n)) - rng.binomial(k, 0.5, (4000, n))) / k) / 2
    bound = np.array([naive_bound(t, n, k, alpha_noise) for t in range(1, n + 1)])
    crossed = (np.abs(np.cumsum(noise, axis=1)) >= bound).any(axis=1).mean()
    assert crossed <= alpha_noise


def test_a_real_difference_stops_early_and_is_covered() -> None:
    jobs = sq.simulate_stopped_jobs(20, 200, 3, jobs=300, seed=16)
    assert np.median(jobs.trials_share()) <= 0.4
    assert np.all(jobs.verdicts == 1) and jobs.covered.mean() >= 1 - sq.ALPHA
    assert jobs.estimand == pytest.approx(np.full(300, 0.2))
    b_side = sq.simulate_stopped_jobs(-20, 200, 3, jobs=100, seed=17)
    assert np.all(b_side.verdicts == 2)


def test_a_negligible_difference_is_called_too_close_to_matter() -> None:
    jobs = sq.simulate_stopped_jobs(0, 400, 3, margin_points=15, jobs=200, seed=18)
    assert np.mean(jobs.verdicts == 3) >= 0.9 and wrong_better(jobs) <= sq.ALPHA
    assert sq.median_trials_share(0, 400, 3, margin_points=15, jobs=200, seed=18) < 1.0


def test_simulation_is_seeded() -> None:
    a = sq.simulate_stopped_jobs(10, 60, 3, jobs=50, seed=3)
    b = sq.simulate_stopped_jobs(10, 60, 3, jobs=50, seed=3)
    assert np.array_equal(a.tasks_seen, b.tasks_seen) and np.array_equal(a.verdicts, b.verdicts)


def test_latest_interval_is_cheap_for_a_large_version() -> None:
    import time

    d = noisy_job(np.random.default_rng(19), 3000, 3, 0.01)
    t0 = time.perf_counter()
    state = sq.sequential_state(d, 3000, attempts=3)
    assert time.perf_counter() - t0 < 2.0  # about 0.07 s: O(T) per halving
    assert state.lower < state.upper
