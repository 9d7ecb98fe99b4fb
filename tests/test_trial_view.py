"""A Job's Task matrix and one Trial's page (`job_tasks`, `trial_detail`), on Jobs that really ran.

Static Jobs (the Direct Agent with the replay configurations, through the model proxy to the provider double on
loopback) run in seconds with no Docker; they give the matrix, a static Trial's page and its model calls, checked
against what a user would compare them with: the `trials` and `ledger` views. A Trial's folder comes two ways: a
Docker-backed Job of Terminus-2 (marked `docker`), and, to hold a 300-step trajectory and runaway logs, the real
Harbor trial folder of `tests/golden/demo-terminus` placed where a cell run puts its Trials
(`records.run_dir`/<trial>) and named in the Trial's stored row, as `trial_runner` names it.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before anything imports litellm: no price download

import copy
import json
import shutil
import statistics
import time
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from helpers import funded, request
from starlette.testclient import TestClient

from amber_pipeline.accounts import tokens, users, workspaces
from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, Actor, local_user
from amber_pipeline.analysis import trial_view
from amber_pipeline.analysis.task_matrix import TaskMatrix
from amber_pipeline.analysis.trial_view import TrialDetail
from amber_pipeline.cells import cell_file_id
from amber_pipeline.errors import NotFound
from amber_pipeline.jobs import cell_run, lifecycle, records
from amber_pipeline.jobs.records import Job, JobCell, cells_of
from amber_pipeline.models.configurations import model_configuration
from amber_pipeline.models.wire import Usage
from amber_pipeline.money import wallet
from amber_pipeline.money.prices import PRICES
from amber_pipeline.operations.areas import OPERATIONS
from amber_pipeline.operations.operation import call_local, path_value
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trial_key, trials_table
from server.routes import create_app

STATIC = PROJECT_ROOT / "examples" / "static-bench"
DEMO = PROJECT_ROOT / "examples" / "demo-bench"
GOLDEN_TRIAL = PROJECT_ROOT / "tests" / "golden" / "demo-terminus" / "count-log-errors__Xnsg32Z"
WS = DEFAULT_WORKSPACE
MISSED = "town-population"  # the one static Task replay-strong's script answers wrong (examples/README.md)
MULTI_TURN = "running-total"  # three turns: three model calls


def ran(wh: Warehouse, models: list[str], workspace: str = WS, bench: Path = STATIC, agent: str = "direct",
        user: str | None = None, cells: int | None = None) -> Job:
    """A Job quoted, started and run the way the daemon runs it (its first ``cells`` cells; all by default)."""
    _, job = lifecycle.submit(wh, workspace, user or local_user(), request(str(bench), agent, models))
    for cell in cells_of(wh, job.id)[:cells]:
        cell_run.run_cell_of_job(wh, job.id, cell.cell_key)
    return job


def tasks(wh: Warehouse, job_id: str, workspace: str = WS) -> TaskMatrix:
    return call_local(wh, Actor(local_user(), workspace), "job_tasks", OPERATIONS["job_tasks"].params(job_id=job_id))


def detail(wh: Warehouse, job_id: str, trial: str, cell_key: str | None = None, workspace: str = WS) -> TrialDetail:
    params = OPERATIONS["trial_detail"].params(job_id=job_id, trial=trial, cell_key=cell_key)
    return call_local(wh, Actor(local_user(), workspace), "trial_detail", params)


def stored(wh: Warehouse, job: Job, workspace: str = WS) -> list[dict[str, Any]]:
    """The Job's Trial rows as a user reads them: the `trials` view."""
    with wh.query(workspace, {"trials"}) as con:
        return con.execute("select * from trials where job_id = ?", [job.id]).fetch_arrow_table().to_pylist()


