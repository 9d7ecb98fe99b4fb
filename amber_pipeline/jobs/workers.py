"""Which process runs a cell, so a process on the same machine can tell that it died.

A cell run records its worker when it starts: the host, the pid, and the
pid's start time (from /proc, in clock ticks since boot), because a pid alone
is reused once its process is gone. On the same host a worker whose pid is
gone, or belongs to a process started at another time, is dead; a worker on
another host cannot be judged from here (the Dagster sensor judges those by
their runs' status).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def this_process() -> str:
    """``host/pid/start``: the worker identity of the calling process."""
    return of_process(os.getpid())


def of_process(pid: int) -> str:
    """``host/pid/start``: the worker identity of a process of this host (that runs now)."""
    return f"{socket.gethostname()}/{pid}/{_started(pid)}"


def is_dead(worker: str | None) -> bool:
    """True when the worker ran on this host and its process no longer exists; False when alive or unknown."""
    if not worker:
        return False
    host, _, rest = worker.partition("/")
    pid, _, started = rest.partition("/")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return _started(int(pid)) != started


def runs(pid: int) -> bool:
    """True when a process of this host has this pid and has not finished (a zombie, not yet reaped, has)."""
    return _started(pid) != ""


def _started(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" when there is no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ")".
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] == "Z":  # a zombie has finished: its parent has not reaped it yet
        return ""
    return fields[19]  # field 22 of the whole line: starttime
