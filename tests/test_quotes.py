"""Quotes that hold: per-Task estimates (the Task's part from its own history or its declared limits, the Agent's
part from the cell's history or the Agent's own prior), a ceiling of one's own, and what a Job that stopped at its
ceiling still needs.

Expected amounts are computed here from the prices and the rule the module states (headroom 40% on what history
and priors say, none on declared limits, money in micro-dollars, history priced at today's prices), not read
back from the code under test. Only the last test needs Docker.
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

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.agents.specs import AGENTS, agent_spec
from amber_pipeline.analysis import report
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.render_report import render_text
from amber_pipeline.benchmarks import registry
from amber_pipeline.cells import NO_MODEL, Cell
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import cell_run, history, lifecycle, quotes
from amber_pipeline.jobs.quotes import TaskFacts
from amber_pipeline.jobs.records import cells_of, get_job, list_jobs
from amber_pipeline.models.configurations import model_configuration
from amber_pipeline.money import wallet
from amber_pipeline.money.prices import PRICES, Prices, show, usd
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord

pytestmark = pytest.mark.usefixtures("cli_mode")  # on the embedded default, then against `amber serve`

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
WS = DEFAULT_WORKSPACE
MICRO = Decimal("0.000001")
SANDBOX_PER_SEC = Decimal("0.05") / 3600  # the embedded default's price of a sandbox-second
ALLOWANCE = 10.0  # the Environment's start-up allowance for a Task nothing has run yet (seconds)


def money(x: Decimal) -> Decimal:
    return x.quantize(MICRO, rounding=ROUND_HALF_UP)


def with_headroom(x: Decimal) -> Decimal:
    return money(x * Decimal("1.4"))


def sandbox(seconds: float) -> Decimal:
    return money(Decimal(str(seconds)) * SANDBOX_PER_SEC)


def tokens_cost(mc_name: str, uncached: int, cached: int, output: int) -> Decimal:
    p = model_configuration(mc_name).prices
    return money((Decimal(str(p.input)) * uncached + Decimal(str(p.cached_input)) * cached
                  + Decimal(str(p.output)) * output) / 1_000_000)


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


def cell_of(agent: str, mc: str | None = None, version: str = "f" * 64) -> Cell:
    return Cell(version, agent, agent_spec(agent).spec_id, model_configuration(mc).ref if mc else NO_MODEL)


def used(cell: Cell, task_hash: str, n: int, *, env: float = 0.0, verifier: float = 0.0, agent: float = 0.0,
         image: float = 0.0, tokens: tuple[int, int, int] = (0, 0, 0), outcome: str = "scored",
         workspace: str = WS) -> TrialRecord:
    """A Trial (the ``n``-th of its cell) of the Task with that hash, and where its time went."""
    at = datetime(2030, 1, 1, tzinfo=UTC)
    seconds = env + verifier + agent + image
    return TrialRecord(workspace=workspace, job_id=f"job-{workspace}", cell_key=cell.key, benchmark_version_id="bv",
                       task_name=task_hash, attempt=n, trial_name=f"{task_hash}__{n}", agent=cell.agent,
                       agent_version="v", model_configuration=cell.model_configuration, outcome=outcome,
                       reward=1.0 if outcome == "scored" else None, errored=outcome == "errored", retries=0,
                       error_type=None, error_message=None, input_tokens=tokens[0], output_tokens=tokens[2],
                       cached_input_tokens=tokens[1], cost_usd=99.0, started_at=at,
                       finished_at=at + timedelta(seconds=seconds), duration_sec=seconds, image_id=None,
                       trial_dir="/nowhere", task_hash=task_hash, image_sec=image, environment_sec=env,
                       agent_sec=agent, verifier_sec=verifier)


def learn(wh: Warehouse, rows: list[TrialRecord], owner: str = WS) -> None:
    """What the Trials used, kept as their charges keep it (`history.record`), under the Benchmark's owner."""
    with wh.write() as con:
        history.record(con, rows[0].workspace, owner, rows)


# ---- 1. estimates, per part and source -------------------------------------------------------------------------

def test_every_agent_has_a_prior_of_its_own() -> None:
    """No Agent is ever priced from another Agent's prior."""
    for name in AGENTS:
        prior, said = quotes.prior_of(Cell("f" * 64, name, agent_spec(name).spec_id, NO_MODEL))
        assert prior is quotes.PRIORS[name] and said == f"prior for {name}"


