"""How long a user waits for a Quote: `amber job quote` from a fresh CLI process, end to end.

In one scratch AMBER_HOME, set up through the CLI (`amber workspace create`, `amber credit add`):

1. The demo Quote, `amber job quote examples/demo-bench --model replay-strong --model replay-weak --bounds`
   (8 Tasks, four cells). Its first run stores the folder as a Benchmark Version and summarizes it; the figure is
   the median wall time of the runs after it, each a fresh process, as a user runs the command again.
2. The same Quote of a 1,000-Task Benchmark (the demo's Tasks copied, each with an Environment of its own, so
   1,000 image tags none of which is built), first with no history, then with every cell's history on every
   Task (synthetic ``trial_usage`` rows, as charged Trials leave them), which is the larger case and the figure.

For each it also prints the first (cold) run, the same Quote with the Benchmark summaries removed before each run
(every Task read and hashed again, as every Quote did before the summaries), and the in-process pricing alone
(`lifecycle.price`). Docker is asked whether images are built on every Quote; without Docker every image counts
as not built and the Quote still runs. `--smoke` uses 16 Tasks and one run of each, for the test suite.

Goals: the demo Quote at most 0.5 s, the 1,000-Task Quote at most 1 s.

    .venv/bin/python bench/quote_speed.py [--tasks 1000] [--runs 5] [--smoke] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from synthetic import scratch_home

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.benchmarks import registry
from amber_pipeline.cells import agent_model
from amber_pipeline.jobs import lifecycle
from amber_pipeline.jobs.records import cells_of, list_jobs
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
MODELS = ["replay-strong", "replay-weak"]
AMBER = [sys.executable, "-m", "amber_pipeline.cli"]
DEMO_GOAL, LARGE_GOAL = 0.5, 1.0


def amber(*args: str) -> float:
    """Run `amber ARGS` in a fresh process; its wall time."""
    started = time.perf_counter()
    done = subprocess.run([*AMBER, *args], cwd=PROJECT_ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"amber {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return wall


def quote_args(bench: Path) -> list[str]:
    return ["job", "quote", str(bench), "--model", MODELS[0], "--model", MODELS[1], "--bounds"]


def median_of(runs: int, once: Callable[[], float]) -> float:
    return statistics.median(once() for _ in range(runs))


def write_benchmark(root: Path, n: int) -> Path:
    """``n`` sandboxed Tasks: the demo's, copied round-robin, each with an Instruction and an Environment of its
    own (a line of its own in the Dockerfile), so each has its own Task hash and image tag."""
    sources = sorted(p for p in DEMO.iterdir() if (p / "task.toml").is_file())
    bench = root / f"bench-{n}"
    for i in range(n):
        source = sources[i % len(sources)]
        task = bench / f"{source.name}-{i:04d}"
        shutil.copytree(source, task)
        instruction = task / "instruction.md"
        instruction.write_text(f"{instruction.read_text()}\n(Task {i:04d})\n")
        dockerfile = task / "environment" / "Dockerfile"
        first, rest = dockerfile.read_text().split("\n", 1)
        dockerfile.write_text(f"{first}\nENV AMBER_BENCH_TASK={i}\n{rest}")
    old = time.time() - 60  # files older than a Quote's racy window, as a checkout is
    for path in bench.rglob("*"):
        os.utime(path, (old, old))
    return bench


def add_history(wh: Warehouse, label_of_job: str) -> int:
    """Every cell of the last Job's history on every one of its Tasks: one scored Trial each, as charging it
    records it (`history.record`). The rows it wrote."""
    job = next(j for j in list_jobs(wh, DEFAULT_WORKSPACE) if j.benchmark_label == label_of_job)
    version = registry.version(wh, job.benchmark_version_id, job.benchmark_owner)
    rows = [[f"bench/{c.cell_key}/{task.name}", DEFAULT_WORKSPACE, DEFAULT_WORKSPACE, version.task_hash(task),
             agent_model(c.cell_key), 0.2, 1.0, 3.0, 0.5, 4.7, 4000, 3000, 200, datetime.now(UTC)]
            for c in cells_of(wh, job.id) for task in version.tasks]
    with wh.write() as con:
        con.executemany("insert into trial_usage (trial_key, scope, workspace, task_hash, agent_model, image_sec, "
                        "environment_sec, agent_sec, verifier_sec, duration_sec, input_tokens, cached_input_tokens, "
                        "output_tokens, recorded_at) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def in_process(wh: Warehouse, bench: Path, runs: int) -> float:
    """The median time `lifecycle.price` takes in this process (warm), the Quote's pricing alone."""
    request = JobRequest(benchmark=str(bench), agent="terminus-2", model_configurations=MODELS, bounds=True)
    lifecycle.price(wh, DEFAULT_WORKSPACE, local_user(), request)

    def once() -> float:
        started = time.perf_counter()
        lifecycle.price(wh, DEFAULT_WORKSPACE, local_user(), request)
        return time.perf_counter() - started

    return median_of(runs, once)


