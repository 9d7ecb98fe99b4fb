"""Static Tasks per second: the Direct Agent's fast path, in process and from a fresh CLI process end to end.

1,000 static Tasks ("What is a + b?", checked by the built-in Verifier's
number check) run by the Direct Agent against an OpenAI-compatible Model
Configuration served by the provider double on loopback (its own process, as
a Provider's server would be).

In process: measured in a FRESH child process, from the Job's submission to
its cell scored: the Quote reserved, every call through the model proxy
(metered, transcripts kept), Trials written to the warehouse, the ledger
charged in batches, the cell's Rewards and score written. The child also
reports its peak RSS. Three children run one after the other; the figures are
their medians (the disk of a shared machine makes single runs vary by half).

End to end: as a user runs it, on an embedded Amber with its daemon and warm
worker up (`amber daemon start`): `amber job submit LABEL --agent direct
--model M --wait` in a fresh process, timed from its start until it has
printed the scored cell and exited. The Benchmark Version is made first by one
Job over the folder (`amber job submit FOLDER ...`, the warm-up, whose
breakdown is printed too: there the snapshot is a real one); then three Jobs
over its label are timed, and the figures are their medians. Each run's time
is split into phases, printed as plain lines: submission (the CLI's start and
the request's checks), the snapshot (resolving the Benchmark Version), the
Quote, starting the Job and asking the warm worker for its cell run, the cell
run's launch (claim, run made, queued, its process started), the run's start
to its first Trial, the Trials, storing and scoring, what the CLI waited after
the cell was scored, and printing the results. The CLI's own steps are timed
by a `sitecustomize` on the child's PYTHONPATH that wraps a few functions as
their modules are imported (the command is the installed `amber`, its imports
unchanged); the daemon's side comes from the catalog (the cell's claim, start
and end), the Dagster run (its start) and the stored Trials.

The Benchmark folder and the replay are written to a temporary folder of their
own, outside the scratch AMBER_HOME: Amber quotes no folder inside its home
(its stored Tasks are not a folder to quote). `--smoke` runs one child over 200
Tasks and one timed Job end to end, for the test suite.

Goals: at least 200 Tasks per second in process, peak RSS at most 500 MB; end
to end, 1,000 Tasks in at most 3.5 s.

    .venv/bin/python bench/static_throughput.py [--tasks 1000] [--repeats 3] [--smoke] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from synthetic import run_child, scratch_home

from amber_pipeline.paths import PROJECT_ROOT, AmberPaths

REPEATS = 3
AMBER = str(Path(sys.executable).parent / "amber")
MODEL = "bench-model"

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

# Put on the timed CLI's PYTHONPATH: wraps the CLI's own steps as their modules are imported (the command's imports
# are its own: nothing is imported here that it would not import) and writes their spans at exit.
SITECUSTOMIZE = r"""
import atexit, functools, importlib.abc, importlib.util, json, os, sys, time

WRAP = {"amber_pipeline.jobs.lifecycle": ("resolve_benchmark", "quote"),
        "amber_pipeline.operations.jobs": ("launch",),
        "amber_pipeline.cli.jobs": ("watch",)}
spans = {}


def timed(name, fn):
    @functools.wraps(fn)
    def inner(*args, **kwargs):
        start = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            spans.setdefault(name, [start, time.time()])  # the first call: a nested or later one is not a step
    return inner


