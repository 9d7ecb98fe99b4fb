"""Scores in the warehouse (amber_pipeline/scoring/store.py): what the SQL views show after a cell run
(``write_cell``) and after a re-aggregation (``reaggregate``), from Trial files in the real layout.

Every cell's numbers are checked against a computation from the Trial records written here (per-Task
means with math.fsum, Errored and cancelled Trials by hand), the two writers against each other (==),
and the comparisons view against the engine.
"""

from __future__ import annotations

import math
import random
import shutil
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest

from amber_pipeline.cells import NO_MODEL, Cell, cell_file_id
from amber_pipeline.paths import AmberPaths
from amber_pipeline.scoring import engine, store
from amber_pipeline.scoring.bootstrap import Interval, Resampling, mean_intervals
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trials_table

BV1, BV2 = "1" * 64, "2" * 64
TASKS = [f"task-{i}" for i in range(7)]
REWARDS = [0.1, 0.7, 0.3, 1 / 3, 0.2, 0.9, 0.0, 1.0, 2 / 3, 0.45]  # sums of these are not exact in binary
START = datetime(2026, 3, 1, tzinfo=UTC)


def trial(workspace: str, job: str, cell: Cell, task: str, attempt: int, outcome: str, reward: float | None,
          cost: float = 0.01, duration: float = 10.0) -> TrialRecord:
    errored = outcome == "errored"
    return TrialRecord(
        workspace=workspace, job_id=job, cell_key=cell.key, benchmark_version_id=cell.benchmark_version_id,
        task_name=task, attempt=attempt, trial_name=f"{task}__{attempt}", agent=cell.agent,
        agent_version=cell.agent_spec_id, model_configuration=cell.model_configuration, outcome=outcome,
        reward=reward if outcome == "scored" else None, errored=errored, retries=2 if errored else 0,
        error_type="SandboxBuildFailedError" if errored else None, error_message="failed" if errored else None,
        input_tokens=100, output_tokens=10, cost_usd=cost, started_at=START,
        finished_at=START + timedelta(seconds=duration), duration_sec=duration, image_id=None,
        trial_dir=f"runs/{job}/{cell.file_id}/{task}__{attempt}")


def store_trials(wh: Warehouse, records: list[TrialRecord]) -> None:
    """One Trial file per (cell, Job), as a cell run writes them."""
    by_file: dict[tuple[str, str], list[TrialRecord]] = defaultdict(list)
    for r in records:
        by_file[(r.cell_key, r.job_id)].append(r)
    for (key, job), rows in by_file.items():
        wh.write_parquet(trials_table(rows), wh.trials_file(cell_file_id(key), job))


def random_cell(rng: random.Random, workspace: str, job: str, cell: Cell, attempts: int = 3,
                tasks: list[str] = TASKS) -> list[TrialRecord]:
    """Non-dyadic Rewards, about 12% Errored and 8% cancelled Trials, costs and durations that do not sum exactly."""
    out = []
    for task in tasks:
        for attempt in range(1, attempts + 1):
            u = rng.random()
            outcome = "errored" if u < 0.12 else "cancelled" if u < 0.2 else "scored"
            out.append(trial(workspace, job, cell, task, attempt, outcome, rng.choice(REWARDS),
                             round(rng.uniform(0.001, 0.1), 6), rng.uniform(1.0, 90.0)))
    return out


def fixed_cell(workspace: str, job: str, cell: Cell, rewards: dict[str, float | None]) -> list[TrialRecord]:
    """One Trial per Task; None is an Errored Trial."""
    return [trial(workspace, job, cell, task, 1, "errored" if r is None else "scored", r)
            for task, r in rewards.items()]


def cells_of(agent: str, models: list[str], bv: str = BV1, version: str = "v1") -> list[Cell]:
    return [Cell(bv, agent, f"{agent}-{version}", m) for m in models]


