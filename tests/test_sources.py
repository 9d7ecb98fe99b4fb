"""TrialEvidence from Harbor job folders and Amber Jobs, checked against the files themselves.

The golden folders under tests/golden are real `harbor run` output (see
tests/golden/README.md); each test reads their JSON on its own and compares.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from helpers import submit
from typer.testing import CliRunner

from amber_pipeline.analysis import sources, trial_folders
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.cli.app import app
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import cell_run, records
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trials_table

GOLDEN = Path(__file__).parent / "golden"
JOBS = ["demo-bounds", "demo-terminus", "demo-broken", "demo-edited"]
DEMO = PROJECT_ROOT / "examples" / "demo-bench"
WS = "default"

# What the trajectories and outcomes show, trial by trial (read by a person from the files).
FLAGS = {  # trial -> (errored, ended_with_error, repeated_tool_error)
    "count-log-errors__KnH5ndg": (False, True, True),  # `checklog`: command not found, three times, to the end
    "fix-off-by-one__Qqqcgxw": (False, True, False),  # three unparsable replies: "ERROR: Missing required fields"
    "fix-off-by-one__EdVrTmo": (True, False, False),  # VerifierTimeoutError, no Verifier result
}


def wh_at(tmp_path: Path) -> Warehouse:
    return Warehouse(AmberPaths(tmp_path / "home"))


def read(path: Path) -> Any:
    return json.loads(path.read_text())


def when(text: str) -> datetime:
    return datetime.fromisoformat(text)


def agent_steps(trial: Path) -> list[dict[str, Any]] | None:
    path = trial / "agent" / "trajectory.json"
    return [s for s in read(path)["steps"] if s["source"] == "agent"] if path.exists() else None


def finished_trials(job: str) -> list[Path]:
    return sorted(d for d in (GOLDEN / job).iterdir() if (d / "result.json").exists())


def by_name(evidence: list[TrialEvidence]) -> dict[str, TrialEvidence]:
    return {e.trial_name: e for e in evidence}


@pytest.mark.parametrize("job", JOBS)
def test_every_field_matches_the_files(job: str) -> None:
    evidence = by_name(trial_folders.read_harbor_folder(GOLDEN / job))
    trials = finished_trials(job)
    assert sorted(evidence) == sorted(read(t / "result.json")["trial_name"] for t in trials)
    for trial in trials:
        r = read(trial / "result.json")
        e = evidence[r["trial_name"]]
        assert e.source == f"harbor:{job}" and e.trial_dir == str(trial.resolve())
        assert (e.task_name, e.agent) == (r["task_name"], r["agent_info"]["name"])
        assert e.model == (r["agent_info"].get("model_info") or {}).get("name")
        assert e.attempt == 1  # one attempt per Task and route in these jobs
        rewards = (r["verifier_result"] or {}).get("rewards")
        assert e.reward == (rewards["reward"] if rewards else None)
        assert e.exception_type == (r["exception_info"] or {}).get("exception_type")
        errored, ended, repeated = FLAGS.get(e.trial_name, (False, False, False))
        assert (e.errored, e.trajectory_ended_with_error, e.repeated_tool_error) == (errored, ended, repeated)
        assert (e.started_at, e.finished_at) == (when(r["started_at"]), when(r["finished_at"]))
        phase = r["agent_execution"]
        assert e.agent_duration_sec == pytest.approx(
            (when(phase["finished_at"]) - when(phase["started_at"])).total_seconds())
        agent_result = r["agent_result"] or {}
        assert (e.input_tokens, e.output_tokens, e.cost_usd) == (
            agent_result.get("n_input_tokens"), agent_result.get("n_output_tokens"), agent_result.get("cost_usd"))
        override = r["config"]["agent"]["override_timeout_sec"]
        task_toml = Path(r["config"]["task"]["path"]) / "task.toml"
        expected_timeout = override or (120.0 if task_toml.exists() else None)  # demo Tasks give 120 s
        assert e.agent_timeout_sec == expected_timeout
        steps = agent_steps(trial)
        assert e.trajectory_steps == (None if steps is None else len(steps))
        configured = r["config"]["agent"]["model_name"]
        assert e.model_used == (None if steps is None else
                                any(configured.endswith("/" + s["model_name"]) for s in steps))
        ctrf = trial / "verifier" / "ctrf.json"
        summary = read(ctrf)["results"]["summary"] if ctrf.exists() else {}
        assert (e.tests_passed, e.tests_total) == (summary.get("passed"), summary.get("tests"))


def test_the_edited_variants() -> None:
    e = by_name(trial_folders.read_harbor_folder(GOLDEN / "demo-edited"))
    assert "csv-region-totals__EdRunng" not in e  # still running: no result.json
    timeout = e["count-log-errors__EdTmout"]
    assert timeout.timed_out and timeout.agent_timeout_sec == 30.0 and timeout.agent_duration_sec == 30.0
    assert timeout.reward == 0.0 and not timeout.errored and timeout.scored
    verifier = e["fix-off-by-one__EdVrTmo"]
    assert verifier.reward is None and verifier.errored and not verifier.scored
    near_miss = e["fix-backup-script__EdCtrf5"]  # no task_checksum: read without Harbor's model
    assert (near_miss.tests_passed, near_miss.tests_total, near_miss.reward) == (4, 5, 0.0)
    assert near_miss.model == "replay-weak" and near_miss.model_used and near_miss.trajectory_steps == 3


def _copy_job(tmp_path: Path, job: str, edit: Any) -> Path:
    """A copy of a golden job whose result.json files pass through `edit(trial_dir, result)`."""
    dst = tmp_path / job
    shutil.copytree(GOLDEN / job, dst)
    for trial in finished_trials(job):
        path = dst / trial.name / "result.json"
        result = read(path)
        edit(trial.name, result)
        path.write_text(json.dumps(result))
    return dst


def test_timeout_from_task_toml_times_the_multiplier(tmp_path: Path) -> None:
    def edit(name: str, r: dict[str, Any]) -> None:
        r["config"]["task"]["path"] = str(DEMO / r["task_name"]) if "off-by-one" in name else "/nowhere/task"
        r["config"]["agent_timeout_multiplier"] = 0.5

    e = trial_folders.read_harbor_folder(_copy_job(tmp_path, "demo-terminus", edit))
    limits = {x.task_name: x.agent_timeout_sec for x in e}
    toml_limit = 120.0  # examples/demo-bench/fix-off-by-one/task.toml
    assert "timeout_sec = 120.0" in (DEMO / "fix-off-by-one" / "task.toml").read_text()
    assert limits == {"fix-off-by-one": toml_limit * 0.5, "count-log-errors": None, "fix-backup-script": None}


def test_attempts_follow_start_order_within_route_and_task(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(GOLDEN / "demo-terminus", job)
    first = job / "count-log-errors__Xnsg32Z"
    earlier = job / "count-log-errors__Earlier"
    shutil.copytree(first, earlier)
    r = read(earlier / "result.json")
    r["trial_name"], r["started_at"] = earlier.name, "2026-12-02T20:00:00Z"
    (earlier / "result.json").write_text(json.dumps(r))
    attempts = {e.trial_name: e.attempt for e in trial_folders.read_harbor_folder(job)}
    assert attempts == {"count-log-errors__Earlier": 1, "count-log-errors__Xnsg32Z": 2,
                        "fix-backup-script__2QQs7jH": 1, "fix-off-by-one__f8X6Cic": 1}


def test_import_twice_changes_nothing_and_the_view_is_scoped(tmp_path: Path) -> None:
    wh = wh_at(tmp_path)
    name, rows = sources.import_harbor(wh, WS, GOLDEN / "demo-terminus")
    assert (name, rows) == ("harbor:demo-terminus", 3)
    [stored] = list(wh.paths.imports.glob("*.parquet"))
    before = pq.read_table(stored)
    assert sources.import_harbor(wh, WS, GOLDEN / "demo-terminus") == (name, rows)
    assert list(wh.paths.imports.glob("*.parquet")) == [stored]
    after = pq.read_table(stored)
    assert after.num_rows == before.num_rows == 3 and after.equals(before)
    sources.import_harbor(wh, "other", GOLDEN / "demo-bounds")
    with wh.query(WS) as con:
        assert con.execute("select distinct workspace, source from imported_trials").fetchall() == [(WS, name)]
        assert con.execute("select count(*) from imported_trials where model_used").fetchone() == (3,)
    with wh.query("other") as con:
        assert con.execute("select count(*), any_value(source) from imported_trials").fetchone() == (
            6, "harbor:demo-bounds")
    with wh.query(None) as con:
        assert con.execute("select count(*) from imported_trials").fetchone() == (9,)


def test_the_view_exists_before_any_import(tmp_path: Path) -> None:
    with wh_at(tmp_path).query(WS) as con:
        columns = [d[0] for d in con.execute("select * from imported_trials").description or []]
    assert columns == ["workspace", "folder", *(f.name for f in dataclasses.fields(TrialEvidence)), "outcome", "cause"]


def test_load_each_kind_of_source(tmp_path: Path) -> None:
    wh = wh_at(tmp_path)
    direct = sources.load(wh, WS, str(GOLDEN / "demo-broken"))
    assert direct == trial_folders.read_harbor_folder(GOLDEN / "demo-broken")
    sources.import_harbor(wh, WS, GOLDEN / "demo-broken")
    imported = sources.load(wh, WS, "harbor:demo-broken")
    assert sorted(imported, key=lambda e: e.trial_name) == sorted(direct, key=lambda e: e.trial_name)
    with pytest.raises(AmberError, match=r"No imported Harbor folder harbor:demo-broken in Workspace other: "
                                         r"import it with `amber import-harbor DIR`"):
        sources.load(wh, "other", "harbor:demo-broken")


def test_load_errors_are_one_sentence(tmp_path: Path) -> None:
    wh = wh_at(tmp_path)
    empty = tmp_path / "empty-job"
    (empty / "running-trial__abc").mkdir(parents=True)
    (empty / "running-trial__abc" / "config.json").write_text("{}")
    cases = {
        "job-0000000000": r"^No Job job-0000000000 in Workspace default: list Jobs with `amber job status`\.$",
        "no-such-thing": r"^Unknown source 'no-such-thing': give an Amber Job id",
        "harbor:nope": r"^No imported Harbor folder harbor:nope in Workspace default",
        str(empty): r"^Harbor job folder .*empty-job has no Trials: ",
    }
    for source, message in cases.items():
        with pytest.raises(AmberError, match=message) as caught:
            sources.load(wh, WS, source)
        assert "\n" not in str(caught.value)
    with pytest.raises(AmberError, match=r"has no Trials: "):
        sources.import_harbor(wh, WS, empty)
    with pytest.raises(AmberError, match=r"^No Harbor job folder at "):
        sources.import_harbor(wh, WS, tmp_path / "missing")


def _texts_of_trials() -> list[str]:
    """Instruction texts and every trajectory message and observation of the golden folders."""
    texts = [(d / "instruction.md").read_text() for d in DEMO.iterdir()]
    for job in JOBS:
        for trial in finished_trials(job):
            path = trial / "agent" / "trajectory.json"
            for step in read(path)["steps"] if path.exists() else []:
                texts.append(step["message"] if isinstance(step["message"], str) else json.dumps(step["message"]))
                texts += [r["content"] for r in (step.get("observation") or {}).get("results", [])]
    return texts


def test_no_evidence_field_carries_a_prompt_or_a_message(tmp_path: Path) -> None:
    wh = wh_at(tmp_path)
    evidence = [e for job in JOBS for e in trial_folders.read_harbor_folder(GOLDEN / job)]
    for job in JOBS:
        sources.import_harbor(wh, WS, GOLDEN / job)
    stored = [v for f in wh.paths.imports.glob("*.parquet") for row in pq.read_table(f).to_pylist()
              for v in row.values()]
    strings = [v for e in evidence for v in dataclasses.asdict(e).values() if isinstance(v, str)]
    strings += [v for v in stored if isinstance(v, str)]
    pieces = {t.strip()[i:i + 40] for t in _texts_of_trials() for i in (0, len(t.strip()) // 2)
              if len(t.strip()) >= 80}
    assert len(pieces) > 20
    assert not [(p, s) for p in pieces for s in strings if p in s]


def test_the_cli_command(amber_home: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["import-harbor", str(GOLDEN / "demo-bounds")])
    assert result.exit_code == 0, result.output
    assert "harbor:demo-bounds" in result.stdout and "6 Trials" in result.stdout
    result = CliRunner().invoke(app, ["import-harbor", str(tmp_path / "missing")])
    assert result.exit_code == 1 and result.stderr.startswith(f"amber: No Harbor job folder at {tmp_path}")


def _record(job_id: str, trial_dir: Path, outcome: str, attempt: int) -> TrialRecord:
    r = read(trial_dir / "result.json")
    return TrialRecord(
        workspace=WS, job_id=job_id, cell_key="cell", benchmark_version_id="bv", task_name=r["task_name"],
        attempt=attempt, trial_name=f"{r['task_name']}__{attempt}", agent="terminus-2", agent_version="v",
        model_configuration="replay-weak", outcome=outcome, reward=0.0 if outcome == "scored" else None,
        errored=outcome == "errored", retries=0, error_type=None, error_message=None, input_tokens=10,
        output_tokens=5, cost_usd=0.25, started_at=when(r["started_at"]), finished_at=when(r["finished_at"]),
        duration_sec=3.0, image_id=None, trial_dir=str(trial_dir))


def test_a_jobs_evidence_joins_its_trial_rows_with_their_folders(tmp_path: Path) -> None:
    wh = wh_at(tmp_path)
    job = submit(wh, str(_one_task_bench(tmp_path)), "oracle", [], 1)
    trial = GOLDEN / "demo-broken" / "count-log-errors__KnH5ndg"
    records = [_record(job.id, trial, "scored", 1), _record(job.id, trial, "cancelled", 2)]
    wh.write_parquet(trials_table(records), wh.trials_file("cell", job.id))
    [e] = sources.amber_job(wh, WS, job.id)
    assert (e.source, e.trial_name, e.model, e.attempt, e.reward, e.errored) == (
        job.id, "count-log-errors__1", "replay-weak", 1, 0.0, False)
    assert (e.input_tokens, e.output_tokens, e.cost_usd) == (10, 5, 0.25)  # Amber's, not the folder's
    assert (e.trajectory_steps, e.model_used, e.repeated_tool_error, e.trajectory_ended_with_error) == (
        3, True, True, True)
    assert (e.tests_passed, e.tests_total) == (1, 4)
    assert sources.load(wh, WS, job.id) == [e]
    with pytest.raises(AmberError, match=rf"^No Job {job.id} in Workspace other"):
        sources.load(wh, "other", job.id)


def test_a_jobs_evidence_is_derived_when_first_read_and_again_only_when_its_trials_change(tmp_path: Path) -> None:
    wh = wh_at(tmp_path)
    job = submit(wh, str(_one_task_bench(tmp_path)), "oracle", [], 1)
    trial = GOLDEN / "demo-broken" / "count-log-errors__KnH5ndg"
    trial_file = wh.trials_file("cell", job.id)
    wh.write_parquet(trials_table([_record(job.id, trial, "scored", 1)]), trial_file)
    assert not wh.paths.evidence.exists()  # storing Trials derives nothing
    [first] = sources.amber_job(wh, WS, job.id)
    [derived] = wh.paths.evidence.glob("*/*.parquet")
    stamp = derived.stat().st_mtime_ns
    assert sources.amber_job(wh, WS, job.id) == [first] and derived.stat().st_mtime_ns == stamp  # not derived twice
    wh.write_parquet(trials_table([_record(job.id, trial, "scored", 1), _record(job.id, trial, "errored", 2)]),
                     trial_file)  # a restarted cell run rewrites its Trial file
    again = sources.amber_job(wh, WS, job.id)
    assert [e.attempt for e in again] == [1, 2] and again[1].errored
    assert list(wh.paths.evidence.glob("*/*.parquet")) != [derived] and len(list(wh.paths.evidence.glob("*/*"))) == 1


def test_a_job_without_trials(tmp_path: Path) -> None:
    wh = wh_at(tmp_path)
    job = submit(wh, str(_one_task_bench(tmp_path)), "oracle", [], 1)
    assert sources.amber_job(wh, WS, job.id) == []
    with pytest.raises(AmberError, match=rf"^Job {job.id} has no Trials: "):
        sources.load(wh, WS, job.id)


def _one_task_bench(tmp_path: Path) -> Path:
    """count-log-errors with the golden runs' Verifier, which also writes verifier/ctrf.json."""
    bench = tmp_path / "bench"
    shutil.copytree(DEMO / "count-log-errors", bench / "count-log-errors")
    shutil.copy(GOLDEN / "inputs" / "count-log-errors-test.sh", bench / "count-log-errors" / "tests" / "test.sh")
    return bench