def test_a_task_nothing_ran_is_priced_at_its_declared_limits(warehouse: Warehouse) -> None:
    """The Environment's allowance and the Verifier timeout, a build at its build timeout, no headroom; nop's
    own time is nothing, the oracle's is the agent timeout (it runs the Task's own solution). Harbor's defaults
    stand in for limits a Task does not declare (600 s)."""
    tasks = [TaskFacts("t", 120.0, 45.0, 300.0, task_hash="h-t"),
             TaskFacts("unbuilt", 90.0, 30.0, 200.0, image_built=False, task_hash="h-u"),
             TaskFacts("open", None, None, 600.0, task_hash="h-o")]
    nop = {e.task: e for e in quotes.estimate_tasks(warehouse, WS, cell_of("nop"), tasks)}
    assert nop["t"].per_trial == sandbox(ALLOWANCE + 45) and nop["t"].build == 0
    assert nop["unbuilt"].per_trial == sandbox(ALLOWANCE + 30) and nop["unbuilt"].build == sandbox(200)
    assert nop["open"].per_trial == sandbox(ALLOWANCE + 600)
    assert {(e.task_basis, e.agent_basis) for e in nop.values()} == {("declared limits", "prior")}
    oracle = {e.task: e for e in quotes.estimate_tasks(warehouse, WS, cell_of("oracle"), tasks)}
    assert oracle["t"].per_trial == sandbox(ALLOWANCE + 45 + 120)
    assert oracle["unbuilt"].per_trial == sandbox(ALLOWANCE + 30 + 90) and oracle["unbuilt"].build == sandbox(200)
    assert oracle["open"].per_trial == sandbox(ALLOWANCE + 600 + 600)
    assert {(e.task_basis, e.agent_basis) for e in oracle.values()} == {("declared limits", "declared limits")}

    quoted = quotes.estimate_cell(warehouse, WS, cell_of("oracle"), tasks, 2)
    assert quoted.sources == {"task": {"declared limits": 3}, "agent": {"declared limits": 3}}
    assert quoted.basis == ("Environment and Verifier: declared limits (3 Tasks); Agent: declared limits (3 Tasks); "
                            "1 image build")
    assert Decimal(quoted.total) == 2 * sum(e.per_trial for e in oracle.values()) + sandbox(200)


def test_a_tasks_part_is_learned_from_every_trial_of_it_and_public_timings_from_every_workspace(
        warehouse: Warehouse) -> None:
    """Environment, image build and Verifier are the Task's: any cell's scored Trials of it count (here nop's and
    the oracle's price a Terminus-2 cell). Another Workspace's Trials count only where they ran on a public
    Benchmark Version."""
    wh = warehouse
    nop, oracle = cell_of("nop"), cell_of("oracle")
    learn(wh, [used(nop, "h-a", 1, env=2.0, verifier=6.0, image=10.0),
               used(oracle, "h-a", 2, env=3.0, verifier=8.0, agent=4.0, image=0.01),
               used(oracle, "h-a", 3, env=9.0, verifier=9.0, outcome="errored")])  # not scored: not learned
    learn(wh, [used(nop, "h-b", 1, env=100.0, verifier=100.0, workspace="other")], owner="other")
    learn(wh, [used(nop, "h-c", 1, env=4.0, verifier=5.0, image=30.0, workspace="other")], owner=registry.PUBLIC)
    tasks = [TaskFacts("a", 120.0, 60.0, 300.0, image_built=False, task_hash="h-a"),
             TaskFacts("b", 120.0, 60.0, 300.0, task_hash="h-b"),
             TaskFacts("c", 120.0, 60.0, 300.0, image_built=False, task_hash="h-c"),
             TaskFacts("d", 120.0, 60.0, 300.0, image_built=False, task_hash="h-d")]
    cell = cell_of("terminus-2", "replay-weak")
    by_task = {e.task: e for e in quotes.estimate_tasks(wh, WS, cell, tasks)}

    # The Agent's part: the measured prior of Terminus-2 with replay-weak (2,900 input of which 1,950 cached, 130
    # output, 2.3 s of its own), with headroom.
    agent_tokens = tokens_cost("replay-weak", 4_060 - 2_730, 2_730, 182)
    agent_sec = 2.3 * 1.4

    def expected(task_sec: float) -> Decimal:
        return agent_tokens + sandbox(task_sec + agent_sec)

    assert by_task["a"].per_trial == expected((2.5 + 7.0) * 1.4)  # means of nop's and the oracle's Trials
    assert by_task["a"].build == sandbox(10.0 * 1.4)  # the Trial that built its image (the other found it built)
    assert by_task["b"].per_trial == expected(ALLOWANCE + 60)  # another Workspace's private Task: nothing known
    assert by_task["c"].per_trial == expected((4.0 + 5.0) * 1.4)  # public: learned from another Workspace
    assert by_task["c"].build == sandbox(30.0 * 1.4)
    assert by_task["d"].per_trial == expected(ALLOWANCE + 60) and by_task["d"].build == sandbox(300)
    assert {t: e.task_basis for t, e in by_task.items()} == {
        "a": "Task history", "b": "declared limits", "c": "Task history", "d": "declared limits"}
    quoted = quotes.estimate_cell(wh, WS, cell, tasks, 1)
    assert quoted.sources == {"task": {"Task history": 2, "declared limits": 2}, "agent": {"prior": 4}}
    assert quoted.basis == ("Environment and Verifier: Task history (2 Tasks), declared limits (2 Tasks); Agent and "
                            "tokens: measured prior for terminus-2 with replay-weak (4 Tasks); 3 image builds")


