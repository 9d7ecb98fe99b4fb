"""Benchmark Versions: immutable, content-addressed snapshots of a Benchmark's Tasks.

A Benchmark Version is named by a content hash that is the same on every
machine: it covers the sorted relative paths, the file bytes and the
executable bit of every file of every Task, and nothing else (no timestamps,
owners or other modes), so a checkout on another machine, or a copy with other
permissions, gives the same id. Amber copies the Tasks into a
content-addressed folder so that later edits of the source folder never change
a Benchmark Version that Rewards already belong to.

A Benchmark Version uploaded with a network allowlist (hosts its Environments
may reach) is another Version than the same Tasks without it, since what the
Tasks may do differs: the hosts, sorted, are hashed in with the files. Without
hosts the id is the files' hash alone, as it always was.

Reading a folder (`read_folder`) writes nothing, so a Quote that is refused
leaves no trace; its Tasks are copied to a hidden temporary folder of the
store and moved into place only once the Quote is made (`FolderTasks.staged`).
A crash in between leaves at most that hidden folder, which nothing reads.
What reading found (the Tasks and their hashes) is kept then too, as a summary
(`summaries.py`) keyed by the files' hash and the folder's fingerprint, as it
is for a stored Version once a Quote of it is made (`remember`), so the next
Quote does not read the same Tasks again.

With a remote result store (AMBER_STORAGE_URL, `warehouse/storage.py`) a
snapshot is copied up once it is moved into place, and a machine that lacks
it fetches it into the same folder of its own store when it opens it. The
store is that of the AMBER_HOME the snapshot folder (``store``) lies in.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from amber_pipeline.benchmarks import summaries
from amber_pipeline.benchmarks.tasks import TaskSpec, find_task_dirs, load_task
from amber_pipeline.errors import AmberError
from amber_pipeline.warehouse import storage, stores


@dataclass(frozen=True)
class BenchmarkVersion:
    id: str  # content hash, 64 hex
    name: str
    tasks: tuple[TaskSpec, ...]
    root: Path  # the immutable copy
    allowed_hosts: tuple[str, ...] = ()  # the network allowlist of its Environments, besides the model proxy

    def task_path(self, task: TaskSpec) -> Path:
        return self.root / task.folder

    def task_hash(self, task: TaskSpec) -> str:
        """The content hash of one Task's own files: the same Task in any Benchmark Version, whoever's, has the
        same one, so what its Trials taught (how long its Environment and Verifier take) follows it."""
        key = (self.id, task.folder)
        if key not in _task_hashes:
            folder = self.task_path(task)
            _task_hashes[key] = content_hash([folder], folder)
        return _task_hashes[key]


# A Version's files never change: each Task's hash is computed once per process, or read from its summary.
_task_hashes: dict[tuple[str, str], str] = {}


def content_hash(task_dirs: list[Path], base: Path) -> str:
    """Hash of sorted relative paths, file bytes and the executable bit only."""
    return hash_tasks(task_dirs, base)[0]


def hash_tasks(task_dirs: Sequence[Path], base: Path) -> tuple[str, list[str]]:
    """The content hash of the Tasks' files together (relative to ``base``) and of each Task's own (relative to its
    folder, `BenchmarkVersion.task_hash`), reading each file once."""
    entries: list[tuple[str, str, str]] = []
    task_hashes = []
    prefix = len(str(base)) + 1  # plain strings, not Paths: a 1,000-Task Benchmark walks 10,000 entries
    for task_dir in task_dirs:
        own: list[tuple[str, str, str]] = []
        own_prefix = len(str(task_dir)) + 1
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
                executable = "x" if info.st_mode & stat.S_IXUSR else "-"
                entries.append((path[prefix:].replace(os.sep, "/"), executable, digest))
                own.append((path[own_prefix:].replace(os.sep, "/"), executable, digest))
        task_hashes.append(_digest(own))
    return _digest(entries), task_hashes


def _digest(entries: list[tuple[str, str, str]]) -> str:
    h = hashlib.sha256()
    for rel, executable, digest in sorted(entries):
        h.update(f"{rel}\0{executable}\0{digest}\n".encode())
    return h.hexdigest()


def _copy_file(source: str, target: str) -> None:
    """A file's bytes and whether it is executable: all a Task keeps of a file (times and owners are not)."""
    shutil.copyfile(source, target)
    if os.stat(source).st_mode & stat.S_IXUSR:
        os.chmod(target, 0o755)


