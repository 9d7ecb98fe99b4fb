"""How long re-aggregating a million Trials takes, how much memory it needs, against a plain DuckDB group-by.

Writes synthetic Trial rows (TRIAL_SCHEMA, one Parquet file per cell and Job, in
the real layout ``warehouse/trials/<cell file id>/<job>.parquet``) to a temporary
AMBER_HOME: one Workspace, one Benchmark Version, 2 Agents x 25 Model
Configurations = 50 cells, 2,000 Tasks, 10 attempts each (1,000,000 rows), 0/1
Rewards with a per-cell pass rate and per-Task difficulty, ~0.3% Errored,
fractional costs and durations. Then, each in a FRESH child process (cold
imports and caches), alternating, three times each:

* ``store.reaggregate(wh, force=True)``: 50 cell scores with 10,000-resample
  bootstrap intervals, 2 x C(25, 2) = 600 paired comparisons, every file written.
  The call's own wall time (perf_counter around it, in the child) and the
  child's peak RSS (ru_maxrss at its end);
* the baseline: a plain DuckDB ``select cell_key, task_name, avg(reward) ...
  group by all`` over the same files, fetched, timed the same way.

Finally a sample of the written numbers is checked against an independent
computation: per-Task means with NumPy from the Parquet rows, each cell's
interval from ``bootstrap.mean_intervals`` on that vector (must be ==), and a
gather bootstrap over the documented resample indices for cells and comparisons.
Exits non-zero on a mismatch. `--smoke` is a small run for the test suite:
20,000 rows (40 Tasks), 1,000 resamples, one child of each kind.

    .venv/bin/python bench/aggregate_scale.py [--rows 1000000] [--resamples 10000] [--repeats 3] [--smoke] [--keep]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from synthetic import Trials, run_child, scratch_home, trial_table

from amber_pipeline.cells import Cell, cell_file_id
from amber_pipeline.paths import AmberPaths
from amber_pipeline.scoring import bootstrap, store
from amber_pipeline.scoring.bootstrap import Resampling
from amber_pipeline.warehouse.catalog import Warehouse

WORKSPACE = "bench"
BV = "b" * 64
AGENTS = ("terminus", "codex")
N_MODELS = 25
ATTEMPTS = 10
REPEATS = 3

# The two measured children. Each prints one JSON line: the timed call's seconds and its peak RSS.
REAGGREGATE_CHILD = """
import json, resource, sys, time
from pathlib import Path
from amber_pipeline.paths import AmberPaths
from amber_pipeline.scoring import store
from amber_pipeline.scoring.bootstrap import Resampling
from amber_pipeline.warehouse.catalog import Warehouse
wh = Warehouse(AmberPaths(Path(sys.argv[1])))
resampling = Resampling(n_resamples=int(sys.argv[2]))
t0 = time.perf_counter()
result = store.reaggregate(wh, resampling=resampling, force=True)
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "cells": result.cells, "comparisons": result.comparisons}))
"""

GROUPBY_CHILD = """
import json, resource, sys, time
from pathlib import Path
import duckdb
t0 = time.perf_counter()
files = sorted(str(p) for p in Path(sys.argv[1], "warehouse", "trials").glob("*/*.parquet"))
listed = "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + "]"  # literals: binding imports pandas
con = duckdb.connect()
rows = con.execute(f"select cell_key, task_name, avg(reward) as mean_reward from read_parquet({listed}) "
                   "where outcome is distinct from 'cancelled' group by all").fetchall()
