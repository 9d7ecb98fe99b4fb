"""Quotes that hold: per-Task estimates (history of the Task, of the cell, the Agent's prior fitted to the Task's
timeouts and image), a ceiling of one's own, and what a Job that stopped at its ceiling still needs.

Expected amounts are computed here from the prices and the rule the module states (headroom 40%, money in
micro-dollars, history priced at today's prices), not read back from the code under test. Only the last test
needs Docker.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from helpers import cli, funded, ok, refusal, request

from amber_pipeline.agents.catalog import agent_spec
from amber_pipeline.analysis import report
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.cells import NO_MODEL, Cell, cell_file_id
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import cell_run, lifecycle, quotes
from amber_pipeline.jobs.quotes import TaskFacts
from amber_pipeline.jobs.records import cells_of, get_job, list_jobs
from amber_pipeline.models.configurations import model_configuration
from amber_pipeline.money import wallet
from amber_pipeline.money.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.money.prices import PRICES, Prices, show, usd
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trials_table

pytestmark = pytest.mark.usefixtures("cli_mode")  # on the embedded default, then against `amber serve`

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
WS = DEFAULT_WORKSPACE
NOP_PRIOR_SEC = quotes.PRIORS["nop"].sandbox_sec  # the nop Agent's prior, whatever it is measured at
MICRO = Decimal("0.000001")
SANDBOX_PER_SEC = Decimal("0.05") / 3600  # the embedded default's price of a sandbox-second


def money(x: Decimal) -> Decimal:
    return x.quantize(MICRO, rounding=ROUND_HALF_UP)


def with_headroom(x: Decimal) -> Decimal:
    return money(x * Decimal("1.4"))


def sandbox(seconds: float) -> Decimal:
    return money(Decimal(str(seconds)) * SANDBOX_PER_SEC)


def one_sentence(message: str, *fragments: str) -> None:
    assert "\n" not in message and message.endswith("."), message
    assert len(re.findall(r"[.!?](?:\s|$)", message)) == 1, message
    for fragment in fragments:
        assert fragment in message, message


def demo_copy(tmp_path: Path, names: list[str], fresh_image: bool = False) -> Path:
    """Demo Tasks copied into a Benchmark folder; ``fresh_image``: each Dockerfile changed so no image of it is
    built."""
    root = tmp_path / "bench"
    for name in names:
        shutil.copytree(DEMO / name, root / name)
        if fresh_image:
            dockerfile = root / name / "environment" / "Dockerfile"
            dockerfile.write_text(dockerfile.read_text() + f"# never built {os.urandom(6).hex()}\n")
    return root


def trial(cell: Cell, task: str, attempt: int, tokens: tuple[int, int, int], seconds: float,
          outcome: str = "scored", workspace: str = WS) -> TrialRecord:
    """A stored Trial that used (input, cached input, output) tokens and ``seconds`` of sandbox."""
    at = datetime(2030, 1, 1, tzinfo=UTC)
    return TrialRecord(workspace=workspace, job_id=f"job-{workspace}", cell_key=cell.key, benchmark_version_id="bv",
                       task_name=task, attempt=attempt, trial_name=f"{task}__{attempt}", agent=cell.agent,
                       agent_version="v", model_configuration=cell.model_configuration, outcome=outcome,
                       reward=1.0 if outcome == "scored" else None, errored=outcome == "errored", retries=0,
                       error_type=None, error_message=None, input_tokens=tokens[0], output_tokens=tokens[2],
                       cached_input_tokens=tokens[1], cost_usd=99.0, started_at=at,
                       finished_at=at + timedelta(seconds=seconds), duration_sec=seconds, image_id=None,
                       trial_dir=f"/nowhere/{task}__{attempt}")


def store(wh: Warehouse, rows: list[TrialRecord]) -> None:
    job_id = f"job-{rows[0].workspace}"
    wh.write_parquet(trials_table(rows), wh.trials_file(cell_file_id(rows[0].cell_key), job_id))


# ---- 1. estimates, per basis ---------------------------------------------------------------------------------

def test_a_task_is_estimated_from_its_own_trials_else_the_cells_and_only_this_workspaces(warehouse: Warehouse) -> None:
    """History is what the Trials used, priced now (the stored cost_usd, 99 here, is not what counts)."""
    wh = warehouse
    mc = model_configuration("replay-weak")
    cell = Cell("0123456789ab" * 5 + "cdef", "terminus-2", agent_spec("terminus-2").spec_id, mc.ref)
    store(wh, [trial(cell, "a", 1, (10_000, 8_000, 500), 20.0), trial(cell, "a", 2, (30_000, 20_000, 1_500), 40.0),
               trial(cell, "d", 1, (50_000, 0, 4_000), 90.0), trial(cell, "a", 3, (90_000, 0, 9_000), 50.0, "errored"),
               trial(cell, "b", 1, (70_000, 0, 7_000), 80.0, "cancelled")])
    store(wh, [trial(cell, "b", 1, (900_000, 0, 90_000), 900.0, workspace="other")])
    tasks = [TaskFacts(t, 120.0, 60.0, 300.0) for t in "abcd"]
    p = mc.prices

    def cost(uncached: int, cached: int, output: int, seconds: float) -> Decimal:
        model = money((Decimal(str(p.input)) * uncached + Decimal(str(p.cached_input)) * cached
                       + Decimal(str(p.output)) * output) / 1_000_000)
        return model + sandbox(seconds)

    by_task = {e.task: e for e in quotes.estimate_tasks(wh, WS, cell, tasks)}
    assert {t: e.basis for t, e in by_task.items()} == {"a": "task", "b": "cell", "c": "cell", "d": "task"}
    # a: two scored Trials (40k input of which 28k cached, 2k output, 60 s) per Trial; errored ones do not count
    assert by_task["a"].per_trial == with_headroom(cost(12_000, 28_000, 2_000, 60.0) / 2)
    assert by_task["d"].per_trial == with_headroom(cost(50_000, 0, 4_000, 90.0))
    # b and c: the cell's three scored Trials of this Workspace, per Trial
    assert by_task["b"].per_trial == by_task["c"].per_trial == with_headroom(cost(62_000, 28_000, 6_000, 150.0) / 3)

    quoted = quotes.estimate_cell(wh, WS, cell, tasks, 2)
    assert quoted.n_tasks == 4 and quoted.trials_per_task == 2
    assert Decimal(quoted.total) == 2 * sum(e.per_trial for e in by_task.values())
    assert quoted.basis == "history of this cell: 2 Tasks measured; 2 Tasks at the cell's mean of 3 Trials"


def test_the_prior_is_fitted_to_each_tasks_timeouts(warehouse: Warehouse) -> None:
    """Terminus-2's prior is for 900 s Tasks: a 90 s Task gets a tenth of its tokens and sandbox time; a longer
    Task no more than the prior. Sandbox time never exceeds the agent and Verifier timeouts together."""
    wh = warehouse
    mc = model_configuration("claude-sonnet-4.6")  # a pair never measured: the Agent's own prior
    cell = Cell("f" * 64, "terminus-2", agent_spec("terminus-2").spec_id, mc.ref)
    tasks = [TaskFacts("long", 1800.0, 600.0, 600.0), TaskFacts("short", 90.0, 30.0, 300.0)]
    p = mc.prices

    def tokens(uncached: int, cached: int, output: int) -> Decimal:
        return money((Decimal(str(p.input)) * uncached + Decimal(str(p.cached_input)) * cached
                      + Decimal(str(p.output)) * output) / 1_000_000)

    by_task = {e.task: e for e in quotes.estimate_tasks(wh, WS, cell, tasks)}
    assert {e.basis for e in by_task.values()} == {"prior"}
    # 250k input of which 200k cached, 8k output, 600 s; a 90 s Task gets a tenth of each
    assert by_task["long"].per_trial == with_headroom(tokens(50_000, 200_000, 8_000) + sandbox(600))
    assert by_task["short"].per_trial == with_headroom(tokens(5_000, 20_000, 800) + sandbox(60))

    nop = Cell("f" * 64, "nop", agent_spec("nop").spec_id, NO_MODEL)
    [quick] = quotes.estimate_tasks(wh, WS, nop, [TaskFacts("quick", 0.5, 0.5, 300.0)])
    assert quick.per_trial == with_headroom(sandbox(1.0))  # the 1.8 s prior, bounded by 0.5 s + 0.5 s
    basis = quotes.estimate_cell(wh, WS, cell, tasks, 1).basis
    assert basis.startswith("prior for terminus-2: 250,000 input (200,000 cached) and 8,000 output tokens")
    assert "scaled down to each Task's agent timeout" in basis and "bounded by the Task timeouts" in basis


def test_a_measured_pair_is_quoted_on_its_own_prior(warehouse: Warehouse) -> None:
    """Terminus-2 with a replay configuration was measured (its script is what it is): that prior, not the one
    for real models, and the cell says so."""
    mc = model_configuration("replay-weak")
    cell = Cell("f" * 64, "terminus-2", agent_spec("terminus-2").spec_id, mc.ref)
    p = mc.prices
    [est] = quotes.estimate_tasks(warehouse, WS, cell, [TaskFacts("t", 120.0, 60.0, 300.0)])
    expected = money((Decimal(str(p.input)) * 950 + Decimal(str(p.cached_input)) * 1_950
                      + Decimal(str(p.output)) * 130) / 1_000_000) + sandbox(3.8)
    assert est.per_trial == with_headroom(expected)
    basis = quotes.estimate_cell(warehouse, WS, cell, [TaskFacts("t", 120.0, 60.0, 300.0)], 1).basis
    assert basis.startswith("measured prior for terminus-2 with replay-weak: 2,900 input (1,950 cached)")


def test_a_task_whose_image_is_not_built_pays_one_build_per_cell(warehouse: Warehouse) -> None:
    wh = warehouse
    nop = Cell("e" * 64, "nop", agent_spec("nop").spec_id, NO_MODEL)
    tasks = [TaskFacts("built", 120.0, 60.0, 300.0), TaskFacts("new", 120.0, 60.0, 300.0, image_built=False),
             TaskFacts("new-quick-build", 120.0, 60.0, 30.0, image_built=False)]
    by_task = {e.task: e for e in quotes.estimate_tasks(wh, WS, nop, tasks)}
    assert by_task["built"].build == 0
    assert by_task["new"].build == with_headroom(sandbox(120))  # the build prior
    assert by_task["new-quick-build"].build == with_headroom(sandbox(30))  # bounded by its build timeout
    quoted = quotes.estimate_cell(wh, WS, nop, tasks, 3)
    per_trial = with_headroom(sandbox(NOP_PRIOR_SEC))
    assert Decimal(quoted.total) == 3 * 3 * per_trial + with_headroom(sandbox(120)) + with_headroom(sandbox(30))
    assert quoted.basis.endswith("; 2 image builds of 120 s at most")


def test_a_quote_without_docker_counts_every_image_as_not_built(tmp_path: Path, warehouse: Warehouse,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    funded(warehouse)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    made = lifecycle.quote(warehouse, WS, local_user(), request(str(demo_copy(tmp_path, ["ini-port-change",
                                                                                       "fix-off-by-one"])), "nop"))
    [cell] = made.cells
    # demo Tasks: build timeout 300 s, so the 120 s build prior holds
    per_task = with_headroom(sandbox(NOP_PRIOR_SEC)) + with_headroom(sandbox(120))
    assert made.amount == Decimal(cell.total) == 2 * per_task
    assert "2 image builds" in cell.basis


# ---- 2. a ceiling of one's own ---------------------------------------------------------------------------------

def test_a_ceiling_below_the_estimate_or_above_the_wallet_is_refused_and_reserves_nothing(
        tmp_path: Path, warehouse: Warehouse) -> None:
    wh = warehouse
    funded(wh, amount="10")
    source = str(demo_copy(tmp_path, ["ini-port-change", "fix-off-by-one"]))
    estimate = lifecycle.quote(wh, WS, local_user(), request(source, "oracle", bounds=True)).amount
    before = wallet.read(wh, WS)[0]
    n_jobs = len(list_jobs(wh, WS))

    low = request(source, "oracle", bounds=True).model_copy(update={"ceiling_usd": float(usd(estimate / 2))})
    with pytest.raises(AmberError) as below:
        lifecycle.quote(wh, WS, local_user(), low)
    one_sentence(str(below.value), f"estimate of {show(estimate)}", f"at least {show(estimate)}")

    high = request(source, "oracle", bounds=True).model_copy(update={"ceiling_usd": 25.0})
    with pytest.raises(AmberError) as above:
        lifecycle.quote(wh, WS, local_user(), high)
    one_sentence(str(above.value), f"has {show(before.available)} available", "$25.00", "--ceiling")

    after = wallet.read(wh, WS)[0]
    assert (after.available, after.reserved) == (before.available, before.reserved)
    assert len(list_jobs(wh, WS)) == n_jobs

    refused = refusal(cli("job", "quote", source, "--agent", "oracle", "--ceiling", "0.000001"))
    one_sentence(refused, "A ceiling of $0.000001 is below this Job's estimate of $")
    refused = refusal(cli("job", "quote", source, "--agent", "oracle", "--ceiling", "nan"))
    one_sentence(refused, "--ceiling")


def test_a_ceiling_is_reserved_and_spread_over_the_cells_so_they_still_sum_to_the_quote(
        tmp_path: Path, warehouse: Warehouse) -> None:
    wh = warehouse
    funded(wh)
    source = str(demo_copy(tmp_path, ["ini-port-change", "fix-off-by-one", "count-log-errors"]))
    plain = lifecycle.quote(wh, WS, local_user(), request(source, "terminus-2", ["replay-strong", "replay-weak"],
                                                          bounds=True))
    estimates = {c.cell_key: Decimal(c.total) for c in plain.cells}
    ceiling = plain.amount + Decimal("1.234567")
    asked = request(source, "terminus-2", ["replay-strong", "replay-weak"], bounds=True).model_copy(
        update={"ceiling_usd": float(ceiling)})
    made = lifecycle.quote(wh, WS, local_user(), asked)

    assert made.amount == ceiling and made.estimate == plain.amount
    assert sum(Decimal(c.total) for c in made.cells) == made.amount
    for c in made.cells:
        assert c.estimated == estimates[c.cell_key]
        share = Decimal(c.total) - estimates[c.cell_key]
        expected = Decimal("1.234567") * estimates[c.cell_key] / plain.amount
        assert abs(share - expected) <= Decimal("0.000004"), (c.label, share, expected)
    with wh.read() as con:
        assert wallet.quote_totals(con, made.id)[0] == ceiling
    lifecycle.start(wh, WS, made.id)
    assert len(made.cells) == 4
    for c in made.cells:  # each cell's budget (the model proxy's) is its share
        assert lifecycle.open_cell_run(wh, made.job_id, c.cell_key).budget == Decimal(c.total)
    assert get_job(wh, made.job_id, WS).request.ceiling_usd == float(ceiling)  # type: ignore[union-attr]

    out = ok(cli("job", "quote", source, "--agent", "oracle", "--ceiling", "2.5"))
    assert "Reserved $2.50" in out and "That is your ceiling: the estimate is $0.0" in out, out


# ---- 3. a Job that reached its ceiling says what is missing ------------------------------------------------

def test_the_report_renders_missing_tasks_per_cell() -> None:
    evidence = [TrialEvidence(source="job-x", trial_name="a__1", task_name="a", agent="oracle", model=None,
                              attempt=1, reward=1.0, errored=False, exception_type=None, started_at=None,
                              finished_at=None, agent_duration_sec=None, agent_timeout_sec=None, input_tokens=0,
                              output_tokens=0, cost_usd=0.1, model_used=None, trajectory_steps=None,
                              trajectory_ended_with_error=False, repeated_tool_error=False, tests_passed=None,
                              tests_total=None, trial_dir=None)]
    missing = [{"route": "oracle", "cell_key": "k1", "cost_usd": 0.25,
                "tasks": [{"task": t, "trials": 1, "cost_usd": 0.125} for t in "bc"]},
               {"route": "nop", "cell_key": "k2", "cost_usd": 0.5,
                "tasks": [{"task": t, "trials": 1, "cost_usd": 0.5 / 3} for t in "abc"]}]
    built = report.build_report(evidence, missing_tasks=missing)
    assert built["missing_tasks"] == missing
    assert "missing_tasks" not in report.build_report(evidence)
    text = report.render_text(built)
    assert "Missing Tasks (the Job stopped before scoring them; finishing them is estimated at 0.750000 USD)" in text
    assert "  oracle: 2 Tasks, 2 Trials, 0.250000 USD to finish: b, c" in text
    assert "  nop: 3 Tasks, 3 Trials, 0.500000 USD to finish: a, b, c" in text
    assert "Missing Tasks" not in report.render_text(report.build_report(evidence))


@pytest.mark.docker
def test_a_job_at_its_ceiling_lists_the_tasks_it_left_and_what_finishing_them_costs(
        tmp_path: Path, warehouse: Warehouse) -> None:
    """The Quote comes from the priors at the default prices; the oracle cell runs at a sandbox price 10,000 times
    higher, so its first Trial costs more than the whole Quote and the Job stops at its ceiling."""
    wh = warehouse
    funded(wh)
    names = ["count-log-errors", "fix-off-by-one", "ini-port-change"]
    source = demo_copy(tmp_path, names)
    made, job = lifecycle.submit(wh, WS, local_user(), request(str(source), "oracle", bounds=True))
    cells = {c.agent: c for c in cells_of(wh, job.id)}
    steep = Prices(sandbox_usd_per_hour=PRICES.sandbox_usd_per_hour * 10_000)
    records = cell_run.run_cell_of_job(wh, job.id, cells["oracle"].cell_key, prices=steep)
    assert cell_run.run_cell_of_job(wh, job.id, cells["nop"].cell_key) == []
    assert get_job(wh, job.id, WS).status == "ceiling_reached"

    scored = [r for r in records if r.outcome == "scored"]
    assert scored and len(scored) < len(names)
    # the oracle's scored Trials are now the cell's history, their sandbox time priced at today's prices
    oracle_mean = sandbox(sum(r.duration_sec for r in scored)) / len(scored)
    expected = {"oracle": {t: with_headroom(oracle_mean) for t in names if t not in {r.task_name for r in scored}},
                "nop": {t: with_headroom(sandbox(NOP_PRIOR_SEC)) for t in names}}  # images built by the oracle's Trials

    found = json.loads(ok(cli("results", job.id, "--json")))
    missing = {m["route"]: m for m in found["missing_tasks"]}
    assert set(missing) == {"oracle", "nop"}
    for route, tasks in expected.items():
        found_costs = {t["task"]: Decimal(str(t["cost_usd"])) for t in missing[route]["tasks"]}
        assert set(found_costs) == set(tasks)
        assert all(abs(found_costs[t] - cost) <= MICRO for t, cost in tasks.items()), (found_costs, tasks)
        assert all(t["trials"] == 1 for t in missing[route]["tasks"])
        assert Decimal(str(missing[route]["cost_usd"])) == sum(found_costs.values())
    assert found["cells"] and found["comparisons"] == []

    text = ok(cli("results", job.id))
    assert "Missing Tasks (the Job stopped before scoring them; finishing them is estimated at" in text
    oracle_line = next(line for line in text.splitlines() if line.startswith("  oracle: "))
    assert all(t in oracle_line for t in expected["oracle"]) and "USD to finish" in oracle_line
    nop_line = next(line for line in text.splitlines() if line.startswith("  nop: "))
    assert nop_line.startswith("  nop: 3 Tasks, 3 Trials,") and nop_line.endswith(", ".join(names))
