"""Files shared across processes: atomic writes (a reader sees a whole file or none, and a failed write
leaves nothing behind), OS file locks, and files of secrets only their owner may read."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

from amber_pipeline.errors import AmberError


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary name beside ``path`` that replaces it once the block has written it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text)


@contextlib.contextmanager
def locked(path: Path, mode: int) -> Iterator[None]:
    """Hold an OS lock on ``path`` (``fcntl.LOCK_SH`` shared, ``fcntl.LOCK_EX`` exclusive) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def private_text(path: Path) -> str | None:
    """The text of a file that holds a secret (an API key, a token), or None if there is none; refused in one
    sentence when others may read it, as ssh refuses such a key: the secret may have leaked, and the user should
    know before it is used."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AmberError(f"{path} can be read by other users: run `chmod 600 {path}` so only you can read it.")
    return path.read_text()
