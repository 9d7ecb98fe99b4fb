"""Code servers forked by the warm worker, where Dagster would start new interpreters.

Dagster starts a code server for each code location it loads itself (the daemon's, and the Dagster UI's of `amber
ui` and `amber serve`) as `python -m dagster api grpc ...`: a new interpreter, which imports Dagster and Amber's
definitions again (1.7 s of CPU by the time it answers; a fork takes 0.2 s). The instance's warm worker
(`launcher.warm_worker`) has them imported: in a process that called :func:`install`, a code server Dagster starts
on this interpreter is asked of the warm worker, which forks it to run the same command. Without a warm worker that
answers, it starts as Dagster starts it.

Dagster watches a code server through its `subprocess.Popen`. A forked one is the warm worker's child, not the
caller's: `ForkedProcess` answers for it from /proc. And a code server Dagster starts is in its caller's process
group, so it ends with it; a forked one ends when the process that asked for it ends (:func:`end_with`). It writes
its log where the warm worker does (the instance's daemon.log).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dagster._grpc import server as grpc_server

from amber_pipeline import worker_socket
from amber_pipeline.jobs import workers

DAGSTER = ["-m", "dagster"]  # what follows the interpreter in a command of Dagster's
NAME = b"dagster-grpc"  # a forked code server's name in `ps -o comm` and /proc/PID/comm (the warm worker's command
# line is still its own)
ENDED = 1  # the return code a forked server reads as once it ended: its parent (the warm worker) reaps it, not us
_STOP_GRACE_SEC = 5.0  # from its owner's end to a hard exit, should the server not stop at SIGTERM


class ForkedProcess:
    """What Dagster asks of a code server's `subprocess.Popen`, for one the warm worker forked."""

    def __init__(self, pid: int, args: Sequence[str]) -> None:
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        identity = workers.of_process(pid)  # its start time too: a pid is reused once its process is gone
        self._identity = identity if workers.runs(pid) else None  # None: it ended before it was seen

    def poll(self) -> int | None:
        if self.returncode is None and (self._identity is None or workers.is_dead(self._identity)):
            self.returncode = ENDED
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.05)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def install(dagster_home: Path) -> None:
    """From now on, the code servers Dagster starts in this process are forked by ``dagster_home``'s warm worker
    when it answers. Installing twice changes nothing."""
    spawn = grpc_server.open_ipc_subprocess
    if getattr(spawn, "_amber_forks", False):
        return

    def open_ipc_subprocess(parts: Sequence[str], **kwargs: Any) -> Any:
        return _forked(dagster_home, parts, kwargs.get("env"), kwargs.get("cwd")) or spawn(list(parts), **kwargs)

    open_ipc_subprocess._amber_forks = True  # type: ignore[attr-defined]
    grpc_server.open_ipc_subprocess = open_ipc_subprocess


def _forked(dagster_home: Path, parts: Sequence[str], env: dict[str, str] | None,
            cwd: str | None) -> ForkedProcess | None:
    """The code server of command ``parts``, forked by the warm worker; None when the command is another one (a
    code location on another interpreter, say) or no warm worker answers."""
    argv = list(parts[1 + len(DAGSTER):])
    if list(parts[:1 + len(DAGSTER)]) != [sys.executable, *DAGSTER] or argv[:2] != ["api", "grpc"]:
        return None
    reply = worker_socket.ask(dagster_home, {"op": "code_server", "argv": argv, "cwd": cwd or os.getcwd(),
                                             "env": dict(os.environ if env is None else env), "owner": os.getpid()})
    if not reply or "pid" not in reply:
        return None
    return ForkedProcess(int(reply["pid"]), parts)


def serve(argv: list[str], env: dict[str, str], cwd: str, owner: int) -> None:
    """`dagster ARGV` (`api grpc ...`) in this process, a fork of the warm worker, in ``owner``'s environment and
    folder, until ``owner`` ends."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    with contextlib.suppress(OSError):  # a name is a convenience: without libc's prctl, the server runs all the same
        ctypes.CDLL(None).prctl(15, NAME, 0, 0, 0)  # PR_SET_NAME
    end_with(owner)
    from dagster._cli import ENV_PREFIX, cli

    cli(args=argv, prog_name="dagster", auto_envvar_prefix=ENV_PREFIX)


def end_with(owner: int) -> None:
    """End this process when ``owner`` ends (now, if it has): SIGTERM, which Dagster's commands take as Ctrl-C,
    then a hard exit should it not stop within a few seconds."""
    try:
        handle = os.pidfd_open(owner)
    except ProcessLookupError:
        os._exit(ENDED)

    def watch() -> None:
        select.select([handle], [], [])
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(_STOP_GRACE_SEC)
        os._exit(ENDED)

    threading.Thread(target=watch, name="amber-owner-watch", daemon=True).start()
