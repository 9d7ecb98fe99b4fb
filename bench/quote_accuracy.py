"""How well a Quote holds: what each cell of a Job was charged over what its Quote set aside for it.

Two Benchmarks, in one scratch AMBER_HOME, each cell run in this process one after the other, the way a cell
run runs it (`cell_run.run_cell_of_job`: real Docker sandboxes, the model proxy metering the replay models):

1. A Benchmark never seen before (tests/fixtures/slow-bench, its images never built: Environments that take
   seconds to build, Verifiers that take 5-10 s), run once with the oracle and nop as its cells. Nothing is
   known of its Tasks, so the Quote prices them from their declared limits. The goal: every cell below 1.0
   (the Job never stopped at its ceiling), and none below 0.05 (it did not set aside twenty times what it
   spent).
2. The demo Job (examples/demo-bench: terminus-2 with replay-strong and replay-weak, oracle and nop as bounds,
   one Trial per Task) twice: the first Quote from the Agents' measured priors and declared limits, the second
   from the first Job's Trials. The goal: every cell of the second Job between 0.5 (the Quote set aside at most
   twice what was spent) and 1.0.

For each cell it prints the charges in the ledger over the cell's share of the Quote, and the sources of its
estimate; then the FIGURE lines. `--smoke` runs one Task of each Benchmark, for the test suite.

    .venv/bin/python bench/quote_accuracy.py [--smoke] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
from decimal import Decimal
from pathlib import Path

from synthetic import scratch_home

from amber_pipeline.accounts import workspaces
from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, Actor, local_user
from amber_pipeline.benchmarks import registry
from amber_pipeline.cells import cell_file_id
from amber_pipeline.jobs import cell_run, lifecycle, quotes
from amber_pipeline.jobs.records import get_job
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money import wallet
from amber_pipeline.money.prices import show
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
UNSEEN = PROJECT_ROOT / "tests" / "fixtures" / "slow-bench"
MODELS = ["replay-strong", "replay-weak"]
LOW, HIGH, UNSEEN_LOW = 0.5, 1.0, 0.05


def charged(wh: Warehouse, job_id: str, cell_key: str) -> Decimal:
    """What the ledger charged the Job for the cell's Trials (a charge's Trial key starts with Job and cell)."""
    prefix = f"{job_id}/{cell_file_id(cell_key)}/"
    with wh.query(DEFAULT_WORKSPACE) as con:
        row = con.execute("select coalesce(sum(amount), 0) from ledger where kind = 'charge' and job_id = ? "
                          "and starts_with(trial_key, ?)", [job_id, prefix]).fetchone()
    assert row is not None
    return Decimal(row[0])


def run_job(wh: Warehouse, title: str, request: JobRequest) -> list[float]:
    """Quote and run a Job; print each cell's charges over its share of the Quote; the ratios."""
    made, job = lifecycle.submit(wh, DEFAULT_WORKSPACE, local_user(), request)
    facts = quotes.task_facts(registry.version(wh, job.benchmark_version_id, job.benchmark_owner))
    print(f"{title}: {job.id} on {job.benchmark_label}; sandbox images built before it: "
          f"{sum(f.image_built for f in facts)} of {len(facts)} Tasks")
    for cell in made.cells:
        cell_run.run_cell_of_job(wh, job.id, cell.cell_key)
    status = get_job(wh, job.id, None).status
    print(f"  quoted {show(made.amount)}, ended {status}")
    print(f"  {'cell':<28} {'quoted':>10} {'charged':>10} {'charged/quoted':>14}  estimate")
    ratios = []
    for cell in made.cells:
        spent = charged(wh, job.id, cell.cell_key)
        ratio = float(spent / Decimal(cell.total))
        ratios.append(ratio)
        print(f"  {cell.label:<28} {show(Decimal(cell.total)):>10} {show(spent):>10} {ratio:>14.3f}  {cell.basis}")
    print(f"  min {min(ratios):.3f}, max {max(ratios):.3f}")
    return ratios


def copied(source: Path, target: Path, n_tasks: int | None, fresh: bool) -> Path:
    """The first ``n_tasks`` Tasks of a Benchmark (all if None); ``fresh``: images no one has built."""
    tasks = sorted(p for p in source.iterdir() if (p / "task.toml").is_file())[:n_tasks]
    for task in tasks:
        shutil.copytree(task, target / task.name)
        if fresh:  # a value of its own right after FROM: no layer of Docker's build cache matches
            dockerfile = target / task.name / "environment" / "Dockerfile"
            base, rest = dockerfile.read_text().split("\n", 1)
            dockerfile.write_text(f"{base}\nENV AMBER_FRESH_COPY={os.urandom(6).hex()}\n{rest}")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one Task of each Benchmark (for the test suite)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary AMBER_HOME")
    args = parser.parse_args()
    n_tasks = 1 if args.smoke else None

    with scratch_home("amber-quotebench-", args.keep) as home:
        wh = Warehouse(AmberPaths(home))
        actor = Actor(local_user(), DEFAULT_WORKSPACE)
        workspaces.create(wh, actor, DEFAULT_WORKSPACE)
        wallet.add_credit(wh, actor, DEFAULT_WORKSPACE, "100", "quote accuracy bench")
        unseen = copied(UNSEEN, home.parent / f"{home.name}-unseen" / "slow-bench", n_tasks, fresh=True)
        demo = copied(DEMO, home.parent / f"{home.name}-demo" / "demo-bench", n_tasks, fresh=False)
        try:
            first = run_job(wh, "A Benchmark never seen before, from its declared limits",
                            JobRequest(benchmark=str(unseen), agent="oracle", bounds=True, public=True))
            run_job(wh, "The demo Job, run 1, from priors and declared limits",
                    JobRequest(benchmark=str(demo), agent="terminus-2", model_configurations=MODELS, bounds=True,
                               public=True))
            second = run_job(wh, "The demo Job, run 2, from the history of run 1",
                             JobRequest(benchmark=str(demo), agent="terminus-2", model_configurations=MODELS,
                                        bounds=True, public=True))
        finally:
            shutil.rmtree(unseen.parent, ignore_errors=True)
            shutil.rmtree(demo.parent, ignore_errors=True)
        print(f"FIGURE quote_accuracy_unseen_min {min(first):.3f} ratio")
        print(f"FIGURE quote_accuracy_unseen_max {max(first):.3f} ratio")
        print(f"FIGURE quote_accuracy_min {min(second):.3f} ratio")
        print(f"FIGURE quote_accuracy_max {max(second):.3f} ratio")
        unseen_met = min(first) >= UNSEEN_LOW and max(first) < HIGH
        print(f"goal every cell of the unseen Benchmark's first Job in [{UNSEEN_LOW}, {HIGH}): "
              f"{'met' if unseen_met else 'MISSED'}")
        met = all(LOW <= r <= HIGH for r in second)
        print(f"goal every cell of the demo's second Job in [{LOW}, {HIGH}]: {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
