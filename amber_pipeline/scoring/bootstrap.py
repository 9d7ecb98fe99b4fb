"""Headline statistics for Amber results: cell scores and paired comparisons.

Implements section 1 of ``evaluation-analysis.md`` ("The two headline numbers")
and "How results are compared" in ``amber-concepts.md``:

* **Cell score** -- mean Reward averaged per Task first (over its non-Errored
  Trials), then across Tasks, with a 95% bootstrap interval that resamples
  Tasks with replacement.
* **Paired comparison** -- the bootstrap of the mean of per-Task differences
  over the Tasks both cells scored; an interval containing zero is
  "too close to call".

The intervals are percentile bootstrap intervals: B. Efron and R. J.
Tibshirani, *An Introduction to the Bootstrap* (Chapman & Hall, 1993),
section 13.3. The ``1 - confidence`` tail mass is split equally; the quantiles
of the bootstrap distribution use linear interpolation between order
statistics (NumPy's default, the same rule as ``scipy.stats.bootstrap``).

Pure functions: NumPy arrays or plain mappings in, frozen dataclasses out.
Every bootstrap is seeded (``np.random.default_rng(seed)``, PCG64), so the same
input and seed give the same interval on every machine with the same NumPy
version.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

N_RESAMPLES = 10_000  # default resamples: the spec's minimum
MIN_RESAMPLES = 1_000  # floor accepted (for tests); below it the interval is too noisy
DEFAULT_SEED = 20261202
_CHUNK_BYTES = 32 * 2**20  # per (resamples x Tasks) work array; two are live at once


@dataclass(frozen=True)
class Interval:
    """A closed interval ``[low, high]``; ``(nan, nan)`` when undefined."""

    low: float
    high: float

    def contains(self, x: float) -> bool:
        """True when ``low <= x <= high``; always False for a NaN interval."""
        return bool(self.low <= x <= self.high)


@dataclass(frozen=True)
class CellScore:
    """Mean of per-Task means, with its 95% percentile bootstrap interval."""

    mean: float  # NaN when no Task was scored
    ci95: Interval  # resampling Tasks with replacement
    n_tasks: int


@dataclass(frozen=True)
class PairedDifference:
    """Mean over shared Tasks of ``a - b`` per-Task means, with its interval."""

    mean_difference: float  # NaN when there is no shared Task
    ci95: Interval
    n_shared_tasks: int
    too_close_to_call: bool  # True when ci95 contains 0 or no Task is shared


def per_task_means(task_names: Sequence[str], rewards: Sequence[float | None]) -> dict[str, float]:
    """Mean Reward of each Task over its scored Trials, keyed by Task name.

    One entry per Trial in the two parallel sequences. A ``None`` reward is an
    Errored Trial: it is left out (never averaged as 0). A Task whose Trials
    all Errored is absent from the result. Keys come out sorted by name.
    Raises ``ValueError`` on length mismatch or a non-finite reward.
    """
    if len(task_names) != len(rewards):
        raise ValueError(f"{len(task_names)} task names but {len(rewards)} rewards")
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for name, reward in zip(task_names, rewards, strict=True):
        if reward is None:
            continue
        if not math.isfinite(reward):
            raise ValueError(f"non-finite reward {reward!r} for Task {name!r}")
        sums[name] = sums.get(name, 0.0) + float(reward)
        counts[name] = counts.get(name, 0) + 1
    return {name: sums[name] / counts[name] for name in sorted(sums)}


def _chunk_size(n: int) -> int:
    """Resamples per chunk: depends on ``n`` only, so results are portable."""
    return max(1, _CHUNK_BYTES // (8 * n))


def bootstrap_mean_ci(
    values: np.ndarray,
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
) -> Interval:
    """Percentile bootstrap interval for the mean of ``values`` (Efron & Tibshirani).

    ``values`` is 1-D, one number per Task. Each resample draws ``n`` values
    with replacement; the interval is the ``(1 - confidence) / 2`` and
    ``(1 + confidence) / 2`` quantiles of the ``n_resamples`` resample means.
    Resamples are drawn in chunks sized so each work array stays near 32 MB
    (2,000 Tasks x 10,000 resamples peaks at about 64 MB).

    Edge cases: ``n == 0`` gives ``Interval(nan, nan)``; ``n == 1`` or all
    values equal gives ``Interval(v, v)`` exactly (every resample mean is
    ``v``). Raises ``ValueError`` when ``n_resamples < 1000``, when
    ``confidence`` is not in (0, 1), or on a non-finite or non-1-D input.
    """
    if n_resamples < MIN_RESAMPLES:
        raise ValueError(f"n_resamples must be >= {MIN_RESAMPLES}, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"values must be 1-D, got shape {x.shape}")
    n = x.size
    if n == 0:
        return Interval(math.nan, math.nan)
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite")
    if np.all(x == x[0]):
        v = float(x[0])
        return Interval(v, v)
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples, dtype=np.float64)
    chunk = _chunk_size(n)
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = x[idx].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Interval(float(low), float(high))


def cell_score(
    task_means: Mapping[str, float],
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
) -> CellScore:
    """Cell score: mean of per-Task means and its bootstrap interval over Tasks.

    ``task_means`` is the output of :func:`per_task_means`. Values are taken
    in sorted Task-name order, so the interval does not depend on mapping
    order. No Task: ``CellScore(nan, Interval(nan, nan), 0)``; one Task or all
    equal: a zero-width interval at that value.
    """
    names = sorted(task_means)
    x = np.array([task_means[t] for t in names], dtype=np.float64)
    ci = bootstrap_mean_ci(x, n_resamples=n_resamples, seed=seed, confidence=confidence)
    mean = float(x.mean()) if x.size else math.nan
    return CellScore(mean=mean, ci95=ci, n_tasks=int(x.size))


def paired_difference(
    a: Mapping[str, float],
    b: Mapping[str, float],
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
) -> PairedDifference:
    """Paired bootstrap of ``a - b`` over the Tasks both cells scored.

    Pairs per-Task means by Task name (sorted), forms ``d_t = a_t - b_t`` and
    bootstraps the mean of ``d`` (resampling Tasks, so each pair stays
    together). ``too_close_to_call`` is True when the interval contains 0.
    No shared Task: NaN mean, NaN interval, ``too_close_to_call=True``. One
    shared Task: too close to call whatever its difference, since a single
    Task says nothing about Task-to-Task variation. All differences equal
    (two or more Tasks): a zero-width interval at ``d``.
    """
    shared = sorted(a.keys() & b.keys())
    d = np.array([a[t] - b[t] for t in shared], dtype=np.float64)
    ci = bootstrap_mean_ci(d, n_resamples=n_resamples, seed=seed, confidence=confidence)
    if d.size == 0:
        return PairedDifference(math.nan, ci, 0, too_close_to_call=True)
    return PairedDifference(
        mean_difference=float(d.mean()),
        ci95=ci,
        n_shared_tasks=int(d.size),
        too_close_to_call=d.size < 2 or ci.contains(0.0),
    )
