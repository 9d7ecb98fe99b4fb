"""Amber's sandbox: a Harbor environment on the Docker SDK (no compose).

Harbor's `Trial` loads this class by import path
(`amber_pipeline.sandbox.environment:AmberSandbox`) and drives it through start, exec,
upload, download and stop. It enforces Amber's sandbox rules, each in the module of its concern:

- images are tagged by the environment's content hash and built once; an
  installed Agent's software (kwarg `amber_agent_software`, the tag of its
  software image) goes on top as a layer of its own, also built once
  (`agent_image.agent_layer`), and the Trial runs in that (`task_image`);
- cpus and memory come from task.toml, and containers are always removed by
  force when the Trial stops, so none outlives its Trial (`container`);
- no network at all, unless given a sandbox network (kwargs `amber_network`
  and `amber_egress_proxy`) or, on another host's engine, a relay (kwarg
  `amber_relay`) (`connectivity`);
- it runs on the Docker engine named by kwarg `amber_engine` (one of
  `engines.engines()`: a unix socket, tcp:// with mutual TLS, or ssh://), or
  on DOCKER_HOST / the local socket without it. Nothing in a sandbox relies on
  a path of the host that runs Amber (no bind mounts; files go in and out
  through the engine's API, the image is built from a build context sent the
  same way), so any engine runs it alike. An engine that lacks the Task's
  image builds it (its base images must be on that engine);
- when a command times out or its phase is cancelled, its processes inside the
  container are killed, and a timeout is known by our own clock (`commands`);
- uploaded files are owned by root, and a Trial's round trips to the engine
  are as few as the rules allow (`container_files`);
- its environment is an allowlist: the Task's `[environment].env`, filled as if
  the server had no environment (`task_env`), the egress proxy's variables and
  what each command is given; never a value of the server's (nor the proxies
  of the Docker client's configuration, which the Docker SDK would add).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path, PurePosixPath

import docker
from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.models.trial.paths import EnvironmentPaths

from amber_pipeline.sandbox import agent_image, docker_engine, engines, relay, task_env
from amber_pipeline.sandbox.commands import Commands
from amber_pipeline.sandbox.connectivity import Connectivity
from amber_pipeline.sandbox.container import SANDBOX_LABEL, TRIAL_DIR_LABEL, SandboxContainer
from amber_pipeline.sandbox.container_files import ContainerFiles
from amber_pipeline.sandbox.task_image import ensure_image, image_tag

_ENGINE_TIMEOUT_SEC = 120  # as docker_engine.connect gives its clients
_api_versions: dict[str, str] = {}  # by engine URL: what the first sandbox of the process learnt


def _connect(engine: engines.Engine | None = None) -> docker.DockerClient:
    """A client of a sandbox's own, for ``engine`` (None: DOCKER_HOST or the local socket). The first one of a
    process for an engine checks that it answers and learns its API version; the others are given that version,
    so they cost no round trip (two, some 7 ms a Trial)."""
    url = engine.url if engine else docker_engine.engine_url()
    if url not in _api_versions:
        client = docker_engine.connect(engine)
        _api_versions[url] = client.api.api_version
        return client
    return docker_engine.client(engine, version=_api_versions[url], timeout=_ENGINE_TIMEOUT_SEC)


class AmberSandbox(BaseEnvironment):
    """One Docker container per Trial, driven through the Docker SDK.

    Harbor needs one class with its methods, and each of them here hands its work to the part of its concern:
    the container and its relay (`SandboxContainer`), how it is wired (`Connectivity`), its files
    (`ContainerFiles`) and its commands (`Commands`). Parts held rather than mixins, since mixins would share one
    `self`, each reading attributes another sets: a held part keeps its own state (the container, the log folders
    still to go in) and is handed the parts it uses, so what touches what reads off its constructor. This class
    keeps what Harbor owns (the Task's config, a command's user and environment, where the log folders are) and
    passes it in.
    """

    _persistent_env: dict[str, str]  # Harbor's: what every command of the sandbox gets

    def __init__(self, *args, amber_network: str | None = None, amber_egress_proxy: str | None = None,
                 amber_agent_software: str | None = None, amber_engine: str | None = None,
                 amber_relay: str | None = None, **kwargs):
        if amber_egress_proxy and not (amber_network or amber_relay):
            raise ValueError("amber_egress_proxy needs amber_network or amber_relay: the sandbox has no network")
        self.engine = engines.named(amber_engine) if amber_engine else None
        self._connectivity = Connectivity(self.engine, amber_network, amber_relay, amber_egress_proxy)
        self._agent_software = amber_agent_software
        self._client = _connect(self.engine)
        self.image_id: str | None = None
        # Seconds this sandbox spent getting its image ready: building it (and an installed Agent's layer), or
        # waiting for another Trial's build of it; milliseconds when it was built already. The Trial's row keeps
        # it apart from the rest of the environment's time, since a Quote adds a build only where none was made.
        self.image_sec = 0.0
        super().__init__(*args, **kwargs)
        self._container = SandboxContainer(self._client, self.session_id)  # named by Harbor's session_id
        self._files = ContainerFiles(self._client, self._container)
        self._commands = Commands(self._client, self._container, self._files)

    @staticmethod
    def type() -> str:
        return "amber-docker"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # Every Amber sandbox runs without network; a task asking for
        # "no-network" therefore gets exactly what it asks.
        return EnvironmentCapabilities(disable_internet=True)

    # Harbor fills the Task's [environment].env from the server's environment; Amber from none (`task_env`).
    def _maybe_resolve_task_env(self) -> None:
        if self.task_env_config.env:
            self._persistent_env = {**self._task_env(), **self._persistent_env}

    def _startup_env(self) -> dict[str, str]:
        return {**self._task_env(), **self._persistent_env}

    def _task_env(self) -> dict[str, str]:
        return task_env.without_host(self.task_env_config.env, "[environment].env")

    def _validate_definition(self) -> None:
        if not (self.environment_dir / "Dockerfile").is_file() and not self.task_env_config.docker_image:
            raise FileNotFoundError(f"{self.environment_dir / 'Dockerfile'} not found and no docker_image set")

    # ---- lifecycle ---------------------------------------------------------

    async def start(self, force_build: bool) -> None:
        await asyncio.to_thread(self._start, force_build)
        if not self._files.pending:  # the image has some of them: made as Harbor makes them, keeping what is there
            await self.ensure_dirs(self._log_dirs())
        await self._upload_environment_dir_after_start()

    def _log_dirs(self) -> list[PurePosixPath]:
        paths = EnvironmentPaths.for_os(self.os)
        return [PurePosixPath(d) for d in (paths.agent_dir, paths.verifier_dir, paths.artifacts_dir)]

    def _start(self, force_build: bool) -> None:
        tag = image_tag(self.environment_dir, self.task_env_config.docker_image)
        began = time.perf_counter()
        self.image_id = ensure_image(self._client, tag, self.environment_dir, self.environment_name, force_build)
        if self._agent_software:
            self.image_id = agent_image.agent_layer(self._client, self.image_id, self._agent_software)
        self.image_sec = time.perf_counter() - began
        self._container.check_not_stopped()
        # The relay, if any, is found by the Trial's folder as its sandbox is, so a sweep of a killed run removes
        # both.
        trial_dir = str(self.trial_paths.trial_dir.resolve())
        networking, environment = self._connectivity.join(
            self._client, self._container, self._startup_env(),
            relay_labels={relay.RELAY_LABEL: self.session_id, TRIAL_DIR_LABEL: trial_dir})
        container = self._container.start(
            self.image_id, self.task_env_config, networking=networking, environment=environment,
            labels={SANDBOX_LABEL: self.session_id, TRIAL_DIR_LABEL: trial_dir})
        self._connectivity.seal(container)
        self._files.defer(self._log_dirs())

    async def stop(self, delete: bool) -> None:
        # Removed whatever `delete` says: no container may outlive its Trial.
        # The image stays, as the build cache of the next Trial.
        try:
            await self._container.remove()
        finally:
            if self.engine is not None and self.engine.ssh is not None:
                # An ssh client holds a login (a thread here, a session there) until closed, and no GC closes it.
                self._client.close()

    # ---- commands ------------------------------------------------------------

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        return await self._commands.run(command, environment=self._merge_env(env),
                                        workdir=cwd or self.task_env_config.workdir or None,
                                        user=self._resolve_user(user), timeout_sec=timeout_sec)

    async def is_dir(self, path: str, user: str | int | None = None) -> bool:
        kind = await self._files.kind_as_seen_by(path, self._resolve_user(user))
        return await super().is_dir(path, user=user) if kind == "ask" else kind == "dir"

    async def is_file(self, path: str, user: str | int | None = None) -> bool:
        kind = await self._files.kind_as_seen_by(path, self._resolve_user(user))
        return await super().is_file(path, user=user) if kind == "ask" else kind == "file"

    # ---- files ----------------------------------------------------------------

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await self._files.upload_file(source_path, target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await self._files.upload_dir(source_dir, target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        await self._files.download_file(source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await self._files.download_dir(source_dir, target_dir)