TERM = cells_of("terminus", ["m-a", "m-b", "m-c"])
CODEX = cells_of("codex", ["m-a", "m-b"])
ORACLE = Cell(BV1, "oracle", "oracle-v1", NO_MODEL)
TERM_V2 = cells_of("terminus", ["m-a"], version="v2")  # another Agent Version, the same Model Configuration
TERM_BV2 = cells_of("terminus", ["m-a", "m-b"], bv=BV2)
FLIP = cells_of("flip", ["m-p", "m-q", "m-r"])


def populate(wh: Warehouse) -> list[TrialRecord]:
    rng = random.Random(42)
    records: list[TrialRecord] = []
    # Workspace alpha: two Jobs on one cell (the second over some Tasks only), a Task Errored in every Trial
    # of one cell, a second Benchmark Version, a second Agent Version, oracle.
    records += random_cell(rng, "alpha", "job-a1", TERM[0]) + random_cell(rng, "alpha", "job-a2", TERM[0],
                                                                          tasks=TASKS[:4])
    records += random_cell(rng, "alpha", "job-a1", TERM[1])
    records += [t if t.task_name != "task-6" else trial("alpha", t.job_id, TERM[2], t.task_name, t.attempt,
                                                        "errored", None)
                for t in random_cell(rng, "alpha", "job-a1", TERM[2])]
    records += random_cell(rng, "alpha", "job-a1", CODEX[0]) + random_cell(rng, "alpha", "job-a1", CODEX[1])
    records += random_cell(rng, "alpha", "job-a1", ORACLE) + random_cell(rng, "alpha", "job-a1", TERM_V2[0])
    for cell in TERM_BV2:
        records += random_cell(rng, "alpha", "job-a4", cell)
    # P scores higher than Q overall but lower on the Tasks both scored; R ties P.
    p, q, r = FLIP
    records += fixed_cell("alpha", "job-a5", p, {"task-0": 0.5, "task-1": 0.5, "task-2": 1.0})
    records += fixed_cell("alpha", "job-a5", q, {"task-0": 0.625, "task-1": 0.625, "task-2": None})
    records += fixed_cell("alpha", "job-a5", r, {"task-0": 0.5, "task-1": 0.5, "task-2": 1.0})
    # Workspace beta: the same cell keys (a public Benchmark) with Trials of its own; a cell that only Errored.
    records += random_cell(rng, "beta", "job-b1", TERM[0], attempts=2) + random_cell(rng, "beta", "job-b1", TERM[1])
    records += fixed_cell("beta", "job-b1", TERM[2], dict.fromkeys(TASKS[:3]))
    records += random_cell(rng, "beta", "job-b1", CODEX[0], tasks=TASKS[:4])
    store_trials(wh, records)
    return records


N_CELLS = {"alpha": 12, "beta": 4}
# alpha: terminus v1 3 + codex 1 + flip 3 on BV1, terminus 1 on BV2 (v2 and oracle pair with nothing);
# beta: terminus 3 (codex has one cell)
N_COMPARISONS = {"alpha": 8, "beta": 3}


# --- what a user reads, and an independent computation of it -------------------------------------------------


def nan_safe(x: object) -> object:
    return "nan" if isinstance(x, float) and math.isnan(x) else x


def views(wh: Warehouse, queries: dict[str, str], workspace: str | None = None) -> dict[str, list[dict]]:
    """The rows of each query over the SQL views a user reads (one Workspace's, or unscoped), NaN as "nan"."""
    out = {}
    with wh.query(workspace) as con:
        for name, sql in queries.items():
            cur = con.execute(sql)
            names = [d[0] for d in cur.description]
            out[name] = [{k: nan_safe(v) for k, v in zip(names, r, strict=True)} for r in cur.fetchall()]
    return out


def view(wh: Warehouse, sql: str, workspace: str | None = None) -> list[dict]:
    return views(wh, {"": sql}, workspace)[""]


