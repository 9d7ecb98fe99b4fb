"""Jobs that stop once their comparison is decided (``--stop-when-decided``).

Such a Job runs its Benchmark Version's Tasks in one random order, fixed by a
seed recorded in its request (`task_order`), the same for every cell, each
Task's Trials together. So the Tasks a cell has run are a random sample of
the Version's, drawn without replacement. As Trials are stored, `update` reads
every cell's Trials of the Job, takes the longest prefix of that order that
every compared cell has finished, and gives each pair of Model
Configurations an anytime-valid confidence sequence for its difference in
mean Reward over the WHOLE Version (`scoring.sequential`). Once every pair is
decided (the sequence excludes 0, or the margin on one side, or lies within
(-M, +M)), the decision is recorded on the Job (`jobs.stop`): no cell starts
another Trial, the Trials in flight finish and are charged, and when the last
cell ends the Job completes saying why and after how many Tasks
(`lifecycle._end_if_idle`), its unspent reservation refunded as for any Job.

The pairs are those the report compares (`scoring.engine.pairs`: a Job's
cells with a Model Configuration, two at a time), and the chance that any of
their intervals ever misses is held to 5% together (Bonferroni,
`sequential.family_alpha`). A Task is finished in a cell once each of its
attempts has a result (not cancelled); its difference is the mean Reward of
its scored attempts in one cell minus the other's. A Task with no scored
attempt in a cell (every attempt Errored) has no difference: it is left out
of the pair's sequence and of the population it is drawn from, as the report
leaves it out of both cells' scores; the Trial noise bound then takes the
fewest scored attempts of any Task used. A decision, once recorded, is never
revised: the interval at the stop is what the report shows.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from amber_pipeline.benchmarks import registry
from amber_pipeline.cells import NO_MODEL, cell_file_id
from amber_pipeline.jobs.decisions import ALPHA, JobDecision, PairInterval, Stopping
from amber_pipeline.jobs.outcomes import Kind
from amber_pipeline.jobs.records import Job, JobCell, cells_of, job_money, trials_finished
from amber_pipeline.warehouse.catalog import Warehouse


@dataclass(frozen=True)
class _Finished:
    """A cell's Task whose every attempt has a result: the mean Reward of its scored ones, how many scored."""

    mean: float | None
    scored: int


@dataclass(frozen=True)
class StoppingRule:
    """How a Job run with stop_when_decided runs and decides: its Tasks' order, its Trials per Task, its margin."""

    order: tuple[str, ...]
    attempts: int
    margin_points: float

    @classmethod
    def of(cls, job: Job, task_names: Sequence[str]) -> StoppingRule | None:
        """The Job's rule (its Version's ``task_names`` in its seeded order), or None for a Job without the flag."""
        request = job.request
        if request is None or not request.stop_when_decided or request.order_seed is None:
            return None
        return cls(tuple(task_order(task_names, request.order_seed)), job.trials_per_task,
                   request.margin_points or 0.0)


def task_order(task_names: Sequence[str], seed: int) -> list[str]:
    """The Job's random order of its Version's Tasks: sorted by a hash of the seed and the name, so the same
    seed gives the same order to every cell, every run and every later reader, whatever the Tasks' listing."""
    return sorted(task_names, key=lambda n: (hashlib.sha256(f"{seed}\0{n}".encode()).digest(), n))


def compared_cells(cells: Sequence[JobCell]) -> list[JobCell]:
    """The cells a Job compares: those with a Model Configuration (the bounds are never compared)."""
    return [c for c in cells if c.model_configuration != NO_MODEL]


