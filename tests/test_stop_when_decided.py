"""Jobs that stop once their comparison is decided (`--stop-when-decided`), end to end.

What a user checks: a Job whose Model Configurations clearly differ stops early, says why and after how many
Tasks, names the better one with an interval for the whole Benchmark Version that holds the full Job's difference,
and gets back every cent it did not spend (refund = reserved - charged, each Trial charged once); the verdict is
the full Job's; cells that ran part of the Tasks are marked partial; a margin ends a Job whose sides are too close
to matter; a Job that never decides runs every Task; the Tasks run in one seeded order, the same for every cell;
a Job without the flag is unchanged; and each wrong request is refused in one sentence.

The static Jobs run on `stopping_data`'s yes-or-no Benchmark (no Docker). A real Job on five of the demo's Tasks
(terminus-2 in sandboxes, replay-strong against replay-weak) is the slow one at the end.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from helpers import cli, funded, ok, refusal
from scipy import stats
from stopping_data import N_TASKS, run_job, shaky_right, stopping_request, yes_no_bench

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, Actor, local_user
from amber_pipeline.cells import cell_file_id
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import quotes, stopping
from amber_pipeline.jobs.records import JobCell, cells_of, list_jobs
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.operations.operation import call_local
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.scoring import sequential
from amber_pipeline.warehouse.catalog import Warehouse

DEMO = PROJECT_ROOT / "examples" / "demo-bench"


@pytest.fixture
def bench(tmp_path: Path, warehouse: Warehouse):
    with yes_no_bench(tmp_path, warehouse) as folder:
        yield folder


def _rows(wh: Warehouse, job_id: str, cell: JobCell) -> list[dict]:
    table = wh.read_parquet(wh.trials_file(cell_file_id(cell.cell_key), job_id))
    return [] if table is None else table.to_pylist()


def _spending(wh: Warehouse, job_id: str) -> tuple[Decimal, Decimal, Decimal, bool]:
    with wh.query(DEFAULT_WORKSPACE) as con:
        return con.execute("select reserved, charged, refunded, settled from job_spending where job_id = ?",
                           [job_id]).fetchone()


def _results(wh: Warehouse, job_id: str):
    from amber_pipeline.operations.jobs import JobRef

    return call_local(wh, Actor(local_user(), DEFAULT_WORKSPACE), "job_results", JobRef(job_id=job_id))


# ---- the order -----------------------------------------------------------------------------------------------

def test_the_order_is_a_seeded_permutation_the_same_whatever_the_listing() -> None:
    names = sorted(f"task-{i}" for i in range(30))
    order = stopping.task_order(names, 7)
    assert sorted(order) == names and order != names
    assert stopping.task_order(list(reversed(names)), 7) == order  # the listing's order does not matter
    assert stopping.task_order(names, 8) != order


def test_the_order_puts_every_task_first_equally_often() -> None:
    """Over 3,000 seeds each of 6 Tasks leads about 500 times: a chi-square test of uniformity at 1% does not
    reject (a hash of the name alone would always put the same Task first)."""
    names = [f"t{i}" for i in range(6)]
    firsts = [stopping.task_order(names, seed)[0] for seed in range(3000)]
    counts = [firsts.count(n) for n in names]
    assert stats.chisquare(counts).pvalue > 0.01, counts


# ---- the decision from stored Trials -------------------------------------------------------------------------

def _cell(key: str, model: str) -> JobCell:
    return JobCell("job-x", key, "direct", model, 0, "running", None)


def _row(task: str, attempt: int, reward: float | None, outcome: str = "scored") -> dict:
    return {"task_name": task, "attempt": attempt, "outcome": outcome, "reward": reward}


def test_a_task_counts_once_every_attempt_has_a_result() -> None:
    rows = [_row("a", 1, 1.0), _row("a", 2, 0.0),  # finished: mean 0.5
            _row("b", 1, 1.0),  # one attempt of two
            _row("c", 1, 1.0), _row("c", 2, None, "cancelled"),  # a cancelled attempt is no result
            _row("d", 1, None, "errored"), _row("d", 2, None, "errored"),  # finished, nothing scored
            _row("e", 1, 3.0), _row("e", 2, 1.0)]  # a Reward past 1 counts as 1
    found = stopping.finished_tasks(rows, attempts=2)
    assert set(found) == {"a", "d", "e"}
    assert (found["a"].mean, found["a"].scored) == (0.5, 2)
    assert (found["d"].mean, found["d"].scored) == (None, 0)
    assert found["e"].mean == 1.0


def test_the_decision_takes_the_longest_prefix_every_compared_cell_finished() -> None:
    """Three Model Configurations and a bound: three pairs at alpha/3 each (Bonferroni), over the Tasks before the
    first one a compared cell has not finished; the bound's progress does not matter. Each interval is the
    module's full sequence at that Task count (its O(T^2) path, not the one the decision takes)."""
    order = [f"t{i}" for i in range(40)]
    cells = [_cell("A", "m-a@1"), _cell("B", "m-b@1"), _cell("C", "m-c@1"), _cell("O", "none")]
    rng = np.random.default_rng(3)
    means = {key: {t: float(rng.integers(0, 3)) / 2 for t in order} for key in "ABC"}
    finished = {key: {t: stopping._Finished(m, 2) for t, m in ms.items()} for key, ms in means.items()}
    del finished["B"]["t25"]  # B has not finished its 26th Task: the decision looks at 25
    del finished["C"]["t31"]
    decision = stopping.decide(stopping.StoppingRule(tuple(order), 2, 0.0), finished, cells)
    assert decision.tasks_seen == 25 and decision.tasks_total == 40 and decision.alpha == 0.05
    assert sorted(tuple(sorted((p.a_cell, p.b_cell))) for p in decision.pairs) == [("A", "B"), ("A", "C"),
                                                                                  ("B", "C")]
    for p in decision.pairs:
        a, b = sorted((p.a_cell, p.b_cell))
        d = np.array([means[a][t] - means[b][t] for t in order[:25]])
        lower, upper = sequential.confidence_sequence(d, 40, 0.05 / 3, attempts=2)
        if (p.a_cell, p.b_cell) != (a, b):  # named the better side first: its interval is the other way round
            lower, upper = -upper, -lower
        assert p.tasks_compared == 25
        assert math.isclose(p.lower_points, 100 * lower[-1], abs_tol=1e-6)
        assert math.isclose(p.upper_points, 100 * upper[-1], abs_tol=1e-6)


