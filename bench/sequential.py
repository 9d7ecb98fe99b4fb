"""Jobs that stop once their comparison is decided: wrong verdicts under the null, Trials saved, coverage.

Simulates whole Jobs of one pair of cells with ``scoring.sequential``: each Version's N Tasks get cell B's
success probability from a spread like real Benchmarks' (35% of Tasks Beta(0.3, 3), mostly failed; 35%
Beta(3, 0.3), mostly solved; 30% Beta(2, 2)), cell A's is B's shifted on the logit scale so that the
Version's expected difference is exactly the one asked, and each cell makes k = 3 Bernoulli Trials per
Task, in a random order. A Job stops after the first Task whose interval (alpha 0.05) decides, or runs
all N. Measured, over ``--jobs`` Jobs per setting (10,000 by default):

* null, same per-Task probabilities, margin 0, N = 100 and N = 500: the share of Jobs that stop with a
  "better" verdict (each N on its own line; the FIGURE is the larger). The same Jobs read by the papers'
  without-replacement interval as if Trials were noiseless are shown too: the pitfall the module avoids;
* a true difference of 10, 20 and 30 points on 200 Tasks, margin 0: the median share of the full Job's
  Trials a stopped Job runs (FIGURE at 20 points);
* coverage: the share of all these Jobs, plus -20 points and a null with a 10-point margin, whose
  interval at the stop contains the Version's expected difference;
* the demo's Job (replay-strong against replay-weak, 8 Tasks) in each of its 70 orders, at 3, 5 and 10
  Trials per Task: how many orders stop early. Eight Tasks are few: the interval decides only once the
  Tasks left cannot change the answer.

Goals: wrong verdicts <= 0.05, share at 20 points <= 0.40, coverage >= 0.95; the bench exits 1 if one
is missed. `--smoke` runs 200 Jobs per setting: the figures are then noisy and the goals not enforced.

    .venv/bin/python bench/sequential.py [--jobs 10000] [--seed 20260101] [--smoke]
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

import numpy as np

from amber_pipeline.scoring import sequential as sq

ATTEMPTS = 3
ALPHA = 0.05
NULL_SIZES = (100, 500)
EFFECT_TASKS = 200
EFFECTS = (10, 20, 30)
DEMO_ATTEMPTS = (3, 5, 10)


def wrong_better(jobs: sq.SimulatedJobs) -> float:
    """The share of Jobs stopped with "a_better" or "b_better" (wrong under the null)."""
    return float(np.isin(jobs.verdicts, [1, 2]).mean())


def describe(name: str, jobs: sq.SimulatedJobs) -> str:
    counts = np.bincount(jobs.verdicts, minlength=len(sq.VERDICTS)) / jobs.verdicts.size
    share = jobs.trials_share()
    verdicts = ", ".join(f"{v} {c:.3f}" for v, c in zip(sq.VERDICTS, counts, strict=True) if c > 0)
    return (f"  {name}: Trials share median {np.median(share):.3f} mean {share.mean():.3f}; verdicts {verdicts}; "
            f"covered {jobs.covered.mean():.4f}")


def demo_line(attempts: int) -> str:
    """The demo's Job (replay-strong against replay-weak on its 8 Tasks) in every order of its Tasks: where it
    stops, with ``attempts`` Trials per Task. The replays' per-Task differences are fixed (+1 on four Tasks, 0 on
    four), so only the order varies."""
    d = np.array([[1.0 if i in ones else 0.0 for i in range(8)] for ones in itertools.combinations(range(8), 4)])
    jobs = sq.stopped_jobs(d, np.full(len(d), 0.5), ALPHA, attempts)
    early = jobs.tasks_seen < 8
    after = ", ".join(map(str, sorted(set(jobs.tasks_seen[early].tolist())))) or "-"
    verdicts = ", ".join(f"{sq.VERDICTS[v]} {n}" for v, n in enumerate(np.bincount(jobs.verdicts, minlength=4)) if n)
    return (f"demo, 8 Tasks, {attempts} Trials per Task: {early.sum()} of {len(d)} orders stop early (after {after} "
            f"Tasks); verdicts after the last Task looked at: {verdicts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="simulated Jobs per setting (default 10,000)")
    parser.add_argument("--seed", type=int, default=20260101)
    parser.add_argument("--smoke", action="store_true", help="200 Jobs per setting; goals not enforced")
    args = parser.parse_args()
    if args.smoke:
        args.jobs = 200
    t0 = time.perf_counter()
    print(f"{args.jobs:,} simulated Jobs per setting, k = {ATTEMPTS} attempts, alpha {ALPHA}, seed {args.seed}")
    every: list[sq.SimulatedJobs] = []

    type1 = []
    for i, n in enumerate(NULL_SIZES):
        rng = np.random.default_rng([args.seed, 0, i])
        d, theta = sq.simulated_differences(rng, 0.0, n, ATTEMPTS, args.jobs)
        jobs = sq.stopped_jobs(d, theta, ALPHA, ATTEMPTS)
        naive = sq.stopped_jobs(d, theta, ALPHA, math.inf)
        every.append(jobs)
        type1.append(wrong_better(jobs))
        print(f"null, N = {n}: wrong 'better' verdicts {type1[-1]:.4f} (the WoR interval reading Trials as "
              f"noiseless: {wrong_better(naive):.4f})")
        print(describe(f"null N = {n}", jobs))

    shares = {}
    for i, points in enumerate((*EFFECTS, -20)):
        jobs = sq.simulate_stopped_jobs(points, EFFECT_TASKS, ATTEMPTS, ALPHA, 0.0, args.jobs, seed=args.seed + 1 + i)
        every.append(jobs)
        shares[points] = float(np.median(jobs.trials_share()))
        if points in EFFECTS and points != 20:
            print(f"{points} points on {EFFECT_TASKS} Tasks: median share of Trials {shares[points]:.3f}")
        print(describe(f"{points:+d} points, {EFFECT_TASKS} Tasks", jobs))

    margin = sq.simulate_stopped_jobs(0, EFFECT_TASKS, ATTEMPTS, ALPHA, 10.0, args.jobs, seed=args.seed + 9)
    every.append(margin)
    print(describe(f"null, {EFFECT_TASKS} Tasks, margin 10 points", margin))
    for attempts in DEMO_ATTEMPTS:
        print(demo_line(attempts))

    coverage = float(np.concatenate([j.covered for j in every]).mean())
    worst = max(type1)
    print(f"ran in {time.perf_counter() - t0:.1f} s")
    print(f"FIGURE sequential_type1_rate {worst:.4f} share")
    print(f"FIGURE sequential_trials_share_20pt {shares[20]:.4f} share")
    print(f"FIGURE sequential_coverage {coverage:.4f} share")
    goals = [("wrong verdicts under the null <= 0.05", worst <= 0.05),
             ("median share of Trials at 20 points <= 0.40", shares[20] <= 0.40),
             ("coverage >= 0.95", coverage >= 0.95)]
    print("goals: " + ", ".join(f"{name}: {'met' if ok else 'MISSED'}" for name, ok in goals)
          + (" (smoke: not enforced)" if args.smoke else ""))
    if not args.smoke and not all(ok for _, ok in goals):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
