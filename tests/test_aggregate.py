"""Re-aggregation: the same numbers as the per-cell path and the report, cheap when nothing changed."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from amber_pipeline.cells import NO_MODEL, Cell, cell_file_id
from amber_pipeline.jobs import cell_run as pipeline
from amber_pipeline.paths import AmberPaths
from amber_pipeline.scoring import bootstrap as stats
from amber_pipeline.scoring import cells as report
from amber_pipeline.scoring import reaggregation as aggregate
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trials_table

BV1, BV2 = "1" * 64, "2" * 64
TASKS = [f"task-{i}" for i in range(7)]
REWARDS = [0.1, 0.7, 0.3, 1 / 3, 0.2, 0.9, 0.0, 1.0, 2 / 3, 0.45]  # sums of these are not exact in binary
START = datetime(2026, 3, 1, tzinfo=UTC)


def trial(workspace: str, job: str, cell: Cell, task: str, attempt: int, outcome: str,
          reward: float | None, cost: float, duration: float) -> TrialRecord:
    errored = outcome == "errored"
    return TrialRecord(
        workspace=workspace, job_id=job, cell_key=cell.key, benchmark_version_id=cell.benchmark_version_id,
        task_name=task, attempt=attempt, trial_name=f"{task}__{attempt}", agent=cell.agent,
        agent_version=cell.agent_spec_id, model_configuration=cell.model_configuration, outcome=outcome,
        reward=reward if outcome == "scored" else None, errored=errored, retries=0,
        error_type="AgentTimeoutError" if errored else None, error_message="timed out" if errored else None,
        input_tokens=100, output_tokens=10, cost_usd=cost, started_at=START,
        finished_at=START + timedelta(seconds=duration), duration_sec=duration, image_id=None,
        trial_dir=f"runs/{job}/{cell.file_id}/{task}__{attempt}")


def store(wh: Warehouse, records: list[TrialRecord]) -> None:
    by_file: dict[tuple[str, str], list[TrialRecord]] = {}
    for r in records:
        by_file.setdefault((r.cell_key, r.job_id), []).append(r)
    for (key, job), rows in by_file.items():
        wh.write_parquet(trials_table(rows), wh.trials_file(cell_file_id(key), job))


def random_cell(rng: random.Random, workspace: str, job: str, cell: Cell, attempts: int = 3,
                tasks: list[str] = TASKS) -> list[TrialRecord]:
    """Float Rewards, some Errored and cancelled Trials, costs and durations that do not sum exactly."""
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
    return [trial(workspace, job, cell, task, 1, "errored" if r is None else "scored", r, 0.01, 10.0)
            for task, r in rewards.items()]


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    return Warehouse(AmberPaths(tmp_path / "amber"))


def cells_of(agent: str, models: list[str], bv: str = BV1) -> list[Cell]:
    return [Cell(bv, agent, f"{agent}-v1", m) for m in models]


def populate(wh: Warehouse) -> None:
    rng = random.Random(42)
    records: list[TrialRecord] = []
    term = cells_of("terminus", ["m-a", "m-b", "m-c"])
    codex = cells_of("codex", ["m-a", "m-b"])
    oracle = Cell(BV1, "oracle", "oracle-v1", NO_MODEL)
    # Workspace alpha: two Jobs on one cell, a second Benchmark Version, a Task that always Errors in one cell.
    records += random_cell(rng, "alpha", "job-a1", term[0]) + random_cell(rng, "alpha", "job-a2", term[0])
    records += random_cell(rng, "alpha", "job-a1", term[1]) + random_cell(rng, "alpha", "job-a1", term[2])
    records += [t if t.task_name != "task-6" else
                trial("alpha", t.job_id, term[2], t.task_name, t.attempt + 10, "errored", None, 0.0, 1.0)
                for t in random_cell(rng, "alpha", "job-a3", term[2])]
    records += random_cell(rng, "alpha", "job-a1", codex[0]) + random_cell(rng, "alpha", "job-a1", codex[1])
    records += random_cell(rng, "alpha", "job-a1", oracle)
    for cell in cells_of("terminus", ["m-a", "m-b"], bv=BV2):
        records += random_cell(rng, "alpha", "job-a4", cell)
    # Paired sign flips against the cell order: P scores higher overall but lower on the shared Tasks.
    p, q, r = cells_of("flip", ["m-p", "m-q", "m-r"])
    records += fixed_cell("alpha", "job-a5", p, {"task-0": 0.5, "task-1": 0.5, "task-2": 1.0})
    records += fixed_cell("alpha", "job-a5", q, {"task-0": 0.6, "task-1": 0.6, "task-2": None})
    records += fixed_cell("alpha", "job-a5", r, {"task-0": 0.5, "task-1": 0.5, "task-2": 1.0})  # ties P
    # Workspace beta: the same cells (a public Benchmark) with other Trials, and a cell that only Errored.
    records += random_cell(rng, "beta", "job-b1", term[0], attempts=2) + random_cell(rng, "beta", "job-b1", term[1])
    records += fixed_cell("beta", "job-b1", term[2], dict.fromkeys(TASKS[:3]))
    records += random_cell(rng, "beta", "job-b1", codex[0], tasks=TASKS[:4])
    store(wh, records)


def ordered(trials: list[TrialRecord]) -> list[TrialRecord]:
    """Trials in re-aggregation's order: Task name, attempt, then Job.

    ``Warehouse.trial_records`` orders by Task name and attempt only, so when two
    Jobs ran one cell their Trials of a (Task, attempt) come in no set order, and
    a per-Task sum of non-dyadic Rewards can differ in its last bit.
    """
    return sorted(trials, key=lambda t: (t.task_name, t.attempt, t.job_id))


def has_ties(trials: list[TrialRecord]) -> bool:
    keys = [(t.task_name, t.attempt) for t in report.results_only(trials)]
    return len(keys) != len(set(keys))


def nan_safe(x: object) -> object:
    return "nan" if isinstance(x, float) and math.isnan(x) else x


def rows(table_rows: list[dict]) -> dict[tuple[str, str], dict]:
    return {(r["workspace"], r["cell_key"]): {k: nan_safe(v) for k, v in r.items()} for r in table_rows}


def aggregate_rows(wh: Warehouse) -> dict[tuple[str, str], dict]:
    return rows([r for p in sorted(wh.paths.aggregates.glob("*/*.parquet")) for r in pq.read_table(p).to_pylist()])


def comparison_rows(wh: Warehouse) -> list[dict]:
    return pq.read_table(aggregate.comparisons_file(wh)).to_pylist()


def outputs(wh: Warehouse) -> dict[Path, int]:
    files = [*wh.paths.aggregates.rglob("*"), *aggregate.comparisons_file(wh).parent.rglob("*")]
    return {p: p.stat().st_mtime_ns for p in files if p.is_file() and p.suffix != ".lock"}


def test_cell_rows_equal_the_per_cell_pipeline_exactly(wh: Warehouse) -> None:
    populate(wh)
    result = aggregate.reaggregate(wh)
    assert result.changed
    mine = aggregate_rows(wh)
    assert result.cells == len(mine) == 15
    keys = {t.cell_key for t in wh.trial_records()}
    tied: set[tuple[str, str]] = set()
    for key in keys:
        for workspace, res in pipeline.write_aggregates(wh, key):
            row = {f: mine[(workspace, key)][f] for f in FIELDS}
            trials = report.results_only(wh.trial_records(cell_key=key, workspace=workspace))
            expected = as_row(res)
            if has_ties(trials):  # two Jobs ran the cell: exact against the report in a set order
                tied.add((workspace, key))
                assert row["ci_high"] == pytest.approx(expected["ci_high"], rel=1e-12)
                expected = as_row(report.cell_result(ordered(trials)))
            assert row == expected
    assert len(tied) == 2
    rewritten = aggregate_rows(wh)  # the pipeline rewrote every file: the same rows, schema and all
    assert {k: v for k, v in rewritten.items() if k not in tied} == {k: v for k, v in mine.items() if k not in tied}
    assert mine[("beta", cells_of("terminus", ["m-c"])[0].key)]["mean_reward"] == "nan"  # only Errored


FIELDS = ("cell_key", "agent", "model_configuration", "n_tasks", "n_trials", "errored", "mean_reward", "ci_low",
          "ci_high", "cost_usd", "mean_duration_sec")


def as_row(res: report.CellResult) -> dict:
    return {"cell_key": res.cell_key, "agent": res.agent, "model_configuration": res.model_configuration,
            "n_tasks": res.n_tasks, "n_trials": res.n_trials,
            "errored": res.errored, "mean_reward": nan_safe(res.score.mean), "ci_low": nan_safe(res.score.ci95.low),
            "ci_high": nan_safe(res.score.ci95.high), "cost_usd": res.cost_usd,
            "mean_duration_sec": res.mean_duration_sec}


def _labelled(row: dict) -> tuple:
    return (f"{row['agent']} / {row['better']}", f"{row['agent']} / {row['worse']}", nan_safe(row["mean_difference"]),
            nan_safe(row["ci_low"]), nan_safe(row["ci_high"]), row["n_shared_tasks"], row["too_close_to_call"])


def test_comparisons_equal_the_report_exactly(wh: Warehouse) -> None:
    populate(wh)
    result = aggregate.reaggregate(wh)
    comps = comparison_rows(wh)
    assert result.comparisons == len(comps)
    expected_all = []
    for workspace in ("alpha", "beta"):
        trials = ordered(wh.trial_records(workspace=workspace))
        for bv in (BV1, BV2):
            cells = report.cell_results([t for t in trials if t.benchmark_version_id == bv])
            expected = sorted((c.better, c.worse, nan_safe(c.difference.mean_difference),
                               nan_safe(c.difference.ci95.low), nan_safe(c.difference.ci95.high),
                               c.difference.n_shared_tasks, c.difference.too_close_to_call)
                              for c in report.comparisons(cells))
            got = sorted(_labelled(r) for r in comps if r["workspace"] == workspace and r["benchmark_version_id"] == bv)
            assert got == expected
            expected_all += expected
    # alpha: terminus 3 + codex 1 + flip 3 on BV1, terminus 1 on BV2; beta: terminus 3 + codex 0
    assert len(expected_all) == len(comps) == 11
    flips = {(r["better"], r["worse"]): r for r in comps if r["agent"] == "flip"}
    assert set(flips) == {("m-q", "m-p"), ("m-q", "m-r"), ("m-p", "m-r")}  # P above Q by cell mean, below when paired
    assert flips[("m-p", "m-r")]["mean_difference"] == 0.0 and flips[("m-p", "m-r")]["too_close_to_call"]


def test_comparisons_match_paired_difference(wh: Warehouse) -> None:
    populate(wh)
    aggregate.reaggregate(wh)
    for row in comparison_rows(wh):
        a = report.cell_result(report.results_only(ordered(
            wh.trial_records(cell_key=row["better_cell_key"], workspace=row["workspace"])))).task_means
        b = report.cell_result(report.results_only(ordered(
            wh.trial_records(cell_key=row["worse_cell_key"], workspace=row["workspace"])))).task_means
        d = stats.paired_difference(a, b)
        assert (nan_safe(d.mean_difference), nan_safe(d.ci95.low), nan_safe(d.ci95.high), d.n_shared_tasks,
                d.too_close_to_call) == (nan_safe(row["mean_difference"]), nan_safe(row["ci_low"]),
                                         nan_safe(row["ci_high"]), row["n_shared_tasks"], row["too_close_to_call"])


def test_workspaces_never_mix(wh: Warehouse) -> None:
    populate(wh)
    aggregate.reaggregate(wh)
    mine = aggregate_rows(wh)
    for workspace in ("alpha", "beta"):
        stored = {t.cell_key for t in wh.trial_records(workspace=workspace) if t.outcome != "cancelled"}
        assert {k for ws, k in mine if ws == workspace} == stored
        for key in stored:
            trials = ordered(wh.trial_records(cell_key=key, workspace=workspace))
            expected = report.cell_result(report.results_only(trials))
            assert mine[(workspace, key)]["n_trials"] == expected.n_trials
            assert mine[(workspace, key)]["mean_reward"] == nan_safe(expected.score.mean)
    ws_of_cell = {(ws, k) for ws, k in mine}
    for r in comparison_rows(wh):
        assert (r["workspace"], r["better_cell_key"]) in ws_of_cell
        assert (r["workspace"], r["worse_cell_key"]) in ws_of_cell
    shared = cells_of("terminus", ["m-a"])[0].key
    assert mine[("alpha", shared)]["n_trials"] != mine[("beta", shared)]["n_trials"]


def test_unchanged_inputs_write_nothing_and_new_trials_are_picked_up(wh: Warehouse) -> None:
    populate(wh)
    first = aggregate.reaggregate(wh)
    before = outputs(wh)
    assert aggregate.fingerprint_file(wh) in before
    second = aggregate.reaggregate(wh)
    assert not second.changed
    assert (second.cells, second.comparisons) == (first.cells, first.comparisons)
    assert outputs(wh) == before  # same files, same mtimes

    cell = cells_of("codex", ["m-b"])[0]
    store(wh, random_cell(random.Random(5), "beta", "job-b2", cell))  # a new Trial file: a new cell in beta
    third = aggregate.reaggregate(wh)
    assert third.changed and third.cells == first.cells + 1 and third.comparisons == first.comparisons + 1
    key = ("beta", cell.key)
    res = dict(pipeline.write_aggregates(wh, cell.key))["beta"]
    assert aggregate_rows(wh)[key]["ci_low"] == res.score.ci95.low

    assert aggregate.reaggregate(wh, force=True).changed
    assert not aggregate.reaggregate(wh).changed
    aggregate.comparisons_file(wh).unlink()  # an output went missing: recompute
    assert aggregate.reaggregate(wh).changed
    assert aggregate.reaggregate(wh, n_resamples=2_000).changed  # other statistics settings


def test_empty_warehouse(wh: Warehouse) -> None:
    result = aggregate.reaggregate(wh)
    assert (result.changed, result.cells, result.comparisons) == (True, 0, 0)
    assert comparison_rows(wh) == []
    assert not aggregate.reaggregate(wh).changed


@pytest.mark.parametrize("n_resamples", [1_000, 3_001])
def test_batched_bootstrap_is_stats_bootstrap(n_resamples: int) -> None:
    rng = np.random.default_rng(3)
    vectors = [rng.random(5), rng.random(5), rng.integers(0, 11, 5) / 10, rng.random(3000), rng.random(3000),
               np.array([]), np.array([0.25]), np.full(4, 0.7), rng.random(2), rng.random(37), -rng.random(37)]
    got = aggregate.bootstrap_cis(vectors, n_resamples=n_resamples)
    want = [stats.bootstrap_mean_ci(v, n_resamples=n_resamples) for v in vectors]
    assert [(nan_safe(i.low), nan_safe(i.high)) for i in got] == [(nan_safe(i.low), nan_safe(i.high)) for i in want]
    with pytest.raises(ValueError):
        aggregate.bootstrap_cis(vectors, n_resamples=999)