def test_the_agents_part_is_the_cells_history_on_the_task_else_its_mean_and_only_this_workspaces(
        warehouse: Warehouse) -> None:
    """The Agent's time and tokens are the cell's Agent Version and Model Configuration's, on any Benchmark
    Version: its Trials of this Task, else its mean over other Tasks (its time bounded by this Task's agent
    timeout). History is what the Trials used, priced now. Another Agent's history never counts."""
    wh = warehouse
    elsewhere = cell_of("terminus-2", "replay-weak", version="e" * 64)  # the same pair on another Benchmark
    env = {"env": 1.0, "verifier": 2.0}
    learn(wh, [used(elsewhere, "h-a", 1, agent=20.0, tokens=(10_000, 8_000, 500), **env),
               used(elsewhere, "h-a", 2, agent=40.0, tokens=(30_000, 20_000, 1_500), **env),
               used(elsewhere, "h-d", 3, agent=90.0, tokens=(50_000, 0, 4_000), **env),
               used(elsewhere, "h-a", 4, agent=70.0, tokens=(90_000, 0, 9_000), outcome="errored", **env)])
    learn(wh, [used(elsewhere, "h-b", 1, agent=900.0, tokens=(900_000, 0, 90_000), workspace="other", **env)],
          owner="other")
    learn(wh, [used(cell_of("oracle"), "h-z", 5, agent=500.0, **env)])
    tasks = [TaskFacts("a", 120.0, 60.0, 300.0, task_hash="h-a"), TaskFacts("b", 60.0, 60.0, 300.0, task_hash="h-b")]
    cell = cell_of("terminus-2", "replay-weak")
    by_task = {e.task: e for e in quotes.estimate_tasks(wh, WS, cell, tasks)}
    # a: the Task's part from its Trials (1 s + 2 s), the Agent's from its two scored Trials (40k input of which
    # 28k cached, 2k output, 60 s): their means, with headroom
    assert by_task["a"].per_trial == (tokens_cost("replay-weak", 8_400, 19_600, 1_400)
                                      + sandbox((1.0 + 2.0) * 1.4 + 30.0 * 1.4))
    # b: nothing known of the Task here; the pair's three scored Trials in this Workspace (90k input of which 28k
    # cached, 6k output, 150 s): the mean, with headroom, its time bounded by b's 60 s agent timeout
    assert by_task["b"].per_trial == tokens_cost("replay-weak", 28_934, 13_066, 2_800) + sandbox(ALLOWANCE + 60 + 60.0)
    assert {t: e.agent_basis for t, e in by_task.items()} == {"a": "cell history on the Task", "b": "cell history"}
    # nop has no history: its own prior, not Terminus-2's or the oracle's
    [nop] = quotes.estimate_tasks(wh, WS, cell_of("nop"), tasks[1:])
    assert nop.per_trial == sandbox(ALLOWANCE + 60) and nop.agent_basis == "prior"