def test_a_task_with_nothing_scored_in_a_cell_is_left_out_of_its_pair_and_of_the_population() -> None:
    order = [f"t{i}" for i in range(20)]
    cells = [_cell("A", "m-a@1"), _cell("B", "m-b@1")]
    finished = {"A": {t: stopping._Finished(1.0, 3) for t in order[:10]},
                "B": {t: stopping._Finished(0.0, 3) for t in order[:10]}}
    finished["B"]["t4"] = stopping._Finished(None, 0)  # every attempt Errored
    finished["A"]["t6"] = stopping._Finished(1.0, 1)  # one scored attempt of three: the noise bound takes k = 1
    [pair] = stopping.decide(stopping.StoppingRule(tuple(order), 3, 0.0), finished, cells).pairs
    d = np.array([1.0] * 9)
    lower, upper = sequential.confidence_sequence(d, 19, 0.05, attempts=1)
    assert pair.tasks_compared == 9
    assert (pair.lower_points, pair.upper_points) == pytest.approx((100 * lower[-1], 100 * upper[-1]), abs=1e-6)


# ---- the request ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"margin_points": 5}, "margin_points", "add --stop-when-decided"),
    ({"order_seed": 3}, "order_seed", "add --stop-when-decided"),
    ({"stop_when_decided": True, "margin_points": 60}, "margin_points", "from 0 to 50 points"),
    ({"stop_when_decided": True, "margin_points": -1}, "margin_points", "from 0 to 50 points"),
    ({"stop_when_decided": True, "model_configurations": ["replay-strong"]}, "stop_when_decided", "two Model"),
    ({"stop_when_decided": True, "agent": "oracle", "model_configurations": []}, "stop_when_decided", "two Model"),
])
def test_a_stopping_request_amber_cannot_run_is_refused_in_one_sentence(fields: dict, field: str,
                                                                          words: str) -> None:
    request = JobRequest.model_validate({"benchmark": str(DEMO), "model_configurations": ["replay-strong",
                                                                                        "replay-weak"]} | fields)
    with pytest.raises(AmberError) as refused:
        request.check()
    assert refused.value.field == field and words in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.usefixtures("cli_mode")