def rewrite(wh: Warehouse, job: Job, cell: JobCell, change: Any) -> None:
    """Replace a cell's stored Trial rows with ``change(rows)``, as a cell run writes its Trial file."""
    path = wh.trials_file(cell_file_id(cell.cell_key), job.id)
    table = wh.read_parquet(path)
    assert table is not None
    rows = [TrialRecord.model_validate(r) for r in table.to_pylist()]
    wh.write_parquet(trials_table(change(rows)), path)


# ---- the Task matrix ----------------------------------------------------------------------------------------


def test_the_matrix_gives_each_cells_attempts_and_puts_differing_tasks_first(warehouse: Warehouse) -> None:
    wh = warehouse
    funded(wh)
    job = ran(wh, ["replay-strong", "replay-weak"])
    strong, weak = cells_of(wh, job.id)
    matrix = tasks(wh, job.id)

    assert [(c.route, c.cell_key, c.agent, c.model, c.missing_tasks) for c in matrix.columns] == [
        ("direct/replay-strong", strong.cell_key, "direct", "replay-strong", None),
        ("direct/replay-weak", weak.cell_key, "direct", "replay-weak", None)]
    rewards = {(r["cell_key"], r["task_name"]): r["reward"] for r in stored(wh, job)}
    differing = sorted(t for (k, t), r in rewards.items() if k == strong.cell_key and r != rewards[weak.cell_key, t])
    assert MISSED in differing and len(differing) == 8  # strong solves 11 of 12, weak 5 (town-population among them)
    assert [r.task for r in matrix.rows] == differing + sorted({t for _, t in rewards} - set(differing))
    for row in matrix.rows:
        assert row.differs == (row.task in differing)
        for entry, cell in zip(row.entries, (strong, weak), strict=True):
            [attempt] = entry.attempts
            reward = rewards[cell.cell_key, row.task]
            assert (attempt.trial, attempt.task, attempt.attempt, attempt.cell_key) == (
                f"{row.task}__1", row.task, 1, cell.cell_key)
            assert attempt.reward == entry.mean_reward == reward
            assert attempt.outcome == ("passed" if reward == 1.0 else "failed")
            assert entry.missing_trials == 0

    # A cell whose run stopped before two Tasks: where the other cell alone has a mean, nothing differs.
    dropped = {MISSED, differing[0]}
    rewrite(wh, job, weak, lambda rows: [r for r in rows if r.task_name not in dropped])
    again = tasks(wh, job.id)
    by_task = {r.task: r for r in again.rows}
    for task in dropped:
        assert not by_task[task].differs
        assert by_task[task].entries[1].attempts == [] and by_task[task].entries[1].mean_reward is None
    assert [r.task for r in again.rows if r.differs] == [t for t in differing if t not in dropped]
    assert [r.task for r in again.rows][:6] == [t for t in differing if t not in dropped]


def test_a_job_that_stopped_early_lists_each_cells_missing_tasks_as_its_results_do(warehouse: Warehouse) -> None:
    wh = warehouse
    funded(wh)
    job = ran(wh, ["replay-strong", "replay-weak"], cells=1)  # the second cell never ran: the Job is cancelled
    lifecycle.cancel(wh, WS, job.id)
    strong, weak = cells_of(wh, job.id)
    matrix = tasks(wh, job.id)
    results = call_local(wh, Actor(local_user(), WS), "job_results", OPERATIONS["job_results"].params(job_id=job.id))

    assert results.missing_tasks is not None
    assert {c.cell_key: c.missing_tasks for c in matrix.columns} == {
        strong.cell_key: [], weak.cell_key: next(m.tasks for m in results.missing_tasks if m.cell_key == weak.cell_key)}
    assert len(matrix.rows) == 12 and not any(r.differs for r in matrix.rows)
    assert [r.task for r in matrix.rows] == sorted(r.task for r in matrix.rows)
    for row in matrix.rows:
        assert [len(e.attempts) for e in row.entries] == [1, 0]
        assert [e.missing_trials for e in row.entries] == [0, 1]


# ---- one Trial ----------------------------------------------------------------------------------------------


