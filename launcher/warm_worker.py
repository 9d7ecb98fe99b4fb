"""The warm worker: Amber's code imported once, a forked process per Dagster run.

A cell run started as a new interpreter spends seconds importing Dagster,
Amber, Harbor and litellm before its first Trial. This process imports them
once, when the embedded Amber starts (`amber daemon start`, `amber ui`), then
waits on a Unix socket (`amber_pipeline.worker_socket`) and forks:

- ``{"op": "execute_run", "args": ...}`` from `WarmRunLauncher`: a child that
  runs the Dagster run exactly as `dagster api execute_run` would (and
  ``resume_run``, for a run whose worker died, as `dagster api resume_run`);
- ``{"op": "start_job", "job_id": ...}`` from whoever started a Job (the CLI,
  the API, `start_quote`): a child that makes the Job's cell runs
  (`cell_runs.launch`: the sensor's requests, submitted at once);
- ``{"op": "run_daemon", "argv": [...]}`` from `embedded.start_daemon`, once:
  the instance's Dagster daemon (`launcher.daemon`);
- ``{"op": "code_server", "argv": [...], ...}`` from the daemon and the Dagster
  UI: the code server Dagster would start as `dagster api grpc`, which ends
  with the process that asked for it (`launcher.code_servers`).

Each child starts a session of its own, so stopping this worker (its process
group) stops neither the daemon nor the runs in progress. The worker itself opens
no database and starts no thread, so every fork starts clean; it answers only
its own user, and replies with the child's pid without waiting for it.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from launcher import migration_scripts

# What a run or a launch imports, measured: Amber's definitions (Dagster, DuckDB); what their assets run, which the
# definitions import only where it runs (the cell run, its scores and plots, the evidence of Trials: Arrow and
# matplotlib); Harbor's trial engine and Agents, litellm (Terminus-2's client), and the Dagster machinery a run worker
# loads lazily (SQLite storage with SQLAlchemy and Alembic, 0.6 s; the run command; the in-process code location),
# and pandas, which DuckDB imports at a process's first query with parameters (0.3 s, in every run and every
# launch). Then what the instance loads when a child first makes it and asks for its parts (each fork paid it, every
# run and every launch): the instance's run coordinator and launcher (the coordinator imports dagster_graphql,
# 0.6 s), its compute log manager, its state storage (upath and fsspec), and the code server module the in-process
# code location uses.
PRELOAD = ("amber_pipeline.definitions", "amber_pipeline.jobs.cell_run", "amber_pipeline.analysis.plots",
           "amber_pipeline.analysis.sources", "harbor.trial.trial", "harbor.agents.factory", "litellm", "docker",
           "dagster._cli.api", "dagster._core.storage.sqlite_storage", "launcher.cell_runs", "pandas",
           "launcher.run_queue", "launcher.run_launcher", "dagster._core.instance.factory",
           "dagster._core.storage.local_compute_log_manager",
           "dagster._core.storage.defs_state.blob_storage_state_storage", "upath.implementations.local",
           "fsspec.implementations.local", "dagster._grpc.server", "dagster._core.workspace.autodiscovery")
_REQUEST_TIMEOUT_SEC = 5


def preload() -> float:
    """Import what every run needs, and read Dagster's migration scripts once for every fork; the seconds it
    took. What was imported is then frozen out of the garbage collector's sight: a fork's collections look only
    at what the run made, not again at the 700,000 objects of its imports that it never frees (a full collection
    over them took a third of a second, and a static cell of 1,000 Trials ran 28% faster without them), and the
    pages a collection would touch stay shared with this process. The collector is off while they are imported:
    its passes over objects that all stay found nothing to free, and cost 6% of the imports' CPU."""
    start = time.perf_counter()
    gc.disable()
    try:
        for module in PRELOAD:
            importlib.import_module(module)
        migration_scripts.read_sqlite_scripts()
    finally:
        gc.enable()
    gc.collect()
    gc.freeze()
    return time.perf_counter() - start


def execute_run(args_json: str) -> None:
    """What `dagster api execute_run ARGS` does, in this process (the command's function, not its CLI); then the
    run queue's bell, since the run's slot is free for a queued one."""
    from dagster._cli.api import execute_run_command

    assert execute_run_command.callback is not None
    with _ringing_at_the_end():
        execute_run_command.callback(args_json, None)


