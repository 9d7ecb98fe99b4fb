"""The scoring engine: the only code that turns Trial rows into per-Task means, cell scores and comparisons.

Every number Amber shows about a cell comes from :func:`score`: the cell run's
Rewards and aggregates, the re-aggregation schedule, `amber report`, `amber
results`, the Dagster assets and the SQL views (which read what this writes).
Its input is a DuckDB relation of Trial rows with the columns of
``SCORING_ROW_SCHEMA`` (``warehouse/schemas.py``), one row per Trial that is a
result (a Trial cancelled with its Job is not a row), from the warehouse or
from report evidence alike.

The numbers (spec section 1, "How results are compared" in the concepts):

* **Per-Task mean**: the mean Reward of a Task over its scored Trials. A Trial
  without a Reward (Errored, or no Verifier result) is left out, never counted
  as 0; a Task whose Trials all lack one has no mean and is not a Task of the
  cell's score.
* **Cell score**: the mean of the per-Task means over the cell's scored Tasks
  (in Task-name order), with the 95% percentile bootstrap interval over those
  Tasks (`bootstrap.py`); the cell's total cost (a missing cost counts as 0),
  its mean Trial duration (over the Trials whose duration is known) and its
  Errored Trials, counted apart.
* **Comparison**: for two cells that pair (below), the mean over the Tasks
  both scored of the per-Task difference, with its paired bootstrap interval
  (the same resample rows as the cells'); "too close to call" when the interval
  contains 0 or fewer than two Tasks are shared.

Which cells pair: two cells of the same scope (a Workspace, or a report's
source), the same Benchmark Version and the same Agent Version, each with a
Model Configuration, and so necessarily different ones. A comparison holds
everything but the Model Configuration fixed. So two Agent Versions of one
Agent are never paired, not even with the same Model Configuration (Rewards of
two Agent Versions are never pooled, and a pair that differs in both would not
say which made the difference), and Agents that call no model (oracle, nop)
are bounds, never compared.

Order and ties: cells come out by scope, Benchmark Version, then mean
descending (no mean last), then label. A pair is taken in that order and its
better side is the one whose mean over the shared Tasks is higher; with equal
means, or no shared Task, the earlier cell is named first.

Sums are exact: DuckDB adds Rewards, costs and durations as DECIMAL(38, 18)
(each value rounded to 18 decimals first), means over Tasks are correctly
rounded sums over n (``math.fsum``), and the bootstrap adds on an exact grid.
So no number depends on the order Trials are read in or on which other cells
are scored alongside, two cells with equal sums have exactly equal means, and
a mean of equal values is that value. (DuckDB's DECIMAL-to-DOUBLE conversion is
deterministic but not always correctly rounded: a per-Task mean can differ in
its last bit from a sum of the doubles done in Python.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations

import duckdb
import numpy as np
import pyarrow as pa

from amber_pipeline.scoring import bootstrap
from amber_pipeline.scoring.bootstrap import DEFAULT_RESAMPLING, Interval, Resampling

_EXACT = "decimal(38, 18)"


@dataclass(frozen=True, eq=False)
class CellScore:
    """One cell's score, with the per-Task means it came from."""

    scope: str
    cell: str
    benchmark: str
    agent: str
    agent_version: str
    model: str | None
    n_tasks: int  # Tasks with a per-Task mean
    n_trials: int
    errored: int
    mean: float  # NaN when no Task was scored
    ci95: Interval
    cost_usd: float
    mean_duration_sec: float  # NaN when no duration is known
    tasks: tuple[str, ...] = field(repr=False)  # the scored Tasks, in name order
    task_means: np.ndarray = field(repr=False)  # their means, in that order
    task_rewards: pa.Table = field(repr=False)  # every Task's scope, cell, task, n_trials, n_errored, mean_reward

    @property
    def label(self) -> str:
        return self.agent if self.model is None else f"{self.agent} / {self.model}"