def snapshot(wh: Warehouse) -> dict[str, list[dict]]:
    """Every number of the score views, for each Workspace and unscoped."""
    out = views(wh, {"cell_aggregates": "select * from cell_aggregates order by workspace, cell_key",
                     "rewards": "select * from rewards order by workspace, cell_key, task_name",
                     "comparisons": "select * from comparisons order by all"})
    for ws in N_CELLS:
        found = views(wh, {"cell_results": "select * from cell_results order by cell_key",
                           "rewards": "select * from rewards order by cell_key, task_name"}, ws)
        out |= {f"{name}/{ws}": rows for name, rows in found.items()}
    return out


def expected_cell(records: list[TrialRecord], workspace: str, key: str) -> dict:
    """A cell's numbers from its Trial records, computed here: cancelled Trials are no result,
    Errored ones count apart, per-Task means (exact sums) then their mean across Tasks."""
    trials = [t for t in records if t.workspace == workspace and t.cell_key == key and t.outcome != "cancelled"]
    by_task: dict[str, list[float]] = defaultdict(list)
    for t in trials:
        by_task[t.task_name]  # noqa: B018  (a Task whose Trials all errored is listed, with no mean)
        if t.reward is not None:
            by_task[t.task_name].append(t.reward)
    means = {task: math.fsum(v) / len(v) for task, v in sorted(by_task.items()) if v}
    durations = [t.duration_sec for t in trials]
    return {"n_trials": len(trials), "errored": sum(t.errored for t in trials), "n_tasks": len(means),
            "task_means": means, "tasks_listed": sorted(by_task),
            "mean_reward": sum(means.values()) / len(means) if means else math.nan,
            "cost_usd": math.fsum(t.cost_usd for t in trials),
            "mean_duration_sec": math.fsum(durations) / len(durations)}


def check_against_records(wh: Warehouse, records: list[TrialRecord]) -> None:
    """Every cell_aggregates and rewards row against :func:`expected_cell`; each interval against the
    bootstrap of the rewards view's per-Task means (what a user re-running it from SQL would get)."""
    found = views(wh, {"aggregates": "select * from cell_aggregates", "rewards": "select * from rewards order by all"})
    aggregates, rewards = found["aggregates"], found["rewards"]
    stored = {(t.workspace, t.cell_key) for t in records if t.outcome != "cancelled"}
    assert {(r["workspace"], r["cell_key"]) for r in aggregates} == stored
    assert len(aggregates) == len(stored)
    for row in aggregates:
        want = expected_cell(records, row["workspace"], row["cell_key"])
        mine = [r for r in rewards if (r["workspace"], r["cell_key"]) == (row["workspace"], row["cell_key"])]
        assert [r["task_name"] for r in mine] == want["tasks_listed"]
        scored = [r for r in mine if r["mean_reward"] is not None]
        assert {r["task_name"]: r["mean_reward"] for r in scored} == pytest.approx(want["task_means"], abs=1e-15)
        assert (row["n_trials"], row["errored"], row["n_tasks"]) == (want["n_trials"], want["errored"],
                                                                   want["n_tasks"])
        assert sum(r["n_trials"] for r in mine) == row["n_trials"]
        assert sum(r["n_errored"] for r in mine) == row["errored"]
        assert row["cost_usd"] == pytest.approx(want["cost_usd"], rel=1e-15)
        assert row["mean_duration_sec"] == pytest.approx(want["mean_duration_sec"], rel=1e-15)
        if want["n_tasks"] == 0:
            assert row["mean_reward"] == row["ci_low"] == row["ci_high"] == "nan"
            continue
        assert row["mean_reward"] == pytest.approx(want["mean_reward"], abs=1e-15)
        [ci] = mean_intervals([np.array([r["mean_reward"] for r in scored])])
        assert Interval(row["ci_low"], row["ci_high"]) == ci


def outputs(wh: Warehouse) -> dict[Path, int]:
    files = [*wh.paths.aggregates.rglob("*"), *wh.paths.rewards.rglob("*"), *wh.paths.comparisons.rglob("*")]
    return {p: p.stat().st_mtime_ns for p in files if p.is_file() and p.suffix != ".lock"}


