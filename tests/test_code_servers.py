"""`launcher.code_servers.ForkedProcess`: what Dagster asks of a code server's `subprocess.Popen`, answered for a
process that is not the asker's child (the warm worker forked it). The forks themselves, and their end with the
process that asked for them, are in test_warm_start.py and test_api.py (`amber serve`)."""

from __future__ import annotations

import signal
import subprocess

import pytest

from launcher.code_servers import ENDED, ForkedProcess


def test_a_forked_process_answers_as_its_popen_would() -> None:
    with subprocess.Popen(["sleep", "30"]) as sleeper:
        server = ForkedProcess(sleeper.pid, ["sleep", "30"])
        assert server.poll() is None and server.returncode is None
        with pytest.raises(subprocess.TimeoutExpired):
            server.wait(timeout=0.2)
        server.kill()
        assert server.wait(timeout=10) == ENDED and server.poll() == ENDED
        server.terminate()  # once it ended, signals go nowhere (its pid may be another process's by then)
        assert sleeper.wait(timeout=10) == -signal.SIGKILL


def test_a_process_that_ended_before_it_was_seen_reads_as_ended() -> None:
    with subprocess.Popen(["true"]) as done:
        done.wait()
        assert ForkedProcess(done.pid, ["true"]).poll() == ENDED
