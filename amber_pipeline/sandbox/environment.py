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
- it runs on the Docker engine named by kwarg `amber_engine` (one of
  `engines.engines()`: a unix socket, tcp:// with mutual TLS, or ssh://), or
  on DOCKER_HOST / the local socket without it. Nothing in a sandbox relies on
  a path of the host that runs Amber (no bind mounts; files go in and out
  through the engine's API, the image is built from a build context sent the
  same way), so any engine runs it alike. An engine that lacks the Task's
  image builds it (its base images must be on that engine). Sandbox networks
  need the engine's host (its firewall and namespaces), so only an engine on a
  unix socket takes `amber_network`; on another host's engine a sandbox
  reaches the proxies through a relay instead (kwarg `amber_relay`, the ports
  to carry; `sandbox.relay`), and has no other network;
- containers are always removed by force when the Trial stops, so none
  outlives its Trial (`sleep infinity` ignores SIGTERM, so a polite stop
  would only wait out its timeout);
- when a command times out or its phase is cancelled, its processes inside the
  container are killed, found by a marker in their environment (which every
  child inherits), so nothing of a timed-out phase keeps running;
- a timeout is known by our own clock, never inferred from exit code 124,
  which a user command may return on its own;
- uploaded files are owned by root, whatever their owner on the host, and
  keep of their mode only whether they are executable (755 or 644);
- its environment is an allowlist: the Task's `[environment].env`, filled as if
  the server had no environment (`task_env`), the egress proxy's variables and
  what each command is given; never a value of the server's (nor the proxies
  of the Docker client's configuration, which the Docker SDK would add).

A Trial's round trips to the engine are what it costs over the bare container
lifecycle, and each one that copies files or runs a process costs about as much
as another (Docker 20.10 starts a helper process for every copy). So, within
the rules above:

- files go in by one put at /, whose entries carry their whole path: Docker
  makes the missing folders on the way (root's, mode 755, as `mkdir -p`);
- Harbor's log folders (mode 777, as its `ensure_dirs` makes them) are known
  empty when the image has none of them. They then go in with the first copy
  into the sandbox, their mtime at the epoch, or just before the first command
  or copy out, whichever comes first (no command of the Trial runs before, so
  none misses them); until then the sandbox answers for them as for empty
  folders. A folder that went in so and still has that mtime is still empty
  (making, removing or renaming anything in it moves the mtime to now), so
  copying it out, or an empty folder into it, takes a stat and no copy. Only a
  command that sets the mtime back on purpose could hide what it put there, as
  deleting it could;
- what a stat tells (a HEAD request: no process) is not asked of a command:
  `is_dir` and `is_file` as root, and Harbor's bookkeeping commands as root
  when the files show they would change nothing (`rm -f --` of paths none of
  which is there, `chmod +x` of files everyone may already run).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import shlex
import tarfile
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path, PurePosixPath

import docker
from docker.errors import APIError, BuildError, ImageNotFound, NotFound
from harbor.environments.base import BaseEnvironment, ExecResult, SandboxBuildFailedError
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.environments.definition import environment_content_hash
from harbor.models.trial.paths import EnvironmentPaths

from amber_pipeline.errors import AmberError
from amber_pipeline.sandbox import agent_image, docker_engine, egress, engines, network, relay, task_env

IMAGE_REPOSITORY = "amber-env"
SANDBOX_LABEL = "org.amber.sandbox"
TRIAL_DIR_LABEL = "org.amber.trial_dir"  # the Trial's folder: unique per Job, cell and Trial
_KILL_GRACE_SEC = 10
_ENGINE_TIMEOUT_SEC = 120  # as docker_engine.connect gives its clients
_ROOT = ("root", "0", 0)
# Go's os.FileMode, as Docker's path stat gives it: the file type in high bits, permissions in the low ones
_GO_MODE_DIR, _GO_MODE_SYMLINK = 1 << 31, 1 << 27
_GO_MODE_TYPE = _GO_MODE_DIR | _GO_MODE_SYMLINK | 1 << 26 | 1 << 25 | 1 << 24 | 1 << 21 | 1 << 19
_EVERYONE_RUNS = 0o111
_EPOCH = "1970-01-01T00:00:00Z"
_UNKNOWN: dict = {"mode": None}  # a path Docker could not stat (one through a file, say): only a command tells
_build_locks: dict[str, threading.Lock] = {}
_build_locks_guard = threading.Lock()
_api_versions: dict[str, str] = {}  # by engine URL: what the first sandbox of the process learnt


def image_tag(environment_dir: Path, docker_image: str | None = None) -> str:
    """The tag of a Task's environment image: its content hash."""
    if docker_image and not (environment_dir / "Dockerfile").is_file():
        return docker_image
    return f"{IMAGE_REPOSITORY}:{environment_content_hash(environment_dir, docker_image=docker_image)}"


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


def _build_lock(tag: str) -> threading.Lock:
    with _build_locks_guard:
        return _build_locks.setdefault(tag, threading.Lock())


class AmberSandbox(BaseEnvironment):
    """One Docker container per Trial, driven through the Docker SDK."""

    _persistent_env: dict[str, str]  # Harbor's: what every command of the sandbox gets

    def __init__(self, *args, amber_network: str | None = None, amber_egress_proxy: str | None = None,
                 amber_agent_software: str | None = None, amber_engine: str | None = None,
                 amber_relay: str | None = None, **kwargs):
        if amber_egress_proxy and not (amber_network or amber_relay):
            raise ValueError("amber_egress_proxy needs amber_network or amber_relay: the sandbox has no network")
        self.engine = engines.named(amber_engine) if amber_engine else None
        if amber_network and self.engine is not None and not self.engine.local:
            raise AmberError(f"The sandbox network {amber_network} needs an engine on this host, and "
                             f"{self.engine.name!r} is at {self.engine.url}: run networked Trials on a unix:// "
                             "engine.")
        self._network_name = amber_network
        self._relay_ports = [int(p) for p in amber_relay.split(",")] if amber_relay else []
        self._relay: relay.Relay | None = None
        self._egress_proxy = amber_egress_proxy
        self._agent_software = amber_agent_software
        self._client = _connect(self.engine)
        self._container = None
        # Harbor's log folders still to go in (until then there and empty), and those that went in empty with
        # their mtime at the epoch; the lock keeps one copy in at a time, so a folder goes in once.
        self._pending: tuple[PurePosixPath, ...] = ()
        self._made_empty: set[PurePosixPath] = set()
        self._copy_in = threading.Lock()
        # stop() may run while start() is still building in its thread (Harbor
        # cancels a start that times out): whoever comes second removes the container.
        self._stopped = threading.Event()
        self._lifecycle = threading.Lock()
        self.image_id: str | None = None
        # Seconds this sandbox spent getting its image ready: building it (and an installed Agent's layer), or
        # waiting for another Trial's build of it; milliseconds when it was built already. The Trial's row keeps
        # it apart from the rest of the environment's time, since a Quote adds a build only where none was made.
        self.image_sec = 0.0
        super().__init__(*args, **kwargs)

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
        if not self._pending:  # the image has some of them: made as Harbor makes them, keeping what is there
            await self.ensure_dirs(self._log_dirs())
        await self._upload_environment_dir_after_start()

    def _log_dirs(self) -> list[PurePosixPath]:
        paths = EnvironmentPaths.for_os(self.os)
        return [PurePosixPath(d) for d in (paths.agent_dir, paths.verifier_dir, paths.artifacts_dir)]

    def _defer_log_dirs(self) -> None:
        """Harbor's log folders are to go in with the first copy in when the image has none of them."""
        dirs = self._log_dirs()
        if all(stat is None for stat in self._stats([str(d) for d in dirs])):
            self._made_empty.update(dirs)
            self._pending = tuple(dirs)

    def _start(self, force_build: bool) -> None:
        tag = image_tag(self.environment_dir, self.task_env_config.docker_image)
        began = time.perf_counter()
        self.image_id = self._ensure_image(tag, force_build)
        if self._agent_software:
            self.image_id = agent_image.agent_layer(self._client, self.image_id, self._agent_software)
        self.image_sec = time.perf_counter() - began
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
        elif self._relay_ports:
            networking = {"network_mode": self._start_relay().network_mode}
            if self._egress_proxy:
                environment = {**environment, **egress.proxy_env(self._egress_proxy)}
        container = self._client.containers.create(
            self.image_id,
            command=["sleep", "infinity"],
            init=True,
            **networking,
            labels={SANDBOX_LABEL: self.session_id, TRIAL_DIR_LABEL: str(self.trial_paths.trial_dir.resolve())},
            environment=environment,
            use_config_proxy=False,
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
        self._defer_log_dirs()

    def _start_relay(self) -> relay.Relay:
        """The relay whose network namespace the sandbox joins (`sandbox.relay`), found by the Trial's folder as
        its sandbox is, so a sweep of a killed run removes both."""
        made = relay.Relay.start(self._client, self._relay_ports,
                                 {relay.RELAY_LABEL: self.session_id,
                                  TRIAL_DIR_LABEL: str(self.trial_paths.trial_dir.resolve())})
        with self._lifecycle:
            if self._stopped.is_set():
                made.close()
                raise RuntimeError(f"The sandbox of {self.session_id} was stopped while it started")
            self._relay = made
        return made

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
            if self.engine is not None and self.engine.ssh is not None:
                # An ssh client holds a login (a thread here, a session there) until closed, and no GC closes it.
                self._client.close()

    # ---- commands ------------------------------------------------------------

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        container = self._require_container()
        answer = await self._answer_from_files(command, user)
        if answer is not None:
            return answer
        if self._pending:
            await asyncio.to_thread(self._settle)
        marker = uuid.uuid4().hex
        environment = {**(self._merge_env(env) or {}), "AMBER_EXEC_ID": marker}
        resolved_user = self._resolve_user(user)
        api = self._client.api
        exec_id = (await asyncio.to_thread(
            api.exec_create, container.id, ["bash", "-c", command], environment=environment,
            workdir=cwd or self.task_env_config.workdir or None,
            user="" if resolved_user is None else str(resolved_user)))["Id"]
        running = asyncio.ensure_future(asyncio.to_thread(_run_exec, api, exec_id))
        try:
            stdout, stderr, code = await asyncio.wait_for(asyncio.shield(running), timeout_sec)
        except (TimeoutError, asyncio.CancelledError) as stopped:
            await asyncio.shield(self._kill_marked(marker, running))
            if isinstance(stopped, asyncio.CancelledError):
                raise
            raise TimeoutError(f"Command timed out after {timeout_sec} s: {command[:200]}") from None
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

    async def _answer_from_files(self, command: str, user: str | int | None) -> ExecResult | None:
        """What one of Harbor's bookkeeping commands would return, when the container's files show that it would
        change nothing; None when it must run. One stat per path instead of a process."""
        if not command.startswith(("rm -f -- ", "chmod +x ")) or self._resolve_user(user) not in _ROOT:
            return None
        words = _plain_words(command) or []
        paths = words[3:] if words[:3] == ["rm", "-f", "--"] else words[2:] if words[:2] == ["chmod", "+x"] else []
        if not paths or not all(PurePosixPath(p).is_absolute() for p in paths):
            return None
        stats = await asyncio.to_thread(self._stats, paths)
        if words[0] == "rm" and all(s is None for s in stats):
            return ExecResult(return_code=0)  # rm -f of nothing says nothing
        if words[0] == "chmod" and all(_runnable_by_all(s) for s in stats):
            return ExecResult(return_code=0)
        return None

    async def is_dir(self, path: str, user: str | int | None = None) -> bool:
        kind = await self._kind_as_seen_by(path, user)
        return await super().is_dir(path, user=user) if kind == "ask" else kind == "dir"

    async def is_file(self, path: str, user: str | int | None = None) -> bool:
        kind = await self._kind_as_seen_by(path, user)
        return await super().is_file(path, user=user) if kind == "ask" else kind == "file"

    async def _kind_as_seen_by(self, path: str, user: str | int | None) -> str | None:
        """What a path is, as `test` run by `user` would see it, from a stat; "ask" when only running `test` can
        tell: a relative path hangs on the command's folder, another user on permissions, a symlink on its target."""
        if not PurePosixPath(path).is_absolute() or self._resolve_user(user) not in _ROOT:
            return "ask"
        kind = _kind(await asyncio.to_thread(self._stat, path))
        return "ask" if kind in ("symlink", "unknown") else kind

    def _stat(self, path: str) -> dict | None:
        return self._stats([path])[0]

    def _stats(self, paths: Sequence[str]) -> list[dict | None]:
        """Docker's stat of paths in the container, None where nothing is there: a HEAD request each, no helper
        process. Raises NotFound when it is the container that is gone, as an exec would."""
        container = self._require_container()
        api = self._client.api
        stats: list[dict | None] = []
        for path in paths:
            wanted = PurePosixPath(path)
            if wanted in self._pending:
                stats.append({"name": wanted.name, "mode": _GO_MODE_DIR | 0o777, "mtime": _EPOCH})
                continue
            if any(d.is_relative_to(wanted) for d in self._pending):
                self._settle()  # a folder above them: what it holds is to change
            response = api.head(api._url("/containers/{0}/archive", container.id), params={"path": path})
            stats.append(_stat_of(response))
        if None in stats:
            api.inspect_container(container.id)  # a 404 of the container itself raises here
        return stats

    # ---- files ----------------------------------------------------------------

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        target = PurePosixPath("/", target_path)
        await asyncio.to_thread(self._put, [(Path(source_path), target)])

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        source, target = Path(source_dir), PurePosixPath("/", target_dir)
        files = [(p, target / p.relative_to(source).as_posix()) for p in sorted(source.rglob("*"))]
        if files:
            await asyncio.to_thread(self._put, files)
        else:
            await self._make_dir(target)

    async def _make_dir(self, path: PurePosixPath) -> None:
        """`mkdir -p` of an empty upload's folder: nothing when it is there, else one put of it."""
        kind = _kind(await asyncio.to_thread(self._stat, str(path)))
        if kind is None:
            await asyncio.to_thread(self._put, [], [_dir_entry(path, mode=0o755, mtime=time.time())])
        elif kind != "dir":  # Docker follows a symlink, and refuses what is no folder, as before
            await asyncio.to_thread(self._require_container().put_archive, str(path), _tar([]))

    def _put(self, files: list[tuple[Path, PurePosixPath]], dirs: Sequence[tarfile.TarInfo] = ()) -> None:
        """Copy host files and empty folders in by one put at /, with the log folders still to go in, if any."""
        with self._copy_in:
            pending = self._pending
            filled = {p for _, p in files} | {PurePosixPath("/", d.name) for d in dirs}
            self._made_empty -= {d for d in pending if any(p.is_relative_to(d) and p != d for p in filled)}
            entries = [_dir_entry(d, mode=0o777, mtime=0) for d in pending] + list(dirs)
            if files or entries:
                self._require_container().put_archive("/", _tar(files, entries))
            self._pending = ()

    def _settle(self) -> None:
        """Put in the log folders still pending, before anything that could tell they are not there yet."""
        if self._pending:
            self._put([])

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
        target = Path(target_dir)
        if await self._still_empty(source_dir):
            target.mkdir(parents=True, exist_ok=True)
            return
        data = await self._get(source_dir.rstrip("/") + "/.")
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(target, filter="data")

    async def _still_empty(self, path: str) -> bool:
        """Whether a log folder that went in empty still is: its mtime is still the epoch."""
        if PurePosixPath(path) not in self._made_empty:
            return False
        stat = await asyncio.to_thread(self._stat, path)
        return stat is not None and _kind(stat) == "dir" and datetime.fromisoformat(stat["mtime"]).timestamp() == 0

    async def _get(self, path: str) -> bytes:
        container = self._require_container()
        if self._pending:
            await asyncio.to_thread(self._settle)
        stream, _ = await asyncio.to_thread(container.get_archive, path)
        return b"".join(await asyncio.to_thread(list, stream))

    def _require_container(self):
        if self._container is None:
            raise RuntimeError(f"The sandbox of {self.session_id} is not running")
        return self._container


def _run_exec(api, exec_id: str) -> tuple[bytes | None, bytes | None, int]:
    """Start an exec and wait for its output, then its exit code: one thread for both."""
    stdout, stderr = api.exec_start(exec_id, demux=True)
    return stdout, stderr, api.exec_inspect(exec_id)["ExitCode"]


def sandboxes_under(folder: Path, engine: engines.Engine | None = None) -> dict[str, list]:
    """The sandboxes of Trials whose folders lie under ``folder`` (a cell's run folder, or every run's), by
    their Trial folder relative to it, on ``engine`` (None: DOCKER_HOST or the local socket)."""
    prefix = f"{folder.resolve()}/"
    found: dict[str, list] = {}
    client = docker_engine.connect(engine)
    for container in client.containers.list(all=True, filters={"label": TRIAL_DIR_LABEL}, ignore_removed=True):
        trial_dir = container.labels.get(TRIAL_DIR_LABEL, "")
        if trial_dir.startswith(prefix):
            found.setdefault(trial_dir[len(prefix):], []).append(container)
    return found


def remove_sandboxes(containers: list) -> list[str]:
    """Remove sandboxes (gone already is fine); their ids."""
    for container in containers:
        with contextlib.suppress(NotFound):
            container.remove(force=True)
    return [c.id for c in containers]


def remove_sandboxes_under(run_dir: Path, engine: engines.Engine | None = None) -> list[str]:
    """Remove the sandboxes of Trials under a cell's run folder that a killed run left behind on ``engine``."""
    return remove_sandboxes([c for found in sandboxes_under(run_dir, engine).values() for c in found])


def _tar(files: Sequence[tuple[Path, PurePosixPath]], dirs: Sequence[tarfile.TarInfo] = ()) -> bytes:
    """A tar to put in at /: empty folders, then host files whose entries belong to root, keeping only the
    executable bit."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info in dirs:
            tar.addfile(info)
        for path, target in files:
            info = tar.gettarinfo(str(path), arcname=_from_root(target))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isdir():
                tar.addfile(info)
            elif info.isfile():
                info.mode = 0o755 if info.mode & 0o100 else 0o644
                with path.open("rb") as f:
                    tar.addfile(info, f)
    return buf.getvalue()


def _dir_entry(path: PurePosixPath, *, mode: int, mtime: float) -> tarfile.TarInfo:
    """An empty folder belonging to root, as an entry of a tar put in at /."""
    info = tarfile.TarInfo(_from_root(path))
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, mtime
    info.uname = info.gname = "root"
    return info


def _from_root(path: PurePosixPath) -> str:
    """A container path as the name of an entry of a tar put in at /."""
    return PurePosixPath("/", path).relative_to("/").as_posix()


def _stat_of(response) -> dict | None:
    """The stat in the answer to a HEAD of a container path; None when nothing is there."""
    if response.status_code == 404:
        return None
    header = response.headers.get("X-Docker-Container-Path-Stat")
    return json.loads(base64.b64decode(header)) if response.ok and header else _UNKNOWN


def _kind(stat: dict | None) -> str | None:
    """"dir", "file", "symlink", "other" or "unknown" from a Docker path stat; None when nothing is there."""
    if stat is None:
        return None
    if stat["mode"] is None:
        return "unknown"
    kind = stat["mode"] & _GO_MODE_TYPE
    return {0: "file", _GO_MODE_DIR: "dir", _GO_MODE_SYMLINK: "symlink"}.get(kind, "other")


def _runnable_by_all(stat: dict | None) -> bool:
    """A regular file that `chmod +x` would not change."""
    return stat is not None and _kind(stat) == "file" and stat["mode"] & _EVERYONE_RUNS == _EVERYONE_RUNS


def _plain_words(command: str) -> list[str] | None:
    """A command's words when the shell would do nothing with it but split them (no expansion, no operator)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    return words if shlex.join(words) == command else None


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")
