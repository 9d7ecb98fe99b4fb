"""What is known of a Benchmark's Tasks without reading them again: small summaries kept between commands.

A Quote needs each Task's limits and content hash (by which its history is found), and for a sandboxed Task the
tag of its image. Deriving them reads every task.toml through Harbor's schema and hashes every file, about 1 ms a
Task: a second for 1,000 Tasks, on every Quote. All of it is a function of the Tasks' files and of the code that
reads them, so it is kept in small JSON files under ``AMBER_HOME/cache/summaries/``, each keyed by exactly what it
is made from:

- **a Version's reading** (``versions/``, `reading`): its Tasks as `TaskSpec`s and each Task's content hash, keyed
  by the hash of its files (a Benchmark Version's id) and `reading_rules` (the source of the modules that read a
  Task, and Harbor's installed version). A Version's files never change, so it never goes stale; other rules are
  another key;
- **a folder's fingerprint** (``folders/``, `Fingerprint`): the hash a Benchmark folder's files had when last
  read, with each entry's relative path, type and mode, size, modification and change times and inode. A folder
  with the same fingerprint holds the same files, so it is the same Version, and nothing is read or hashed. Any
  edit of a file sets its change time (which no user can set back), and an added, removed or renamed entry changes
  the list. A fingerprint is kept only when it is the same before and after the files were read, and no entry
  changed within `RACY_SEC` of it (git's "racy" rule: an edit in the same clock tick would leave it equal), so
  such a folder is simply read again next time;
- **facts of a layer above** (`kept`, `keep`): the image tags a Quote asks Docker about (`jobs/quotes.py`), keyed
  by the Version and the rules that derive them.

Reading writes nothing: a summary is kept when the command that needed it is carried out (a Quote made, Tasks
stored: `FolderTasks.staged`, `versions.remember`), so a refused command leaves no trace, and a folder Amber
refuses is refused again, in the same sentence, on every try. A summary that cannot be read (missing, torn,
written by other code) is derived again, and rewritten atomically (a reader sees a whole file or none) at the next
command carried out; one that cannot be written is derived again next time.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amber_pipeline.benchmarks.static import StaticChecks
from amber_pipeline.benchmarks.tasks import TaskSpec
from amber_pipeline.warehouse import files

RACY_SEC = 2.0
_HERE = Path(__file__).parent
# The modules whose code decides how a Task folder reads: a change to any of them is a new key for every reading.
_READERS = ("tasks.py", "limits.py", "static.py", "versions.py", "summaries.py", "intake/task_refusals.py")


def root_of(store: Path) -> Path:
    """The summaries of the AMBER_HOME whose Benchmark store (``benchmarks/``) is ``store``."""
    return store.parent / "cache" / "summaries"


# ---- keys ------------------------------------------------------------------------------------------------------

def rules(sources: Sequence[Path], packages: Sequence[str] = ()) -> str:
    """The digest of the code a summary is derived by: these source files' bytes and these packages' installed
    versions."""
    h = hashlib.sha256()
    for source in sources:
        h.update(source.read_bytes())
        h.update(b"\0")
    for package in packages:
        h.update(f"{package}={installed(package)}\0".encode())
    return h.hexdigest()


@functools.cache
def reading_rules() -> str:
    """The digest of the code that reads a Task folder: Amber's readers and Harbor's schema."""
    return rules([_HERE / name for name in _READERS], ["harbor"])


@functools.cache
def installed(package: str) -> str:
    """Which build of an installed package this process imports, found without importing it: its distribution's
    metadata folder name (which names its version), else its module file's size and time."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return "absent"
    origin = Path(spec.origin)
    site = origin.parent.parent
    prefix = f"{package.replace('-', '_').lower()}-"
    found = sorted(n for n in os.listdir(site) if n.lower().startswith(prefix) and n.endswith(".dist-info"))
    if found:
        return ",".join(found)
    info = origin.stat()
    return f"{origin}:{info.st_size}:{info.st_mtime_ns}"