@pytest.mark.docker
def test_a_real_jobs_evidence(tmp_path: Path) -> None:
    wh = wh_at(tmp_path)
    job = submit(wh, str(_one_task_bench(tmp_path)), "oracle", [], 1, bounds=True)
    for cell in records.cells_of(wh, job.id):
        cell_run.run_cell_of_job(wh, job.id, cell.cell_key)
    evidence = {e.agent: e for e in sources.load(wh, WS, job.id)}
    assert sorted(evidence) == ["nop", "oracle"]
    oracle, nop = evidence["oracle"], evidence["nop"]
    assert (oracle.reward, oracle.errored, oracle.scored, oracle.passed) == (1.0, False, True, True)
    assert (nop.reward, nop.passed) == (0.0, False)
    for e in (oracle, nop):
        r = read(Path(e.trial_dir or "") / "result.json")
        assert (e.source, e.task_name, e.model, e.attempt) == (job.id, "count-log-errors", None, 1)
        assert e.agent_timeout_sec == 120.0  # the Task's task.toml, read from the Benchmark snapshot
        assert e.agent_duration_sec == pytest.approx(
            (when(r["agent_execution"]["finished_at"]) - when(r["agent_execution"]["started_at"])
             ).total_seconds())
        assert (e.trajectory_steps, e.model_used, e.trajectory_ended_with_error) == (None, None, False)
    assert (oracle.tests_passed, oracle.tests_total) == (4, 4)
    assert nop.tests_total == 4 and (nop.tests_passed or 0) < 4


