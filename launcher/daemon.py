"""Amber's Dagster daemon: `dagster-daemon run`, whose run queue is looked at when its bell rings.

The embedded Amber starts its daemon as ``python -m launcher.daemon run -w
WORKSPACE`` (`embedded.start_daemon`): Dagster's own command, with one change
made before it reads the instance. When the instance's run coordinator is
Amber's (`launcher.run_queue.PromptRunCoordinator`), its queue daemon is
:class:`~launcher.run_queue.PromptQueueDaemon`, which starts a queued run as
soon as the run's submitter (or a run that ended) rings, instead of at the
next of its half-second steps. Every other daemon is Dagster's, made as
Dagster makes it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dagster import DagsterInstance
from dagster._daemon import controller
from dagster._daemon.cli import main
from dagster._daemon.daemon import DagsterDaemon

from launcher.run_queue import PromptQueueDaemon, PromptRunCoordinator

_dagsters_daemon_of_type = controller.create_daemon_of_type


def daemon_of_type(daemon_type: str, instance: DagsterInstance) -> DagsterDaemon:
    """Dagster's daemon of ``daemon_type``, but the run queue's when the coordinator is Amber's."""
    coordinator = instance.run_coordinator
    if daemon_type == PromptQueueDaemon.daemon_type() and isinstance(coordinator, PromptRunCoordinator):
        return PromptQueueDaemon(coordinator.dequeue_interval_seconds, Path(instance.root_directory))
    return _dagsters_daemon_of_type(daemon_type, instance)


if __name__ == "__main__":
    controller.create_daemon_of_type = daemon_of_type  # read by create_daemons_from_instance at each call
    sys.argv[0] = "dagster-daemon"
    main()
