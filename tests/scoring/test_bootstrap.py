"""The percentile bootstrap over Tasks (amber_pipeline/scoring/bootstrap.py), against independent computations.

Three kinds of reference:

* **Exact.** For n <= 5 Tasks every one of the n**n resamples is enumerated and
  passed as the resample matrix; the interval must EQUAL NumPy's quantile of the
  enumerated resample means, computed here by gathering (``x[idx].mean(axis=1)``).
  Values are multiples of 1/8, so every sum is exact on both sides and ``==`` is
  the honest comparison. The seeded matrix is also checked against the draw it
  documents (``default_rng([seed, n]).integers(0, n, (B, n))``, counted), so the
  seeded interval equals a plain gather bootstrap over those same indices.
* **SciPy.** ``scipy.stats.bootstrap(method="percentile")`` with B_REF = 100,000
  resamples from its own generator. Tolerance, derived in
  :func:`quantile_tolerance`: K_SIGMA = 4 standard errors of the difference of
  two independent Monte Carlo quantiles, plus one lattice step for discrete data.
* **Exact distribution.** For 0/1 Rewards the bootstrap distribution of the
  mean is Binomial(n, p_hat) / n, whose quantiles scipy gives exactly.
"""

from __future__ import annotations

import itertools
import math
import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest
from scipy import stats as sps

from amber_pipeline.scoring import bootstrap
from amber_pipeline.scoring.bootstrap import (
    DEFAULT_RESAMPLING,
    NO_INTERVAL,
    Interval,
    Resampling,
    mean_intervals,
    seeded_counts,
)

B = DEFAULT_RESAMPLING.n_resamples  # 10,000: ours
B_REF = 100_000  # SciPy's
K_SIGMA = 4.0
TAIL = 0.025
FLOAT_NOISE = 1e-9


def quantile_tolerance(x: np.ndarray, lattice_step: float) -> float:
    """How far our 2.5% (or 97.5%) endpoint may be from SciPy's when both are right.

    A Monte Carlo p-quantile of B draws has standard error ``sqrt(p (1 - p) / B) / f(q_p)``.
    The bootstrap distribution of a mean is close to Normal(mean, sigma*), with
    ``sigma* = sd_plugin(x) / sqrt(n)``, so ``f(q_p) = phi(z_p) / sigma*`` and the
    standard error is ``2.67 sigma* / sqrt(B)`` at p = 0.025. Ours (B = 10,000) and
    SciPy's (B_REF = 100,000) are independent, so their difference has standard
    error ``2.67 sigma* sqrt(1/B + 1/B_REF)``; K_SIGMA = 4 of them fail about once
    in 16,000 honest runs. Means of lattice data (0/1 Rewards, k/3 per-Task means)
    live on a lattice of step ``g / n``; both endpoints are lattice atoms and
    independent noise can put them on neighbouring atoms, so one step is added
    (it dominates for small n: 1/30 = 0.033 at 30 Tasks).
    """
    sigma_star = float(np.std(x)) / math.sqrt(x.size)
    c = math.sqrt(TAIL * (1 - TAIL)) / float(sps.norm.pdf(sps.norm.ppf(TAIL)))  # 2.67
    return K_SIGMA * c * sigma_star * math.sqrt(1 / B + 1 / B_REF) + lattice_step


def assert_level_bracketed(reference: np.ndarray, endpoint: float, p: float) -> None:
    """Distribution-free: the share of SciPy's resample means below / at our endpoint brackets ``p``.

    Our endpoint's level has standard error sqrt(p (1 - p) / B), SciPy's empirical CDF
    sqrt(p (1 - p) / B_REF): K_SIGMA of their combination is 0.0069 at p = 0.025. SciPy's resample
    means of one lattice atom differ in their last bits (its sums are not exact, ours are rounded to a
    binary grid), so "at" means within FLOAT_NOISE = 1e-9: far above 1e-15 noise, far below any lattice step.
    """
    tol = K_SIGMA * math.sqrt(p * (1 - p) * (1 / B + 1 / B_REF))
    below = float(np.mean(reference < endpoint - FLOAT_NOISE))
    at_or_below = float(np.mean(reference <= endpoint + FLOAT_NOISE))
    assert below - tol <= p <= at_or_below + tol, (below, at_or_below, p, tol)


