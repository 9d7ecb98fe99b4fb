"""Benchmark Versions: immutable, content-addressed snapshots of a Benchmark's Tasks.

A Benchmark Version is named by a content hash that is the same on every
machine: it covers the sorted relative paths, the file bytes and the
executable bit of every file of every Task, and nothing else (no timestamps,
owners or other modes), so a checkout on another machine, or a copy with other
permissions, gives the same id. Amber copies the Tasks into a
content-addressed folder so that later edits of the source folder never change
a Benchmark Version that Rewards already belong to.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from amber_pipeline.benchmarks.tasks import TaskSpec, find_task_dirs, load_task
from amber_pipeline.errors import AmberError


@dataclass(frozen=True)
class BenchmarkVersion:
    id: str  # content hash, 64 hex
    name: str
    tasks: tuple[TaskSpec, ...]
    root: Path  # the immutable copy

    def task_path(self, task: TaskSpec) -> Path:
        return self.root / task.folder


def content_hash(task_dirs: list[Path], base: Path) -> str:
    """Hash of sorted relative paths, file bytes and the executable bit only."""
    entries: list[tuple[str, str, str]] = []
    prefix = len(str(base)) + 1  # plain strings, not Paths: a 1,000-Task Benchmark walks 10,000 entries
    for task_dir in task_dirs:
        for folder, dirs, files in os.walk(task_dir):
            for name in (*dirs, *files):
                path = os.path.join(folder, name)
                info = os.lstat(path)
                if stat.S_ISLNK(info.st_mode):
                    raise AmberError(f"{path} is a symbolic link: Tasks may hold only files and folders.")
                if not stat.S_ISREG(info.st_mode):
                    continue
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                entries.append((path[prefix:].replace(os.sep, "/"), "x" if info.st_mode & stat.S_IXUSR else "-",
                                digest))
    h = hashlib.sha256()
    for rel, executable, digest in sorted(entries):
        h.update(f"{rel}\0{executable}\0{digest}\n".encode())
    return h.hexdigest()


def _copy_file(source: str, target: str) -> None:
    """A file's bytes and whether it is executable: all a Task keeps of a file (times and owners are not)."""
    shutil.copyfile(source, target)
    if os.stat(source).st_mode & stat.S_IXUSR:
        os.chmod(target, 0o755)


def snapshot(source: Path, store: Path, name: str | None = None) -> BenchmarkVersion:
    """Load a Benchmark folder and copy it, once, into the content-addressed store."""
    source = source.resolve()
    task_dirs = find_task_dirs(source)
    base = source if task_dirs != [source] else source.parent
    tasks = [load_task(d, base) for d in task_dirs]
    names = [t.name for t in tasks]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise AmberError(f"Task names must be unique in a Benchmark, but {', '.join(duplicates)} "
                         "appear more than once: rename the Task folders.")
    version_id = content_hash(task_dirs, base)
    root = store / version_id
    if not root.exists():
        staging = store / f".{version_id}.{uuid.uuid4().hex}.tmp"
        try:
            prefix = len(str(base)) + 1
            for d in task_dirs:
                shutil.copytree(d, staging / str(d)[prefix:], symlinks=False, copy_function=_copy_file)
            staging.rename(root)
        except OSError:
            if not root.is_dir():  # another process stored the same version first: that is fine
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return BenchmarkVersion(id=version_id, name=name or source.name, tasks=tuple(tasks), root=root)


def open_snapshot(version_id: str, name: str, store: Path) -> BenchmarkVersion:
    """Reopen a stored Benchmark Version by id (the copy is already checked)."""
    root = store / version_id
    if not root.is_dir():
        raise AmberError(f"The files of Benchmark Version {version_id[:12]} are missing from {store}: "
                         "submit its folder again to restore them.")
    tasks = tuple(load_task(d, root) for d in find_task_dirs(root))
    return BenchmarkVersion(id=version_id, name=name, tasks=tasks, root=root)
