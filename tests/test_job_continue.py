"""Going on past the ceiling: `amber job continue` prices a Job's missing Trials, reserves them into the same pool
and runs them in the same Job, so its report is that of a Job that had enough from the start.

The first test runs real sandboxes (Terminus-2 with the replay configurations, through the model proxy); the
others need no Docker (static Tasks, or no Trial at all).
"""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from helpers import cli, costs_and_charges, funded, ok, refusal, request

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.jobs import cell_run, lifecycle, records
from amber_pipeline.jobs.records import cells_of, get_job
from amber_pipeline.money import wallet
from amber_pipeline.money.prices import PRICES, Prices
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
STATIC = PROJECT_ROOT / "examples" / "static-bench"
WS = DEFAULT_WORKSPACE
TASKS = ["count-log-errors", "fix-off-by-one", "ini-port-change"]
TIMING = {"source", "cost_usd", "mean_duration_sec"}  # what differs between two runs of the same Trials


def spending(wh: Warehouse, job_id: str) -> tuple[Decimal, Decimal, Decimal, bool]:
    with wh.query(WS) as con:
        return con.execute("select reserved, charged, refunded, settled from job_spending where job_id = ?",
                           [job_id]).fetchone()


def scores(job_id: str) -> tuple[list[dict], list[dict]]:
    """The Job's cells and comparisons as `amber results --json` gives them, without what timing changes."""
    found = json.loads(ok(cli("results", job_id, "--json")))
    cells = sorted(({k: v for k, v in c.items() if k not in TIMING} for c in found["cells"]),
                   key=lambda c: c["route"])
    return cells, found["comparisons"]


@pytest.mark.slow
@pytest.mark.docker
def test_a_job_stopped_at_its_ceiling_goes_on_to_the_report_of_a_job_that_had_enough(
        tmp_path: Path, warehouse: Warehouse) -> None:
    wh = warehouse
    funded(wh)
    bench = tmp_path / "bench"
    for name in TASKS:
        shutil.copytree(DEMO / name, bench / name)
    asked = request(str(bench), "terminus-2", ["replay-strong", "replay-weak"])

    _, enough = lifecycle.submit(wh, WS, local_user(), asked)
    for cell in cells_of(wh, enough.id):
        cell_run.run_cell_of_job(wh, enough.id, cell.cell_key)
    assert get_job(wh, enough.id, WS).status == "completed"

    # The same Job, whose first cell runs at a sandbox price 10,000 times the Quote's: its first Trial's charge
    # passes the whole reservation, so the Job stops at its ceiling and its other cell never starts.
    made, job = lifecycle.submit(wh, WS, local_user(), asked)
    first, second = cells_of(wh, job.id)
    steep = Prices(sandbox_usd_per_hour=PRICES.sandbox_usd_per_hour * 10_000)
    ran = cell_run.run_cell_of_job(wh, job.id, first.cell_key, prices=steep)
    assert cell_run.run_cell_of_job(wh, job.id, second.cell_key) == []
    stopped = get_job(wh, job.id, WS)
    assert stopped.status == "ceiling_reached"
    kept = {(r.task_name, r.attempt): r for r in ran if r.outcome == "scored"}
    assert 0 < len(kept) < len(TASKS)
    missing = json.loads(ok(cli("results", job.id, "--json")))["missing_tasks"]
    estimate = sum(Decimal(str(m["cost_usd"])) for m in missing)

    out = ok(cli("job", "continue", job.id))
    assert f"Missing Trials of {job.id}" in out and f"{job.id} is running" in out, out
    assert get_job(wh, job.id, WS).status == "running"
    with wh.read() as con:
        reserved_first, charged_first, refunded_first = wallet.job_totals(con, job.id)
    assert reserved_first == made.amount + estimate  # the missing Trials as `results` priced them, on top
    assert {c.status for c in cells_of(wh, job.id)} == {"pending"}  # both cells have Trials to run

    rerun: list = []
    for cell in cells_of(wh, job.id):
        rerun += cell_run.run_cell_of_job(wh, job.id, cell.cell_key)
    done = get_job(wh, job.id, WS)
    assert done.status == "completed" and done.message is None
    # The Trials scored before the ceiling were kept, not run again; every other one ran now.
    assert not {(r.task_name, r.attempt) for r in rerun if r.cell_key == first.cell_key} & set(kept)
    assert len(rerun) == 2 * len(TASKS) - len(kept)

    assert scores(job.id) == scores(enough.id)  # one Job whose cells hold every Trial: the same numbers
    reserved, charged, refunded, settled = spending(wh, job.id)
    assert settled and reserved == charged + refunded and reserved == made.amount + estimate
    with wh.query(WS) as con:
        twice = con.execute("select trial_key from ledger where kind = 'charge' and job_id = ? group by trial_key "
                            "having count(*) > 1", [job.id]).fetchall()
        kinds = dict(con.execute("select kind, count(*) from ledger where job_id = ? group by kind",
                                 [job.id]).fetchall())
    # every Trial charged once, but one that finished after the pool was spent, which is free (never past it)
    assert twice == [] and kinds["reservation"] == 2
    assert kinds["charge"] == len(rerun) + sum(r.cost_usd > 0 for r in kept.values())
    # a refund each time the Job ended with something left: at its ceiling the capped charge left nothing
    assert charged_first == made.amount and refunded_first == 0 and kinds["refund"] == 1
    costs, charges = costs_and_charges(wh, job.id)
    assert costs == charges


