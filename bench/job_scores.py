"""How long a finished Job takes to get its scores: from its Trial files to every cell's score written and
the Job's comparisons computed.

A 1,000-Task Job in one Workspace: terminus-2 with two Model Configurations,
plus the oracle and nop bounds, 3 Trials per Task (12,000 Trials), written as
the cell runs write them (one Trial Parquet file per cell and Job, the real
layout). Rewards are mostly 0/1 with some partial credit, per-Task difficulty
shared by both models, a few Errored Trials (not charged), costs from token
counts at list prices plus sandbox time, durations from a gamma distribution.

Measured in a FRESH child process (cold caches; imports before the clock
starts): ``store.write_cell`` for each of the Job's four cells, then the Job's
scores and comparisons (``engine.score`` over ``store.trial_rows`` of the
Job's files). Three children; the median is the figure. The goal is under 1 s.
`--smoke` is a small run for the test suite: 50 Tasks, one child.

    .venv/bin/python bench/job_scores.py [--tasks 1000] [--trials 3] [--repeats 3] [--smoke] [--keep]
"""

from __future__ import annotations

import argparse
import statistics
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
from synthetic import Trials, run_child, scratch_home, trial_table

from amber_pipeline.cells import NO_MODEL, Cell
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

WORKSPACE = "team"
JOB = "job-0001"
BV = "c0ffee" * 10 + "c0de"
REPEATS = 3
SANDBOX_USD_PER_SEC = 0.000014
# (Model Configuration, skill, input and output USD per token)
MODELS = {"model-strong": (0.12, 3e-6, 15e-6), "model-weak": (-0.08, 0.25e-6, 2e-6)}

CHILD = """
import json, resource, sys, time
t_start = time.perf_counter()
from pathlib import Path
import duckdb
from amber_pipeline.cells import cell_file_id
from amber_pipeline.paths import AmberPaths
from amber_pipeline.scoring import engine, store
from amber_pipeline.warehouse.catalog import Warehouse
imported = time.perf_counter()
home, job, keys = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
wh = Warehouse(AmberPaths(home))
t0 = time.perf_counter()
for key in keys:
    store.write_cell(wh, key)
written = time.perf_counter()
files = [wh.trials_file(cell_file_id(key), job) for key in keys]
con = duckdb.connect()
scores = engine.score(con, store.trial_rows(files))
done = time.perf_counter()
con.close()
print(json.dumps({
    "seconds": done - t0, "write_cells": written - t0, "job_scores": done - written, "imports": imported - t_start,
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "cells": [[c.label, c.n_tasks, c.n_trials, c.errored, c.mean, c.ci95.low, c.ci95.high, c.cost_usd,
               c.mean_duration_sec] for c in scores.cells],
    "comparisons": [[c.better.label, c.worse.label, c.difference.mean, c.difference.ci95.low, c.difference.ci95.high,
                     c.difference.n_shared_tasks, c.difference.too_close_to_call] for c in scores.comparisons]}))
"""


def job_cells() -> list[Cell]:
    return ([Cell(BV, "terminus-2", "terminus-2-spec", m) for m in MODELS]
            + [Cell(BV, "oracle", "oracle-spec", NO_MODEL), Cell(BV, "nop", "nop-spec", NO_MODEL)])


def cell_table(cell: Cell, n_tasks: int, trials: int, difficulty: np.ndarray, partial: np.ndarray,
               rng: np.random.Generator) -> pa.Table:
    n = n_tasks * trials
    task = np.repeat(np.arange(n_tasks), trials)
    duration = rng.gamma(3.0, 40.0, n)
    if cell.agent == "terminus-2":
        skill, usd_in, usd_out = MODELS[cell.model_configuration]
        p = np.clip(0.55 + skill + difficulty[task], 0.01, 0.99)
        passed = rng.random(n) < p
        # Tasks with several tests give partial credit: the share of 8 tests passed
        reward = np.where(partial[task], rng.binomial(8, p) / 8, passed.astype(float))
        in_tok = rng.integers(5_000, 120_000, n)
        out_tok = rng.integers(500, 12_000, n)
        cost = in_tok * usd_in + out_tok * usd_out + duration * SANDBOX_USD_PER_SEC
    else:
        reward = np.full(n, 1.0 if cell.agent == "oracle" else 0.0)
        in_tok = out_tok = np.zeros(n, dtype=np.int64)
        duration = duration / 4
        cost = duration * SANDBOX_USD_PER_SEC
    rows = Trials(task=task, attempt=np.tile(np.arange(1, trials + 1, dtype=np.int32), n_tasks), reward=reward,
                  errored=rng.random(n) < 0.004, input_tokens=in_tok, output_tokens=out_tok, cost_usd=cost,
                  duration_sec=duration)
    return trial_table(cell, WORKSPACE, JOB, BV, rows, datetime(2026, 12, 2, tzinfo=UTC), "SandboxBuildFailedError",
                       seconds_apart=1)


def generate(wh: Warehouse, n_tasks: int, trials: int) -> int:
    rng = np.random.default_rng(12)
    difficulty = rng.uniform(-0.45, 0.45, n_tasks)
    partial = rng.random(n_tasks) < 0.2
    rows = 0
    for cell in job_cells():
        table = cell_table(cell, n_tasks, trials, difficulty, partial, rng)
        wh.write_parquet(table, wh.trials_file(cell.file_id, JOB))
        rows += table.num_rows
    return rows


def child(home: Path) -> dict:
    return run_child(CHILD, [str(home), JOB, *(c.key for c in job_cells())])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=REPEATS, help="children, one after the other (default 3)")
    parser.add_argument("--smoke", action="store_true", help="50 Tasks, one child (for the test suite)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary AMBER_HOME")
    args = parser.parse_args()
    if args.smoke:
        args.tasks, args.repeats = 50, 1

    with scratch_home("amber-jobbench-", args.keep) as home:
        wh = Warehouse(AmberPaths(home))
        rows = generate(wh, args.tasks, args.trials)
        print(f"a finished Job: {rows:,} Trials ({len(job_cells())} cells x {args.tasks:,} Tasks x {args.trials}) "
              f"in {len(job_cells())} Trial files under {home}")
        runs = []
        for i in range(args.repeats):
            r = child(home)
            runs.append(r)
            print(f"  run {i + 1}: {r['seconds']:.3f} s = write_cell x {len(job_cells())} {r['write_cells']:.3f} s "
                  f"+ Job scores and comparisons {r['job_scores']:.3f} s (imports before the clock "
                  f"{r['imports']:.2f} s; whole child process {r['wall']:.2f} s; peak RSS {r['rss_mb']:.0f} MB)")
        last = runs[-1]
        for label, n_tasks, n_trials, errored, mean, low, high, cost, duration in last["cells"]:
            print(f"    {label:<26} {mean:.3f} [{low:.3f}, {high:.3f}]  {n_tasks} Tasks, {n_trials} Trials, "
                  f"{errored} Errored, ${cost:.2f}, {duration:.0f} s mean")
        for better, worse, mean, low, high, shared, close in last["comparisons"]:
            verdict = "too close to call" if close else f"{better} is better"
            print(f"    {better} - {worse}: {mean:+.3f} [{low:+.3f}, {high:+.3f}] over {shared} Tasks: {verdict}")
        median = statistics.median(r["seconds"] for r in runs)
        print(f"median whole child process, start to exit: {statistics.median(r['wall'] for r in runs):.2f} s")
        print(f"FIGURE job_scores_seconds {median:.3f} s")
        print(f"goal under 1 s: {'met' if median < 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