def test_the_cli_refuses_a_stopping_job_with_one_model(warehouse: Warehouse) -> None:
    message = refusal(cli("job", "submit", str(DEMO), "--model", "replay-strong", "--stop-when-decided"))
    assert "needs two Model Configurations to compare" in message
    with warehouse.read() as con:
        assert con.execute("select count(*) from jobs").fetchone()[0] == 0  # nothing quoted, nothing reserved


# ---- static Jobs end to end ------------------------------------------------------------------------------------

def test_a_job_stops_once_decided_says_why_and_refunds_what_it_did_not_spend(bench: Path,
                                                                             warehouse: Warehouse) -> None:
    wh = warehouse
    job = run_job(wh, stopping_request(bench, ["sharp", "shaky"], seed=11))
    decision = job.stop
    assert job.status == "completed" and decision is not None
    assert decision.tasks_seen < N_TASKS / 2 and decision.tasks_total == N_TASKS
    assert job.message == decision.sentence()
    assert job.message.startswith(f"Stopped early after {decision.tasks_seen} of {N_TASKS} Tasks")
    [pair] = decision.pairs
    assert (pair.a, pair.b, pair.verdict) == ("direct / sharp", "direct / shaky", "a_better")
    assert "direct / sharp is better than direct / shaky" in job.message

    # The Tasks run in the Job's seeded order, every attempt of a Task together: each cell ran a prefix of it.
    order = stopping.task_order([f"q-{i:03d}" for i in range(N_TASKS)], 11)
    cells = cells_of(wh, job.id)
    ran = 0
    for cell in cells:
        tasks = {r["task_name"] for r in _rows(wh, job.id, cell)}
        assert tasks == set(order[:len(tasks)]) and decision.tasks_seen <= len(tasks) < N_TASKS, cell.label
        ran += len(tasks)

    # The interval is for the whole Version: it holds the difference the full Job measures (each Task's Rewards
    # are fixed here, so that is the Version's expected difference).
    truth = 100 * sum(not shaky_right(t) for t in order) / N_TASKS
    assert pair.lower_points > 0 and pair.lower_points <= truth <= pair.upper_points

    # Every cent not spent goes back, each Trial charged once.
    reserved, charged, refunded, settled = _spending(wh, job.id)
    costs = sum(Decimal(str(r["cost_usd"])) for c in cells for r in _rows(wh, job.id, c))
    assert settled and charged == costs and refunded == reserved - charged and charged < reserved / 2

    found = _results(wh, job.id)
    s = found.stopping
    assert s is not None and s.stopped_early and s.decision == decision
    assert (s.trials_run, s.trials_planned, s.trials_saved) == (ran, 2 * N_TASKS, 2 * N_TASKS - ran)
    assert (Decimal(str(s.reserved_usd)), Decimal(str(s.charged_usd)), Decimal(str(s.refunded_usd))) == \
        (reserved, charged, refunded)
    assert all(c.partial for c in found.report.cells) and found.report.stopping == s

    # The full Job (the same request without the flag) names the same better side, and runs attempt-major.
    full = run_job(wh, stopping_request(bench, ["sharp", "shaky"], stop=False))
    assert full.stop is None and full.message is None
    full_found = _results(wh, full.id)
    [compared] = full_found.report.comparisons
    assert (compared.better, compared.too_close_to_call) == ("direct/sharp", False)
    assert math.isclose(100 * compared.mean_difference, truth)
    assert full_found.stopping is None and not any(c.partial for c in full_found.report.cells)
    assert [r["task_name"] for r in _rows(wh, full.id, cells_of(wh, full.id)[0])] == \
        [f"q-{i:03d}" for i in range(N_TASKS)]

    # What `amber results` and the SQL views show of it.
    text = ok(cli("results", job.id))
    assert f"Stopped early after {decision.tasks_seen} of {N_TASKS} Tasks" in text
    assert "direct/sharp (partial)" in text and f"Ran {ran} of {2 * N_TASKS} Trials" in text
    shown = json.loads(ok(cli("results", job.id, "--json")))
    assert shown["stopping"]["decision"]["pairs"][0]["verdict"] == "a_better"
    assert all(c["partial"] for c in shown["cells"])
    assert "stopping" not in json.loads(ok(cli("results", full.id, "--json")))
    with wh.query(DEFAULT_WORKSPACE) as con:
        rows = con.execute("select job_id, a, b, verdict, lower_points, upper_points, tasks_seen, tasks_total, "
                           "stopped_early from job_decisions").fetchall()
    assert rows == [(job.id, "direct / sharp", "direct / shaky", "a_better", pair.lower_points, pair.upper_points,
                     decision.tasks_seen, N_TASKS, True)]


