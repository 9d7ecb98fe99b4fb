"""The embedded Amber: a Dagster instance in AMBER_HOME, its daemon, its warm worker and its webserver.

Started as plain processes (the warm worker, then `dagster-daemon run`, as `launcher.daemon`, forked by
the warm worker, which has Dagster imported already; `python -m server`, which serves the Dagster UI at
/ui) with DAGSTER_HOME and AMBER_HOME set, so every run they launch sees the same warehouse. One daemon
per instance: the UI uses the one that runs, or starts one and stops it again when it exits. The
instance is made from the dagster.yaml the settings name (the repository's
unless AMBER_DAGSTER_CONFIG says otherwise: deploy/ holds variants on
PostgreSQL with other run launchers), and the daemon and the UI load the code
location themselves or from a code server over gRPC (deploy/workspace.grpc.yaml).
This module spawns them; it never imports dagster.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from amber_pipeline import settings, worker_socket
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import workers
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.sandbox import engines
from amber_pipeline.warehouse import files

WARM_WORKER_START_SEC = 30
DAEMON_LOAD_SEC = 30  # how long a daemon may take to load its instance before it is taken as started
STOP_GRACE_S = 15.0  # how long a stopped process's own shutdown may take (the API's waits up to 10 s for requests)
# Amber's backend settings, which a run launcher passes to run workers by name (deploy/dagster.docker.yaml):
# one unset here passes as empty, which `settings` reads as its default, so a worker elsewhere never uses
# another catalog or store than the daemon's, and Dagster never refuses to launch for a name it cannot find.
WORKER_SETTINGS = ("AMBER_CATALOG_URL", "AMBER_STORAGE_URL", "AMBER_SANDBOX_HOSTS")


def environment(paths: AmberPaths) -> dict[str, str]:
    """The environment of the Dagster processes: the instance (made from the dagster.yaml the settings name)
    and warehouse of this AMBER_HOME."""
    paths.ensure()
    write_instance_config(paths.dagster_home / "dagster.yaml")
    return {**dict.fromkeys(WORKER_SETTINGS, ""), **os.environ,
            "DAGSTER_HOME": str(paths.dagster_home), "AMBER_HOME": str(paths.home),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HARBOR_TELEMETRY": "off",
            "DAGSTER_DAEMON_HEARTBEAT_TOLERANCE": "60"}


def write_instance_config(path: Path) -> None:
    """The instance's dagster.yaml: the one the settings name, with, when AMBER_SANDBOX_HOSTS lists engines, a
    limit per engine pool on the runs tagged with it (its slots), and room for all of them at once."""
    source = settings.dagster_config()
    if settings.sandbox_hosts_file() is None:
        shutil.copyfile(source, path)
        return
    import yaml  # only for engine pools: a plain instance's file is copied

    config = yaml.safe_load(source.read_text()) or {}
    runs = config.setdefault("concurrency", {}).setdefault("runs", {})
    pools = engines.pools()
    limits = [t for t in runs.get("tag_concurrency_limits", []) if t.get("key") != engines.POOL_TAG]
    runs["tag_concurrency_limits"] = limits + [{"key": engines.POOL_TAG, "value": pool, "limit": slots}
                                               for pool, slots in sorted(pools.items())]
    runs["max_concurrent_runs"] = max(int(runs.get("max_concurrent_runs", 0)), sum(pools.values()))
    files.write_text(path, f"# Made from {source} and AMBER_SANDBOX_HOSTS by `amber`; edit those.\n"
                     + yaml.safe_dump(config, sort_keys=False))


def _pid_file(paths: AmberPaths) -> Path:
    return paths.dagster_home / "daemon.pid"


def _worker_pid_file(paths: AmberPaths) -> Path:
    return paths.dagster_home / "warm-worker.pid"


def daemon_pid(paths: AmberPaths) -> int | None:
    return _alive(_pid_file(paths))


def announce_daemon(paths: AmberPaths) -> None:
    """Called by the daemon (`launcher.daemon`) once it has loaded its instance: its pid in the instance's pid file,
    which is what `start_daemon` waits for."""
    _pid_file(paths).write_text(str(os.getpid()))


def _alive(pid_file: Path) -> int | None:
    """The pid a pid file names, if that process still runs."""
    try:
        return _running(int(pid_file.read_text()))
    except (FileNotFoundError, ValueError):
        return None


def _running(pid: int) -> int | None:
    """``pid`` if that process still runs. A process this one started is reaped if it ended; one another process
    started (the warm worker's fork of the daemon) may have ended and not yet been reaped: it has ended all the same."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return None
    return pid if workers.runs(pid) else None


def start_daemon(paths: AmberPaths, workspace: Path | None = None) -> int:
    """Start the warm worker and the Dagster daemon in the background unless the daemon runs already; return the
    daemon's pid once it has loaded its instance. ``workspace`` says where the daemon finds the code location: loaded
    by itself (workspace.yaml), or served by a code server over gRPC (deploy/workspace.grpc.yaml); None: the one
    AMBER_DAGSTER_WORKSPACE names.

    The daemon is forked by the warm worker once its imports are done (a few seconds, once): a daemon started as a
    new interpreter spent 2.6 s of CPU importing and loading what the worker has loaded already. Without a warm worker
    (one that failed to start) the daemon starts as a new process, as it did before."""
    workspace = workspace or settings.dagster_workspace()
    pid = daemon_pid(paths)
    if pid is not None:
        return pid
    env = environment(paths)
    argv = ["run", "-w", str(workspace)]
    log = open(paths.dagster_home / "daemon.log", "ab")  # noqa: SIM115 - handed to the children
    _stop_group(_worker_pid_file(paths))  # a worker left by a daemon that was killed
    worker = subprocess.Popen([sys.executable, "-m", "launcher.warm_worker"], cwd=PROJECT_ROOT, env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    _worker_pid_file(paths).write_text(str(worker.pid))
    deadline = time.monotonic() + WARM_WORKER_START_SEC
    while (ping := worker_socket.ask(paths.dagster_home, {"op": "ping"})) is None and worker.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    forked = worker_socket.ask(paths.dagster_home, {"op": "run_daemon", "argv": argv}) if ping else None
    if forked and "pid" in forked:
        pid = int(forked["pid"])
    else:
        pid = subprocess.Popen([sys.executable, "-m", "launcher.daemon", *argv], cwd=PROJECT_ROOT, env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True).pid
    if not _loaded(paths, pid):  # a config it cannot load, say: its warm worker would serve nobody
        _stop_group(_worker_pid_file(paths))
        raise AmberError(f"The Dagster daemon stopped at once: see {paths.dagster_home / 'daemon.log'}.")
    return pid


def _loaded(paths: AmberPaths, pid: int) -> bool:
    """Whether the daemon ``pid`` has loaded its instance (`announce_daemon`), rather than stopped; one still loading
    after DAEMON_LOAD_SEC is taken as started, and its pid written here."""
    deadline = time.monotonic() + DAEMON_LOAD_SEC
    while daemon_pid(paths) != pid:
        if _running(pid) is None:
            return False
        if time.monotonic() > deadline:
            _pid_file(paths).write_text(str(pid))
            break
        time.sleep(0.05)
    return True


def stop_daemon(paths: AmberPaths) -> bool:
    """Stop the daemon and the warm worker. Cell runs in progress are processes of their own sessions: they
    finish, and the runs still queued start when a daemon runs again."""
    pid = daemon_pid(paths)
    _stop_group(_worker_pid_file(paths))
    if pid is None:
        return False
    _stop_group(_pid_file(paths))
    return True


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _stop_group(pid_file: Path) -> None:
    """Stop the process group a pid file names (`_end_group`) and remove the file."""
    pid = _alive(pid_file)
    if pid is not None:
        _end_group(pid, lambda: _alive(pid_file) is None)
    pid_file.unlink(missing_ok=True)


def _end_group(leader: int, ended: Callable[[], bool]) -> None:
    """Stop the process group of a process started in a session of its own: SIGTERM to all of it, then, once
    the leader has ended (or after STOP_GRACE_S, by force), SIGKILL to whatever of it is left. A code server Dagster
    starts as a new interpreter is in its parent's group and outlives it otherwise, until its heartbeat runs out (one
    the warm worker forked ends with the process that asked for it: `launcher.code_servers`)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while not ended() and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader, signal.SIGKILL)


def run_ui(paths: AmberPaths, host: str, port: int, workspace: Path | None = None) -> int:
    """The embedded default's server (`python -m server --local`: the web app at /, the Dagster UI at /ui, both
    the local login's without sign-in) in the foreground, with the instance's daemon: the one that runs already,
    or one started here (on the same workspace) and stopped when the server exits. The server's Dagster UI loads
    the code location from `workspace` too (None: the one AMBER_DAGSTER_WORKSPACE names)."""
    workspace = workspace or settings.dagster_workspace()
    return _with_daemon(paths, workspace, [sys.executable, "-m", "server", "--local", "--host", host,
                                           "--port", str(port)],
                        {"AMBER_DAGSTER_WORKSPACE": str(workspace)})


def run_api(paths: AmberPaths, host: str, port: int, public_url: str | None = None) -> int:
    """The hosted API (`server`: the operations behind sign-in, the Dagster UI under /ui) in the foreground,
    with the instance's daemon, as `run_ui` runs the local one. Its redirects name `public_url` (the URL people
    open it at; None: a redirect names its path alone), which `server` checks."""
    public = [] if public_url is None else ["--public-url", public_url]
    return _with_daemon(paths, settings.dagster_workspace(),
                        [sys.executable, "-m", "server", "--host", host, "--port", str(port), *public])


def _with_daemon(paths: AmberPaths, workspace: Path, command: list[str], env: dict[str, str] | None = None) -> int:
    """`command` in the foreground on the instance (with `env` over the instance's environment), with its daemon:
    the one that runs already, or one started here (on the same workspace) and stopped when the command exits.

    The command runs in a session of its own, so Ctrl-C or SIGTERM reaches this process alone, which stops the
    command with everything it started (the code server of its Dagster UI among them) before it returns.
    """
    started_here = daemon_pid(paths) is None
    signal.signal(signal.SIGTERM, _interrupt)  # stopped like Ctrl-C, so the daemon started here stops too
    process = None
    try:
        start_daemon(paths, workspace)
        process = subprocess.Popen(command, cwd=PROJECT_ROOT, env={**environment(paths), **(env or {})},
                                   start_new_session=True)
        return process.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        with _uninterrupted():
            if process is not None:
                running = process
                _end_group(running.pid, lambda: running.poll() is not None)
            if started_here:
                stop_daemon(paths)


@contextlib.contextmanager
def _uninterrupted() -> Iterator[None]:
    """Ctrl-C and SIGTERM ignored while stopping (which is bounded), so pressing Ctrl-C again leaves nothing
    half stopped."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