# --- tests -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reaggregated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Warehouse, list[TrialRecord]]:
    """A populated warehouse, re-aggregated once, for the tests that only read it."""
    wh = Warehouse(AmberPaths(tmp_path_factory.mktemp("amber")))
    records = populate(wh)
    result = store.reaggregate(wh)
    assert result.changed
    assert (result.cells, result.comparisons) == (sum(N_CELLS.values()), sum(N_COMPARISONS.values()))
    return wh, records


def test_reaggregation_writes_every_cells_numbers(reaggregated: tuple[Warehouse, list[TrialRecord]]) -> None:
    warehouse, records = reaggregated
    check_against_records(warehouse, records)
    only_errored = view(warehouse, f"select * from cell_results where cell_key = '{TERM[2].key}'", "beta")
    assert [(r["n_tasks"], r["n_trials"], r["errored"], r["mean_reward"]) for r in only_errored] == [(0, 3, 3, "nan")]


def test_write_cell_and_reaggregate_write_identical_numbers(warehouse: Warehouse) -> None:
    records = populate(warehouse)
    keys = sorted({t.cell_key for t in records})
    for key in keys:
        scores = store.write_cell(warehouse, key)
        assert {c.cell for c in scores.cells} == {key}
        assert {c.scope for c in scores.cells} == {t.workspace for t in records
                                                   if t.cell_key == key and t.outcome != "cancelled"}
    per_cell = snapshot(warehouse)
    check_against_records(warehouse, records)
    per_cell_files = set(outputs(warehouse))
    shutil.rmtree(warehouse.paths.aggregates)
    shutil.rmtree(warehouse.paths.rewards)
    assert store.reaggregate(warehouse).changed
    again = snapshot(warehouse)
    assert {k: v for k, v in again.items() if k != "comparisons"} == {k: v for k, v in per_cell.items()
                                                                       if k != "comparisons"}
    assert per_cell_files <= set(outputs(warehouse))  # the same files, plus the comparisons and fingerprint
    for cell in TERM:  # and a cell run after the re-aggregation leaves its numbers as they are (both Workspaces)
        store.write_cell(warehouse, cell.key)
    assert snapshot(warehouse) == again


def test_workspaces_never_mix(reaggregated: tuple[Warehouse, list[TrialRecord]]) -> None:
    warehouse, records = reaggregated
    shared = TERM[0].key  # run by both Workspaces
    assert (warehouse.aggregates_file(TERM[0].file_id, "alpha") != warehouse.aggregates_file(TERM[0].file_id, "beta"))
    rows = {}
    for ws in N_CELLS:
        mine = view(warehouse, "select * from cell_aggregates", ws)
        assert {r["workspace"] for r in mine} == {ws} and len(mine) == N_CELLS[ws]
        assert {r["workspace"] for r in view(warehouse, "select * from rewards", ws)} == {ws}
        comps = view(warehouse, "select * from comparisons", ws)
        assert {r["workspace"] for r in comps} == {ws} and len(comps) == N_COMPARISONS[ws]
        keys = {r["cell_key"] for r in mine}
        assert all(r["better_cell_key"] in keys and r["worse_cell_key"] in keys for r in comps)
        [rows[ws]] = [r for r in mine if r["cell_key"] == shared]
        want = expected_cell(records, ws, shared)
        assert (rows[ws]["n_trials"], rows[ws]["n_tasks"]) == (want["n_trials"], want["n_tasks"])
        assert rows[ws]["mean_reward"] == pytest.approx(want["mean_reward"], abs=1e-15)
    assert rows["alpha"]["n_trials"] != rows["beta"]["n_trials"]
    assert rows["alpha"]["mean_reward"] != rows["beta"]["mean_reward"]