def test_a_margin_ends_a_job_whose_sides_are_too_close_to_matter(bench: Path, warehouse: Warehouse) -> None:
    job = run_job(warehouse, stopping_request(bench, ["sharp", "sharp-twin"], trials=3, margin=10))
    assert job.status == "completed" and job.stop is not None and job.stop.tasks_seen < N_TASKS
    [pair] = job.stop.pairs
    assert pair.verdict == "too_close_to_matter" and -10 < pair.lower_points <= 0 <= pair.upper_points < 10
    assert "are too close to matter" in (job.message or "")


def test_a_job_that_never_decides_runs_every_task(bench: Path, warehouse: Warehouse) -> None:
    """Two identical sides and no margin: no interval ever excludes 0, so every Trial runs and the Job completes
    as a Job without the flag would, its results saying the comparison is undecided."""
    job = run_job(warehouse, stopping_request(bench, ["sharp", "sharp-twin"]))
    assert (job.status, job.stop, job.message) == ("completed", None, None)
    s = _results(warehouse, job.id).stopping
    assert s is not None and not s.stopped_early and s.trials_run == s.trials_planned == 2 * N_TASKS
    assert s.decision.tasks_seen == N_TASKS and [p.verdict for p in s.decision.pairs] == ["undecided"]
    assert s.refunded_usd == pytest.approx(s.reserved_usd - s.charged_usd)


@pytest.mark.slow
def test_a_stopping_job_submitted_from_the_cli_stops_in_the_daemons_cell_runs(bench: Path,
                                                                             warehouse: Warehouse) -> None:
    """The way a user runs it: `amber job submit ... --stop-when-decided --wait` on the embedded Amber, each cell
    a Dagster run of its own process, each reading the other's stored Trials; --wait prints the decision."""
    from amber_pipeline import embedded, worker_socket

    funded(warehouse, DEFAULT_WORKSPACE, "100")
    embedded.start_daemon(warehouse.paths)
    try:
        deadline = time.monotonic() + 120  # the warm worker's imports take long on a busy machine
        while worker_socket.ask(warehouse.paths.dagster_home, {"op": "ping"}) is None:
            assert time.monotonic() < deadline, "no answer of the warm worker"
            time.sleep(0.2)
        text = ok(cli("job", "submit", str(bench), "--agent", "direct", "--model", "sharp", "--model", "shaky",
                      "--stop-when-decided", "--wait"))
    finally:
        embedded.stop_daemon(warehouse.paths)
    [job] = list_jobs(warehouse, DEFAULT_WORKSPACE)
    assert job.status == "completed" and job.stop is not None and job.stop.tasks_seen < N_TASKS
    assert f"Stopped early after {job.stop.tasks_seen} of {N_TASKS} Tasks" in text
    assert "direct / sharp is better than direct / shaky" in text
    reserved, charged, refunded, settled = _spending(warehouse, job.id)
    assert settled and refunded == reserved - charged > 0


# ---- a real Job in sandboxes ---------------------------------------------------------------------------------

# The demo's four Tasks that replay-strong solves and replay-weak does not, and one that both fail (examples/README.md)
SPLIT_TASKS = ("count-log-errors", "fix-backup-script", "fix-off-by-one", "organize-inbox")
TIED_TASK = "csv-region-totals"
ORDER_SEED = 1  # an order whose last Task is the tied one: see the test's docstring


