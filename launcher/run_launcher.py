"""WarmRunLauncher: Dagster runs start as forks of the warm worker, or as new processes when none runs; a run
whose worker died is resumed the same way.

Configured in `dagster.yaml` as the instance's run launcher, so the daemon's
run queue launches every run (cell runs, `submit_job`, schedules) through it.
A run's worker pid is kept in its tags: `terminate` signals it (Dagster's run
worker turns SIGTERM into a clean cancel), and run monitoring can tell a
worker that died from one that still runs. The pid goes with its process's
start time (`jobs.workers`), since after a machine restart the same pid may
belong to another process: a daemon started then still sees the run's worker
gone, and its run is run again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from dagster._core.launcher.base import (
    CheckRunHealthResult,
    LaunchRunContext,
    ResumeRunContext,
    RunLauncher,
    WorkerStatus,
)
from dagster._core.storage.dagster_run import DagsterRun
from dagster._grpc.types import ExecuteRunArgs, ResumeRunArgs
from dagster._serdes import ConfigurableClass, ConfigurableClassData
from dagster_shared.serdes import serialize_value

from amber_pipeline import worker_socket
from amber_pipeline.jobs import workers
from amber_pipeline.paths import PROJECT_ROOT

PID_TAG = "amber/worker_pid"
WORKER_TAG = "amber/worker"  # host/pid/start of the worker (`jobs.workers`)


class WarmRunLauncher(RunLauncher, ConfigurableClass):
    def __init__(self, inst_data: ConfigurableClassData | None = None):
        self._inst_data = inst_data
        self._cold: list[subprocess.Popen] = []
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict:
        return {}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Any) -> WarmRunLauncher:
        return cls(inst_data=inst_data)

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        self._start_worker(run, "execute_run", serialize_value(ExecuteRunArgs(
            job_origin=run.job_code_origin, run_id=run.run_id,  # type: ignore[arg-type]
            instance_ref=self._instance.get_ref(), set_exit_code_on_failure=True)))

    @property
    def supports_resume_run(self) -> bool:
        return True

    def resume_run(self, context: ResumeRunContext) -> None:
        """A new worker for a run whose worker died (run monitoring asks, `max_resume_run_attempts` times at
        most): the same run goes on, and a cell run keeps the Trials it stored (`jobs.cell_run`)."""
        run = context.dagster_run
        self._start_worker(run, "resume_run", serialize_value(ResumeRunArgs(
            job_origin=run.job_code_origin, run_id=run.run_id,  # type: ignore[arg-type]
            instance_ref=self._instance.get_ref(), set_exit_code_on_failure=True)))

    def _start_worker(self, run: DagsterRun, command: str, args: str) -> None:
        """`dagster api COMMAND ARGS` for the run: forked by the warm worker, else as a new process."""
        reply = worker_socket.ask(Path(self._instance.root_directory), {"op": command, "args": args})
        if reply and "pid" in reply:
            pid, how = int(reply["pid"]), "forked by the warm worker"
        else:
            pid, how = self._cold_start(command, args), "started cold (no warm worker answered)"
        self._instance.add_run_tags(run.run_id, {PID_TAG: str(pid), WORKER_TAG: workers.of_process(pid)})
        self._instance.report_engine_event(f"Run worker {how}, pid {pid}.", run, cls=self.__class__)

    def _cold_start(self, command: str, args: str) -> int:
        self._cold = [p for p in self._cold if p.poll() is None]  # reap the ones that ended
        process = subprocess.Popen([sys.executable, "-m", "dagster", "api", command, args],
                                   cwd=PROJECT_ROOT, start_new_session=True)
        self._cold.append(process)
        return process.pid

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        pid = _pid(run)
        if pid is None:
            return False
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return False
        return True

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        pid = _pid(run)
        if pid is None:
            return CheckRunHealthResult(WorkerStatus.UNKNOWN, "no worker pid recorded")
        worker = run.tags.get(WORKER_TAG)
        if worker is not None and workers.is_dead(worker):
            return CheckRunHealthResult(WorkerStatus.NOT_FOUND, f"run worker pid {pid} is gone")
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return CheckRunHealthResult(WorkerStatus.NOT_FOUND, f"run worker pid {pid} is gone")
        return CheckRunHealthResult(WorkerStatus.RUNNING, run_worker_id=str(pid))


def _pid(run: DagsterRun) -> int | None:
    value = run.tags.get(PID_TAG)
    return int(value) if value and value.isdigit() else None