def test_a_static_trials_page_gives_its_model_calls_as_the_proxy_metered_and_the_wallet_charged_them(
        warehouse: Warehouse) -> None:
    wh = warehouse
    funded(wh)
    job = ran(wh, ["replay-strong", "replay-weak"])
    strong, weak = cells_of(wh, job.id)
    row = next(r for r in stored(wh, job) if r["cell_key"] == weak.cell_key and r["task_name"] == MULTI_TURN)
    page = detail(wh, job.id, f"{MULTI_TURN}__1", weak.cell_key)

    assert (page.job_id, page.cell.route, page.cell.cell_key, page.task, page.attempt) == (
        job.id, "direct/replay-weak", weak.cell_key, MULTI_TURN, 1)
    assert page.outcome == "failed" and page.reward == row["reward"] == 0.0 and page.error is None
    assert page.verifier is not None and page.verifier.rewards == {"reward": 0.0}
    assert page.verifier.detail == row["error_message"] and page.verifier.detail  # the built-in Verifier's sentence
    assert not page.has_folder and page.trajectory is None and page.phases == []
    assert [(a.trial, a.outcome) for a in page.attempts] == [(f"{MULTI_TURN}__1", "failed")]

    calls = page.model_calls
    assert [c.seq for c in calls] == [0, 1, 2] and {c.status for c in calls} == {200}  # one call per turn
    assert (sum(c.input_tokens for c in calls), sum(c.output_tokens for c in calls)) == (
        row["input_tokens"], row["output_tokens"]) == (page.input_tokens, page.output_tokens)
    assert all(c.input_tokens > 0 and c.output_tokens > 0 and c.latency_ms > 0 for c in calls)
    mc = model_configuration(weak.model_configuration, wh.paths, WS)
    for c in calls:
        assert c.cost_usd == float(PRICES.model_cost(mc, Usage(c.input_tokens, c.cached_input_tokens,
                                                               c.output_tokens)))
    key = trial_key(job.id, weak.cell_key, MULTI_TURN, 1)
    with wh.query(WS, {"ledger"}) as con:
        [(charged,)] = con.execute("select amount from ledger where kind = 'charge' and trial_key = ?",
                                   [key]).fetchall()
    # The Wallet was charged the calls' tokens at the configuration's prices (a static Trial has no sandbox time).
    assert charged == PRICES.model_cost(mc, Usage(page.input_tokens, page.cached_input_tokens, page.output_tokens))
    assert Decimal(str(page.cost_usd)) == charged
    assert abs(sum(c.cost_usd or 0 for c in calls) - float(charged)) <= 1e-6 * len(calls)  # each rounded to 1e-6
    first_turn = (STATIC / MULTI_TURN / "instruction.md").read_text().splitlines()[0]
    assert json.dumps(first_turn)[1:-1] in calls[0].request.text and '"content"' in calls[0].response.text

    ordered = sorted(r["task_name"] for r in stored(wh, job) if r["cell_key"] == weak.cell_key)
    at = ordered.index(MULTI_TURN)
    assert page.neighbours.previous is not None and page.neighbours.next is not None
    assert (page.neighbours.previous.trial, page.neighbours.next.trial) == (
        f"{ordered[at - 1]}__1", f"{ordered[at + 1]}__1")
    assert {page.neighbours.previous.cell_key, page.neighbours.next.cell_key} == {weak.cell_key}
    [other] = page.neighbours.other_cells
    assert (other.trial, other.cell_key, other.route, other.outcome) == (
        f"{MULTI_TURN}__1", strong.cell_key, "direct/replay-strong", "passed")
    first = detail(wh, job.id, f"{ordered[0]}__1", weak.cell_key)
    assert first.neighbours.previous is None