def test_cancelled_trials_are_not_results(warehouse: Warehouse) -> None:
    cell = TERM[0]
    store_trials(warehouse, [
        trial("alpha", "job-1", cell, "t0", 1, "scored", 1.0, cost=0.5),
        trial("alpha", "job-1", cell, "t0", 2, "cancelled", None, cost=0.25),
        trial("alpha", "job-1", cell, "t1", 1, "cancelled", None, cost=0.25),  # a Task with no result at all
        trial("alpha", "job-1", cell, "t2", 1, "errored", None, cost=0.0),
        trial("alpha", "job-1", cell, "t3", 1, "scored", 0.0, cost=0.5),
    ])
    [score] = store.write_cell(warehouse, cell.key).cells
    assert (score.n_trials, score.errored, score.n_tasks, score.mean, score.cost_usd) == (3, 1, 2, 0.5, 1.0)
    rewards = view(warehouse, "select task_name, n_trials, n_errored, mean_reward from rewards order by task_name")
    assert rewards == [{"task_name": "t0", "n_trials": 1, "n_errored": 0, "mean_reward": 1.0},
                       {"task_name": "t2", "n_trials": 1, "n_errored": 1, "mean_reward": None},
                       {"task_name": "t3", "n_trials": 1, "n_errored": 0, "mean_reward": 0.0}]
    # a cell all of whose Trials were cancelled has no score at all
    store_trials(warehouse, [trial("alpha", "job-1", TERM[1], "t0", 1, "cancelled", None)])
    assert store.write_cell(warehouse, TERM[1].key).cells == []
    assert store.reaggregate(warehouse).cells == 1


def test_several_jobs_of_one_cell_are_pooled(warehouse: Warehouse) -> None:
    cell = TERM[0]
    store_trials(warehouse, fixed_cell("alpha", "job-1", cell, {"t0": 1.0, "t1": 0.0, "t2": None})
                 + fixed_cell("alpha", "job-2", cell, {"t0": 0.0, "t2": 0.5, "t3": 1.0}))
    assert len(store.cell_trial_files(warehouse, cell.key)) == 2
    [score] = store.write_cell(warehouse, cell.key).cells
    assert score.tasks == ("t0", "t1", "t2", "t3") and score.task_means.tolist() == [0.5, 0.0, 0.5, 1.0]
    assert (score.n_trials, score.errored, score.mean) == (6, 1, 0.5)
    rewards = view(warehouse, "select task_name, n_trials from rewards order by task_name")
    assert [(r["task_name"], r["n_trials"]) for r in rewards] == [("t0", 2), ("t1", 1), ("t2", 2), ("t3", 1)]
    store.reaggregate(warehouse)
    assert view(warehouse, "select n_trials, mean_reward from cell_aggregates") == [{"n_trials": 6, "mean_reward": 0.5}]


def test_comparisons_view_rows_are_the_engines_comparisons(reaggregated: tuple[Warehouse, list[TrialRecord]]) -> None:
    warehouse, _ = reaggregated
    files = sorted(warehouse.paths.trials.glob("*/*.parquet"))
    with duckdb.connect() as con:  # the engine over the same Trial files, in a connection of its own
        scores = engine.score(con, store.trial_rows(files))
    want = sorted(
        (c.better.scope, c.better.benchmark, c.better.agent, c.better.model, c.worse.model,
         nan_safe(c.difference.mean), nan_safe(c.difference.ci95.low), nan_safe(c.difference.ci95.high),
         c.difference.n_shared_tasks, c.difference.too_close_to_call, c.better.cell, c.worse.cell)
        for c in scores.comparisons)
    got = sorted(tuple(r.values()) for r in view(warehouse, "select * from comparisons"))
    assert got == want and len(got) == sum(N_COMPARISONS.values())
    flips = {(r["better"], r["worse"]): r for r in view(warehouse, "select * from comparisons where agent = 'flip'")}
    assert set(flips) == {("m-q", "m-p"), ("m-q", "m-r"), ("m-p", "m-r")}  # Q is better where both scored
    assert flips[("m-q", "m-p")]["mean_difference"] == 0.125 and flips[("m-q", "m-p")]["n_shared_tasks"] == 2
    assert flips[("m-p", "m-r")]["mean_difference"] == 0.0 and flips[("m-p", "m-r")]["too_close_to_call"]
    versions = {r["better_cell_key"] for r in view(warehouse, "select * from comparisons")} | {
        r["worse_cell_key"] for r in view(warehouse, "select * from comparisons")}
    assert TERM_V2[0].key not in versions and ORACLE.key not in versions  # never paired


