"""Amber's Dagster daemon: `dagster-daemon run`, whose run queue is looked at when its bell rings.

The embedded Amber's warm worker forks its daemon (`embedded.start_daemon`),
which then runs :func:`run` with ``run -w WORKSPACE``, or, without a warm worker,
starts it as ``python -m launcher.daemon run -w WORKSPACE``: Dagster's own
command, with two changes made before it reads the instance. Once the
instance has loaded, the daemon writes its pid in the instance's pid file
(`embedded.announce_daemon`), which tells `start_daemon` that it started; one
whose instance does not load stops before. When the instance's run coordinator is
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
from dagster._daemon.cli import cli
from dagster._daemon.daemon import DagsterDaemon

from amber_pipeline import embedded
from amber_pipeline.paths import AmberPaths
from launcher import code_servers
from launcher.run_queue import PromptQueueDaemon, PromptRunCoordinator

_dagsters_daemon_of_type = controller.create_daemon_of_type
_announced = False


def daemon_of_type(daemon_type: str, instance: DagsterInstance) -> DagsterDaemon:
    """Dagster's daemon of ``daemon_type``, but the run queue's when the coordinator is Amber's. Dagster makes its
    daemons once the instance has loaded, before it loads the workspace: the first call announces the daemon."""
    global _announced
    if not _announced:
        embedded.announce_daemon(AmberPaths.from_env())
        _announced = True
    coordinator = instance.run_coordinator
    if daemon_type == PromptQueueDaemon.daemon_type() and isinstance(coordinator, PromptRunCoordinator):
        return PromptQueueDaemon(coordinator.dequeue_interval_seconds, Path(instance.root_directory))
    return _dagsters_daemon_of_type(daemon_type, instance)


def run(argv: list[str]) -> None:
    """`dagster-daemon ARGV` in this process, with Amber's run queue daemon, and its code server forked by the warm
    worker when one answers (`launcher.code_servers`)."""
    controller.create_daemon_of_type = daemon_of_type  # read by create_daemons_from_instance at each call
    code_servers.install(AmberPaths.from_env().dagster_home)
    cli(args=argv, prog_name="dagster-daemon", obj={})


if __name__ == "__main__":
    run(sys.argv[1:])