@dataclass(frozen=True)
class PairedDifference:
    """The mean over the shared Tasks of one cell's per-Task means minus another's, with its paired interval."""

    mean: float  # NaN with no shared Task
    ci95: Interval
    n_shared_tasks: int

    @property
    def too_close_to_call(self) -> bool:
        return self.n_shared_tasks < 2 or self.ci95.contains(0.0)


@dataclass(frozen=True, eq=False)
class Comparison:
    """Two cells that pair, the better first: ``difference`` is better minus worse (never negative)."""

    better: CellScore
    worse: CellScore
    difference: PairedDifference


@dataclass(frozen=True, eq=False)
class Scores:
    cells: list[CellScore]
    comparisons: list[Comparison]


def score(con: duckdb.DuckDBPyConnection, rows: str, resampling: Resampling = DEFAULT_RESAMPLING) -> Scores:
    """Score every cell of ``rows`` (a relation or query with the columns of ``SCORING_ROW_SCHEMA``) and compare
    the cells that pair.

    Binds no parameter, so ``rows`` carries its values as literals (``warehouse.sql``): binding one, or
    converting Python values to Arrow, makes DuckDB and pyarrow import pandas, a third of a second.
    """
    try:
        con.execute(f"""
            create or replace temp table _task_sums as
            select scope, cell, task, count(*) as n_trials, count(reward) as n_scored,
                   count(*) filter (where errored) as n_errored,
                   sum(reward::{_EXACT}) as reward_sum, sum(coalesce(cost_usd, 0)::{_EXACT}) as cost,
                   sum(duration_sec::{_EXACT}) as duration, count(duration_sec) as n_durations
            from (select * replace (case when errored then null else reward end as reward) from ({rows}))
            group by scope, cell, task""")
    except (duckdb.ConversionException, duckdb.InvalidInputException) as e:
        raise ValueError(f"a Trial's Reward, cost or duration is not a finite number ({e})") from None
    con.execute("""
        create or replace temp table _task_rewards as
        select scope, cell, task, n_trials, n_errored,
               case when n_scored > 0 then reward_sum::double / n_scored end as mean_reward
        from _task_sums""")
    rewards = con.execute("select * from _task_rewards order by scope, cell, task").to_arrow_table()
    tasks = con.execute("select task, coalesce(mean_reward, 'nan'::double) as mean from _task_rewards "
                        "order by scope, cell, task").fetchnumpy()
    cells = con.execute(f"""
        select s.scope, s.cell, m.benchmark, m.agent, m.agent_version, m.model, s.n_trials, s.n_errored,
               s.cost::double as cost, s.duration::double / nullif(s.n_durations, 0) as mean_duration, s.n_task_rows
        from (select scope, cell, sum(n_trials) as n_trials, sum(n_errored) as n_errored, sum(cost) as cost,
                     sum(duration) as duration, sum(n_durations) as n_durations, count(*) as n_task_rows
              from _task_sums group by scope, cell) s
        join (select scope, cell, min(benchmark) as benchmark, min(agent) as agent,
                     min(agent_version) as agent_version, min(model) as model
              from ({rows}) group by scope, cell) m using (scope, cell)
        order by s.scope, s.cell""").fetchall()
    con.execute("drop table _task_sums; drop table _task_rewards")
    scored, resampled = _cell_scores(cells, rewards, tasks["task"], np.asarray(tasks["mean"], dtype=np.float64),
                                     resampling)
    return Scores(scored, _comparisons(scored, resampled))