def test_reaggregation_is_idempotent_and_sees_every_change(warehouse: Warehouse) -> None:
    records = populate(warehouse)
    first = store.reaggregate(warehouse)
    before = outputs(warehouse)
    assert store.fingerprint_file(warehouse) in before and store.comparisons_file(warehouse) in before
    second = store.reaggregate(warehouse)
    assert not second.changed
    assert (second.cells, second.comparisons) == (first.cells, first.comparisons)
    assert outputs(warehouse) == before  # nothing written: same files, same modification times

    # a Trial file that changes (a late Trial of job-a2): recomputed, and the new Trial counts
    late = trial("alpha", "job-a2", TERM[0], "task-6", 9, "scored", 1.0)
    job_a2 = [t for t in records if t.job_id == "job-a2"] + [late]
    store_trials(warehouse, job_a2)
    third = store.reaggregate(warehouse)
    assert third.changed and (third.cells, third.comparisons) == (first.cells, first.comparisons)
    check_against_records(warehouse, [*records, late])
    after = outputs(warehouse)
    assert all(after[p] != before[p] for p in before)  # every output rewritten

    # a new cell in beta: a new aggregate and a new comparison
    store_trials(warehouse, random_cell(random.Random(5), "beta", "job-b2", CODEX[1]))
    fourth = store.reaggregate(warehouse)
    assert fourth.changed and (fourth.cells, fourth.comparisons) == (first.cells + 1, first.comparisons + 1)

    assert not store.reaggregate(warehouse).changed
    assert store.reaggregate(warehouse, force=True).changed
    assert not store.reaggregate(warehouse).changed
    for other in (Resampling(n_resamples=2_000), Resampling(seed=1), Resampling(confidence=0.9)):
        assert store.reaggregate(warehouse, resampling=other).changed  # other statistics
        assert store.reaggregate(warehouse).changed  # and back
    store.comparisons_file(warehouse).unlink()  # an output went missing: recompute
    assert store.reaggregate(warehouse).changed and store.comparisons_file(warehouse).exists()
    assert not store.reaggregate(warehouse).changed


def test_other_resampling_settings_reach_the_written_intervals(warehouse: Warehouse) -> None:
    store_trials(warehouse, fixed_cell("alpha", "job-1", TERM[0], {f"t{i}": (i % 3) / 2 for i in range(12)}))
    store.reaggregate(warehouse)
    default = view(warehouse, "select ci_low, ci_high from cell_aggregates")
    other = Resampling(n_resamples=2_000, seed=7, confidence=0.8)
    store.reaggregate(warehouse, resampling=other)
    [row] = view(warehouse, "select ci_low, ci_high from cell_aggregates")
    [ci] = mean_intervals([np.array([(i % 3) / 2 for i in range(12)])], other)
    assert Interval(row["ci_low"], row["ci_high"]) == ci and [row] != default


def test_empty_warehouse(warehouse: Warehouse) -> None:
    nothing = store.write_cell(warehouse, TERM[0].key)
    assert nothing.cells == nothing.comparisons == [] and outputs(warehouse) == {}
    result = store.reaggregate(warehouse)
    assert (result.changed, result.cells, result.comparisons) == (True, 0, 0)
    assert pq.read_table(store.comparisons_file(warehouse)).num_rows == 0
    assert view(warehouse, "select * from comparisons") == view(warehouse, "select * from cell_aggregates") == []
    assert not store.reaggregate(warehouse).changed