def test_the_prior_is_fitted_to_each_tasks_timeouts(warehouse: Warehouse) -> None:
    """Terminus-2's prior is for 900 s Tasks: a 90 s Task gets a tenth of its tokens and of its time; a longer
    Task no more than the prior; its time never exceeds the agent timeout."""
    cell = cell_of("terminus-2", "claude-sonnet-4.6")  # a pair never measured: the Agent's own prior
    tasks = [TaskFacts("long", 1800.0, 600.0, 600.0), TaskFacts("short", 90.0, 30.0, 300.0),
             TaskFacts("tight", 300.0, 30.0, 300.0)]
    by_task = {e.task: e for e in quotes.estimate_tasks(warehouse, WS, cell, tasks)}
    assert {e.agent_basis for e in by_task.values()} == {"prior"}
    # 250k input of which 200k cached, 8k output, 600 s, with headroom; a 90 s Task gets a tenth of each
    assert by_task["long"].per_trial == (tokens_cost("claude-sonnet-4.6", 70_000, 280_000, 11_200)
                                         + sandbox(ALLOWANCE + 600 + 600 * 1.4))
    assert by_task["short"].per_trial == (tokens_cost("claude-sonnet-4.6", 7_000, 28_000, 1_120)
                                          + sandbox(ALLOWANCE + 30 + 60 * 1.4))
    # a third of 600 s is 200 s, 280 s with headroom: within its 300 s agent timeout
    assert by_task["tight"].per_trial == (tokens_cost("claude-sonnet-4.6", 23_334, 93_333, 3_733)
                                          + sandbox(ALLOWANCE + 30 + 200 * 1.4))
    basis = quotes.estimate_cell(warehouse, WS, cell, tasks, 1).basis
    assert basis.endswith("Agent and tokens: prior for terminus-2 (3 Tasks)")


def test_a_quote_without_docker_counts_every_image_as_not_built(tmp_path: Path, warehouse: Warehouse,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    funded(warehouse)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    made = lifecycle.quote(warehouse, WS, local_user(), request(str(demo_copy(tmp_path, ["ini-port-change",
                                                                                       "fix-off-by-one"])), "nop"))
    [cell] = made.cells
    # demo Tasks: Verifier timeout 60 s, build timeout 300 s; nothing ran them in this Workspace
    per_task = sandbox(ALLOWANCE + 60) + sandbox(300)
    assert made.amount == Decimal(cell.total) == 2 * per_task
    assert cell.basis.endswith("; 2 image builds")


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
    for c in made.cells:  # each cell's budget (the model proxy's) is the Job's whole pool
        pool = lifecycle.open_cell_run(wh, made.job_id, c.cell_key).pool
        assert pool is not None and pool.left() == made.amount
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
    built = report.build_report(evidence, missing_tasks=[report.MissingTasks.model_validate(m) for m in missing])
    assert built.model_dump(mode="json")["missing_tasks"] == missing
    assert "missing_tasks" not in report.build_report(evidence).model_dump(mode="json")
    text = render_text(built)
    assert "Missing Tasks (the Job stopped before scoring them; finishing them is estimated at 0.750000 USD)" in text
    assert "  oracle: 2 Tasks, 2 Trials, 0.250000 USD to finish: b, c" in text
    assert "  nop: 3 Tasks, 3 Trials, 0.500000 USD to finish: a, b, c" in text
    assert "Missing Tasks" not in render_text(report.build_report(evidence))


@pytest.mark.docker
def test_a_job_at_its_ceiling_lists_the_tasks_it_left_and_what_finishing_them_costs(
        tmp_path: Path, warehouse: Warehouse) -> None:
    """The Quote comes from the declared limits at the default prices; the oracle cell runs at a sandbox price
    10,000 times higher, so its first Trial costs more than the whole Quote and the Job stops at its ceiling."""
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

    scored = {r.task_name: r for r in records if r.outcome == "scored"}
    assert scored and len(scored) < len(names)
    # The oracle's scored Trials are now history: of their Tasks (Environment and Verifier) and of the oracle's
    # cell (its own time, bounded by the demo Tasks' 120 s agent timeout), priced at today's prices. A Task none
    # of them ran is at its declared limits (Verifier timeout 60 s; a build at its 300 s timeout if not built).
    facts = {f.name: f for f in quotes.task_facts(registry.version(wh, job.benchmark_version_id, job.benchmark_owner))}
    oracle_sec = min(sum(r.agent_sec or 0 for r in scored.values()) / len(scored) * 1.4, 120.0)

    def task_sec(t: str) -> float:
        r = scored.get(t)
        return (r.environment_sec + r.verifier_sec) * 1.4 if r else ALLOWANCE + 60  # type: ignore[operator]

    def build(t: str) -> Decimal:
        r = scored.get(t)
        if facts[t].image_built:
            return Decimal(0)
        return sandbox(r.image_sec * 1.4 if r and (r.image_sec or 0) >= 1 else 300.0)  # type: ignore[operator]

    expected = {"oracle": {t: sandbox(task_sec(t) + oracle_sec) + build(t) for t in names if t not in scored},
                "nop": {t: sandbox(task_sec(t)) + build(t) for t in names}}  # nop's own time: nothing

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