def golden_trial(trial_dir: Path, steps: int, stdout_chars: int) -> dict[str, Any]:
    """The golden Harbor trial folder at ``trial_dir``, its trajectory grown to ``steps`` agent steps (its own
    agent steps over again, renumbered) with one observation past the text bound, and a Verifier log of
    ``stdout_chars`` characters; its trajectory, as written."""
    shutil.copytree(GOLDEN_TRIAL, trial_dir)
    path = trial_dir / "agent" / "trajectory.json"
    data = json.loads(path.read_text())
    first, agent_steps = data["steps"][0], data["steps"][1:]
    grown = [first]
    for i in range(steps):
        step = copy.deepcopy(agent_steps[i % len(agent_steps)])
        step["step_id"] = i + 2
        for call in step.get("tool_calls", []):
            call["tool_call_id"] = f"{call['tool_call_id']}_{i}"
        for result in step.get("observation", {}).get("results", []):
            if "source_call_id" in result:
                result["source_call_id"] = f"{result['source_call_id']}_{i}"
        grown.append(step)
    grown[-1]["observation"]["results"][0]["content"] = "x" * (trial_view.TEXT_CHARACTERS + 10)
    data["steps"] = grown
    path.write_text(json.dumps(data))
    (trial_dir / "verifier" / "test-stdout.txt").write_text("é" * stdout_chars)
    return data


def test_a_trials_folder_gives_its_trajectory_verifier_output_and_phases_bounded(warehouse: Warehouse) -> None:
    wh = warehouse
    funded(wh)
    job = ran(wh, ["replay-weak"])
    [cell] = cells_of(wh, job.id)
    trial = "capital-city__1"
    folder = records.run_dir(wh, job.id, cell.cell_key) / trial  # where a cell run puts its Trial's folder
    written = golden_trial(folder, steps=300, stdout_chars=trial_view.FILE_CHARACTERS * 3)
    rewrite(wh, job, cell, lambda rows: [r.model_copy(update={"trial_dir": str(folder)}) if r.trial_name == trial
                                         else r for r in rows])

    timings = []
    for _ in range(5):
        began = time.perf_counter()
        page = detail(wh, job.id, trial)  # one cell: its name alone finds it
        timings.append(time.perf_counter() - began)
    print(f"trial_detail with a 301-step trajectory: median {statistics.median(timings) * 1000:.0f} ms")
    # About 0.1 s on an idle machine (most of it the catalog's reads); the bound is loose for a busy one, and
    # still far below what reading the Job's every Trial folder would take.
    assert statistics.median(timings) < 1.0

    assert page.has_folder and not page.transcripts_expired
    assert page.trajectory is not None and page.trajectory.steps_left_out == 0
    assert (page.trajectory.agent, page.trajectory.model_name) == ("terminus-2", "openai/replay-weak")
    steps = page.trajectory.steps
    assert [s.step_id for s in steps] == list(range(1, 302)) and [s.source for s in steps[:2]] == ["user", "agent"]
    for shown, raw in zip(steps, written["steps"], strict=True):
        assert shown.message.text == raw["message"][:trial_view.TEXT_CHARACTERS]
        assert [(c.call_id, c.name, json.loads(c.arguments.text)) for c in shown.tool_calls] == [
            (c["tool_call_id"], c["function_name"], c["arguments"]) for c in raw.get("tool_calls", [])]
        assert [r.call_id for r in shown.observations] == [
            r.get("source_call_id") for r in raw.get("observation", {}).get("results", [])]
        metrics = raw.get("metrics")
        assert (shown.metrics is None) == (metrics is None)
        if metrics:
            assert shown.metrics is not None and (shown.metrics.prompt_tokens, shown.metrics.completion_tokens) == (
                metrics["prompt_tokens"], metrics["completion_tokens"])
    assert steps[1].timestamp == datetime.fromisoformat(written["steps"][1]["timestamp"])
    last = steps[-1].observations[0].content
    assert last.truncated and len(last.text) == trial_view.TEXT_CHARACTERS
    assert not steps[1].observations[0].content.truncated

    verifier = page.verifier
    assert verifier is not None and verifier.rewards == {"reward": 0.0} and verifier.stderr is None
    assert verifier.stdout is not None and verifier.stdout.truncated
    assert verifier.stdout.text == "é" * trial_view.FILE_CHARACTERS
    assert verifier.tests is not None and (verifier.tests.tests, verifier.tests.passed, verifier.tests.failed) == (
        4, 2, 2)
    assert [c.name for c in verifier.tests.cases][:1] == ["report_exists"]
    result = json.loads((folder / "result.json").read_text())
    assert [(p.phase, p.seconds) for p in page.phases] == [
        (phase, (datetime.fromisoformat(result[phase]["finished_at"])
                 - datetime.fromisoformat(result[phase]["started_at"])).total_seconds())
        for phase in ("environment_setup", "agent_setup", "agent_execution", "verifier")]
    assert page.model_calls and page.model_calls[0].request.text  # the stored Trial's own calls, as before


