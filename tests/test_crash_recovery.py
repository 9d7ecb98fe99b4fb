"""A cell run killed anywhere settles its Job: nothing charged twice, nothing lost, no container left.

Each test runs a real cell run (Docker sandboxes, the oracle Agent) in a
process of its own and kills it with SIGKILL: during a Trial, between a
Trial's row and its charge, between the charge and the row's cost, and
while the scores are written (the failpoints of `amber_pipeline.failpoints`).
Then recovery runs as `amber job cancel` and the Dagster sensor run it (a
read such as `amber job status` changes nothing), and the test checks what a
user would: the Job ended and reserved = charged + refunded, every Trial charged
at most once and its row shows what the ledger took, finished Trials keep
their Rewards, and no sandbox of the Job is left. One more restarts the
Docker engine in the middle of a Job. These cell runs are not Dagster's runs:
one that Dagster started is resumed and finishes its Job instead
(tests/test_jobs_finish.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import dagster as dg
import docker
import pytest
from helpers import cli, costs_and_charges, funded, request, submit, trial_sandboxes
from servers import dockerd

from amber_pipeline import failpoints
from amber_pipeline.accounts.identity import local_user
from amber_pipeline.jobs import lifecycle, records, recovery
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from assets.cell_job import CELL_TAG, JOB_TAG
from assets.resources import WarehouseResource
from sensors.dead_cells import dead_cell_sensor

pytestmark = pytest.mark.docker

DEMO_BENCH = PROJECT_ROOT / "examples" / "demo-bench"
TASKS = ("fix-off-by-one", "ini-port-change", "json-settings-update")

RUN_CELL = textwrap.dedent("""
    import sys
    from amber_pipeline.jobs.cell_run import run_cell_of_job
    from amber_pipeline.paths import AmberPaths
    from amber_pipeline.warehouse.catalog import Warehouse
    run_cell_of_job(Warehouse(AmberPaths.from_env()), sys.argv[1], sys.argv[2])