def test_failure_causes_view_over_an_imported_folder(tmp_path: Path) -> None:
    from amber_pipeline.analysis.report import failure_cause

    wh = wh_at(tmp_path)
    sources.import_harbor(wh, WS, GOLDEN / "demo-broken")
    expected = sorted((e.trial_name, failure_cause(e)) for e in trial_folders.read_harbor_folder(GOLDEN / "demo-broken")
                      if not e.passed)
    with wh.query(WS) as con:
        rows = sorted(con.execute("select trial_name, cause from failure_causes").fetchall())
    assert rows == expected and rows
    assert "dead_tools" in {cause for _, cause in rows}


def test_a_static_trials_evidence_looks_for_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A static Trial's row names no folder (its trial_dir is empty): its evidence adds nothing a folder would,
    exactly what looking in a folder with none of the files finds, and never reads the current directory, which
    an empty path names."""
    cwd = tmp_path / "cwd"
    (cwd / "agent").mkdir(parents=True)
    (cwd / "agent" / "trajectory.json").write_text(json.dumps({"agent": {"name": "x"}, "steps": [
        {"source": "agent", "message": "hi"}]}))
    monkeypatch.chdir(cwd)
    assert trial_folders.trial_facts(Path(""))["trajectory_steps"] == 1  # what an empty path used to read
    empty = tmp_path / "no-files"
    empty.mkdir()
    assert trial_folders.trial_facts(empty) == trial_folders.NO_FOLDER
    row = {f: None for f in TrialRecord.model_fields} | {
        "schema_version": 1, "workspace": "w", "job_id": "job-s", "cell_key": "c", "benchmark_version_id": "b",
        "task_name": "t", "attempt": 1, "trial_name": "t__1", "agent": "direct", "agent_version": "v",
        "model_configuration": "m", "outcome": "scored", "reward": 1.0, "errored": False, "retries": 0,
        "input_tokens": 1, "output_tokens": 1, "cost_usd": 0.0, "duration_sec": 0.1, "trial_dir": "",
        "started_at": datetime(2026, 12, 5), "finished_at": datetime(2026, 12, 5), "cached_input_tokens": 0,
        "model_calls": 1}
    record = TrialRecord.model_validate(row)
    folder = sources.here(Warehouse(AmberPaths(tmp_path / "amber")), record.trial_dir)
    evidence = sources._of_record(record, folder)
    assert {k: getattr(evidence, k) for k in trial_folders.NO_FOLDER} == trial_folders.NO_FOLDER