def test_a_cell_whose_trials_are_no_longer_results_leaves_no_score_behind(warehouse: Warehouse) -> None:
    store_trials(warehouse, fixed_cell("alpha", "job-1", TERM[0], {"t0": 1.0, "t1": 0.0})
                 + fixed_cell("alpha", "job-1", TERM[1], {"t0": 0.0, "t1": 0.0}))
    assert store.reaggregate(warehouse).cells == 2
    # the Job's Trial file of TERM[0] is written again (a restarted cell run) and holds only cancelled Trials
    store_trials(warehouse, [trial("alpha", "job-1", TERM[0], t, 1, "cancelled", None) for t in ("t0", "t1")])
    assert store.reaggregate(warehouse).cells == 1
    assert view(warehouse, "select cell_key from cell_aggregates") == [{"cell_key": TERM[1].key}]


def test_write_version_writes_what_reaggregate_writes_and_keeps_other_versions(warehouse: Warehouse) -> None:
    """A cell run ends by scoring its Benchmark Version (``write_version``): version by version, the cells and
    the comparisons come out exactly as one re-aggregation of everything writes them, and each version's
    comparisons replace only that version's rows."""
    records = populate(warehouse)
    by_version: dict[str, set[str]] = defaultdict(set)
    for t in records:
        by_version[t.benchmark_version_id].add(t.cell_key)
    assert len(by_version) == 2
    for version, keys in sorted(by_version.items()):
        scores = store.write_version(warehouse, version, sorted(keys))
        assert {c.cell for c in scores.cells} <= keys
        assert {c.better.benchmark for c in scores.comparisons} <= {version}
    versioned = snapshot(warehouse)
    assert {r["benchmark_version_id"] for r in versioned["comparisons"]} == set(by_version)  # both kept
    shutil.rmtree(warehouse.paths.aggregates)
    shutil.rmtree(warehouse.paths.rewards)
    shutil.rmtree(warehouse.paths.comparisons)
    assert store.reaggregate(warehouse).changed
    assert snapshot(warehouse) == versioned
    # Again for one version: the other's rows stay as they were.
    store.write_version(warehouse, BV2, sorted(by_version[BV2]))
    assert snapshot(warehouse) == versioned


def test_scoring_reads_again_a_trial_file_replaced_while_it_read_it(warehouse: Warehouse,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Another cell's run rewrites its Trial file (a new file renamed into place) while a cell's results are
    scored; DuckDB, which reads a file's footer and its data apart, then fails on data that no longer matches
    the footer. The scoring asks again, of the files as they are then; a failure with no file changed is
    raised at once."""
    a, b = TERM[0], TERM[1]
    store_trials(warehouse, fixed_cell("alpha", "job-1", a, {"t0": 1.0, "t1": 0.0})
                 + fixed_cell("alpha", "job-2", b, {"t0": 0.0}))
    real, calls = engine.score, []

    def racing(con, rows, resampling):  # as DuckDB fails when the file changed between footer and data
        calls.append(1)
        if len(calls) == 1:
            store_trials(warehouse, fixed_cell("alpha", "job-2", b, {"t0": 0.0, "t1": 1.0, "t2": 1.0}))
            raise duckdb.InvalidInputException("TProtocolException: Invalid data")
        return real(con, rows, resampling)

    monkeypatch.setattr(store.engine, "score", racing)
    scores = store.write_version(warehouse, BV1, [a.key, b.key])
    assert len(calls) == 2
    assert {c.cell: (c.n_trials, c.mean) for c in scores.cells} == {a.key: (2, 0.5), b.key: (3, 2 / 3)}

    calls.clear()

    def broken(con, rows, resampling):
        calls.append(1)
        raise duckdb.InvalidInputException("a query that fails on its own")

    monkeypatch.setattr(store.engine, "score", broken)
    with pytest.raises(duckdb.InvalidInputException, match="fails on its own"):
        store.write_version(warehouse, BV1, [a.key, b.key])
    assert len(calls) == 1
