"""PromptRunCoordinator: Dagster's run queue, looked at as soon as a run comes or goes, and the door every run
comes through.

Every run waits in the queue for the daemon's next look at it, and Dagster's
own coordinator takes whole seconds between looks (at least 1, in steps of
half a second): up to a second added to each start, twice for a Job launched
from the UI (its `submit_job` run, then its cell runs), and again for each cell
run that waits for a slot. Here a run queued (`submit_run`) or ended (the warm
worker's run child) rings a bell, a datagram on a Unix socket of the
instance's, and Amber's daemon (`launcher/daemon.py`, with
:class:`PromptQueueDaemon`) looks at the queue at once. Without the bell (a
daemon on another host, a run started cold) the queue is still read every
`dequeue_interval_seconds`, fractions allowed; each look is one query of the
run storage. The queue's limits (`concurrency.runs` in dagster.yaml) apply as
before.

Every launch comes through `submit_run` (the UI's Launch and Materialize, the
sensors, the warm worker), right after Dagster made the run and before it is
queued, so this is where Amber refuses what it would only refuse later:
- a launchpad job whose config a rule of Amber's refuses (an unknown Model
  Configuration, a Benchmark folder that is not there: `assets.job_requests.launch_refusal`);
- a run of a cell's Trials that names no Job (Materialize on `trials`:
  `assets.cell_job.launch_refusal`), which would fail its step and mark a good
  cell failed.
A refused run is deleted before anything ran (Dagster counts a partition failed
when the run that planned it failed, and a deleted run as never planned), and
the Launch gets one sentence: for the UI's GraphQL, as a config error naming
the field (the launchpad shows it under "Please fix the following errors") or
the sentence alone; for anyone else, an exception carrying the sentence.
"""

from __future__ import annotations

import contextlib
import select
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from threading import Event
from typing import Any, cast

from dagster import DagsterRun, Field
from dagster._config.stack import EvaluationStackEntry, EvaluationStackRoot
from dagster._core.run_coordinator.base import SubmitRunContext
from dagster._core.run_coordinator.queued_run_coordinator import QueuedRunCoordinator
from dagster._core.workspace.context import IWorkspaceProcessContext
from dagster._daemon.daemon import DaemonIterator, SpanMarker
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon
from dagster._serdes import ConfigurableClassData
from dagster._utils.error import serializable_error_info_from_exc_info
from dagster_graphql.implementation.utils import UserFacingGraphQLError
from dagster_graphql.schema.errors import GrapheneInvalidSubsetError
from dagster_graphql.schema.pipelines.config import (
    GrapheneEvaluationStack,
    GrapheneRunConfigValidationInvalid,
    GrapheneRuntimeMismatchConfigError,
)

from amber_pipeline import worker_socket
from amber_pipeline.paths import AmberPaths
from assets import cell_job, job_requests

BELL = "run-queue.sock"
_HEARTBEAT_STEP_SEC = 0.5  # the longest wait between yields to the daemon's loop (its heartbeats and shutdown)


