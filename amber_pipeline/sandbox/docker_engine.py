"""The Docker engine that runs sandboxes: one place that connects to it.

A dead engine is the commonest thing a user can fix, so connecting turns the
SDK's long exception into one sentence naming the fix.
"""

from __future__ import annotations

import os
import time

import docker
from docker.errors import DockerException

from amber_pipeline.errors import AmberError


def engine_url() -> str:
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def connect(timeout: int = 120) -> docker.DockerClient:
    """A client for the engine at DOCKER_HOST (or the local socket) that answers a ping."""
    try:
        client = docker.DockerClient(base_url=engine_url(), timeout=timeout)
        client.ping()
    except DockerException:
        raise AmberError(f"The Docker engine at {engine_url()} is not answering: start it "
                         "(as root on Debian, `make setup` installs and starts one) and try again.") from None
    return client


def answers_within(seconds: float) -> bool:
    """Wait until the engine answers a ping (a restarting engine takes seconds); False if not within
    ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            client = docker.DockerClient(base_url=engine_url(), timeout=5)
            try:
                client.ping()
                return True
            finally:
                client.close()
        except DockerException:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)