def sample(kind: str) -> tuple[np.ndarray, float]:
    """A named vector of per-Task means and the lattice step of its resample means."""
    rng = np.random.default_rng(sum(map(ord, kind)))
    match kind:
        case "binary5":
            return np.array([1.0, 0.0, 1.0, 1.0, 0.0]), 1 / 5
        case "binary30":
            return rng.binomial(1, 0.6, 30).astype(float), 1 / 30
        case "binary30_skewed":
            return rng.binomial(1, 0.9, 30).astype(float), 1 / 30
        case "binary200":
            return rng.binomial(1, 0.45, 200).astype(float), 1 / 200
        case "binary500":
            return rng.binomial(1, 0.3, 500).astype(float), 1 / 500
        case "thirds60":  # 3 Trials per Task, 0/1 Rewards
            return rng.binomial(3, 0.55, 60) / 3, 1 / (3 * 60)
        case "tenths500":  # 10 Trials per Task
            return rng.binomial(10, rng.uniform(0, 1, 500)) / 10, 1 / (10 * 500)
        case "uniform50":
            return rng.uniform(0, 1, 50), 0.0
        case "partial_credit120":  # continuous Rewards piled at 0 and 1
            return np.clip(rng.normal(0.6, 0.5, 120), 0, 1), 0.0
    raise AssertionError(kind)


SCIPY_CASES = ["binary5", "binary30", "binary30_skewed", "binary200", "binary500", "thirds60", "tenths500",
               "uniform50", "partial_credit120"]


@pytest.mark.parametrize("kind", SCIPY_CASES)
def test_interval_agrees_with_scipy_percentile_bootstrap(kind: str) -> None:
    x, step = sample(kind)
    assert not np.all(x == x[0])  # a sample that needs resampling
    [ours] = mean_intervals([x])
    ref = sps.bootstrap((x,), np.mean, method="percentile", n_resamples=B_REF, confidence_level=0.95,
                        batch=10_000, rng=np.random.default_rng(99))
    tol = quantile_tolerance(x, step)
    assert ours.low == pytest.approx(ref.confidence_interval.low, abs=tol)
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=tol)
    assert_level_bracketed(ref.bootstrap_distribution, ours.low, TAIL)
    assert_level_bracketed(ref.bootstrap_distribution, ours.high, 1 - TAIL)
    assert ours.low < float(x.mean()) < ours.high


@pytest.mark.parametrize("kind", ["binary5", "binary30", "binary30_skewed", "binary200", "binary500"])
def test_binary_interval_agrees_with_the_exact_binomial_bootstrap(kind: str) -> None:
    """0/1 Rewards: a resample mean is Binomial(n, p_hat) / n, so the exact quantiles are known.

    One Monte Carlo quantile against the exact one: K_SIGMA standard errors plus one lattice step.
    """
    x, step = sample(kind)
    n, p_hat = x.size, float(x.mean())
    [ours] = mean_intervals([x])
    tol = K_SIGMA * 2.67 * math.sqrt(p_hat * (1 - p_hat) / n) / math.sqrt(B) + step
    assert ours.low == pytest.approx(sps.binom.ppf(TAIL, n, p_hat) / n, abs=tol)
    assert ours.high == pytest.approx(sps.binom.ppf(1 - TAIL, n, p_hat) / n, abs=tol)


# --- exact: every resample enumerated --------------------------------------------------------------------


def enumerated(n: int) -> np.ndarray:
    """Every one of the n**n resamples of n Tasks, as index tuples."""
    return np.array(list(itertools.product(range(n), repeat=n)), dtype=np.int64).reshape(-1, n)