def resume_run(args_json: str) -> None:
    """What `dagster api resume_run ARGS` does, in this process: a run whose worker died goes on."""
    from dagster._cli.api import resume_run_command

    assert resume_run_command.callback is not None
    with _ringing_at_the_end():
        resume_run_command.callback(args_json)


@contextlib.contextmanager
def _ringing_at_the_end() -> Iterator[None]:
    """A run, then the run queue's bell however it ended: its slot is free for a queued run."""
    from launcher import run_queue

    try:
        yield
    finally:
        run_queue.ring(Path(os.environ["DAGSTER_HOME"]))


def start_job(job_id: str) -> None:
    import dagster as dg

    from amber_pipeline.paths import AmberPaths
    from amber_pipeline.warehouse.catalog import Warehouse
    from launcher import cell_runs

    with dg.DagsterInstance.get() as instance:
        cell_runs.launch(instance, Warehouse(AmberPaths.from_env()), job_id)


def run_daemon(argv: list[str]) -> None:
    """The instance's Dagster daemon (`launcher.daemon`), from what this process has imported: Dagster's, and the
    code location's (which its code server, forked here too, serves)."""
    from launcher import daemon

    daemon.run(argv)


def code_server(argv: list[str], env: dict[str, str], cwd: str, owner: int) -> None:
    """The code server Dagster asked for in process ``owner`` (the daemon, a Dagster UI), from what this process has
    imported (`launcher.code_servers`)."""
    from launcher import code_servers

    code_servers.serve(argv, env, cwd, owner)


def _fork(work: Callable[[], None], *sockets: socket.socket) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        for s in sockets:
            s.close()
        os.setsid()  # not in the worker's process group: stopping the daemon does not stop this run
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as in a new process, not the worker's (serve)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        work()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001 - a child must never return into the server loop
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _same_user(conn: socket.socket) -> bool:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return uid == os.getuid()


def _handle(conn: socket.socket, server: socket.socket) -> None:
    conn.settimeout(_REQUEST_TIMEOUT_SEC)
    if not _same_user(conn):
        return
    with conn.makefile("rb") as lines:
        request = json.loads(lines.readline() or b"{}")
    op = request.get("op")
    if op == "execute_run":
        pid = _fork(lambda: execute_run(request["args"]), server, conn)
    elif op == "resume_run":
        pid = _fork(lambda: resume_run(request["args"]), server, conn)
    elif op == "start_job":
        pid = _fork(lambda: start_job(str(request["job_id"])), server, conn)
    elif op == "run_daemon":
        pid = _fork(lambda: run_daemon([str(arg) for arg in request["argv"]]), server, conn)
    elif op == "code_server":
        pid = _fork(lambda: code_server([str(arg) for arg in request["argv"]],
                                        {str(k): str(v) for k, v in request["env"].items()}, str(request["cwd"]),
                                        int(request["owner"])), server, conn)
    elif op == "ping":
        pid = os.getpid()
    else:
        conn.sendall(json.dumps({"error": f"unknown op {op!r}"}).encode() + b"\n")
        return
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def serve(path: Path) -> None:
    from amber_pipeline import worker_socket

    server = worker_socket.bound(path, socket.SOCK_STREAM)
    server.listen(16)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        while not stopping:
            _reap()
            ready, _, _ = select.select([server], [], [], 1.0)
            if not ready:
                continue
            conn, _ = server.accept()
            with conn:
                try:
                    _handle(conn, server)
                except (OSError, ValueError, KeyError) as exc:
                    print(f"warm worker: a request failed: {exc}", file=sys.stderr, flush=True)
    finally:
        server.close()
        path.unlink(missing_ok=True)


def main() -> None:
    from amber_pipeline import worker_socket

    seconds = preload()
    path = worker_socket.socket_path(Path(os.environ["DAGSTER_HOME"]))
    print(f"warm worker: imports took {seconds:.1f} s; listening on {path}", file=sys.stderr, flush=True)
    serve(path)


if __name__ == "__main__":
    main()