seconds = time.perf_counter() - t0
con.close()
print(json.dumps({"seconds": seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "groups": len(rows)}))
"""


def cells() -> list[Cell]:
    return [Cell(BV, agent, f"{agent}-spec", f"model-{m:02d}") for agent in AGENTS for m in range(N_MODELS)]


def cell_table(cell: Cell, job_id: str, n_tasks: int, rate: float, difficulty: np.ndarray,
               rng: np.random.Generator) -> pa.Table:
    n = n_tasks * ATTEMPTS
    task = np.repeat(np.arange(n_tasks), ATTEMPTS)
    p = np.clip(rate + difficulty[task], 0.02, 0.98)
    errored = rng.random(n) < 0.003
    in_tok = rng.integers(1_000, 20_000, n)
    out_tok = rng.integers(100, 4_000, n)
    trials = Trials(task=task, attempt=np.tile(np.arange(1, ATTEMPTS + 1, dtype=np.int32), n_tasks),
                    reward=(rng.random(n) < p).astype(np.float64), errored=errored, input_tokens=in_tok,
                    output_tokens=out_tok, cost_usd=in_tok * 3e-6 + out_tok * 15e-6,
                    duration_sec=rng.gamma(4.0, 15.0, n))
    return trial_table(cell, WORKSPACE, job_id, BV, trials, datetime(2026, 1, 1, tzinfo=UTC), "AgentTimeoutError")


def generate(wh: Warehouse, rows: int) -> tuple[int, int]:
    all_cells = cells()
    n_tasks = max(2, rows // (len(all_cells) * ATTEMPTS))
    rng = np.random.default_rng(7)
    difficulty = rng.uniform(-0.35, 0.35, n_tasks)
    total = 0
    for i, cell in enumerate(all_cells):
        rate = 0.3 + 0.4 * (i % N_MODELS) / N_MODELS + (0.05 if cell.agent == "codex" else 0.0)
        table = cell_table(cell, f"job-{i:03d}", n_tasks, rate, difficulty, rng)
        wh.write_parquet(table, wh.trials_file(cell.file_id, f"job-{i:03d}"))
        total += table.num_rows
    return total, n_tasks


# --- the independent check ------------------------------------------------------------------------------------


def task_means(wh: Warehouse, cell_key: str) -> tuple[np.ndarray, np.ndarray, int, int]:
    """A cell's per-Task means from its Parquet rows with NumPy, in Task-name order; its Trials and Errored."""
    t = pq.read_table(wh.paths.trials / cell_file_id(cell_key), columns=["task_name", "reward", "outcome", "errored"])
    outcome = np.asarray(t["outcome"].to_pylist(), dtype=object)
    keep = outcome != "cancelled"
    names = np.asarray(t["task_name"].to_pylist(), dtype=object)[keep]
    reward = np.asarray(t["reward"].to_numpy(zero_copy_only=False), dtype=np.float64)[keep]  # NaN: no Reward
    errored = np.asarray(t["errored"].to_pylist(), dtype=bool)[keep]
    tasks, which = np.unique(names, return_inverse=True)
    scored = ~np.isnan(reward)
    sums = np.bincount(which[scored], weights=reward[scored], minlength=tasks.size)  # 0/1 Rewards: exact
    counts = np.bincount(which[scored], minlength=tasks.size)
    has = counts > 0
    return tasks[has], sums[has] / counts[has], int(keep.sum()), int(errored.sum())


