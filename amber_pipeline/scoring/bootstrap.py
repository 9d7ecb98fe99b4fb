"""The percentile bootstrap over Tasks, as one resample matrix per number of Tasks, applied by matrix products.

A cell's score and a paired comparison both resample Tasks with replacement
(spec section 1). A resample of ``n`` Tasks is a row of counts: how many times
each Task was drawn. ``counts(n)`` is the matrix of those rows, drawn from
``default_rng([seed, n])``, so it depends only on ``n`` and the seed: every
cell and every comparison over ``n`` Tasks is resampled by the same rows, and
the resample means of a set of vectors are one matrix product ``W @ X / n``
instead of one gather per vector.

Exact by construction. Before the product each vector is put on a binary grid
(``x * 2**p`` rounded to an integer, ``p`` chosen from ``n`` and the vector's
largest magnitude so that every partial sum stays below 2**53): counts times
grid values are integers, so every sum in the product is exact, whatever the
order BLAS adds in, the number of vectors multiplied at once or the machine.
A resample mean is then that exact sum divided by ``2**p * n``, rounded once.
So a vector gets the same interval alone or among a thousand others, and the
resample sums of a difference ``a - b`` are exactly the differences of those
of ``a`` and ``b`` (a comparison and its two cells agree by construction).
The grid moves a value by at most ``2**-(p+1)``, about 5e-13 for 2,000 Tasks
with Rewards in [0, 1]: far below any interval's Monte Carlo error.

The interval is the percentile interval of B. Efron and R. J. Tibshirani,
*An Introduction to the Bootstrap* (Chapman & Hall, 1993), section 13.3: the
``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of the resample
means, linearly interpolated between order statistics (NumPy's default and
``scipy.stats.bootstrap``'s). Edge cases: no Task gives ``(nan, nan)``; one
Task, or all values equal, gives ``(v, v)`` exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

N_RESAMPLES = 10_000  # the spec's minimum
MIN_RESAMPLES = 1_000  # accepted for tests; below it an interval is too noisy
DEFAULT_SEED = 20261202
CONFIDENCE = 0.95
_CHUNK_BYTES = 16 * 2**20  # one chunk of the resample matrix, as float64
_EXACT_BITS = 52  # integers below 2**53 are exact in float64; one bit of margin


@dataclass(frozen=True)
class Interval:
    """A closed interval ``[low, high]``; ``(nan, nan)`` when undefined."""

    low: float
    high: float

    def contains(self, x: float) -> bool:
        """True when ``low <= x <= high``; always False for a NaN interval."""
        return bool(self.low <= x <= self.high)


NO_INTERVAL = Interval(math.nan, math.nan)


@dataclass(frozen=True)
class Resampling:
    """How intervals are drawn: the number of resamples, the seed and the confidence level."""

    n_resamples: int = N_RESAMPLES
    seed: int = DEFAULT_SEED
    confidence: float = CONFIDENCE

    def __post_init__(self) -> None:
        if self.n_resamples < MIN_RESAMPLES:
            raise ValueError(f"n_resamples must be >= {MIN_RESAMPLES}, got {self.n_resamples}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")


DEFAULT_RESAMPLING = Resampling()
Counts = Callable[[int], Iterator[np.ndarray]]  # n -> chunks of rows of the resample matrix (float64 counts)


def seeded_counts(resampling: Resampling) -> Counts:
    """The resample matrix for ``n`` Tasks, in chunks of rows: row b counts the draws of each Task in resample b.

    Drawn from ``default_rng([seed, n])``: each resample picks ``n`` Task positions
    uniformly with replacement (the indices scipy's and NumPy's bootstraps draw),
    which are then counted. Chunks hold about 16 MB and reuse one buffer, so a
    chunk is valid until the next is drawn and memory stays flat in B.
    """

    def chunks(n: int) -> Iterator[np.ndarray]:
        rows = max(1, _CHUNK_BYTES // (8 * n))
        buffer = np.empty((rows, n), dtype=np.float64)
        drawn = _PREPARED.get((resampling, n))
        if drawn is not None:
            for start in range(0, resampling.n_resamples, rows):
                chunk = buffer[:min(rows, resampling.n_resamples - start)]
                np.copyto(chunk, drawn[start:start + len(chunk)], casting="unsafe")
                yield chunk
            return
        rng = np.random.default_rng([resampling.seed, n])
        offsets = np.arange(rows)[:, None] * n  # one bincount over the whole chunk
        for start in range(0, resampling.n_resamples, rows):
            size = min(rows, resampling.n_resamples - start)
            draws = rng.integers(0, n, size=(size, n))
            draws += offsets[:size]
            chunk = buffer[:size]
            np.copyto(chunk.reshape(-1), np.bincount(draws.ravel(), minlength=size * n), casting="unsafe")
            yield chunk

    return chunks


# The resample matrices drawn ahead in this process (`prepare`), by resampling and number of Tasks.
_PREPARED: dict[tuple[Resampling, int], np.ndarray] = {}


def prepare(n: int, resampling: Resampling = DEFAULT_RESAMPLING) -> None:
    """Draw the resample matrix for ``n`` Tasks now and keep it in this process, for the intervals over ``n`` Tasks
    computed later here: the same rows, so the same intervals, without the draw (a tenth of a second per thousand
    Tasks). For a process that knows what it will score before it can (`amber job submit --wait` draws the
    rows of its Job's report while the Job runs); the smallest unsigned type that holds ``n`` keeps the counts
    (20 MB for 1,000 Tasks)."""
    if n < 1 or (resampling, n) in _PREPARED:
        return
    drawn = np.empty((resampling.n_resamples, n), dtype=np.min_scalar_type(n))
    start = 0
    for chunk in seeded_counts(resampling)(n):
        drawn[start:start + len(chunk)] = chunk
        start += len(chunk)
    _PREPARED[(resampling, n)] = drawn


def grid_bits(n: int, largest: float) -> int:
    """The ``p`` whose grid ``2**-p`` keeps sums of ``n`` counts times values up to ``largest`` exact (see above)."""
    return _EXACT_BITS - math.ceil(math.log2(n * max(largest, 1.0))) - 1


def on_grid(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row of ``vectors`` (k x n) as integers on its own grid: (``rint(x * 2**p)``, ``p`` per row)."""
    n = vectors.shape[1]
    bits = np.array([grid_bits(n, float(np.abs(v).max(initial=0.0))) for v in vectors], dtype=np.int64)
    return np.rint(np.ldexp(vectors, bits[:, None])), bits


def resample_sums(grid_rows: np.ndarray, counts: Iterator[np.ndarray]) -> np.ndarray:
    """Exact sums (k x B) of each grid row (k x n, from :func:`on_grid`) under every resample of ``counts``."""
    return np.concatenate([grid_rows @ chunk.T for chunk in counts], axis=1)


def percentile_intervals(sums: np.ndarray, bits: np.ndarray, n: int, confidence: float) -> list[Interval]:
    """The percentile interval of each row of resample sums: ``sums / (2**bits * n)`` are the resample means."""
    if sums.shape[0] == 0:
        return []
    means = sums / (np.ldexp(1.0, bits)[:, None] * n)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail], axis=1, overwrite_input=True)  # means is ours to sort
    return [Interval(float(lo), float(hi)) for lo, hi in zip(low, high, strict=True)]