def enumerated_counts(asked: list[int]) -> bootstrap.Counts:
    """The exhaustive resample matrix for n Tasks (each row counts one index tuple), in two chunks."""

    def chunks(n: int) -> Iterator[np.ndarray]:
        asked.append(n)
        idx = enumerated(n)
        counts = np.stack([np.bincount(row, minlength=n) for row in idx]).astype(np.float64)
        half = len(counts) // 2
        yield counts[:half]
        yield counts[half:]

    return chunks


def enumerated_interval(x: np.ndarray, confidence: float) -> Interval:
    """The percentile interval of the exact bootstrap distribution, by gathering, linear interpolation."""
    means = x[enumerated(x.size)].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Interval(float(low), float(high))


@pytest.mark.parametrize("confidence", [0.95, 0.8, 0.5])
def test_exhaustive_resamples_give_exactly_the_enumerated_quantiles(confidence: float) -> None:
    rng = np.random.default_rng(8)
    vectors = [np.array([0.0, 1.0]), np.array([0.125, 0.875]), np.array([0.0, 0.0, 1.0]),
               np.array([-0.5, 0.25, 1.0]),  # per-Task differences can be negative
               rng.integers(0, 9, 4) / 8, rng.integers(-8, 9, 4) / 8, rng.integers(0, 9, 5) / 8,
               np.array([0.0, 0.125, 0.5, 0.75, 1.0])]
    assert all(not np.all(v == v[0]) for v in vectors)
    asked: list[int] = []
    got = mean_intervals(vectors, Resampling(confidence=confidence), counts=enumerated_counts(asked))
    assert got == [enumerated_interval(v, confidence) for v in vectors]
    assert sorted(asked) == [2, 3, 4, 5]  # one matrix per number of Tasks, whatever the number of vectors


def test_exhaustive_resamples_off_the_grid_move_by_at_most_the_grid_step() -> None:
    """Values that are not on the binary grid are rounded to it: by at most 2**-(p+1) each (the docstring)."""
    x = np.array([0.1, 0.7, 1 / 3, 0.45, 0.9])
    [got] = mean_intervals([x], counts=enumerated_counts([]))
    want = enumerated_interval(x, 0.95)
    step = 2.0 ** -bootstrap.grid_bits(x.size, 1.0)
    assert abs(got.low - want.low) <= step and abs(got.high - want.high) <= step


def test_exhaustive_two_task_interval_is_known_by_hand() -> None:
    """Two Tasks 0 and 1: resample means 0, 0.5, 0.5, 1; the 2.5% quantile interpolates 0 and 0.5."""
    [ci] = mean_intervals([np.array([0.0, 1.0])], counts=enumerated_counts([]))
    assert ci.low == pytest.approx(0.075 * 0.5, abs=1e-15)  # index 0.025 * 3 = 0.075, between 0 and 0.5
    assert ci.high == pytest.approx(1.0 - 0.075 * 0.5, abs=1e-15)


@pytest.mark.parametrize("x", [[0.0, 1.0], [1.0, 0.0], [0.0, 0.0, 1.0]], ids=["0-1", "1-0", "0-0-1"])
@pytest.mark.parametrize("seed", [bootstrap.DEFAULT_SEED, 0, 1, 2])
def test_seeded_quantiles_land_on_the_lattice_atoms(x: list[float], seed: int) -> None:
    """Resample means of [0, 1] are 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4; of [0, 0, 1] the mean is 1
    with probability 1/27 = 0.037. At B = 10,000 both 2.5% and 97.5% quantiles sit inside the end atoms by
    more than 6 binomial standard errors, so the interval is exactly (0, 1) for any honest seed."""
    [ci] = mean_intervals([np.array(x)], Resampling(seed=seed))
    assert ci == Interval(0.0, 1.0)