def _cell_scores(cells: list[tuple], rewards: pa.Table, names: np.ndarray, means: np.ndarray,
                 resampling: Resampling) -> tuple[list[CellScore], _Resampled]:
    """Per-Task means and scores of every cell, and their resample sums (which comparisons reuse).

    ``rewards``, ``names`` and ``means`` (NaN: no scored Trial) are per Task, sorted by (scope, cell, Task);
    ``cells`` are sorted by (scope, cell), each with its number of Tasks.
    """
    vectors, task_names, slices = [], [], []
    lo = 0
    for *_, n_rows in cells:
        slices.append(rewards.slice(lo, n_rows))
        has = ~np.isnan(means[lo:lo + n_rows])
        vectors.append(np.ascontiguousarray(means[lo:lo + n_rows][has]))
        task_names.append(tuple(names[lo:lo + n_rows][has].tolist()))
        lo += n_rows
    resampled = _Resampled(vectors, resampling)
    intervals = resampled.intervals()
    out = [CellScore(scope=scope, cell=cell, benchmark=benchmark, agent=agent, agent_version=agent_version,
                     model=model, n_tasks=len(v), n_trials=int(n_trials), errored=int(n_errored),
                     mean=mean_of(v), ci95=ci, cost_usd=float(cost),
                     mean_duration_sec=math.nan if duration is None else float(duration),
                     tasks=names_, task_means=v, task_rewards=rows)
           for (scope, cell, benchmark, agent, agent_version, model, n_trials, n_errored, cost, duration, _),
               v, names_, rows, ci in zip(cells, vectors, task_names, slices, intervals, strict=True)]
    resampled.index = {(c.scope, c.cell): i for i, c in enumerate(out)}
    return sorted(out, key=_order), resampled


class _Resampled(bootstrap.ResampleSums):
    """The cells' resample sums, found again by cell for their comparisons."""

    def __init__(self, vectors: list[np.ndarray], resampling: Resampling):
        super().__init__(vectors, resampling)
        self.index: dict[tuple[str, str], int] = {}  # (scope, cell) -> position, set once the cells are scored

    def sums_of(self, cell: CellScore) -> tuple[np.ndarray, int] | None:
        """A scored cell's resample sums and grid bits, when this resampling holds them."""
        i = self.index.get((cell.scope, cell.cell))
        sums = None if i is None else self.sums[i]
        return None if i is None or sums is None else (sums, int(self.bits[i]))


def mean_of(values: np.ndarray) -> float:
    """The mean of a vector: its exact (correctly rounded) sum over n, and exactly the value when all are equal,
    so it never falls outside its own degenerate interval; NaN when empty."""
    if values.size == 0:
        return math.nan
    if np.all(values == values[0]):
        return float(values[0])
    return math.fsum(values.tolist()) / values.size


def _order(c: CellScore) -> tuple:
    return (c.scope, c.benchmark, math.isnan(c.mean), -c.mean if not math.isnan(c.mean) else 0.0, c.label)


def pairs(cells: list[CellScore]) -> list[tuple[CellScore, CellScore]]:
    """The cells that pair (see the module's docstring), each pair in cell order."""
    groups: dict[tuple[str, str, str], list[CellScore]] = {}
    for c in cells:
        if c.model is not None:
            groups.setdefault((c.scope, c.benchmark, c.agent_version), []).append(c)
    return [(a, b) for members in groups.values() for a, b in combinations(sorted(members, key=_order), 2)]


def _comparisons(cells: list[CellScore], resampled: _Resampled) -> list[Comparison]:
    """Every comparison of cells that pair, the better side first."""
    oriented, shared = [], []
    exact = _ExactSums()
    for a, b in pairs(cells):
        x, y, d = _shared(a, b)
        flip = exact.of(y) > exact.of(x)  # exact sums: equal means never flip
        oriented.append((b, a) if flip else (a, b))
        shared.append((y, x, -d) if flip else (x, y, d))
    return [Comparison(a, b, d)
            for (a, b), d in zip(oriented, _differences(oriented, resampled, shared, exact), strict=True)]


class _ExactSums:
    """Correctly rounded sums of vectors, each summed once (a cell's means are shared by all its pairs)."""

    def __init__(self) -> None:
        self._done: dict[int, tuple[np.ndarray, float]] = {}

    def of(self, values: np.ndarray) -> float:
        found = self._done.get(id(values))
        if found is None or found[0] is not values:
            found = (values, math.fsum(values.tolist()))
            self._done[id(values)] = found
        return found[1]


def difference(a: CellScore, b: CellScore, resampling: Resampling = DEFAULT_RESAMPLING) -> PairedDifference:
    """``a`` minus ``b`` over the Tasks both scored, whichever is better: the same numbers a comparison of
    the two gives (for cells that do not pair, such as the two sides of `amber compare`)."""
    [d] = _differences([(a, b)], _Resampled([], resampling), [_shared(a, b)], _ExactSums())
    return d


