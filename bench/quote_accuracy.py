"""How well a Quote holds: what each cell of the demo Job was charged over what its Quote set aside for it.

Runs the demo Job (examples/demo-bench: terminus-2 with replay-strong and
replay-weak, oracle and nop as bounds, one Trial per Task) twice in one
scratch AMBER_HOME, each cell in this process one after the other, the way a
cell run runs it (`cell_run.run_cell_of_job`: real Docker sandboxes, the model
proxy metering the replay models). The first Quote has no history, so it is
made from the Agents' priors; the second from the first Job's Trials. For
each cell of each run it prints the charges in the ledger over the cell's
share of the Quote. The goal: every cell between 0.5 (the Quote set aside at
most twice what was spent) and 1.0 (the Job never stopped at its ceiling).

    .venv/bin/python bench/quote_accuracy.py [--keep]
"""

from __future__ import annotations

import argparse
from decimal import Decimal

from synthetic import scratch_home

from amber_pipeline.benchmarks import registry
from amber_pipeline.cells import cell_file_id
from amber_pipeline.jobs import cell_run, lifecycle, quotes
from amber_pipeline.jobs.records import get_job
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money import wallet, workspaces
from amber_pipeline.money.identity import DEFAULT_WORKSPACE, Actor, local_user
from amber_pipeline.money.prices import show
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
MODELS = ["replay-strong", "replay-weak"]
LOW, HIGH = 0.5, 1.0


def charged(wh: Warehouse, job_id: str, cell_key: str) -> Decimal:
    """What the ledger charged the Job for the cell's Trials (a charge's Trial key starts with Job and cell)."""
    prefix = f"{job_id}/{cell_file_id(cell_key)}/"
    with wh.query(DEFAULT_WORKSPACE) as con:
        row = con.execute("select coalesce(sum(amount), 0) from ledger where kind = 'charge' and job_id = ? "
                          "and starts_with(trial_key, ?)", [job_id, prefix]).fetchone()
    assert row is not None
    return Decimal(row[0])


def run_job(wh: Warehouse, title: str) -> list[float]:
    """Quote and run the demo Job; print each cell's charges over its share of the Quote; the ratios."""
    request = JobRequest(benchmark=str(DEMO), agent="terminus-2", model_configurations=MODELS, bounds=True,
                         public=True)
    made, job = lifecycle.submit(wh, DEFAULT_WORKSPACE, local_user(), request)
    if title.startswith("run 1"):
        facts = quotes.task_facts(registry.version(wh, job.benchmark_version_id, job.benchmark_owner))
        print(f"sandbox images built before run 1: {sum(f.image_built for f in facts)} of {len(facts)} Tasks")
    for cell in made.cells:
        cell_run.run_cell_of_job(wh, job.id, cell.cell_key)
    status = get_job(wh, job.id, None).status
    print(f"{title}: {job.id} quoted {show(made.amount)}, ended {status}")
    print(f"  {'cell':<28} {'quoted':>10} {'charged':>10} {'charged/quoted':>14}  estimate")
    ratios = []
    for cell in made.cells:
        spent = charged(wh, job.id, cell.cell_key)
        ratio = float(spent / Decimal(cell.total))
        ratios.append(ratio)
        print(f"  {cell.label:<28} {show(Decimal(cell.total)):>10} {show(spent):>10} {ratio:>14.3f}  {cell.basis}")
    inside = sum(LOW <= r <= HIGH for r in ratios)
    print(f"  {inside} of {len(ratios)} cells within [{LOW}, {HIGH}]; min {min(ratios):.3f}, max {max(ratios):.3f}")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary AMBER_HOME")
    args = parser.parse_args()

    with scratch_home("amber-quotebench-", args.keep) as home:
        wh = Warehouse(AmberPaths(home))
        actor = Actor(local_user(), DEFAULT_WORKSPACE)
        workspaces.create(wh, actor, DEFAULT_WORKSPACE)
        wallet.add_credit(wh, actor, DEFAULT_WORKSPACE, "100", "quote accuracy bench")
        first = run_job(wh, "run 1, Quote from the priors")
        second = run_job(wh, "run 2, Quote from the history of run 1")
        ratios = first + second
        print(f"FIGURE quote_accuracy_min {min(ratios):.3f} ratio")
        print(f"FIGURE quote_accuracy_max {max(ratios):.3f} ratio")
        met = all(LOW <= r <= HIGH for r in ratios)
        print(f"goal every cell of both runs in [{LOW}, {HIGH}]: {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