# --- the seeded resample matrix --------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 37, 2000])
def test_seeded_matrix_counts_the_documented_draw(n: int) -> None:
    """Row b counts the n Task positions drawn by ``default_rng([seed, n]).integers(0, n, (B, n))``."""
    resampling = Resampling(n_resamples=3_001, seed=17)
    got = np.concatenate([chunk.copy() for chunk in seeded_counts(resampling)(n)])
    idx = np.random.default_rng([17, n]).integers(0, n, size=(3_001, n))
    want = np.zeros((3_001, n))
    np.add.at(want, (np.arange(3_001)[:, None], idx), 1.0)
    assert np.array_equal(got, want)
    assert np.all(got.sum(axis=1) == n)


@pytest.mark.parametrize("kind", ["binary30", "binary500", "thirds60"])
def test_seeded_interval_equals_a_gather_bootstrap_over_the_same_indices(kind: str) -> None:
    """The matrix product is a plain gather bootstrap in disguise: same indices, same interval, bit for bit
    (lattice data: every resample sum is exact in both computations)."""
    x, _ = sample(kind)
    if kind == "thirds60":
        x = np.floor(x * 8) / 8  # k/3 is not on a binary grid; make it so, so sums are exact in both
    idx = np.random.default_rng([DEFAULT_RESAMPLING.seed, x.size]).integers(0, x.size, size=(B, x.size))
    low, high = np.quantile(x[idx].mean(axis=1), [TAIL, 1 - TAIL])
    assert mean_intervals([x]) == [Interval(float(low), float(high))]


def test_seed_changes_a_continuous_interval_and_only_the_seed_does() -> None:
    x = np.random.default_rng(1).uniform(0, 1, 50)
    first = mean_intervals([x])
    assert mean_intervals([x.copy()]) == first
    assert mean_intervals([x], Resampling(seed=DEFAULT_RESAMPLING.seed)) == first
    assert mean_intervals([x], Resampling(seed=DEFAULT_RESAMPLING.seed + 1)) != first


# --- edge cases --------------------------------------------------------------------------------------------


def test_no_task_gives_a_nan_interval_that_contains_nothing() -> None:
    [ci] = mean_intervals([np.array([])])
    assert math.isnan(ci.low) and math.isnan(ci.high)
    assert not ci.contains(0.0) and not NO_INTERVAL.contains(0.0)


@pytest.mark.parametrize("values", [[0.7], [1 / 3], [1 / 3] * 7, [0.1] * 25, [0.0] * 40, [1.0] * 2000, [-0.25] * 3],
                         ids=["one-task", "one-third", "thirds", "tenths", "zeros", "ones", "negative"])
def test_one_task_or_all_equal_gives_exactly_that_value(values: list[float]) -> None:
    v = values[0]
    assert mean_intervals([np.array(values)]) == [Interval(v, v)]  # exactly: no grid, no division


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        mean_intervals([np.array([0.0, 1.0]), np.array([0.5, bad, 1.0])])
    with pytest.raises(ValueError, match="finite"):
        mean_intervals([np.array([bad])])


@pytest.mark.parametrize("bad", [0, 1, 999, -10_000])
def test_fewer_than_a_thousand_resamples_are_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="n_resamples"):
        Resampling(n_resamples=bad)
    assert Resampling(n_resamples=1_000).n_resamples == 1_000  # the floor itself is allowed


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, 95.0, math.nan])
def test_confidence_outside_zero_one_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="confidence"):
        Resampling(confidence=bad)


def test_interval_contains_is_closed() -> None:
    iv = Interval(-0.1, 0.2)
    assert iv.contains(-0.1) and iv.contains(0.2) and iv.contains(0.0)
    assert not iv.contains(0.21) and not iv.contains(-0.11)


# --- exactness: a vector's interval does not depend on its company --------------------------------------------