def _shared(a: CellScore, b: CellScore) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each side's means over the Tasks both scored (in name order), and their difference ``a - b``."""
    if a.tasks == b.tasks:
        x, y = a.task_means, b.task_means
    else:
        _, ia, ib = np.intersect1d(np.array(a.tasks, dtype=object), np.array(b.tasks, dtype=object),
                                   assume_unique=True, return_indices=True)
        x, y = a.task_means[ia], b.task_means[ib]
    return x, y, x - y


def _differences(found: list[tuple[CellScore, CellScore]], resampled: _Resampled,
                 shared: list[tuple[np.ndarray, np.ndarray, np.ndarray]], exact: _ExactSums) -> list[PairedDifference]:
    """``a - b`` over the shared Tasks of each pair (``shared``: :func:`_shared` of each), with its paired interval.

    The paired resample of ``m`` shared Tasks puts both sides on the grid of
    ``m`` Tasks and their largest magnitude (``bootstrap.py``) and subtracts
    their exact resample sums under the rows for ``m``. Two cells over one set
    of Tasks were already resampled so, and on that grid when theirs agree:
    their sums are subtracted with no new product. Other pairs share one
    product per number of shared Tasks.
    """
    out: list[tuple[np.ndarray, Interval | None]] = []
    reused: dict[int, list[tuple[int, np.ndarray, int]]] = {}  # m -> (pair, resample sums, grid bits)
    fresh: dict[int, list[int]] = {}  # m -> pairs
    for i, ((a, b), (x, y, d)) in enumerate(zip(found, shared, strict=True)):
        out.append((d, bootstrap.degenerate(d)))
        if out[i][1] is not None:
            continue
        bits = bootstrap.grid_bits(d.size, max(float(np.abs(x).max()), float(np.abs(y).max())))
        sa, sb = resampled.sums_of(a), resampled.sums_of(b)
        if a.tasks == b.tasks and sa is not None and sb is not None and sa[1] == sb[1] == bits:
            reused.setdefault(d.size, []).append((i, sa[0] - sb[0], bits))
        else:
            fresh.setdefault(d.size, []).append(i)
    draw = bootstrap.seeded_counts(resampled.resampling)
    for m, members in fresh.items():
        grid = []
        for i in members:
            x, y, _ = shared[i]
            bits = bootstrap.grid_bits(m, max(float(np.abs(x).max()), float(np.abs(y).max())))
            grid.append((np.rint(np.ldexp(x, bits)) - np.rint(np.ldexp(y, bits)), bits))
        sums = bootstrap.resample_sums(np.stack([g for g, _ in grid]), draw(m))
        reused.setdefault(m, []).extend((i, row, bits) for i, row, (_, bits) in zip(members, sums, grid, strict=True))
    confidence = resampled.resampling.confidence
    cis: dict[int, Interval] = {}
    for m, items in reused.items():
        sums = np.stack([row for _, row, _ in items])
        bits_of = np.array([bits for _, _, bits in items], dtype=np.int64)
        cis.update(zip([i for i, _, _ in items], bootstrap.percentile_intervals(sums, bits_of, m, confidence),
                       strict=True))
    return [PairedDifference(_mean_difference(x, y, d, exact), fixed or cis.get(i, bootstrap.NO_INTERVAL),
                             int(d.size))
            for i, ((x, y, d), (_, fixed)) in enumerate(zip(shared, out, strict=True))]


def _mean_difference(x: np.ndarray, y: np.ndarray, d: np.ndarray, exact: _ExactSums) -> float:
    """The mean of ``x - y``: the difference of the sides' exact sums over n (so two sides with equal sums
    differ by exactly 0), and exactly the difference when every Task's is the same; NaN with no Task."""
    if d.size == 0:
        return math.nan
    if np.all(d == d[0]):
        return float(d[0])
    return (exact.of(x) - exact.of(y)) / d.size
