"""The embedded daemon with its warm worker: runs start warm, survive a daemon stop, and resume after a start.

Real processes throughout: `embedded.start_daemon` starts `dagster-daemon` and the warm worker on a temporary
AMBER_HOME, Jobs are submitted as the CLI does (`lifecycle.submit`, then `launch`), and cell runs execute real
Trials in Docker sandboxes.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import httpx
import pytest
from helpers import children, free_port, funded, submit

from amber_pipeline import embedded, worker_socket
from amber_pipeline.accounts.identity import local_user
from amber_pipeline.cli.client import tls
from amber_pipeline.jobs import lifecycle, records, workers
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.operations.jobs import launch
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from launcher import code_servers, run_queue

pytestmark = [pytest.mark.docker, pytest.mark.dagster_ui]

TASK = PROJECT_ROOT / "examples" / "demo-bench" / "fix-off-by-one"


def slow_bench(tmp_path: Path, seconds: int) -> Path:
    """One Task whose solution first sleeps, so an oracle Trial is still running when we act."""
    bench = tmp_path / "slow-bench"
    shutil.copytree(TASK, bench / TASK.name)
    solve = bench / TASK.name / "solution" / "solve.sh"
    lines = solve.read_text().splitlines()
    solve.write_text("\n".join([lines[0], f"sleep {seconds}", *lines[1:]]) + "\n")
    return bench


def wait_for(what: str, check, budget: float):
    deadline = time.monotonic() + budget
    while (value := check()) in (None, False, []):
        assert time.monotonic() < deadline, f"no {what} within {budget} s"
        time.sleep(0.2)
    return value


def runs_of(instance: dg.DagsterInstance, job_id: str) -> list[dg.DagsterRun]:
    return [r.dagster_run for r in instance.get_run_records(dg.RunsFilter(tags={"amber/job": job_id}))]


@pytest.mark.slow
def test_runs_start_warm_survive_a_daemon_stop_and_resume_after_a_start(tmp_path: Path, warehouse: Warehouse,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    paths = warehouse.paths
    funded(warehouse)
    bench = slow_bench(tmp_path, 6)
    bell = worker_socket.socket_path(paths.dagster_home, run_queue.BELL)
    daemon = embedded.start_daemon(paths)
    monkeypatch.setenv("DAGSTER_HOME", str(paths.dagster_home))
    try:
        # The daemon is a fork of the warm worker, which had Dagster and the code location imported already.
        worker = int((paths.dagster_home / "warm-worker.pid").read_text())
        assert Path(f"/proc/{daemon}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(worker)
        # `start_daemon` waits WARM_WORKER_START_SEC for the worker's imports; on a busy machine they take longer
        wait_for("answer of the warm worker", lambda: worker_socket.ask(paths.dagster_home, {"op": "ping"}), 120)
        wait_for("the run queue's bell", bell.is_socket, 60)  # the daemon is Amber's (launcher.daemon)
        # Its code server is the warm worker's fork too (`launcher.code_servers`), not a new interpreter.
        [server] = wait_for("the daemon's code server", lambda: [pid for pid, (name, _) in children(worker).items()
                                                                 if name == code_servers.NAME], 60)
        _, running = lifecycle.submit(warehouse, "default", local_user(),  # room for the slow solution's time
                                      JobRequest(benchmark=str(bench), agent="oracle", ceiling_usd=1.0))
        launch(warehouse, running.id)
        wait_for("running cell", lambda: [c for c in records.cells_of(warehouse, running.id)
                                          if c.status == "running"], 60)
        with dg.DagsterInstance.get() as instance:
            [run] = runs_of(instance, running.id)
            assert run.tags["amber/worker_pid"].isdigit()
            assert any("forked by the warm worker" in (e.message or "")
                       for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT))
        # Stop the daemon while the Trial runs: the run is a process of its own and finishes. The code server ends
        # with the daemon.
        assert embedded.stop_daemon(paths)
        wait_for("the code server gone with its daemon", lambda: not workers.runs(server), 10)
        queued = submit(warehouse, str(bench), "nop", [], 1)  # started while no daemon runs
        launch(warehouse, queued.id)  # no warm worker answers: it waits for a daemon
        done = wait_for("the running Job to end", lambda: records.get_job(warehouse, running.id, None).ended, 90)
        assert done and records.get_job(warehouse, running.id, None).status == "completed"
        with dg.DagsterInstance.get() as instance:
            [run] = runs_of(instance, running.id)
            wait_for("the run to succeed", lambda: instance.get_run_by_id(run.run_id).status
                     == dg.DagsterRunStatus.SUCCESS, 30)
            assert runs_of(instance, queued.id) == []
        with warehouse.query() as con:
            assert con.execute("select mean_reward from cell_results where agent = 'oracle'").fetchone() == (1.0,)
        assert records.get_job(warehouse, queued.id, None).status == "running"

        # A later start picks the waiting Job up (the sensor claims what nobody launched).
        embedded.start_daemon(paths)
        wait_for("the queued Job to end", lambda: records.get_job(warehouse, queued.id, None).ended, 90)
        assert records.get_job(warehouse, queued.id, None).status == "completed"
        with dg.DagsterInstance.get() as instance:
            [run] = runs_of(instance, queued.id)
            assert run.tags["dagster/sensor_name"] == "job_request_sensor"
    finally:
        embedded.stop_daemon(paths)
    assert worker_socket.ask(paths.dagster_home, {"op": "ping"}) is None, "the warm worker outlived its daemon"
    wait_for("the bell gone with its daemon", lambda: not bell.exists(), 30)


@pytest.mark.slow
def test_amber_ui_uses_the_running_daemon_and_leaves_it_running(warehouse: Warehouse) -> None:
    paths = warehouse.paths
    pid = embedded.start_daemon(paths)
    port = free_port()
    ui = subprocess.Popen([str(Path(sys.executable).parent / "amber"), "ui", "--port", str(port)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with httpx.Client(verify=tls(), base_url=f"http://127.0.0.1:{port}", timeout=5, trust_env=False) as client:
            def serving() -> bool:
                try:
                    return client.get("/ui/server_info").status_code == 200  # the Dagster UI, under /ui
                except httpx.TransportError:
                    return False
            wait_for("the webserver", serving, 90)
        assert embedded.daemon_pid(paths) == pid  # the one daemon of the instance, not a second
        ui.send_signal(signal.SIGTERM)
        output = ui.communicate(timeout=60)[0].decode()
        assert embedded.daemon_pid(paths) == pid, "amber ui stopped a daemon it did not start"
        assert "will not be used" not in output and "deprecat" not in output.lower(), output
    finally:
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGKILL)
        embedded.stop_daemon(paths)



@pytest.mark.slow
def test_the_demo_leaves_every_run_succeeded_and_comparisons_materialized(warehouse: Warehouse) -> None:
    """`amber demo` starts the daemon, follows its Jobs to the end and stops it: no run of its is interrupted,
    and the comparisons are recorded, not waiting for the hourly schedule."""
    demo = subprocess.run([str(Path(sys.executable).parent / "amber"), "demo", "--agent", "nop"],
                          capture_output=True, text=True, timeout=900, check=False)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert embedded.daemon_pid(warehouse.paths) is None  # it stopped the daemon it started
    jobs = records.list_jobs(warehouse, "default")
    assert [j.status for j in jobs] == ["completed", "completed"], (
        [(j.id, j.status, j.message) for j in jobs], demo.stdout[-3000:])
    with dg.DagsterInstance.from_config(str(warehouse.paths.dagster_home)) as instance:
        runs = [r.dagster_run for r in instance.get_run_records()]
        wait_for("the last run's bookkeeping", lambda: all(
            instance.get_run_by_id(r.run_id).is_finished for r in runs), 30)
        statuses = {r.tags["dagster/partition"]: instance.get_run_by_id(r.run_id).status for r in runs}
        assert statuses == {name: dg.DagsterRunStatus.SUCCESS for name in (
            "demo-bench@1/oracle", "demo-bench@1/nop", "static-bench@1/direct/replay-strong",
            "static-bench@1/direct/replay-weak")}, statuses
        assert instance.get_latest_materialization_event(dg.AssetKey("comparisons")) is not None