def _name(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


# ---- storage -------------------------------------------------------------------------------------------------

def kept(root: Path, kind: str, key: str) -> Any | None:
    """The summary of ``kind`` kept under ``key``, or None when there is none that reads."""
    try:
        return json.loads((root / kind / f"{key}.json").read_bytes())
    except (OSError, ValueError):
        return None


def keep(root: Path, kind: str, key: str, data: Any) -> None:
    """Keep a summary, atomically; one that cannot be written is derived again next time."""
    try:
        files.write_text(root / kind / f"{key}.json", json.dumps(data, separators=(",", ":")))
    except OSError:
        pass


# ---- a Version's reading -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reading:
    """A Benchmark Version's Tasks as read, and each one's content hash, in the same order."""

    tasks: tuple[TaskSpec, ...]
    task_hashes: tuple[str, ...]


def reading(root: Path, files_hash: str) -> Reading | None:
    """The kept reading of the Version whose files hash to ``files_hash``, or None."""
    data = kept(root, "versions", _name(files_hash, reading_rules()))
    if not isinstance(data, dict):
        return None
    try:
        read = Reading(tuple(_spec(t) for t in data["tasks"]), tuple(str(h) for h in data["task_hashes"]))
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    return read if len(read.tasks) == len(read.task_hashes) else None


def keep_reading(root: Path, files_hash: str, read: Reading) -> None:
    keep(root, "versions", _name(files_hash, reading_rules()),
         {"tasks": [dataclasses.asdict(t) for t in read.tasks], "task_hashes": list(read.task_hashes)})


def _spec(data: dict[str, Any]) -> TaskSpec:
    static = data.pop("static")
    fields: dict[str, Any] = {} if static is None else {k: tuple(v) if isinstance(v, list) else v
                                                          for k, v in static.items()}
    checks = None if static is None else StaticChecks(**fields)
    return TaskSpec(**data, static=checks)


# ---- a folder's fingerprint ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fingerprint:
    """What a folder's Task files are on disk, without their bytes (see the module's docstring)."""

    digest: str
    settled: bool  # no entry changed within RACY_SEC of it


def fingerprint(task_dirs: Sequence[Path], base: Path) -> Fingerprint:
    """The fingerprint of the Task folders ``task_dirs`` (named relative to ``base``)."""
    taken = time.time_ns()
    entries: list[str] = []
    newest = 0
    prefix = len(str(base)) + 1
    pending = [str(d) for d in task_dirs]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as found:
            for entry in found:
                info = entry.stat(follow_symlinks=False)
                entries.append(f"{entry.path[prefix:]}\0{info.st_mode:o}\0{info.st_size}\0{info.st_mtime_ns}\0"
                               f"{info.st_ctime_ns}\0{info.st_ino}")
                newest = max(newest, info.st_mtime_ns, info.st_ctime_ns)
                if stat.S_ISDIR(info.st_mode):
                    pending.append(entry.path)
    entries.sort()
    digest = hashlib.sha256("\n".join([str(base), *entries]).encode()).hexdigest()
    return Fingerprint(digest, newest < taken - int(RACY_SEC * 1e9))


def folder_key(source: Path, base: Path, task_dirs: Sequence[Path]) -> str:
    """The key of a folder's fingerprint: where it is, which Task folders were taken, and the reading rules."""
    return _name(str(source), str(base), *map(str, task_dirs), reading_rules())


def files_hash_of(root: Path, key: str, found: Fingerprint) -> str | None:
    """The hash the folder's files had when its fingerprint was ``found``, or None when it was not kept or
    differs."""
    data = kept(root, "folders", key)
    if isinstance(data, dict) and data.get("fingerprint") == found.digest and isinstance(data.get("files"), str):
        return data["files"]
    return None


@dataclass(frozen=True)
class FolderReading:
    """What reading a folder found: the hash of its files and their reading, and what is new to keep once its
    Tasks are stored (`keep_folder`): its fingerprint (None when unsettled or changed while read: not kept) and
    whether the reading itself came from a summary."""

    key: str
    files_hash: str
    reading: Reading
    fingerprint: Fingerprint | None
    kept: bool


def keep_folder(root: Path, found: FolderReading, version_id: str) -> None:
    """Keep what reading a folder found, under its files' hash and its Version's id (`reading`), with the folder's
    fingerprint; nothing for a reading that may have changed while it was read."""
    if found.kept or found.fingerprint is None:
        return
    keep_reading(root, found.files_hash, found.reading)
    if version_id != found.files_hash:
        keep_reading(root, version_id, found.reading)
    keep(root, "folders", found.key, {"fingerprint": found.fingerprint.digest, "files": found.files_hash})