def decide(rule: StoppingRule, finished: dict[str, dict[str, _Finished]], cells: Sequence[JobCell]) -> JobDecision:
    """Every pair's interval after the longest prefix of the rule's order that each compared cell finished
    (``finished``: each compared cell's finished Tasks by name, `finished_tasks`)."""
    import numpy as np  # only for a stopping Job's cell run or report

    from amber_pipeline.scoring import sequential

    order, attempts, margin_points = rule.order, rule.attempts, rule.margin_points
    compared = compared_cells(cells)
    seen = 0
    for name in order:
        if not all(name in finished.get(c.cell_key, {}) for c in compared):
            break
        seen += 1
    prefix = order[:seen]
    pairs = list(combinations(compared, 2))
    alpha = sequential.family_alpha(ALPHA, len(pairs)) if pairs else ALPHA
    intervals = []
    for a, b in pairs:
        fa, fb = finished.get(a.cell_key, {}), finished.get(b.cell_key, {})
        both = [(fa[n], fb[n]) for n in prefix if fa[n].mean is not None and fb[n].mean is not None]
        left_out = seen - len(both)
        differences = [x.mean - y.mean for x, y in both]  # type: ignore[operator]
        k = min((min(x.scored, y.scored) for x, y in both), default=attempts)
        state = sequential.sequential_state(np.asarray(differences, dtype=np.float64), len(order) - left_out,
                                            alpha, k, margin_points / 100.0)
        flip = state.verdict == "b_better"  # the better side is named first, its interval for better minus worse
        if flip:
            a, b = b, a
        lower, upper = (-state.upper, -state.lower) if flip else (state.lower, state.upper)
        intervals.append(PairInterval(a=a.label, b=b.label, a_cell=a.cell_key, b_cell=b.cell_key,
                                      lower_points=round(100 * lower, 6), upper_points=round(100 * upper, 6),
                                      verdict="a_better" if flip else state.verdict, tasks_compared=len(both)))
    return JobDecision(tasks_seen=seen, tasks_total=len(order), margin_points=margin_points,
                       alpha=ALPHA, pairs=intervals)


def finished_tasks(rows: Sequence[dict], attempts: int) -> dict[str, _Finished]:
    """A cell's finished Tasks from its stored Trial rows (task_name, attempt, outcome, reward)."""
    by_task: dict[str, dict[int, dict]] = defaultdict(dict)
    for r in rows:
        if r["outcome"] != Kind.CANCELLED:
            by_task[r["task_name"]][r["attempt"]] = r
    out = {}
    for name, tried in by_task.items():
        if any(a not in tried for a in range(1, attempts + 1)):
            continue
        rewards = [min(max(float(r["reward"]), 0.0), 1.0) for r in tried.values()
                   if r["outcome"] == Kind.SCORED and r["reward"] is not None and math.isfinite(r["reward"])]
        out[name] = _Finished(math.fsum(rewards) / len(rewards) if rewards else None, len(rewards))
    return out


def current(wh: Warehouse, job_id: str, rule: StoppingRule, cells: Sequence[JobCell] | None = None) -> JobDecision:
    """The Job's decision from the Trials its cells have stored so far."""
    cells = list(cells) if cells is not None else cells_of(wh, job_id)
    finished = {}
    for c in compared_cells(cells):
        table = wh.read_parquet(wh.trials_file(cell_file_id(c.cell_key), job_id),
                                ["task_name", "attempt", "outcome", "reward"])
        finished[c.cell_key] = finished_tasks([] if table is None else table.to_pylist(), rule.attempts)
    return decide(rule, finished, cells)


def recorded(wh: Warehouse, job_id: str) -> JobDecision | None:
    """The decision a Job stopped on, if it did."""
    with wh.read() as con:
        row = con.execute("select stop from jobs where id = ?", [job_id]).fetchone()
    return None if row is None or row[0] is None else JobDecision.model_validate_json(row[0])


def update(wh: Warehouse, job_id: str, rule: StoppingRule) -> None:
    """Decide the running Job from its stored Trials, and record the decision once every pair is decided (the
    first cell run to see it records it; a Job that already stopped or decided keeps what it has)."""
    if recorded(wh, job_id) is not None:
        return
    decision = current(wh, job_id, rule)
    if decision.decided:
        with wh.write(job=job_id) as con:
            con.execute("update jobs set stop = ? where id = ? and stop is null and status = 'running'",
                        [decision.model_dump_json(), job_id])


def summary(wh: Warehouse, job: Job, cells: Sequence[JobCell] | None = None) -> Stopping | None:
    """What a Job run with stop_when_decided shows (its decision, the Trials it ran of those quoted, its money);
    None for any other Job."""
    if job.request is None or not job.request.stop_when_decided:
        return None
    cells = list(cells) if cells is not None else cells_of(wh, job.id)
    decision = job.stop
    if decision is None:
        version = registry.version(wh, job.benchmark_version_id, job.benchmark_owner)
        rule = StoppingRule.of(job, [t.name for t in version.tasks])
        if rule is None:
            return None
        decision = current(wh, job.id, rule, cells)
    money = job_money(wh, job.id)
    return Stopping(decision=decision, stopped_early=job.stop is not None and job.stop.early,
                    trials_run=trials_finished(wh, job.id), trials_planned=sum(c.n_trials for c in cells),
                    reserved_usd=float(money.reserved), charged_usd=float(money.charged),
                    refunded_usd=float(money.refunded))
