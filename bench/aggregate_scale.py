"""How long re-aggregating a million Trials takes, and how much memory it needs.

Writes synthetic Trial rows (TRIAL_SCHEMA, one Parquet file per cell and Job, in
the real layout ``warehouse/trials/<cell file id>/<job>.parquet``) to a temporary
AMBER_HOME: one Workspace, one Benchmark Version, 2 Agents x 25 Model
Configurations = 50 cells, 2,000 Tasks, 10 attempts each (1,000,000 rows), 0/1
Rewards with a per-cell pass rate and per-Task difficulty, ~0.3% Errored.
Then times ``aggregate.reaggregate`` (50 cell scores with 10,000-resample
bootstrap intervals, 2 x C(25, 2) = 600 paired comparisons) with its peak
memory, a second call (nothing changed), and checks a sample of the written
numbers against ``stats.cell_score`` / ``stats.paired_difference`` called directly.

    .venv/bin/python bench/aggregate_scale.py [--rows 1000000] [--resamples 10000] [--keep]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
import shutil
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from amber_pipeline.cells import Cell
from amber_pipeline.paths import AmberPaths
from amber_pipeline.scoring import bootstrap as stats
from amber_pipeline.scoring import reaggregation as aggregate
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import SCHEMA_VERSION, TRIAL_SCHEMA

WORKSPACE = "bench"
BV = "b" * 64
AGENTS = ("terminus", "codex")
N_MODELS = 25
ATTEMPTS = 10


def cells() -> list[Cell]:
    return [Cell(BV, agent, f"{agent}-spec", f"model-{m:02d}") for agent in AGENTS for m in range(N_MODELS)]


def cell_table(cell: Cell, job_id: str, n_tasks: int, rate: float, difficulty: np.ndarray,
               rng: np.random.Generator) -> pa.Table:
    n = n_tasks * ATTEMPTS
    task = np.repeat(np.arange(n_tasks), ATTEMPTS)
    attempt = np.tile(np.arange(1, ATTEMPTS + 1, dtype=np.int32), n_tasks)
    p = np.clip(rate + difficulty[task], 0.02, 0.98)
    errored = rng.random(n) < 0.003
    reward = np.where(errored, np.nan, (rng.random(n) < p).astype(np.float64))
    in_tok = rng.integers(1_000, 20_000, n)
    out_tok = rng.integers(100, 4_000, n)
    duration = rng.gamma(4.0, 15.0, n)
    started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=1)
    start_us = np.int64(started.timestamp() * 1e6) + np.arange(n, dtype=np.int64) * 60_000_000
    names = [f"task-{t:04d}" for t in range(n_tasks)]
    task_names = pa.array(names).take(pa.array(task))
    trial_names = [f"task-{t:04d}__{a}" for t, a in zip(task.tolist(), attempt.tolist(), strict=True)]
    cols = {
        "schema_version": pa.array(np.full(n, SCHEMA_VERSION, dtype=np.int32)),
        "workspace": pa.array([WORKSPACE] * n), "job_id": pa.array([job_id] * n),
        "cell_key": pa.array([cell.key] * n), "benchmark_version_id": pa.array([BV] * n),
        "task_name": task_names, "attempt": pa.array(attempt), "trial_name": pa.array(trial_names),
        "agent": pa.array([cell.agent] * n), "agent_version": pa.array([cell.agent_spec_id] * n),
        "model_configuration": pa.array([cell.model_configuration] * n),
        "outcome": pa.array(np.where(errored, "errored", "scored").tolist()),
        "reward": pa.array(reward, mask=errored), "errored": pa.array(errored),
        "retries": pa.array(np.zeros(n, dtype=np.int32)),
        "error_type": pa.array(np.where(errored, "AgentTimeoutError", "").tolist(), mask=~errored),
        "error_message": pa.array(np.where(errored, "timed out", "").tolist(), mask=~errored),
        "input_tokens": pa.array(in_tok), "output_tokens": pa.array(out_tok),
        "cost_usd": pa.array(in_tok * 3e-6 + out_tok * 15e-6),
        "started_at": pa.array(start_us, type=pa.timestamp("us", tz="UTC")),
        "finished_at": pa.array(start_us + (duration * 1e6).astype(np.int64), type=pa.timestamp("us", tz="UTC")),
        "duration_sec": pa.array(duration), "image_id": pa.array(["sha256:bench"] * n),
        "trial_dir": pa.array([f"runs/{job_id}/{cell.file_id}/{t}" for t in trial_names]),
    }
    return pa.Table.from_pydict(cols, schema=TRIAL_SCHEMA)


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


def verify(wh: Warehouse, n_resamples: int, n_cells: int = 2, n_comparisons: int = 3) -> str:
    """Recompute a sample of cells and comparisons with stats.cell_score / paired_difference directly."""
    means: dict[str, dict[str, float]] = {}
    for cell in cells():
        t = pq.read_table(wh.paths.trials / cell.file_id, columns=["task_name", "reward", "outcome"])
        t = t.filter(pa.compute.not_equal(t["outcome"], "cancelled"))
        means[cell.key] = stats.per_task_means(t["task_name"].to_pylist(), t["reward"].to_pylist())
    agg = pa.concat_tables(pq.read_table(p) for p in wh.paths.aggregates.glob("*/*.parquet")).to_pylist()
    comps = pq.read_table(aggregate.comparisons_file(wh)).to_pylist()
    pick = random.Random(1)
    bad = 0
    for row in pick.sample(agg, n_cells):
        s = stats.cell_score(means[row["cell_key"]], n_resamples=n_resamples)
        bad += (s.mean, s.ci95.low, s.ci95.high, s.n_tasks) != (row["mean_reward"], row["ci_low"], row["ci_high"],
                                                                 row["n_tasks"])
    for row in pick.sample(comps, n_comparisons):
        d = stats.paired_difference(means[row["better_cell_key"]], means[row["worse_cell_key"]],
                                    n_resamples=n_resamples)
        bad += (d.mean_difference, d.ci95.low, d.ci95.high, d.n_shared_tasks, d.too_close_to_call) != (
            row["mean_difference"], row["ci_low"], row["ci_high"], row["n_shared_tasks"], row["too_close_to_call"])
    return f"{n_cells} cells + {n_comparisons} comparisons vs stats directly: " + (
        "identical" if not bad else f"{bad} MISMATCHES")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--resamples", type=int, default=stats.N_RESAMPLES)
    parser.add_argument("--keep", action="store_true", help="keep the temporary AMBER_HOME")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="amber-aggbench-"))
    os.environ["AMBER_HOME"] = str(home)
    try:
        wh = Warehouse(AmberPaths(home))
        t0 = time.perf_counter()
        rows, n_tasks = generate(wh, args.rows)
        print(f"generated {rows:,} Trial rows ({len(cells())} cells x {n_tasks:,} Tasks x {ATTEMPTS} attempts) "
              f"in {time.perf_counter() - t0:.1f} s under {home}")
        one = np.random.default_rng(0).random(n_tasks)
        t0 = time.perf_counter()
        stats.bootstrap_mean_ci(one, n_resamples=args.resamples)
        single = time.perf_counter() - t0
        print(f"one stats.bootstrap_mean_ci over {n_tasks:,} Tasks x {args.resamples:,} resamples: {single:.2f} s "
              f"(x {50 + 2 * math.comb(N_MODELS, 2)} bootstraps called one by one: ~{single * 650:.0f} s)")

        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tracemalloc.start()
        first = aggregate.reaggregate(wh, n_resamples=args.resamples)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(f"reaggregate: changed={first.changed} cells={first.cells} comparisons={first.comparisons} "
              f"in {first.seconds:.1f} s (under tracemalloc)")
        print(f"  peak Python allocations (tracemalloc, NumPy included): {peak / 2**20:.0f} MiB; "
              f"process max RSS: {rss / 1024:.0f} MiB (before the call: {rss0 / 1024:.0f} MiB)")
        second = aggregate.reaggregate(wh, n_resamples=args.resamples)
        print(f"second call, nothing changed: changed={second.changed} in {second.seconds * 1000:.1f} ms")
        third = aggregate.reaggregate(wh, n_resamples=args.resamples, force=True)
        print(f"forced recompute (no tracemalloc): {third.seconds:.1f} s")
        print(verify(wh, args.resamples))
    finally:
        if args.keep:
            print(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