@pytest.mark.docker
@pytest.mark.slow(60)  # two Jobs, about 40 sandboxes
def test_a_sandboxed_job_stops_early_and_agrees_with_the_full_job(tmp_path: Path, warehouse: Warehouse) -> None:
    """terminus-2 in sandboxes, replay-strong against replay-weak on five of the demo's Tasks, 3 Trials per Task.

    An anytime-valid interval decides only once the Tasks left could not change the answer. On these five Tasks
    at 3 Trials each it decides after the four that split the replays, and only when the one they tie on comes
    last in the Job's order (`scoring.sequential.stopped_jobs` over the five places it may take: one stops early);
    on all eight of the demo's Tasks it takes 5 Trials per Task and stops after 7 Tasks at the soonest
    (`bench/sequential.py`'s demo line), over twice the sandboxes. The seed is such an order; the test checks
    that the Job then stops by itself, says so, and that its verdict and refund are right."""
    wh = warehouse
    bench = tmp_path / "demo-five"
    for name in (*SPLIT_TASKS, TIED_TASK):
        shutil.copytree(DEMO / name, bench / name)
    assert stopping.task_order(sorted(p.name for p in bench.iterdir()), ORDER_SEED)[-1] == TIED_TASK
    job = run_job(wh, JobRequest(benchmark=str(bench), agent="terminus-2", trials_per_task=3,
                                 model_configurations=["replay-strong", "replay-weak"], stop_when_decided=True,
                                 order_seed=ORDER_SEED))
    assert job.status == "completed" and job.stop is not None, job.message
    assert job.stop.tasks_seen == 4 and job.message.startswith("Stopped early after 4 of 5 Tasks")
    [pair] = job.stop.pairs
    assert (pair.a, pair.b, pair.verdict) == ("terminus-2 / replay-strong", "terminus-2 / replay-weak", "a_better")
    reserved, charged, refunded, settled = _spending(wh, job.id)
    assert reserved == Decimal(quotes.get(wh, DEFAULT_WORKSPACE, job.quote_id or "").amount)  # the Quote
    assert settled and refunded == reserved - charged > 0
    assert 2 * 4 * 3 <= _results(wh, job.id).stopping.trials_run < 2 * 5 * 3

    # The full Job: the replays answer each Task the same way every time, so one Trial per Task measures what
    # three do; its bootstrap comparison names the same better side.
    full = run_job(wh, JobRequest(benchmark=str(bench), agent="terminus-2", trials_per_task=1,
                                  model_configurations=["replay-strong", "replay-weak"]))
    [compared] = _results(wh, full.id).report.comparisons
    assert (compared.better, compared.too_close_to_call) == ("terminus-2/replay-strong", False)
    assert pair.lower_points <= 100 * compared.mean_difference <= pair.upper_points


# ---- amber plan ------------------------------------------------------------------------------------------------

def test_plan_gives_the_share_of_trials_a_stopping_job_runs() -> None:
    """The share is the simulation's (the same seeded Jobs `bench/sequential.py` reads), and it falls as the true
    difference grows."""
    from amber_pipeline.analysis import plan

    shares = {d: plan.plan(200, 3, delta_points=d).stopping for d in (10, 20, 30)}
    assert shares[20] is not None and shares[20].jobs_simulated == 1000
    assert shares[20].median_trials_share_percent == pytest.approx(
        100 * sequential.median_trials_share(20, 200, 3, jobs=1000, seed=0))
    assert shares[10].median_trials_share_percent > shares[20].median_trials_share_percent \
        > shares[30].median_trials_share_percent
    assert shares[20].median_trials_share_percent <= 40 and shares[20].right_percent >= 95
    assert plan.plan(200, 3).stopping is None  # no change asked about
    text = ok(cli("plan", "--tasks", "200", "--attempts", "3", "--change", "20"))
    assert (f"A Job that stops once decided (--stop-when-decided) runs a median "
            f"{shares[20].median_trials_share_percent:.0f}% of its Trials at a true difference of 20 points") in text
