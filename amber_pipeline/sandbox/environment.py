"""Amber's sandbox: a Harbor environment on the Docker SDK (no compose).

Harbor's `Trial` loads this class by import path
(`amber_pipeline.sandbox.environment:AmberSandbox`) and drives it through start, exec,
upload, download and stop. It enforces Amber's sandbox rules:

- images are tagged by the environment's content hash and built once; an
  installed Agent's software (kwarg `amber_agent_software`, the tag of its
  software image) goes on top as a layer of its own, also built once
  (`agent_image.agent_layer`), and the Trial runs in that;
- cpus and memory come from task.toml;
- no network at all, unless given a sandbox network (kwargs `amber_network`,
  the name of a `SandboxNetwork`, and optionally `amber_egress_proxy`, the URL
  of an `EgressProxy` on its gateway): then the container runs on that network
  with its default route removed and no name server (`network.isolate`), and
  with HTTP(S)_PROXY set to the egress proxy and NO_PROXY covering the
  gateway, where the model proxy listens;
- containers are always removed by force when the Trial stops, so none
  outlives its Trial (`sleep infinity` ignores SIGTERM, so a polite stop
  would only wait out its timeout);
- when a command times out or its phase is cancelled, its processes inside the
  container are killed, found by a marker in their environment (which every
  child inherits), so nothing of a timed-out phase keeps running;
- a timeout is known by our own clock, never inferred from exit code 124,
  which a user command may return on its own;
- uploaded files are owned by root, whatever their owner on the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import shlex
import tarfile
import threading
import uuid
from pathlib import Path, PurePosixPath

from docker.errors import APIError, BuildError, ImageNotFound, NotFound
from harbor.environments.base import BaseEnvironment, ExecResult, SandboxBuildFailedError
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.environments.definition import environment_content_hash
from harbor.models.trial.paths import EnvironmentPaths

from amber_pipeline.sandbox import agent_image, docker_engine, egress, network

IMAGE_REPOSITORY = "amber-env"
SANDBOX_LABEL = "org.amber.sandbox"
TRIAL_DIR_LABEL = "org.amber.trial_dir"  # the Trial's folder: unique per Job, cell and Trial
_KILL_GRACE_SEC = 10
_build_locks: dict[str, threading.Lock] = {}
_build_locks_guard = threading.Lock()


def image_tag(environment_dir: Path, docker_image: str | None = None) -> str:
    """The tag of a Task's environment image: its content hash."""
    if docker_image and not (environment_dir / "Dockerfile").is_file():
        return docker_image
    return f"{IMAGE_REPOSITORY}:{environment_content_hash(environment_dir, docker_image=docker_image)}"


def _build_lock(tag: str) -> threading.Lock:
    with _build_locks_guard:
        return _build_locks.setdefault(tag, threading.Lock())