def version_id_of(files_hash: str, allowed_hosts: Sequence[str] = ()) -> str:
    """A Benchmark Version's id: its files' hash, with its network allowlist hashed in when it has one."""
    if not allowed_hosts:
        return files_hash
    return hashlib.sha256(f"{files_hash}\0allow:{','.join(sorted(allowed_hosts))}".encode()).hexdigest()


@dataclass(frozen=True)
class FolderTasks:
    """A Benchmark folder's Tasks, read and hashed but stored nowhere yet: what a Quote prices and checks before
    anything is written. Its Version's root is the stored copy when there is one, else the folder itself (the
    same bytes: the id is their hash)."""

    version: BenchmarkVersion
    source: Path  # the folder as given, resolved
    task_dirs: tuple[Path, ...]
    base: Path  # what Task folders are named relative to
    store: Path
    found: summaries.FolderReading | None = None  # what reading it found: kept once the Tasks are stored

    @contextlib.contextmanager
    def staged(self) -> Iterator[Callable[[], BenchmarkVersion]]:
        """Copy the Tasks to a hidden temporary folder of the store and give the step that moves them into place
        (once: the store is content-addressed) and returns the stored Version; what was not moved in is removed
        on leaving, so a refusal between the two leaves the store as it was. Tasks edited since they were read
        are refused, since the copy would not be the Version that was priced."""
        root = self.store / self.version.id
        if root.is_dir():
            yield lambda: self._remembered(replace(self.version, root=root))
            return
        staging = self.store / f".{self.version.id}.{uuid.uuid4().hex}.tmp"
        try:
            prefix = len(str(self.base)) + 1
            for d in self.task_dirs:
                shutil.copytree(d, staging / str(d)[prefix:], symlinks=False, copy_function=_copy_file)
            copied = [staging / str(d)[prefix:] for d in self.task_dirs]
            if version_id_of(content_hash(copied, staging), self.version.allowed_hosts) != self.version.id:
                raise AmberError(f"The Tasks in {self.source} changed while Amber read them: submit them again.")

            def move_in() -> BenchmarkVersion:
                try:
                    staging.rename(root)
                except OSError:
                    if not root.is_dir():  # another process stored the same version first: that is fine
                        raise
                _result_store(self.store).put_folder(root)
                return self._remembered(replace(self.version, root=root))

            yield move_in
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _remembered(self, stored: BenchmarkVersion) -> BenchmarkVersion:
        """The stored Version, its reading and the folder's fingerprint kept (`summaries.py`)."""
        if self.found is not None:
            summaries.keep_folder(summaries.root_of(self.store), self.found, stored.id)
        return stored


def read_folder(source: Path, store: Path, name: str | None = None, *, folders: Sequence[str] | None = None,
                allowed_hosts: Sequence[str] = ()) -> FolderTasks:
    """Load a Benchmark folder's Tasks and hash them, writing nothing (a folder unchanged since it was stored is
    known from its summary, `summaries.py`, and not read again); ``folders`` (relative to ``source``) picks the
    Task folders to take instead of every Task folder found."""
    source = source.resolve()
    if folders is None:
        task_dirs = find_task_dirs(source)
        base = source if task_dirs != [source] else source.parent
    else:
        task_dirs, base = [source / f for f in sorted(folders)], source
    found = _read_tasks(source, task_dirs, base, summaries.root_of(store))
    hosts = tuple(sorted(set(allowed_hosts)))
    version_id = version_id_of(found.files_hash, hosts)
    root = store / version_id
    version = BenchmarkVersion(id=version_id, name=name or source.name, tasks=found.reading.tasks,
                               root=root if root.is_dir() else base, allowed_hosts=hosts)
    _know_task_hashes(version, found.reading)
    return FolderTasks(version, source, tuple(task_dirs), base, store, found)