class Wrapping(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in WRAP:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        exec_module = spec.loader.exec_module

        def exec_and_wrap(module):
            exec_module(module)
            for name in WRAP[fullname]:
                setattr(module, name, timed(name, getattr(module, name)))
        spec.loader.exec_module = exec_and_wrap
        return spec


sys.meta_path.insert(0, Wrapping())
atexit.register(lambda: open(os.environ["AMBER_BENCH_SPANS"], "w").write(json.dumps(spans)))
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


def in_process(bench: Path, model: Path, home: Path, repeats: int) -> list[dict]:
    """The cell run in fresh children, one after the other, each on an empty warehouse."""
    results = []
    for _ in range(repeats):
        shutil.rmtree(home / "warehouse", ignore_errors=True)
        shutil.rmtree(home / "benchmarks", ignore_errors=True)
        result = run_child(CHILD, [str(bench), str(model), getpass.getuser()])
        p = result["phases"]
        print(f"child: {result['trials'] / result['elapsed']:.1f} Tasks/s: submit (Benchmark Version, "
              f"Quote) {p['submit']:.2f} s, run {p['run']:.2f} s, score {p['score']:.2f} s; wall "
              f"{result['wall']:.2f} s with {result['imports']:.2f} s of imports; peak RSS "
              f"{result['rss_mb']:.0f} MB")
        results.append(result)
    result = results[-1]
    print(f"{result['trials']} Trials, {result['scored']} scored, {result['passed']} passed (mean Reward "
          f"{result['mean']}), {result['calls']} model calls through the proxy, {result['charges']} ledger charges "
          f"totalling ${result['charged']}, Job {result['status']}")
    return results


@dataclass(frozen=True)
class Embedded:
    """An embedded Amber of its own (AMBER_HOME, config) for the CLI, as a user has one."""

    paths: AmberPaths
    env: dict[str, str]

    def amber(self, *args: str) -> str:
        done = subprocess.run([AMBER, *args], cwd=PROJECT_ROOT, env=self.env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"amber {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout


@contextlib.contextmanager
def embedded(root: Path, model: Path) -> Iterator[Embedded]:
    """A Workspace with a Credit and the Model Configuration, and the daemon with its warm worker running."""
    env = {**os.environ, "AMBER_HOME": str(root / "amber"), "AMBER_CONFIG": str(root / "config.toml"),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "COLUMNS": "200"}  # no table wrapped to 80 columns
    env.pop("AMBER_URL", None)
    amber = Embedded(AmberPaths(root / "amber"), env)
    amber.amber("workspace", "create", "default")
    amber.amber("credit", "add", "--amount", "1000", "--reason", "static bench")
    amber.amber("model", "add", str(model))
    amber.amber("daemon", "start")
    try:
        yield amber
    finally:
        amber.amber("daemon", "stop")


PHASES = ("submission (CLI start, the request's checks)", "snapshot (the Benchmark Version)", "Quote",
          "start, and asking the warm worker", "cell run launch (claimed, run made, queued, started)",
          "run start to the first Trial", "Trials", "storing and scoring", "CLI wait after scoring",
          "results printed")


def submit(amber: Embedded, benchmark: str, spans_dir: Path) -> dict:
    """`amber job submit BENCHMARK --agent direct --model M --wait` in a fresh process: its wall time, its phases
    and what it printed."""
    spans_file = spans_dir / "spans.json"
    env = {**amber.env, "PYTHONPATH": os.pathsep.join([str(spans_dir), amber.env.get("PYTHONPATH", "")]),
           "AMBER_BENCH_SPANS": str(spans_file)}
    t0 = time.time()
    done = subprocess.run([AMBER, "job", "submit", benchmark, "--agent", "direct", "--model", MODEL, "--wait"],
                          cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    t_exit = time.time()
    if done.returncode != 0:
        raise SystemExit(f"amber job submit failed:\n{done.stdout}{done.stderr}")
    spans = json.loads(spans_file.read_text())
    job_id = next(w.rstrip(".") for w in done.stdout.split() if w.startswith("job-"))
    cell = cell_times(amber, job_id)
    bounds = [t0, spans["quote"][0], spans["resolve_benchmark"][1], spans["quote"][1], spans["launch"][1],
              cell["run_started"], cell["started"], cell["last_trial"], cell["finished"], spans["watch"][1], t_exit]
    phases = [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
    phases[1] = spans["resolve_benchmark"][1] - spans["resolve_benchmark"][0]  # the snapshot, within the Quote
    phases[2] = spans["quote"][1] - spans["quote"][0] - phases[1]
    return {"job": job_id, "seconds": t_exit - t0, "phases": dict(zip(PHASES, phases, strict=True)),
            "status": cell["status"], "trials": cell["trials"], "out": done.stdout}


def cell_times(amber: Embedded, job_id: str) -> dict:
    """When the Job's one cell was claimed, started and ended (catalog), its run started (Dagster), and its last
    Trial finished (its stored Trials)."""
    import dagster as dg
    import duckdb

    from amber_pipeline.cells import cell_file_id
    from amber_pipeline.warehouse.catalog import Warehouse

    wh = Warehouse(amber.paths)
    with wh.read() as con:
        cell_key, started, finished, status = con.execute(
            "select c.cell_key, c.started_at, c.finished_at, j.status from job_cells c join jobs j on j.id = c.job_id "
            "where c.job_id = ?", [job_id]).fetchone()
    rows = wh.trials_file(cell_file_id(cell_key), job_id)
    with contextlib.closing(duckdb.connect()) as db:
        stored = db.execute("select count(*), max(finished_at) from read_parquet(?)", [str(rows)]).fetchone()
    assert stored is not None
    trials, last = stored
    with dg.DagsterInstance.from_config(str(amber.paths.dagster_home)) as instance:
        (run,) = instance.get_run_records(dg.RunsFilter(tags={"amber/job": job_id}))
    assert run.start_time is not None, f"the cell run of {job_id} never started"
    return {"run_started": run.start_time, "started": started.timestamp(), "last_trial": last.timestamp(),
            "finished": finished.timestamp(), "status": status, "trials": trials}


def end_to_end(bench: Path, model: Path, root: Path, repeats: int) -> list[dict]:
    """The warm-up Job over the folder, then `repeats` Jobs over its label, each from a fresh CLI process."""
    spans_dir = root / "spans"
    spans_dir.mkdir(parents=True)
    (spans_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    runs = []
    with embedded(root, model) as amber:
        first = submit(amber, str(bench), spans_dir)
        label = next(w for w in first["out"].split() if w.startswith(f"{bench.name}@"))
        show("warm-up, over the folder (the Benchmark Version made)", first)
        for i in range(repeats):
            run = submit(amber, label, spans_dir)
            show(f"run {i + 1}, over {label}", run)
            runs.append(run)
    print(f"end to end, median of {len(runs)}, {runs[0]['trials']} Tasks per Job:")
    for phase in PHASES:
        print(f"  {phase:56} {statistics.median(r['phases'][phase] for r in runs):6.2f} s")
    return runs


def show(title: str, run: dict) -> None:
    mean = next((line.split()[3] for line in run["out"].splitlines() if line.strip().startswith("direct/")), "?")
    print(f"{title}: {run['seconds']:.2f} s, {run['job']} {run['status']}, {run['trials']} Trials, mean Reward "
          f"{mean}; " + ", ".join(f"{name.split(' (')[0]} {v:.2f}" for name, v in run["phases"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=REPEATS, help="children and CLI Jobs (default 3)")
    parser.add_argument("--smoke", action="store_true", help="one child and one CLI Job over 200 Tasks (for the "
                                                             "test suite)")
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
            model = Path(inputs) / f"{MODEL}.toml"
            model.write_text(f'name = "{MODEL}"\nmodel = "{MODEL}"\nprovider = "openai-compatible"\n'
                             f'base_url = "{url}"\n[prices]\ninput = 1.0\ncached_input = 0.1\noutput = 5.0\n'
                             f'source = "bench"\n')
            results = in_process(bench, model, home, args.repeats)
            runs = end_to_end(bench, model, home / "e2e", args.repeats)
        finally:
            double.terminate()
            double.wait()
    rate = statistics.median(r["trials"] / r["elapsed"] for r in results)
    e2e = statistics.median(r["seconds"] for r in runs)
    print(f"FIGURE static_tasks_per_second {rate:.1f} tasks/s")
    print(f"FIGURE static_peak_rss_mb {statistics.median(r['rss_mb'] for r in results):.0f} MB")
    print(f"FIGURE static_e2e_seconds {e2e:.2f} s")
    print(f"FIGURE static_e2e_tasks_per_second {runs[0]['trials'] / e2e:.1f} tasks/s")
    print(f"goal in process at least 200 Tasks/s and at most 500 MB: "
          f"{'MET' if rate >= 200 and max(r['rss_mb'] for r in results) <= 500 else 'MISSED'}; end to end "
          f"1,000 Tasks in at most 3.5 s: {'MET' if args.tasks == 1000 and e2e <= 3.5 else 'MISSED'}")


if __name__ == "__main__":
    main()