def test_model_call_bodies_are_bounded(warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    wh = warehouse
    funded(wh)
    job = ran(wh, ["replay-strong"])
    monkeypatch.setattr(trial_view, "TEXT_CHARACTERS", 40)
    [call] = detail(wh, job.id, "capital-city__1").model_calls
    assert call.request.truncated and call.response.truncated
    assert len(call.request.text) == len(call.response.text) == 40 and call.request.text.startswith('{"model"')


# ---- what another Workspace sees ----------------------------------------------------------------------------


def test_another_workspaces_job_and_trial_read_as_missing_ones(warehouse: Warehouse) -> None:
    wh = warehouse
    funded(wh)
    funded(wh, "other")
    mine = ran(wh, ["replay-strong"])
    theirs = ran(wh, ["replay-weak"], workspace="other")
    [their_cell] = cells_of(wh, theirs.id)
    made_up = "job-0123456789"

    def refused(job_id: str, trial: str, cell_key: str | None = None, workspace: str = WS) -> str:
        with pytest.raises(NotFound) as raised:
            detail(wh, job_id, trial, cell_key, workspace)
        return str(raised.value)

    # Their Job, asked for from my Workspace, reads as a Job that does not exist, for both operations.
    assert refused(theirs.id, "capital-city__1").replace(theirs.id, "<id>") == refused(
        made_up, "capital-city__1").replace(made_up, "<id>")
    with pytest.raises(NotFound) as theirs_tasks:
        tasks(wh, theirs.id)
    with pytest.raises(NotFound) as made_up_tasks:
        tasks(wh, made_up)
    assert str(theirs_tasks.value).replace(theirs.id, "<id>") == str(made_up_tasks.value).replace(made_up, "<id>")
    # In my Job: their cell (a Trial of that name is theirs, not mine) reads as a made-up Trial, but for the name.
    assert refused(mine.id, "capital-city__1", their_cell.cell_key) == refused(mine.id, "capital-city__1",
                                                                                "no-such-cell")
    made_up_trial = refused(mine.id, "no-such-task__1")
    assert made_up_trial == refused(mine.id, "capital-city__9").replace("capital-city__9", "no-such-task__1")
    assert made_up_trial.startswith(f'No Trial "no-such-task__1" in Job {mine.id}')
    assert theirs.id not in made_up_trial
    assert detail(wh, theirs.id, "capital-city__1", workspace="other").cell.route == "direct/replay-weak"


# ---- the API ------------------------------------------------------------------------------------------------


def test_the_api_serves_both_operations_to_the_jobs_members(warehouse: Warehouse) -> None:
    wh = warehouse
    users.add(wh, "alice", "tests")
    workspaces.create(wh, Actor("alice", None), "alpha")
    wallet.add_credit(wh, Actor(local_user(), None), "alpha", "100", "test credit")
    job = ran(wh, ["replay-strong", "replay-weak"], workspace="alpha", user="alice")
    strong, _ = cells_of(wh, job.id)
    secret = tokens.create(wh, "alice").secret
    routes = {(op.method, op.route) for op in OPERATIONS.values()}
    assert {("GET", "/v1/workspaces/{workspace}/jobs/{job_id}/tasks"),
            ("GET", "/v1/workspaces/{workspace}/jobs/{job_id}/trials/{trial}")} <= routes

    with TestClient(create_app(wh.paths), headers={"Authorization": f"Bearer {secret}"}) as api:
        matrix = api.get(OPERATIONS["job_tasks"].path_for("alpha", {"job_id": job.id}))
        assert matrix.status_code == 200, matrix.text
        assert len(matrix.json()["rows"]) == 12 and matrix.json()["rows"][0]["differs"]

        trial = OPERATIONS["trial_detail"]
        path = trial.path_for("alpha", {"job_id": job.id, "trial": f"{MISSED}__1"})
        assert path.endswith(f"/trials/{path_value(MISSED + '__1')}")
        page = api.get(path, params={"cell_key": strong.cell_key})
        assert page.status_code == 200, page.text
        assert (page.json()["trial"], page.json()["outcome"], page.json()["cell"]["route"]) == (
            f"{MISSED}__1", "failed", "direct/replay-strong")
        ambiguous = api.get(path)  # two cells name a Trial so: which one is asked
        assert ambiguous.status_code == 400 and strong.cell_key in ambiguous.json()["detail"]
        # (no '/' in it: the test client decodes a path once more than a server does)
        missing = api.get(trial.path_for("alpha", {"job_id": job.id, "trial": "<b>nope"}))
        assert missing.status_code == 404
        assert missing.json()["detail"] == str(trial_view.no_trial(job.id, "<b>nope"))


# ---- a sandboxed Trial ----------------------------------------------------------------------------------------


@pytest.mark.docker
def test_a_sandboxed_trials_page_reads_its_real_trajectory_and_model_calls(warehouse: Warehouse,
                                                                            tmp_path: Path) -> None:
    wh = warehouse
    funded(wh)
    bench = tmp_path / "bench"
    shutil.copytree(DEMO / "count-log-errors", bench / "count-log-errors")
    job = ran(wh, ["replay-strong", "replay-weak"], bench=bench, agent="terminus-2")
    strong, weak = cells_of(wh, job.id)

    [row] = tasks(wh, job.id).rows
    assert row.differs and [e.attempts[0].outcome for e in row.entries] == ["passed", "failed"]
    stored_row = next(r for r in stored(wh, job) if r["cell_key"] == weak.cell_key)
    page = detail(wh, job.id, "count-log-errors__1", weak.cell_key)

    assert page.has_folder and page.outcome == "failed" and page.reward == 0.0
    assert [p.phase for p in page.phases] == ["environment_setup", "agent_setup", "agent_execution", "verifier"]
    assert all(p.seconds > 0 for p in page.phases)
    assert page.verifier is not None and page.verifier.stdout is not None
    assert page.trajectory is not None and page.trajectory.agent == "terminus-2"
    agent_steps = [s for s in page.trajectory.steps if s.source == "agent"]
    assert agent_steps and all(s.tool_calls for s in agent_steps)
    assert {c.name for s in agent_steps for c in s.tool_calls} >= {"bash_command"}
    # Each of the Agent's steps is one model call, and the proxy metered what the Agent was told it used.
    calls = page.model_calls
    assert len(calls) == len(agent_steps)
    assert [(c.input_tokens, c.output_tokens) for c in calls] == [
        (s.metrics.prompt_tokens, s.metrics.completion_tokens) for s in agent_steps if s.metrics is not None]
    assert (sum(c.input_tokens for c in calls), sum(c.output_tokens for c in calls)) == (
        stored_row["input_tokens"], stored_row["output_tokens"])
    model_cost = sum(Decimal(str(c.cost_usd)) for c in calls)
    charged = Decimal(str(page.cost_usd))
    sandbox = PRICES.sandbox_cost(page.duration_sec)
    assert abs(charged - (model_cost + sandbox)) <= Decimal("0.000001") * (len(calls) + 1)