def ring(dagster_home: Path) -> None:
    """Tell the instance's daemon to look at its run queue now: a run was queued, or one ended and left a slot.
    Nobody listening (no daemon, or one on another host) is no error: the queue is read at its next look anyway."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as bell:
        bell.setblocking(False)
        bell.sendto(b"!", str(worker_socket.socket_path(dagster_home, BELL)))


@contextlib.contextmanager
def _listening(dagster_home: Path) -> Iterator[socket.socket]:
    path = worker_socket.socket_path(dagster_home, BELL)
    bell = worker_socket.bound(path, socket.SOCK_DGRAM)
    bell.setblocking(False)
    try:
        yield bell
    finally:
        bell.close()
        path.unlink(missing_ok=True)


def _rung(bell: socket.socket, timeout: float) -> bool:
    """Whether the bell rang within ``timeout`` seconds; every ring waiting is taken (one look serves them all)."""
    if not select.select([bell], [], [], max(timeout, 0))[0]:
        return False
    with contextlib.suppress(BlockingIOError):
        while True:
            bell.recv(16)
    return True


class PromptRunCoordinator(QueuedRunCoordinator):
    def __init__(self, dequeue_interval_seconds: float = 0.25, inst_data: ConfigurableClassData | None = None,
                 **kwargs: Any):
        super().__init__(inst_data=inst_data, dequeue_interval_seconds=1, **kwargs)
        self._prompt_interval = float(dequeue_interval_seconds)

    @property
    def dequeue_interval_seconds(self) -> float:  # type: ignore[override]  # Dagster's is a whole number
        return self._prompt_interval

    @classmethod
    def config_type(cls) -> dict:
        fields = dict(cast(Mapping[str, Any], super().config_type()))
        fields["dequeue_interval_seconds"] = Field(
            float, is_required=False, description="Seconds between looks at the run queue (fractions allowed).")
        return fields

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData,
                          config_value: Mapping[str, Any]) -> PromptRunCoordinator:
        return cls(inst_data=inst_data, **{k: v for k, v in config_value.items() if v is not None})

    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        """Queue the run, unless Amber refuses it (see the module's docstring): then it is deleted, and the launch
        gets one sentence."""
        run = context.dagster_run
        refused = self._refusal(run)
        if refused is not None:
            self._instance.delete_run(run.run_id)
            raise refused
        queued = super().submit_run(context)
        ring(Path(self._instance.root_directory))
        return queued

    def _refusal(self, run: DagsterRun) -> LaunchRefused | None:
        plan = self._instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id) \
            if run.execution_plan_snapshot_id else None
        steps = plan.step_keys_to_execute if plan is not None else []
        sentence = cell_job.launch_refusal(steps, run.tags)
        if sentence is not None:
            return LaunchRefused(GrapheneInvalidSubsetError(message=sentence, pipeline=None))
        refusal = job_requests.launch_refusal(self._instance, run.job_name, run.run_config, AmberPaths.from_env())
        if refusal is None:
            return None
        field = refusal.field or "config"
        path = ["ops", job_requests.LAUNCHPAD_OPS[run.job_name], "config", field]
        stack: EvaluationStackEntry = EvaluationStackRoot()
        for name in path:
            stack = stack.for_field(name)
        return LaunchRefused(GrapheneRunConfigValidationInvalid(pipeline_name=run.job_name, errors=[
            GrapheneRuntimeMismatchConfigError(message=f"{field}: {refusal}", path=path, reason="RUNTIME_TYPE_MISMATCH",
                                               value_rep=None, stack=GrapheneEvaluationStack(stack))]))


class PromptQueueDaemon(QueuedRunCoordinatorDaemon):
    """Dagster's run-queue daemon, which between its looks at the queue waits for the bell (or for its interval)
    rather than sleeping in steps of half a second. Its loop is Dagster's (`IntervalDaemon.core_loop`) but for
    that wait; it yields at least every half second, so heartbeats and shutdown are seen as before."""

    def __init__(self, interval_seconds: float, dagster_home: Path):
        super().__init__(interval_seconds)
        self._dagster_home = dagster_home

    def core_loop(self, workspace_process_context: IWorkspaceProcessContext,
                  shutdown_event: Event) -> DaemonIterator:
        with _listening(self._dagster_home) as bell:
            while True:
                look_again = time.monotonic() + self.interval_seconds
                yield SpanMarker.START_SPAN
                try:
                    yield from self.run_iteration(workspace_process_context)
                except Exception:
                    error_info = serializable_error_info_from_exc_info(sys.exc_info())
                    self._logger.error("Caught error:\n%s", error_info)
                    yield error_info
                yield SpanMarker.END_SPAN
                while (left := look_again - time.monotonic()) > 0 and not shutdown_event.is_set():
                    if _rung(bell, min(left, _HEARTBEAT_STEP_SEC)):
                        break
                    yield None
                yield None


class LaunchRefused(UserFacingGraphQLError):
    """A launch Amber refuses before its run is queued: the GraphQL launch mutation returns `error` as its result
    (the UI shows its sentence, no traceback); anyone else sees the sentence as the exception's message."""

    def __init__(self, error: Any):
        super().__init__(error)
        self.args = (_sentence(error),)

    def __str__(self) -> str:
        return str(self.args[0])


def _sentence(error: Any) -> str:
    errors = getattr(error, "errors", None)
    return str(errors[0].message if errors else error.message)