def test_a_running_job_near_its_ceiling_is_given_more(warehouse: Warehouse) -> None:
    """A running Job whose pool still covers its missing Trials needs nothing: that is said, and nothing moves.
    With --amount, that much more goes into its pool and it keeps running."""
    wh = warehouse
    funded(wh)
    made, job = lifecycle.submit(wh, WS, local_user(), request(str(STATIC), "direct", ["replay-strong"]))
    refused = refusal(cli("job", "continue", job.id))
    assert "of its reservation left, which covers its missing Trials" in refused and "--amount" in refused
    assert spending(wh, job.id)[0] == made.amount

    out = ok(cli("job", "continue", job.id, "--amount", "1.5"))
    assert "Reserved $1.50 more" in out and f"{job.id} is running" in out, out
    assert get_job(wh, job.id, WS).status == "running"
    assert spending(wh, job.id)[0] == made.amount + Decimal("1.5")
    [cell] = cells_of(wh, job.id)
    pool = lifecycle.open_cell_run(wh, job.id, cell.cell_key).pool
    assert pool is not None and pool.left() == made.amount + Decimal("1.5")  # the model proxy sees it too

    cell_run.run_cell_of_job(wh, job.id, cell.cell_key)
    reserved, charged, refunded, settled = spending(wh, job.id)
    assert get_job(wh, job.id, WS).status == "completed"
    assert settled and reserved == made.amount + Decimal("1.5") and charged > 0


def test_a_cancelled_job_goes_on_as_a_new_round_of_its_cells(warehouse: Warehouse) -> None:
    """A Job cancelled before its cell ran goes on: its cell is claimed again under a new run key (so Dagster's
    sensor, which runs a key once, starts it), runs every Trial, and the Job completes."""
    wh = warehouse
    funded(wh)
    _, job = lifecycle.submit(wh, WS, local_user(), request(str(STATIC), "direct", ["replay-strong"]))
    [first] = records.claim_cells(wh, job.id)
    lifecycle.cancel(wh, WS, job.id)
    assert [c.status for c in cells_of(wh, job.id)] == ["cancelled"]

    ok(cli("job", "continue", job.id))
    [again] = records.claim_cells(wh, job.id)
    assert again.cell_key == first.cell_key and again.run_key == f"{first.run_key}:r1"
    ran = cell_run.run_cell_of_job(wh, job.id, again.cell_key)
    assert len(ran) == 12 and all(r.outcome == "scored" for r in ran)
    assert get_job(wh, job.id, WS).status == "completed"
    reserved, charged, refunded, settled = spending(wh, job.id)
    assert settled and charged > 0 and reserved == charged + refunded