def _read_tasks(source: Path, task_dirs: list[Path], base: Path, kept: Path) -> summaries.FolderReading:
    """The hash of the Task folders' files and their reading: from the summaries when the folder's fingerprint is
    the one they were kept with, else read (Harbor's schema, limits, static checks) and hashed, with the
    fingerprint to keep when nothing changed while they were read."""
    key = summaries.folder_key(source, base, task_dirs)
    before = summaries.fingerprint(task_dirs, base)
    files_hash = summaries.files_hash_of(kept, key, before)
    known = summaries.reading(kept, files_hash) if files_hash is not None else None
    if files_hash is not None and known is not None and len(known.tasks) == len(task_dirs):
        return summaries.FolderReading(key, files_hash, known, before, kept=True)
    tasks = [load_task(d, base) for d in task_dirs]
    names = [t.name for t in tasks]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise AmberError(f"Task names must be unique in a Benchmark, but {', '.join(duplicates)} "
                         "appear more than once: rename the Task folders.")
    files_hash, task_hashes = hash_tasks(task_dirs, base)
    stable = before.settled and summaries.fingerprint(task_dirs, base) == before  # nothing changed while read
    return summaries.FolderReading(key, files_hash, summaries.Reading(tuple(tasks), tuple(task_hashes)),
                                   before if stable else None, kept=False)


def _know_task_hashes(version: BenchmarkVersion, read: summaries.Reading) -> None:
    for task, task_hash in zip(read.tasks, read.task_hashes, strict=True):
        _task_hashes[(version.id, task.folder)] = task_hash


def snapshot(source: Path, store: Path, name: str | None = None, *, folders: Sequence[str] | None = None,
             allowed_hosts: Sequence[str] = ()) -> BenchmarkVersion:
    """Load a Benchmark folder and copy it, once, into the content-addressed store (`read_folder`, then
    `FolderTasks.staged`)."""
    with read_folder(source, store, name, folders=folders, allowed_hosts=allowed_hosts).staged() as move_in:
        return move_in()


def open_snapshot(version_id: str, name: str, store: Path, allowed_hosts: Sequence[str] = ()) -> BenchmarkVersion:
    """Reopen a stored Benchmark Version by id (the copy is already checked)."""
    root = store / version_id
    if not _result_store(store).fetch_folder(root):
        raise AmberError(f"The files of Benchmark Version {version_id[:12]} are missing from {store}: "
                         "submit its folder again to restore them.")
    read = summaries.reading(summaries.root_of(store), version_id)
    if read is None:  # no summary yet (`remember` keeps one): read, and hashed when a Task's hash is asked for
        tasks = tuple(load_task(d, root) for d in find_task_dirs(root))
        return BenchmarkVersion(id=version_id, name=name, tasks=tasks, root=root, allowed_hosts=tuple(allowed_hosts))
    version = BenchmarkVersion(id=version_id, name=name, tasks=read.tasks, root=root,
                               allowed_hosts=tuple(allowed_hosts))
    _know_task_hashes(version, read)
    return version


def remember(version: BenchmarkVersion, store: Path) -> None:
    """Keep the reading of a stored Version (its Tasks and their hashes) if none is kept: a command that used it
    was carried out (a Quote made), so the next one opens it without reading its Tasks. Its files never change,
    so it never goes stale."""
    kept = summaries.root_of(store)
    if version.root != store / version.id or summaries.reading(kept, version.id) is not None:
        return
    summaries.keep_reading(kept, version.id, summaries.Reading(version.tasks,
                                                              tuple(version.task_hash(t) for t in version.tasks)))


def _result_store(snapshots: Path) -> storage.LocalStore:
    """The result store of the AMBER_HOME whose snapshot folder (``benchmarks/``) is ``snapshots``."""
    return stores.store(snapshots.parent)