def measure(title: str, wh: Warehouse, bench: Path, runs: int) -> float:
    """Print the cold run, the warm median, the median without summaries and the in-process pricing; the warm
    median."""
    args = quote_args(bench)
    cold = amber(*args)
    warm = median_of(runs, lambda: amber(*args))
    summaries = wh.paths.cache / "summaries"

    def rederived() -> float:
        shutil.rmtree(summaries, ignore_errors=True)
        return amber(*args)

    without = median_of(runs, rederived)
    amber(*args)  # the summaries back, for what follows
    priced = in_process(wh, bench, runs)
    print(f"{title}: first run {cold:.3f} s; then median {warm:.3f} s of {runs} fresh processes; "
          f"{without:.3f} s with the Benchmark summaries removed before each run; pricing in process "
          f"{priced * 1000:.0f} ms")
    return warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per median (default 5)")
    parser.add_argument("--smoke", action="store_true", help="16 Tasks and one run (for the test suite)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary AMBER_HOME")
    args = parser.parse_args()
    if args.smoke:
        args.tasks, args.runs = 16, 1  # each demo Task twice: more Tasks than the demo's 8

    with scratch_home("amber-quotespeed-", args.keep) as home, \
            tempfile.TemporaryDirectory(prefix="amber-quotespeed-input-") as inputs:
        wh = Warehouse(AmberPaths(home))
        amber("workspace", "create", DEFAULT_WORKSPACE)
        amber("--workspace", DEFAULT_WORKSPACE, "credit", "add", "--amount", "1000000", "--reason", "quote bench")
        started = time.perf_counter()
        bench = write_benchmark(Path(inputs), args.tasks)  # outside AMBER_HOME, where Amber quotes a folder
        print(f"wrote {args.tasks} Tasks in {time.perf_counter() - started:.1f} s; `amber --help` takes "
              f"{median_of(args.runs, lambda: amber('--help')):.3f} s (imports alone)")

        demo = measure("demo Quote (8 Tasks, 4 cells)", wh, DEMO, args.runs)
        fresh = measure(f"{args.tasks}-Task Quote, no history", wh, bench, args.runs)
        rows = add_history(wh, bench.name + "@1")
        print(f"added {rows} trial_usage rows: every cell's history on every Task")
        known = measure(f"{args.tasks}-Task Quote, with history", wh, bench, args.runs)
        large = max(fresh, known)

    print(f"FIGURE quote_seconds {demo:.3f} s")
    print(f"FIGURE quote_1000_tasks_seconds {large:.3f} s")
    print(f"goal the demo Quote at most {DEMO_GOAL} s: {'MET' if demo <= DEMO_GOAL else 'MISSED'}; "
          f"the {args.tasks}-Task Quote at most {LARGE_GOAL} s: {'MET' if large <= LARGE_GOAL else 'MISSED'}")


if __name__ == "__main__":
    main()
