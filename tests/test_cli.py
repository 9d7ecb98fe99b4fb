"""The amber CLI as a user meets it: bad input gets one plain sentence, no traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import submit

from amber_pipeline.jobs import cell_run as pipeline
from amber_pipeline.jobs import lifecycle as jobs
from amber_pipeline.money import wallet
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
AMBER = [sys.executable, "-m", "amber_pipeline.cli"]


def amber(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AMBER, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AMBER_HOME": str(home), "COLUMNS": "200", **(env or {})})


def assert_one_sentence(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    message = " ".join(result.stderr.split())
    assert message.startswith("amber: ")
    for fragment in fragments:
        assert fragment in message, message


def one_task_benchmark(tmp_path: Path, task: str = "ini-port-change") -> Path:
    bench = tmp_path / "bench"
    shutil.copytree(DEMO / task, bench / task)
    return bench


def test_unknown_benchmark_path(tmp_path: Path) -> None:
    r = amber(tmp_path / "home", "job", "submit", str(tmp_path / "nowhere"), "--agent", "nop")
    assert_one_sentence(r, "No Benchmark at", "give the path of a folder")


def test_folder_without_task_toml(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    r = amber(tmp_path / "home", "job", "submit", str(tmp_path / "empty"), "--agent", "nop")
    assert_one_sentence(r, "No Task found in", "task.toml")


def test_bad_task_toml(tmp_path: Path) -> None:
    bench = one_task_benchmark(tmp_path)
    (bench / "ini-port-change" / "task.toml").write_text("[agent]\ntimeout_sec = 'soon'\n")
    r = amber(tmp_path / "home", "job", "submit", str(bench), "--agent", "nop")
    assert_one_sentence(r, "task.toml", "agent.timeout_sec", "fix the file")
    (bench / "ini-port-change" / "task.toml").write_text("[agent\n")
    assert_one_sentence(amber(tmp_path / "home", "job", "submit", str(bench), "--agent", "nop"),
                        "is not valid TOML")


@pytest.mark.parametrize("trials", ["0", "11"])
def test_trials_outside_one_to_ten(tmp_path: Path, trials: str) -> None:
    r = amber(tmp_path / "home", "job", "submit", str(DEMO), "--agent", "nop", "--trials", trials)
    assert_one_sentence(r, "Trials per Task must be from 1 to 10", trials)
    assert jobs.list_jobs(Warehouse(AmberPaths(tmp_path / "home")), "default") == []


def test_unknown_model_configuration(tmp_path: Path) -> None:
    r = amber(tmp_path / "home", "job", "submit", str(DEMO), "--model", "gpt-99")
    assert_one_sentence(r, "Unknown Model Configuration 'gpt-99'", "replay-strong")
    assert jobs.list_jobs(Warehouse(AmberPaths(tmp_path / "home")), "default") == []


def test_docker_engine_down(tmp_path: Path) -> None:
    r = amber(tmp_path / "home", "job", "submit", str(DEMO), "--agent", "nop",
              env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"})
    assert_one_sentence(r, "Docker engine", "is not answering", "start it")


def test_unknown_job_and_bad_sql(tmp_path: Path) -> None:
    assert_one_sentence(amber(tmp_path / "home", "results", "job-nope"), "No Job job-nope")
    assert_one_sentence(amber(tmp_path / "home", "sql", "select * from no_such_view"), "The query failed")


def bench_with_a_broken_task(tmp_path: Path) -> Path:
    bench = one_task_benchmark(tmp_path)
    broken = bench / "broken-env"
    shutil.copytree(DEMO / "count-log-errors", broken)
    (broken / "environment" / "Dockerfile").write_text("FROM amber-base:bookworm\nRUN false\n")
    return bench


@pytest.mark.docker
@pytest.mark.parametrize("public", [True, False], ids=["public", "private"])
def test_a_task_that_does_not_build_and_the_others_go_on(tmp_path: Path, public: bool) -> None:
    """Public Benchmark: Errored after two retries, not charged. Private: the Task's own failure, Reward 0."""
    wh = Warehouse(AmberPaths(tmp_path / "home"))
    job = submit(wh, str(bench_with_a_broken_task(tmp_path)), "oracle", [], 1, public=public)
    [cell] = jobs.cells_of(wh, job.id)
    records = {r.task_name: r for r in pipeline.run_trials(wh, job.id, cell.cell_key)}
    good, broken = records["ini-port-change"], records["broken-env"]
    assert good.reward == 1.0 and good.outcome == "scored"
    assert broken.error_type == "SandboxBuildFailedError"
    assert "\n" not in (broken.error_message or "")
    if public:
        assert broken.outcome == "errored" and broken.reward is None and broken.retries == 2
    else:
        assert broken.outcome == "scored" and broken.reward == 0.0 and broken.retries == 0
    assert jobs.get_job(wh, job.id, None).status == "completed"
    assert len(wh.trial_records(job_id=job.id)) == 2
    with wh.read() as con:
        charged_keys = {e.trial_key for e in wallet.entries(con, "default") if e.kind == "charge"}
        reserved, charged, refunded = wallet.quote_totals(con, job.quote_id)
    assert (broken.key in charged_keys) is (not public)
    assert good.key in charged_keys
    assert reserved == charged + refunded


@pytest.mark.docker
def test_results_and_sql_over_a_finished_job(tmp_path: Path) -> None:
    home = tmp_path / "home"
    wh = Warehouse(AmberPaths(home))
    job = submit(wh, str(one_task_benchmark(tmp_path)), "oracle", [], 2, bounds=True)
    for cell in jobs.cells_of(wh, job.id):
        pipeline.run_trials(wh, job.id, cell.cell_key)
        pipeline.write_rewards(wh, cell.cell_key)
        pipeline.write_aggregates(wh, cell.cell_key)
    r = amber(home, "sql", f"select agent, count(*) as n, avg(reward) as mean from trials "
                           f"where job_id = '{job.id}' group by agent order by agent")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if "oracle" in line or "nop" in line]
    assert any("nop" in line and " 2 " in line and "0.0" in line for line in lines), r.stdout
    assert any("oracle" in line and " 2 " in line and "1.0" in line for line in lines), r.stdout
    r = amber(home, "sql", "select agent, mean_reward, ci_low, ci_high from cell_results order by agent")
    assert r.returncode == 0 and "oracle" in r.stdout and "nop" in r.stdout
    r = amber(home, "sql", "select agent, cause, count(*) as n from failure_causes group by all order by agent")
    assert r.returncode == 0 and "nop" in r.stdout and "early_stops" in r.stdout and "oracle" not in r.stdout
    r = amber(home, "results", job.id)
    assert r.returncode == 0 and "oracle" in r.stdout and "95% CI" in r.stdout
    r = amber(home, "job", "status", job.id)
    assert r.returncode == 0 and "completed" in r.stdout
    r = amber(home, "results", job.id, "--json")
    cells = {c["agent"]: c for c in json.loads(r.stdout)["cells"]}
    assert cells["oracle"]["mean_reward"] == 1.0 and cells["oracle"]["ci95"] == [1.0, 1.0]
    assert cells["nop"]["mean_reward"] == 0.0 and cells["nop"]["n_trials"] == 2
    assert cells["oracle"]["errored"] == 0 and cells["oracle"]["cost_usd"] > 0


def test_a_failed_parquet_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = tmp_path / "w" / "x.parquet"

    def explode(table: pa.Table, where: Path) -> None:
        Path(where).write_bytes(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", explode)
    with pytest.raises(OSError):
        Warehouse.write_parquet(pa.table({"a": [1]}), target)
    assert list(target.parent.iterdir()) == []