""")


def slow_bench(tmp_path: Path, seconds: float) -> Path:
    """Three demo Tasks whose solutions take ``seconds`` first, so a test can kill a run while a Trial runs."""
    bench = tmp_path / "slow-bench"
    for name in TASKS:
        shutil.copytree(DEMO_BENCH / name, bench / name)
        solve = bench / name / "solution" / "solve.sh"
        lines = solve.read_text().splitlines()
        solve.write_text("\n".join([lines[0], f"sleep {seconds}", *lines[1:]]) + "\n")
    return bench


def start_cell_run(wh: Warehouse, job_id: str, cell_key: str, point: str | None, tmp_path: Path) -> subprocess.Popen:
    env = dict(os.environ)
    if point is not None:
        control = tmp_path / "failpoint"
        control.write_text(point)
        env[failpoints.ENV] = str(control)
    return subprocess.Popen([sys.executable, "-c", RUN_CELL, job_id, cell_key], cwd=PROJECT_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def sandboxes_of(wh: Warehouse, job_id: str) -> list:
    return trial_sandboxes(docker.from_env(), wh.paths.runs / job_id)


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def assert_settled(wh: Warehouse, job_id: str) -> None:
    """What a user checks after a crash: the Job ended, its money settled, each Trial charged once and shown
    at its charge, and nothing of it still running in Docker."""
    job = records.get_job(wh, job_id, None)
    assert job.ended, job
    with wh.query() as con:
        reserved, charged, refunded, settled = con.execute(
            "select reserved, charged, refunded, settled from job_spending where job_id = ?", [job_id]).fetchone()
        assert settled and reserved == charged + refunded, (reserved, charged, refunded)
        twice = con.execute("select trial_key, count(*) from ledger where kind = 'charge' and job_id = ? "
                            "group by trial_key having count(*) > 1", [job_id]).fetchall()
        assert twice == []
    costs, charges = costs_and_charges(wh, job_id)
    assert costs == charges  # the trials view's cost is the ledger's charge
    assert sandboxes_of(wh, job_id) == []


def stored_rewards(wh: Warehouse, job_id: str) -> dict[str, float | None]:
    with wh.query() as con:
        return dict(con.execute("select task_name, reward from trials where job_id = ?", [job_id]).fetchall())


@pytest.mark.parametrize("point, cell_status", [
    ("after_rows", "failed"),      # the first Trial's row is stored, its charge not yet made
    ("after_charge", "failed"),    # charged, the row's cost not yet the ledger's
    ("aggregates", "done"),        # every Trial stored and charged; killed while the scores are written
])
@pytest.mark.slow
def test_a_run_killed_at_a_failpoint_settles_its_job(tmp_path: Path, warehouse: Warehouse, point: str,
                                                    cell_status: str) -> None:
    job = submit(warehouse, str(slow_bench(tmp_path, 0)), "oracle", [], 1)
    [cell] = records.cells_of(warehouse, job.id)
    run = start_cell_run(warehouse, job.id, cell.cell_key, point, tmp_path)
    assert run.wait(timeout=300) == -signal.SIGKILL, run.communicate()
    assert records.get_job(warehouse, job.id, None).status == "running"  # the run died: nobody ended it

    ok = cli("job", "status", job.id)  # a read changes nothing: a run Dagster started would be resumed
    assert ok.exit_code == 0, ok.output
    assert "its run's process is gone; the daemon resumes the run" in " ".join(ok.output.split())  # but says so
    assert records.get_job(warehouse, job.id, None).status == "running"
    with dg.instance_for_test() as instance:  # no Dagster run started this one: the sensor judges it by its pid
        dead_cell_sensor(dg.build_sensor_context(instance=instance, resources={"warehouse": WarehouseResource()}))
    assert_settled(warehouse, job.id)
    [ended] = records.cells_of(warehouse, job.id)
    assert ended.status == cell_status, ended
    rewards = stored_rewards(warehouse, job.id)
    assert rewards and set(rewards.values()) == {1.0}  # the oracle's Trials keep their Rewards
    if cell_status == "done":
        assert len(rewards) == len(TASKS)
        assert records.get_job(warehouse, job.id, None).status == "completed"
        with warehouse.query() as con:  # the scores the dead run was writing are there
            assert con.execute("select n_trials, mean_reward from cell_results where cell_key = ?",
                               [cell.cell_key]).fetchone() == (len(TASKS), 1.0)
    else:
        failed = records.get_job(warehouse, job.id, None)
        assert failed.status == "failed" and "its run's process died" in (failed.message or ""), failed
    assert recovery.recover(warehouse, job.id) == []  # once: a second recovery finds nothing to do


def test_a_run_killed_during_a_trial_leaves_no_sandbox_and_cancel_refunds(tmp_path: Path,
                                                                        warehouse: Warehouse) -> None:
    job = submit(warehouse, str(slow_bench(tmp_path, 30)), "oracle", [], 1)
    [cell] = records.cells_of(warehouse, job.id)
    run = start_cell_run(warehouse, job.id, cell.cell_key, None, tmp_path)
    try:
        wait_for(lambda: sandboxes_of(warehouse, job.id), 240, "a Trial's sandbox")
        time.sleep(2)
    finally:
        run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert sandboxes_of(warehouse, job.id)  # the dead run left its sandboxes running

    ok = cli("job", "cancel", job.id)  # a stuck Job is cancelled and refunded at once
    assert ok.exit_code == 0, ok.output
    assert "cancelled" in ok.stdout
    assert_settled(warehouse, job.id)
    with warehouse.query() as con:
        charged, refunded = con.execute("select charged, refunded from job_spending where job_id = ?",
                                        [job.id]).fetchone()
    assert charged == 0 and refunded > 0  # no Trial finished: nothing charged, everything refunded
    assert records.cells_of(warehouse, job.id)[0].status == "failed"


@pytest.mark.slow
def test_a_restarted_docker_engine_mid_job_settles_it(tmp_path: Path, warehouse: Warehouse, engine2: dockerd.Dockerd,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine is this test's second dockerd (DOCKER_HOST, as a user points Amber at an engine), so its restart
    runs beside the other tests rather than stopping the machine's own engine under them."""
    monkeypatch.setenv("DOCKER_HOST", engine2.unix_url)
    funded(warehouse)
    slow = request(str(slow_bench(tmp_path, 20)), "oracle").model_copy(update={"ceiling_usd": 1.0})  # never reached
    _, job = lifecycle.submit(warehouse, "default", local_user(), slow)
    [cell] = records.cells_of(warehouse, job.id)
    run = start_cell_run(warehouse, job.id, cell.cell_key, None, tmp_path)
    try:
        wait_for(lambda: sandboxes_of(warehouse, job.id), 240, "a Trial's sandbox")
        engine2.stop_process()  # SIGTERM: dockerd stops its containers and exits, as a service restart does
        engine2.start()
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err
    finally:
        if run.poll() is None:
            run.kill()
    # The run's own cleanup may find the engine still starting, and a container it stopped may still be refused
    # removal for a moment after: the sensor sweeps what is left at its next ticks (every 5 s in a deployment).
    with dg.instance_for_test() as instance:
        for _ in range(12):
            dead_cell_sensor(dg.build_sensor_context(instance=instance, resources={"warehouse": WarehouseResource()}))
            if not sandboxes_of(warehouse, job.id):
                break
            time.sleep(5)
    assert not (left := [(c.short_id, c.status) for c in sandboxes_of(warehouse, job.id)]), left
    assert_settled(warehouse, job.id)
    with warehouse.query() as con:
        rows = con.execute("select task_name, errored, reward from trials where job_id = ?", [job.id]).fetchall()
    # The Trials the restart broke were retried once the engine answered again, and scored.
    assert sorted(rows) == [(t, False, 1.0) for t in TASKS], rows
    assert records.get_job(warehouse, job.id, None).status == "completed"


def test_the_sensor_ends_a_cell_whose_dagster_run_failed(tmp_path: Path, warehouse: Warehouse) -> None:
    """A worker on another machine cannot be judged by its pid; Dagster's run monitoring marks its run failed
    and the sensor ends the cell from the run's status."""
    job = submit(warehouse, str(slow_bench(tmp_path, 0)), "oracle", [], 1)
    [cell] = records.cells_of(warehouse, job.id)
    with warehouse.write() as con:
        con.execute("update job_cells set status = 'running', worker = 'elsewhere/1/1' where job_id = ?", [job.id])
    context = dict(resources={"warehouse": WarehouseResource()})
    with dg.instance_for_test() as instance:
        run = dg.DagsterRun(job_name="cell_job", run_id=str(uuid.uuid4()), status=dg.DagsterRunStatus.STARTED,
                         tags={JOB_TAG: job.id, CELL_TAG: cell.cell_key})
        instance.add_run(run)
        dead_cell_sensor(dg.build_sensor_context(instance=instance, **context))
        assert records.get_job(warehouse, job.id, None).status == "running"  # its run still runs: left alone
        instance.report_run_failed(run, "Run worker failed health check")
        dead_cell_sensor(dg.build_sensor_context(instance=instance, **context))
    assert_settled(warehouse, job.id)
    failed = records.get_job(warehouse, job.id, None)
    assert failed.status == "failed" and f"its run {run.run_id[:8]} ended FAILURE" in (failed.message or "")