class AmberSandbox(BaseEnvironment):
    """One Docker container per Trial, driven through the Docker SDK."""

    def __init__(self, *args, amber_network: str | None = None, amber_egress_proxy: str | None = None,
                 amber_agent_software: str | None = None, **kwargs):
        if amber_egress_proxy and not amber_network:
            raise ValueError("amber_egress_proxy needs amber_network: the egress proxy listens on its gateway")
        self._network_name = amber_network
        self._egress_proxy = amber_egress_proxy
        self._agent_software = amber_agent_software
        self._client = docker_engine.connect()
        self._container = None
        # stop() may run while start() is still building in its thread (Harbor
        # cancels a start that times out): whoever comes second removes the container.
        self._stopped = threading.Event()
        self._lifecycle = threading.Lock()
        self.image_id: str | None = None
        super().__init__(*args, **kwargs)

    @staticmethod
    def type() -> str:
        return "amber-docker"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # Every Amber sandbox runs without network; a task asking for
        # "no-network" therefore gets exactly what it asks.
        return EnvironmentCapabilities(disable_internet=True)

    def _validate_definition(self) -> None:
        if not (self.environment_dir / "Dockerfile").is_file() and not self.task_env_config.docker_image:
            raise FileNotFoundError(f"{self.environment_dir / 'Dockerfile'} not found and no docker_image set")

    # ---- lifecycle ---------------------------------------------------------

    async def start(self, force_build: bool) -> None:
        await asyncio.to_thread(self._start, force_build)
        paths = EnvironmentPaths.for_os(self.os)
        await self.ensure_dirs([paths.agent_dir, paths.verifier_dir, paths.artifacts_dir])
        await self._upload_environment_dir_after_start()

    def _start(self, force_build: bool) -> None:
        tag = image_tag(self.environment_dir, self.task_env_config.docker_image)
        self.image_id = self._ensure_image(tag, force_build)
        if self._agent_software:
            self.image_id = agent_image.agent_layer(self._client, self.image_id, self._agent_software)
        cfg = self.task_env_config
        limits: dict = {}
        if cfg.cpus:
            limits["nano_cpus"] = int(float(cfg.cpus) * 1e9)
        if cfg.memory_mb:
            limits["mem_limit"] = f"{cfg.memory_mb}m"
            limits["memswap_limit"] = f"{cfg.memory_mb}m"
        if self._stopped.is_set():
            raise RuntimeError(f"The sandbox of {self.session_id} was stopped while it started")
        environment = self._startup_env()
        networking: dict = {"network_mode": "none"}
        if self._network_name:
            sandbox_network = network.SandboxNetwork.get(self._network_name, self._client)
            networking = {"network": sandbox_network.name}
            if self._egress_proxy:
                environment = {**environment, **egress.proxy_env(self._egress_proxy, [sandbox_network.gateway])}
        container = self._client.containers.create(
            self.image_id,
            command=["sleep", "infinity"],
            init=True,
            **networking,
            labels={SANDBOX_LABEL: self.session_id, TRIAL_DIR_LABEL: str(self.trial_paths.trial_dir.resolve())},
            environment=environment,
            working_dir=cfg.workdir or None,
            **limits,
        )
        with self._lifecycle:
            if self._stopped.is_set():
                container.remove(force=True)
                raise RuntimeError(f"The sandbox of {self.session_id} was stopped while it started")
            self._container = container
        container.start()
        if self._network_name:
            network.isolate(container)

    def _ensure_image(self, tag: str, force_build: bool) -> str:
        with _build_lock(tag):
            if not force_build:
                try:
                    return self._client.images.get(tag).id
                except ImageNotFound:
                    pass
            if not (self.environment_dir / "Dockerfile").is_file():
                raise SandboxBuildFailedError(
                    f"Image {tag} is not present locally and no registry is reachable: build it first.")
            try:
                image, _ = self._client.images.build(
                    path=str(self.environment_dir), tag=tag, rm=True, forcerm=True, pull=False,
                    labels={SANDBOX_LABEL: "environment"})
            except BuildError as e:
                tail = " | ".join(str(line.get("stream", line.get("error", ""))).strip()
                                  for line in list(e.build_log)[-5:] if line)
                raise SandboxBuildFailedError(f"The environment of {self.environment_name} does not "
                                              f"build: {e.msg}. Last build output: {tail}") from None
            except APIError as e:
                raise SandboxBuildFailedError(f"The environment of {self.environment_name} does not "
                                              f"build: {e.explanation}") from None
            return image.id

    async def stop(self, delete: bool) -> None:
        # Removed whatever `delete` says: no container may outlive its Trial.
        # The image stays, as the build cache of the next Trial.
        with self._lifecycle:
            self._stopped.set()
            container, self._container = self._container, None
        if container is not None:
            try:
                await asyncio.to_thread(container.remove, force=True)
            except NotFound:
                pass

    # ---- commands ------------------------------------------------------------

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        container = self._require_container()
        marker = uuid.uuid4().hex
        environment = {**(self._merge_env(env) or {}), "AMBER_EXEC_ID": marker}
        resolved_user = self._resolve_user(user)
        api = self._client.api
        exec_id = (await asyncio.to_thread(
            api.exec_create, container.id, ["bash", "-c", command], environment=environment,
            workdir=cwd or self.task_env_config.workdir or None,
            user="" if resolved_user is None else str(resolved_user)))["Id"]
        running = asyncio.ensure_future(asyncio.to_thread(api.exec_start, exec_id, demux=True))
        try:
            stdout, stderr = await asyncio.wait_for(asyncio.shield(running), timeout_sec)
        except (TimeoutError, asyncio.CancelledError) as stopped:
            await asyncio.shield(self._kill_marked(marker, running))
            if isinstance(stopped, asyncio.CancelledError):
                raise
            raise TimeoutError(f"Command timed out after {timeout_sec} s: {command[:200]}") from None
        code = (await asyncio.to_thread(api.exec_inspect, exec_id))["ExitCode"]
        return ExecResult(stdout=_text(stdout), stderr=_text(stderr), return_code=code)

    async def _kill_marked(self, marker: str, running: asyncio.Future) -> None:
        """Kill every process of one exec inside the container, then reap the exec stream."""
        script = (f"for p in /proc/[0-9]*; do grep -qzx 'AMBER_EXEC_ID={marker}' $p/environ 2>/dev/null "
                  "&& kill -9 ${p#/proc/} 2>/dev/null; done; true")
        container = self._container
        if container is not None:
            try:
                await asyncio.to_thread(container.exec_run, ["bash", "-c", script], user="root")
            except (APIError, NotFound):
                pass  # the container is already gone, and its processes with it
        try:
            await asyncio.wait_for(running, _KILL_GRACE_SEC)
        except Exception:  # noqa: BLE001 - the stream of a killed command may end any way
            pass

    # ---- files ----------------------------------------------------------------

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        target = PurePosixPath(target_path)
        data = _tar_of([(Path(source_path), target.name)])
        await self._put(str(target.parent), data)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        source = Path(source_dir)
        files = [(p, p.relative_to(source).as_posix()) for p in sorted(source.rglob("*"))]
        await self._put(target_dir, _tar_of(files))

    async def _put(self, target_dir: str, data: bytes) -> None:
        container = self._require_container()
        await self.exec(f"mkdir -p {shlex.quote(target_dir)}", user="root")
        await asyncio.to_thread(container.put_archive, target_dir, data)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        members = await self._get(source_path)
        with tarfile.open(fileobj=io.BytesIO(members)) as tar:
            member = next(m for m in tar.getmembers() if m.isfile())
            extracted = tar.extractfile(member)
            assert extracted is not None
            target = Path(target_path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(extracted.read())

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        data = await self._get(source_dir.rstrip("/") + "/.")
        target = Path(target_dir)
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(target, filter="data")

    async def _get(self, path: str) -> bytes:
        container = self._require_container()
        stream, _ = await asyncio.to_thread(container.get_archive, path)
        return b"".join(await asyncio.to_thread(list, stream))

    def _require_container(self):
        if self._container is None:
            raise RuntimeError(f"The sandbox of {self.session_id} is not running")
        return self._container


def remove_sandboxes_under(run_dir: Path) -> list[str]:
    """Remove the sandboxes of Trials under a cell's run folder that a killed run left behind."""
    client = docker_engine.connect()
    prefix = f"{run_dir.resolve()}/"
    removed = []
    for container in client.containers.list(all=True, filters={"label": TRIAL_DIR_LABEL}):
        if container.labels.get(TRIAL_DIR_LABEL, "").startswith(prefix):
            with contextlib.suppress(NotFound):
                container.remove(force=True)
            removed.append(container.id)
    return removed


def _tar_of(files: list[tuple[Path, str]]) -> bytes:
    """A tar of host files whose entries belong to root, keeping only the executable bit."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, name in files:
            info = tar.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isdir():
                tar.addfile(info)
            elif info.isfile():
                info.mode = 0o755 if info.mode & 0o100 else 0o644
                with path.open("rb") as f:
                    tar.addfile(info, f)
    return buf.getvalue()


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")