def gather_interval(d: np.ndarray, resampling: Resampling) -> tuple[float, float]:
    """A textbook percentile bootstrap by gathering, over the indices bootstrap.py documents."""
    idx = np.random.default_rng([resampling.seed, d.size]).integers(0, d.size, size=(resampling.n_resamples, d.size))
    tail = (1 - resampling.confidence) / 2
    means = np.empty(resampling.n_resamples)
    for lo in range(0, resampling.n_resamples, 1000):  # in slices: 10,000 x 2,000 gathered at once is 160 MB
        means[lo:lo + 1000] = d[idx[lo:lo + 1000]].mean(axis=1)
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def verify(wh: Warehouse, resampling: Resampling, n_cells: int = 3, n_comparisons: int = 3) -> list[str]:
    """Mismatches between the written numbers and the independent computation, for a sample."""
    aggregates = {r["cell_key"]: r for p in wh.paths.aggregates.glob("*/*.parquet")
                  for r in pq.read_table(p).to_pylist()}
    comparisons = pq.read_table(store.comparisons_file(wh)).to_pylist()
    pick = random.Random(1)
    bad: list[str] = []
    mine: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def means_of(key: str) -> tuple[np.ndarray, np.ndarray]:
        if key not in mine:
            tasks, means, _, _ = task_means(wh, key)
            mine[key] = (tasks, means)
        return mine[key]

    for key in pick.sample(sorted(aggregates), n_cells):
        row = aggregates[key]
        tasks, means, n_trials, n_errored = task_means(wh, key)
        mine[key] = (tasks, means)
        [ci] = bootstrap.mean_intervals([means], resampling)
        # the documented mean: the correctly rounded sum of the per-Task means, over n
        want = {"n_tasks": tasks.size, "n_trials": n_trials, "errored": n_errored,
                "mean_reward": math.fsum(means.tolist()) / means.size, "ci_low": ci.low, "ci_high": ci.high}
        got = {k: row[k] for k in want}
        if got != want:
            bad.append(f"cell {key}: written {got} != independent {want}")
        stored = pq.read_table(wh.rewards_file(cell_file_id(key), WORKSPACE)).to_pylist()
        stored_means = [(r["task_name"], r["mean_reward"]) for r in stored if r["mean_reward"] is not None]
        if stored_means != list(zip(tasks.tolist(), means.tolist(), strict=True)):
            bad.append(f"cell {key}: per-Task means differ")
        low, high = gather_interval(means, resampling)
        if abs(low - ci.low) > 1e-12 or abs(high - ci.high) > 1e-12:
            bad.append(f"cell {key}: ({ci.low}, {ci.high}) vs gather bootstrap ({low}, {high})")
    for row in pick.sample(comparisons, n_comparisons):
        (ta, a), (tb, b) = means_of(row["better_cell_key"]), means_of(row["worse_cell_key"])
        shared, ia, ib = np.intersect1d(ta, tb, assume_unique=True, return_indices=True)
        d = a[ia] - b[ib]
        low, high = gather_interval(d, resampling)
        # the documented mean difference: the sides' correctly rounded sums, subtracted, over n
        want = {"n_shared_tasks": shared.size,
                "mean_difference": (math.fsum(a[ia].tolist()) - math.fsum(b[ib].tolist())) / shared.size}
        got = {k: row[k] for k in want}
        if got != want:
            bad.append(f"comparison {row['better']} vs {row['worse']}: written {got} != independent {want}")
        # d is not on a binary grid (per-Task means are k/9 and k/10): the gather's sums round, the
        # engine's do not, so the two agree to far below a Monte Carlo error, not to the last bit.
        if abs(low - row["ci_low"]) > 1e-12 or abs(high - row["ci_high"]) > 1e-12:
            bad.append(f"comparison {row['better']} vs {row['worse']}: ({row['ci_low']}, {row['ci_high']}) "
                       f"vs gather bootstrap ({low}, {high})")
        if row["too_close_to_call"] != (low <= 0.0 <= high):
            bad.append(f"comparison {row['better']} vs {row['worse']}: verdict differs")
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--resamples", type=int, default=bootstrap.N_RESAMPLES)
    parser.add_argument("--repeats", type=int, default=REPEATS, help="children of each kind (default 3)")
    parser.add_argument("--smoke", action="store_true", help="20,000 rows, 1,000 resamples, one child each")
    parser.add_argument("--keep", action="store_true", help="keep the temporary AMBER_HOME")
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.resamples, args.repeats = 20_000, 1_000, 1
    resampling = Resampling(n_resamples=args.resamples)

    with scratch_home("amber-aggbench-", args.keep) as home:
        wh = Warehouse(AmberPaths(home))
        t0 = time.perf_counter()
        rows, n_tasks = generate(wh, args.rows)
        print(f"generated {rows:,} Trial rows ({len(cells())} cells x {n_tasks:,} Tasks x {ATTEMPTS} attempts, "
              f"~0.3% Errored) in {time.perf_counter() - t0:.1f} s under {home}")
        print(f"each measurement in a fresh process ({sys.executable} -c ...), {args.repeats} times, alternating")

        reaggregations, groupbys = [], []
        for i in range(args.repeats):
            r = run_child(REAGGREGATE_CHILD, [str(home), str(args.resamples)])
            reaggregations.append(r)
            print(f"  run {i + 1}: reaggregate(force=True) {r['seconds']:.3f} s (child process {r['wall']:.2f} s, "
                  f"peak RSS {r['rss_mb']:.0f} MB): {r['cells']} cells, {r['comparisons']} comparisons")
            g = run_child(GROUPBY_CHILD, [str(home)])
            groupbys.append(g)
            print(f"  run {i + 1}: plain DuckDB group-by {g['seconds']:.3f} s (child process {g['wall']:.2f} s, "
                  f"peak RSS {g['rss_mb']:.0f} MB): {g['groups']:,} (cell, Task) groups fetched")

        reagg = statistics.median(r["seconds"] for r in reaggregations)
        groupby = statistics.median(g["seconds"] for g in groupbys)
        rss = max(r["rss_mb"] for r in reaggregations)
        walls = statistics.median(r["wall"] for r in reaggregations), statistics.median(g["wall"] for g in groupbys)
        print(f"median whole child process, start to exit: reaggregate {walls[0]:.2f} s, group-by {walls[1]:.2f} s")

        t0 = time.perf_counter()
        again = store.reaggregate(wh, resampling=resampling)
        print(f"a second reaggregate with nothing changed (this process): changed={again.changed} "
              f"in {(time.perf_counter() - t0) * 1000:.1f} ms")

        bad = verify(wh, resampling)
        print("3 cells + 3 comparisons against NumPy per-Task means, bootstrap.mean_intervals (==) and a gather "
              "bootstrap over the documented indices (1e-12): "
              + ("identical" if not bad else f"{len(bad)} MISMATCHES"))
        for line in bad:
            print("  " + line)

        print(f"FIGURE reaggregate_seconds {reagg:.3f} s")
        print(f"FIGURE reaggregate_peak_rss_mb {rss:.0f} MB")
        print(f"FIGURE plain_groupby_seconds {groupby:.3f} s")
        print(f"FIGURE reaggregate_vs_groupby_ratio {reagg / groupby:.1f} x")
        targets = [("reaggregate at most 2 s", reagg <= 2.0), ("peak RSS at most 1 GB", rss <= 1024)]
        print("targets: " + ", ".join(f"{name}: {'met' if ok else 'MISSED'}" for name, ok in targets))
        if bad:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
