"""Static Tasks per second: the Direct Agent's fast path end to end.

1,000 static Tasks ("What is a + b?", checked by the built-in Verifier's
number check) run by the Direct Agent against an OpenAI-compatible Model
Configuration served by the provider double on loopback (its own process, as
a Provider's server would be). Measured in a FRESH child process, from the
Job's submission to its cell scored: the Quote reserved, every call through
the model proxy (metered, transcripts kept), Trials written to the
warehouse, the ledger charged in batches, the cell's Rewards and score
written. The child also reports its peak RSS. Three children run one after
the other; the figures are their medians (the disk of a shared machine makes
single runs vary by half).

The Benchmark folder and the replay are written to a temporary folder of their
own, outside the scratch AMBER_HOME: Amber quotes no folder inside its home
(its stored Tasks are not a folder to quote). `--smoke` runs one child over 200
Tasks, for the test suite.

Goals: at least 200 Tasks per second, peak RSS at most 500 MB.

    .venv/bin/python bench/static_throughput.py [--tasks 1000] [--repeats 3] [--smoke] [--keep]
"""

from __future__ import annotations

import argparse
import getpass
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from synthetic import run_child, scratch_home

REPEATS = 3

CHILD = r"""
import json, resource, sys, time
t_import = time.perf_counter()
from amber_pipeline.jobs import cell_run, lifecycle
from amber_pipeline.jobs.records import cells_of, get_job
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.accounts import workspaces
from amber_pipeline.money import wallet
from amber_pipeline.accounts.identity import Actor
from amber_pipeline.models import configurations
from amber_pipeline.paths import AmberPaths
from amber_pipeline.scoring import store
from amber_pipeline.warehouse.catalog import Warehouse

bench, model_file, user = sys.argv[1], sys.argv[2], sys.argv[3]
wh = Warehouse(AmberPaths.from_env())
actor = Actor(user, None)
ws = workspaces.acting_workspace(wh, actor)
wallet.add_credit(wh, actor, ws, "1000", "bench")
mc, _ = configurations.add(wh.paths, ws, configurations.read_file(__import__("pathlib").Path(model_file)))
imports = time.perf_counter() - t_import
t0 = time.perf_counter()
made, job = lifecycle.submit(wh, ws, user, JobRequest(benchmark=bench, agent="direct", model_configurations=[mc.name]))
t_submit = time.perf_counter()
(cell,) = cells_of(wh, job.id)
records = cell_run.run_trials(wh, job.id, cell.cell_key)
t_run = time.perf_counter()
scores = cell_run.store_results(wh, cell.cell_key, job.id)
elapsed = time.perf_counter() - t0
phases = {"submit": t_submit - t0, "run": t_run - t_submit, "score": elapsed - (t_run - t0)}
with wh.query(ws) as con:
    charged, entries = con.execute("select sum(amount), count(*) from ledger where kind = 'charge'").fetchone()
    calls = con.execute("select count(*) from transcripts").fetchone()[0]
print(json.dumps({"elapsed": elapsed, "phases": phases, "imports": imports, "trials": len(records),
                  "scored": sum(r.outcome == "scored" for r in records),
                  "passed": sum(r.reward == 1.0 for r in records), "charged": str(charged), "charges": entries,
                  "calls": calls, "status": get_job(wh, job.id, ws).status,
                  "mean": scores.cells[0].mean if scores.cells else None,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def write_benchmark(root: Path, n: int) -> tuple[Path, Path]:
    """n static Tasks and the replay that answers them (every 10th answer wrong, so the score is 0.9)."""
    bench = root / "static-1000"
    scripts = {}
    for i in range(n):
        a, b = 1000 + 7 * i, 3 * i + 11
        task = bench / f"sum-{i:05d}"
        task.mkdir(parents=True)
        (task / "task.toml").write_text(f'version = "1.0"\n\n[metadata.amber.static]\nnumber = {a + b}\n')
        (task / "instruction.md").write_text(f"Task {i:05d}: what is {a} + {b}? Answer with the number.\n")
        scripts[task.name] = [f"The sum is {a + b + (1 if i % 10 == 9 else 0)}."]
    replay = root / "bench-replay.json"
    replay.write_text(json.dumps({"model": "bench-model", "description": "bench answers", "tasks": scripts}))
    return bench, replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=REPEATS, help="children, one after the other (default 3)")
    parser.add_argument("--smoke", action="store_true", help="one child over 200 Tasks (for the test suite)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary AMBER_HOME")
    args = parser.parse_args()
    if args.smoke:
        args.tasks, args.repeats = 200, 1
    with scratch_home("amber-bench-static-", args.keep) as home, \
            tempfile.TemporaryDirectory(prefix="amber-bench-static-input-") as inputs:
        bench, replay = write_benchmark(Path(inputs), args.tasks)  # outside AMBER_HOME, where Amber quotes it
        double = subprocess.Popen(
            [sys.executable, "-m", "amber_pipeline.models.provider_double", "--replay", str(replay),
             "--tasks", str(bench)], stdout=subprocess.PIPE, text=True)
        try:
            assert double.stdout is not None
            url = double.stdout.readline().strip().rsplit(" at ", 1)[1]
            model = Path(inputs) / "bench-model.toml"
            model.write_text(f'name = "bench-model"\nmodel = "bench-model"\nprovider = "openai-compatible"\n'
                             f'base_url = "{url}"\n[prices]\ninput = 1.0\ncached_input = 0.1\noutput = 5.0\n'
                             f'source = "bench"\n')
            results = []
            for _ in range(args.repeats):
                shutil.rmtree(home / "warehouse", ignore_errors=True)
                shutil.rmtree(home / "benchmarks", ignore_errors=True)
                result = run_child(CHILD, [str(bench), str(model), getpass.getuser()])
                p = result["phases"]
                print(f"child: {result['trials'] / result['elapsed']:.1f} Tasks/s: submit (Benchmark Version, "
                      f"Quote) {p['submit']:.2f} s, run {p['run']:.2f} s, score {p['score']:.2f} s; wall "
                      f"{result['wall']:.2f} s with {result['imports']:.2f} s of imports; peak RSS "
                      f"{result['rss_mb']:.0f} MB")
                results.append(result)
        finally:
            double.terminate()
            double.wait()
    n = result["trials"]
    print(f"{n} Trials, {result['scored']} scored, {result['passed']} passed (mean Reward {result['mean']}), "
          f"{result['calls']} model calls through the proxy, {result['charges']} ledger charges totalling "
          f"${result['charged']}, Job {result['status']}")
    rate = statistics.median(r["trials"] / r["elapsed"] for r in results)
    print(f"FIGURE static_tasks_per_second {rate:.1f} tasks/s")
    print(f"FIGURE static_peak_rss_mb {statistics.median(r['rss_mb'] for r in results):.0f} MB")
    print(f"goal at least 200 Tasks/s and at most 500 MB: "
          f"{'MET' if rate >= 200 and max(r['rss_mb'] for r in results) <= 500 else 'MISSED'}")


if __name__ == "__main__":
    main()
