"""The run queue's bell: Amber's queue daemon looks at the queue when a run is queued or ends, not at its interval.

`launcher.run_queue.PromptQueueDaemon` is driven here as Dagster's daemon controller drives it (its loop is a
generator, advanced until shutdown, then closed), with its look at the queue counted instead of made, and an
interval of a minute: a second look within seconds can only have come from the bell.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amber_pipeline import worker_socket
from launcher.run_queue import BELL, PromptQueueDaemon, ring

INTERVAL_SEC = 60.0


class CountingDaemon(PromptQueueDaemon):
    """The queue daemon, whose look at the queue is counted (Dagster's would query the instance's run storage)."""

    def __init__(self, dagster_home: Path):
        super().__init__(INTERVAL_SEC, dagster_home)
        self.looks = 0
        self.looking = threading.Event()
        self.may_finish = threading.Event()  # a look ends once this is set
        self.may_finish.set()

    def run_iteration(self, workspace_process_context: object) -> Iterator[None]:  # type: ignore[override]
        self.looks += 1
        self.looking.set()
        self.may_finish.wait(10)
        yield None


def looks_reach(daemon: CountingDaemon, n: int, budget: float = 10.0) -> bool:
    deadline = time.monotonic() + budget
    while daemon.looks < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return daemon.looks >= n


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[CountingDaemon]:
    daemon = CountingDaemon(tmp_path)
    shutdown = threading.Event()
    loop = daemon.core_loop(None, shutdown)  # type: ignore[arg-type]  # the context goes to run_iteration alone

    def drive() -> None:  # as `DagsterDaemon.run_daemon_loop` does
        try:
            while not shutdown.is_set():
                next(loop)
        finally:
            loop.close()

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        yield daemon
    finally:
        shutdown.set()
        driver.join(timeout=5)
    assert not driver.is_alive(), "the queue daemon did not see its shutdown"


def test_a_ring_makes_the_daemon_look_at_once_and_each_ring_is_heard(daemon: CountingDaemon, tmp_path: Path) -> None:
    assert looks_reach(daemon, 1)
    time.sleep(0.3)
    assert daemon.looks == 1, "the daemon looked again before its interval with no ring"
    for n in (2, 3):
        ring(tmp_path)
        assert looks_reach(daemon, n), f"look {n} did not come within seconds of its ring (the interval is a minute)"


def test_rings_during_a_look_are_one_more_look_not_lost(daemon: CountingDaemon, tmp_path: Path) -> None:
    assert looks_reach(daemon, 1)
    daemon.may_finish.clear()
    daemon.looking.clear()
    ring(tmp_path)
    assert daemon.looking.wait(10)  # look 2 has begun, and is held
    for _ in range(5):  # runs queued while the daemon looks: the look may have missed them
        ring(tmp_path)
    daemon.may_finish.set()
    assert looks_reach(daemon, 3)
    time.sleep(0.3)
    assert daemon.looks == 3, "the five rings that waited were one look, since one look serves them all"


def test_the_bell_is_its_owners_alone_and_gone_with_the_daemon(tmp_path: Path) -> None:
    bell = worker_socket.socket_path(tmp_path, BELL)
    ring(tmp_path)  # nobody listens: no error, and no file made
    assert not bell.exists()
    daemon = CountingDaemon(tmp_path)
    shutdown = threading.Event()
    loop = daemon.core_loop(None, shutdown)  # type: ignore[arg-type]
    next(loop)
    assert bell.is_socket() and bell.stat().st_mode & 0o077 == 0
    loop.close()
    assert not bell.exists()