def degenerate(values: np.ndarray) -> Interval | None:
    """The interval of a vector that needs no resampling (no Task; all values equal), else None."""
    if values.size == 0:
        return NO_INTERVAL
    if not np.all(np.isfinite(values)):
        raise ValueError("values must be finite")
    if np.all(values == values[0]):
        return Interval(float(values[0]), float(values[0]))
    return None


class ResampleSums:
    """The exact resample sums of a list of vectors: one matrix product per length, none for a constant vector
    (every row of counts adds up to n, so its sums are its value times n), and their percentile intervals.

    ``counts`` replaces the seeded resample matrix (the tests pass an enumeration of every resample).
    """

    def __init__(self, vectors: list[np.ndarray], resampling: Resampling = DEFAULT_RESAMPLING,
                 counts: Counts | None = None):
        self.vectors = [np.asarray(v, dtype=np.float64) for v in vectors]
        if not all(np.all(np.isfinite(v)) for v in self.vectors):
            raise ValueError("values must be finite")
        self.resampling = resampling
        self.sums: list[np.ndarray | None] = [None] * len(vectors)  # None: an empty vector
        self.bits = np.zeros(len(vectors), dtype=np.int64)
        draw = counts or seeded_counts(resampling)
        by_n: dict[int, list[int]] = {}
        for i, v in enumerate(self.vectors):
            if v.size:
                by_n.setdefault(v.size, []).append(i)
        for n, members in by_n.items():
            grid_rows, bits = on_grid(np.stack([self.vectors[i] for i in members]))
            varies = [j for j, row in enumerate(grid_rows) if np.any(row != row[0])]
            found = resample_sums(grid_rows[varies], draw(n)) if varies else None
            sums = np.outer(grid_rows[:, 0] * n, np.ones(resampling.n_resamples if found is None else found.shape[1]))
            if found is not None:
                sums[varies] = found
            for i, row, b in zip(members, sums, bits, strict=True):
                self.sums[i], self.bits[i] = row, b

    def intervals(self) -> list[Interval]:
        """Every vector's percentile interval: one quantile call per length."""
        out = [degenerate(v) for v in self.vectors]
        by_n: dict[int, list[int]] = {}
        for i, v in enumerate(self.vectors):
            if out[i] is None:
                by_n.setdefault(v.size, []).append(i)
        for n, members in by_n.items():
            sums = np.stack([self.sums[i] for i in members])  # type: ignore[misc]
            found = percentile_intervals(sums, self.bits[members], n, self.resampling.confidence)
            for i, ci in zip(members, found, strict=True):
                out[i] = ci
        return [NO_INTERVAL if ci is None else ci for ci in out]


def mean_intervals(vectors: list[np.ndarray], resampling: Resampling = DEFAULT_RESAMPLING,
                   counts: Counts | None = None) -> list[Interval]:
    """The percentile interval of the mean of each vector; vectors of one length are one matrix product."""
    return ResampleSums(vectors, resampling, counts).intervals()
