"""A sandbox's container on its Docker engine: made, started and removed, and found again by its labels.

- one container per Trial, idle (`sleep infinity` under an init) until commands run in it; cpus and memory come
  from task.toml;
- its environment is what the sandbox gives it and nothing else: not the proxies of the Docker client's
  configuration either, which the Docker SDK would add (`use_config_proxy=False`);
- containers are always removed by force when the Trial stops, so none outlives its Trial (`sleep infinity`
  ignores SIGTERM, so a polite stop would only wait out its timeout); so is the relay the container runs in, if
  any (`sandbox.relay`);
- each carries its Trial's session (`SANDBOX_LABEL`) and folder (`TRIAL_DIR_LABEL`), by which the sandboxes a
  killed run left behind are found and removed (`remove_sandboxes_under`).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import docker
from docker.errors import APIError, NotFound

from amber_pipeline.sandbox import docker_engine, engines, relay

if TYPE_CHECKING:
    from harbor.models.task.config import EnvironmentConfig

SANDBOX_LABEL = "org.amber.sandbox"
TRIAL_DIR_LABEL = "org.amber.trial_dir"  # the Trial's folder: unique per Job, cell and Trial


class SandboxContainer:
    """The container of one sandbox, and the relay whose network namespace it joins, if any.

    stop() may run while start() is still building in its thread (Harbor cancels a start that times out):
    whoever comes second removes the container.
    """

    def __init__(self, client: docker.DockerClient, session_id: str) -> None:
        self._client = client
        self._session_id = session_id
        self.container = None  # from start to stop
        self._relay: relay.Relay | None = None
        self._stopped = threading.Event()
        self._lifecycle = threading.Lock()

    @property
    def id(self) -> str:
        """The running container's id."""
        return self.require().id

    def require(self):
        if self.container is None:
            raise RuntimeError(f"The sandbox of {self._session_id} is not running")
        return self.container

    def check_not_stopped(self) -> None:
        if self._stopped.is_set():
            raise self._stopped_while_starting()

    def keep_relay(self, made: relay.Relay) -> relay.Relay:
        """Keep the relay the container is to run in, for `remove`; closed at once when the sandbox was stopped."""
        with self._lifecycle:
            if self._stopped.is_set():
                made.close()
                raise self._stopped_while_starting()
            self._relay = made
        return made

    def start(self, image_id: str, config: EnvironmentConfig, *, labels: dict[str, str],
              environment: dict[str, str], networking: dict[str, str]):
        """Make and start the container of ``image_id`` with the Task's limits and workdir (``config``), the
        ``environment`` given and nothing else, on ``networking`` (`connectivity`)."""
        container = self._client.containers.create(
            image_id,
            command=["sleep", "infinity"],
            init=True,
            **networking,
            labels=labels,
            environment=environment,
            use_config_proxy=False,  # the environment given and nothing else: no proxies of the client's config
            working_dir=config.workdir or None,
            **_limits(config),
        )
        with self._lifecycle:
            if self._stopped.is_set():
                container.remove(force=True)
                raise self._stopped_while_starting()
            self.container = container
        container.start()
        return container

    async def remove(self) -> None:
        """Remove the container and its relay by force, and any made after by a start still running."""
        with self._lifecycle:
            self._stopped.set()
            container, self.container = self.container, None
            made_relay, self._relay = self._relay, None
        try:
            if container is not None:
                try:
                    await asyncio.to_thread(container.remove, force=True)
                except NotFound:
                    pass
        finally:
            if made_relay is not None:
                await asyncio.to_thread(made_relay.close)

    def _stopped_while_starting(self) -> RuntimeError:
        return RuntimeError(f"The sandbox of {self._session_id} was stopped while it started")


def _limits(config: EnvironmentConfig) -> dict:
    """The container's cpus and memory (no swap beyond it), from task.toml."""
    limits: dict = {}
    if config.cpus:
        limits["nano_cpus"] = int(float(config.cpus) * 1e9)
    if config.memory_mb:
        limits["mem_limit"] = f"{config.memory_mb}m"
        limits["memswap_limit"] = f"{config.memory_mb}m"
    return limits


def sandboxes_under(folder: Path, engine: engines.Engine | None = None) -> dict[str, list]:
    """The sandboxes of Trials whose folders lie under ``folder`` (a cell's run folder, or every run's), by
    their Trial folder relative to it, on ``engine`` (None: DOCKER_HOST or the local socket)."""
    return sandboxes_on(docker_engine.connect(engine), folder)


def sandboxes_on(client: docker.DockerClient, folder: Path) -> dict[str, list]:
    """`sandboxes_under`, on the engine of a client already made. A sandbox removed between Docker's list and its
    inspect (another run's, swept meanwhile) is not counted."""
    prefix = f"{folder.resolve()}/"
    found: dict[str, list] = {}
    for container in client.containers.list(all=True, filters={"label": TRIAL_DIR_LABEL}, ignore_removed=True):
        trial_dir = container.labels.get(TRIAL_DIR_LABEL, "")
        if trial_dir.startswith(prefix):
            found.setdefault(trial_dir[len(prefix):], []).append(container)
    return found


def remove_sandboxes(containers: list) -> list[str]:
    """Remove sandboxes (gone already is fine); the ids of those removed. One the engine refuses for now (a container
    stopped by an engine restart can be, for a moment) is left for the next sweep and does not keep the others."""
    removed = []
    for container in containers:
        try:
            container.remove(force=True)
        except NotFound:
            pass
        except APIError:
            continue
        removed.append(container.id)
    return removed


def remove_sandboxes_under(run_dir: Path, engine: engines.Engine | None = None) -> list[str]:
    """Remove the sandboxes of Trials under a cell's run folder that a killed run left behind on ``engine``."""
    return remove_sandboxes([c for found in sandboxes_under(run_dir, engine).values() for c in found])