def test_an_interval_is_the_same_alone_and_in_any_batch() -> None:
    rng = np.random.default_rng(4)
    x = rng.uniform(0, 1, 300)  # continuous: any reordering of a floating-point sum would show
    alone = mean_intervals([x])
    crowd = [rng.uniform(0, 1, 300) for _ in range(60)] + [rng.uniform(0, 50, 300), -rng.uniform(0, 1, 300)]
    mixed = [rng.uniform(0, 1, n) for n in (2, 7, 300, 1000)]
    for batch in ([*crowd, x], [x, *crowd], [*crowd[:20], x, *mixed, *crowd[20:]]):
        position = next(i for i, v in enumerate(batch) if v is x)
        assert mean_intervals(batch)[position] == alone[0]
    # and a batch is each vector alone
    assert mean_intervals(mixed) == [mean_intervals([v])[0] for v in mixed]


def test_intervals_of_many_lengths_and_degenerate_vectors_keep_their_places() -> None:
    rng = np.random.default_rng(5)
    vectors = [rng.random(5), np.array([]), np.array([0.25]), rng.random(37), np.full(4, 0.7), rng.random(5)]
    got = mean_intervals(vectors, Resampling(n_resamples=3_001))
    assert got[2] == Interval(0.25, 0.25) and got[4] == Interval(0.7, 0.7) and math.isnan(got[1].low)
    for v, ci in zip(vectors, got, strict=True):
        if v.size > 1 and not np.all(v == v[0]):
            assert ci == mean_intervals([v], Resampling(n_resamples=3_001))[0]
            assert v.min() <= ci.low < ci.high <= v.max()


def test_ninety_five_percent_intervals_cover_the_true_mean() -> None:
    """400 samples of 40 Bernoulli(0.6) Tasks, one batch: the share covering 0.6 is near 95%.

    The coverage of this interval for this design is about 95.5% (measured over 4,000 samples); 4 binomial
    standard errors of a share of 400 are 0.04, so [0.90, 0.995] fails only a broken interval (one always
    too wide covers 100%, one too narrow by a third about 80%).
    """
    rng = np.random.default_rng(2026)
    samples = [rng.binomial(1, 0.6, 40).astype(float) for _ in range(400)]
    covered = sum(ci.contains(0.6) for ci in mean_intervals(samples))
    assert 0.90 <= covered / 400 <= 0.995, covered


def test_memory_stays_flat_for_two_thousand_tasks() -> None:
    """The 10,000 x 2,000 matrix (160 MB as float64) is drawn in 16 MB chunks, never held whole."""
    x = np.random.default_rng(0).binomial(1, 0.5, 2000).astype(float)
    tracemalloc.start()
    try:
        [ci] = mean_intervals([x])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20, peak
    assert ci.low < x.mean() < ci.high


# --- rows drawn ahead ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 37, 300, 2000])
def test_prepared_rows_are_the_seeded_rows(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`prepare` keeps the matrix `seeded_counts` draws, chunk for chunk; the intervals and resample sums over it
    are bit for bit those drawn afresh, and another length or resampling still draws its own."""
    monkeypatch.setattr(bootstrap, "_PREPARED", {})
    resampling = Resampling(n_resamples=3_001, seed=17)
    fresh = [chunk.copy() for chunk in seeded_counts(resampling)(n)]
    vectors = [np.random.default_rng(n).uniform(0, 1, n), np.random.default_rng(n + 1).uniform(0, 1, n + 1)]
    drawn = bootstrap.ResampleSums(vectors, resampling)
    bootstrap.prepare(n, resampling)
    assert list(bootstrap._PREPARED) == [(resampling, n)]
    kept = [chunk.copy() for chunk in seeded_counts(resampling)(n)]
    assert [c.shape for c in kept] == [c.shape for c in fresh]
    assert all(np.array_equal(a, b) for a, b in zip(kept, fresh, strict=True))
    again = bootstrap.ResampleSums(vectors, resampling)
    assert again.intervals() == drawn.intervals()
    assert all(np.array_equal(a, b) for a, b in zip(again.sums, drawn.sums, strict=True))  # type: ignore[arg-type]
    other = Resampling(n_resamples=3_001, seed=18)
    assert np.array_equal(next(seeded_counts(other)(n)), next(iter(fresh))) == (n == 1)  # one Task: one count
    assert list(bootstrap._PREPARED) == [(resampling, n)]
