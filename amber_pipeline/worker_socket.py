"""The warm worker's socket: how the core asks for a started Job's cell runs, and how a run is started warm.

The warm worker (`launcher/warm_worker.py`) is a process of the embedded Amber
that has Dagster, Amber's definitions, Harbor and litellm imported once and
forks a fresh process for each request, so nothing waits for a cold
interpreter. Its clients are whoever started a Job (the CLI, the API and
`start_quote`, through :func:`start_cell_runs`: the one way to ask for cell
runs, which `launcher/cell_runs.py` makes) and the run launcher (run this
Dagster run). Both speak one JSON line each way over a Unix socket that only
its owner can reach; a missing worker is not an error, since the sensor and a
cold process do the same work more slowly.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path

from amber_pipeline.paths import AmberPaths

_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes


def socket_path(dagster_home: Path, name: str = "warm-worker.sock") -> Path:
    """A socket of one Dagster instance's (the warm worker's by default): in the instance's folder, or, when that
    path is too long for a Unix socket, in a folder of this user's under /tmp that only they can enter."""
    path = dagster_home.resolve() / name
    if len(str(path)) <= _MAX_SOCKET_PATH:
        return path
    folder = Path(f"/tmp/amber-{os.getuid()}")
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or folder.is_symlink():
        raise PermissionError(f"{folder} is not this user's alone: remove it and try again.")
    return folder / f"{hashlib.sha256(str(path).encode()).hexdigest()[:16]}.sock"


def bound(path: Path, kind: socket.SocketKind) -> socket.socket:
    """A Unix socket of ``kind`` bound at ``path`` (one left there by a process that was killed is replaced),
    which only its owner can reach: the warm worker's and the run queue's bell alike."""
    path.unlink(missing_ok=True)
    made = socket.socket(socket.AF_UNIX, kind)
    old_umask = os.umask(0o177)
    try:
        made.bind(str(path))
    finally:
        os.umask(old_umask)
    return made


def ask(dagster_home: Path, request: dict, timeout: float = 5.0) -> dict | None:
    """Send one request to the warm worker and return its reply; None when no worker answers."""
    path = socket_path(dagster_home)
    if not path.exists():
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(path))
            s.sendall(json.dumps(request).encode() + b"\n")
            with s.makefile("rb") as reply:
                line = reply.readline()
    except OSError:
        return None
    return json.loads(line) if line else None


def start_cell_runs(paths: AmberPaths, job_id: str) -> bool:
    """Ask for a started Job's cell runs now (not at the sensor's next tick); False if no warm worker listens."""
    return ask(paths.dagster_home, {"op": "start_job", "job_id": job_id}) is not None
