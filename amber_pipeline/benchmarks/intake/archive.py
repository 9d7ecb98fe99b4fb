"""Archive: the first gate of an upload, unpacking an untrusted .tar.gz, .tar or .zip of Tasks safely.

An uploaded archive is hostile until proven otherwise, so nothing here trusts
it: the format is read from the file's first bytes, not its name; every
entry's path and kind are checked (only files and folders, relative paths
with forward slashes, no "..", no duplicates) and the whole archive is
refused at its first bad entry; limits (compressed size, unpacked bytes,
files, folders, Tasks) are enforced while unpacking, on the bytes actually
written, so a compression bomb stops at the limit instead of filling the disk.

The archive is read twice. The first pass checks every entry's metadata (a
tar's members, a zip's central directory) and writes nothing, so almost every
refusal leaves the disk untouched. The second pass writes each file itself,
streamed in chunks with ``O_EXCL | O_NOFOLLOW``, into a staging folder next to
the destination, and renames it into place only when everything passed. Any
failure, Ctrl-C included, removes the staging folder: nothing of a refused
archive stays on disk. Only the executable bit survives from the archive
(files 0o755 or 0o644, folders 0o755); owners and times are never applied.

Layouts: the Tasks (folders holding a task.toml) may sit at the archive's
root, in one folder of it, or be a single Task's files directly at the root;
`Unpacked.root` is the folder whose Task folders are the Benchmark's Tasks (a
single Task at the root is put in a folder named after the archive). A
task.toml inside a Task folder is one of that Task's files, not a Task.

The format readers, one `Entry` per tar member or zip entry whatever the
format, are `archive_entries`; the sentences a refusal is said in are
`archive_refusals`. This module holds the rules, the limits and the writing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from amber_pipeline.benchmarks.intake.archive_entries import CHUNK, READ_ERRORS, Entry, Format, detect_format, entries
from amber_pipeline.benchmarks.intake.archive_refusals import CONTROL, bad, refused, shown, shown_size
from amber_pipeline.benchmarks.intake.archive_refusals import ArchiveRejected as ArchiveRejected
from amber_pipeline.errors import AmberError

TASK_FILE = "task.toml"
MAX_COMPONENT = 255  # bytes in one path component (Linux NAME_MAX)
MAX_PATH = 1024  # bytes in a whole path: far more than a Task needs, well under PATH_MAX with the staging prefix
FILE_MODE, EXEC_MODE, FOLDER_MODE = 0o644, 0o755, 0o755
DRIVE = re.compile(r"^[A-Za-z]:")
TWICE = "appears twice (each path may appear once)"


@dataclass(frozen=True)
class Limits:
    """What one upload may hold. Sizes are binary: 1 MB = 2**20 bytes. A task.toml is bounded where it is read
    (`tasks.MAX_TASK_FILE_BYTES`), for an upload and a local folder alike."""

    compressed_bytes: int = 100 << 20  # the archive file itself, checked before it is read
    unpacked_bytes: int = 1 << 30  # file contents, counted as they are written
    files: int = 50_000
    folders: int = 50_000  # a bound on inodes too: deep paths make many folders from few files
    tasks: int = 1_000


LIMITS = Limits()


@dataclass(frozen=True)
class Unpacked:
    """An unpacked archive: `root` is the folder whose Task folders are the Benchmark's Tasks."""

    root: Path
    n_files: int
    n_bytes: int
    n_tasks: int


def unpack(archive: Path, dest: Path, limits: Limits = LIMITS, *, as_is: bool = False) -> Unpacked:
    """Unpack an untrusted archive of Tasks into `dest` (which must not exist; its parent must), or refuse it
    whole with `ArchiveRejected`, leaving nothing on disk. `as_is`: every entry where it is, whatever Tasks it
    holds where (a Benchmark folder sent whole, which the reader of folders then checks as it would here)."""
    try:
        st = archive.stat()
    except FileNotFoundError:
        raise AmberError(f"No archive at {archive}: give a .tar.gz, .tar or .zip file of Task folders.") from None
    if not stat.S_ISREG(st.st_mode):
        raise AmberError(f"{archive} is not a file: give a .tar.gz, .tar or .zip file of Task folders.")
    if os.path.lexists(dest):
        raise AmberError(f"{dest} already exists: unpack the archive into a new folder.")
    if st.st_size > limits.compressed_bytes:
        raise refused(f"it is {shown_size(st.st_size, exact=False)}, more than the "
                      f"{shown_size(limits.compressed_bytes)} limit for one upload (split the Tasks into several "
                      "archives)")
    fmt = detect_format(archive)
    checked = _Tally(limits, declared=True)
    _scan(archive, fmt, checked, None)
    tasks = checked.outermost_tasks()
    prefix, root = ((), ()) if as_is else _layout(tasks, archive)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".unpacking", dir=dest.parent))
    try:
        written = _Tally(limits, declared=False)
        _scan(archive, fmt, written, _Writer(staging, prefix))
        if written.tasks != checked.tasks:
            raise refused("it changed while it was being unpacked (upload it again)")
        os.chmod(staging, FOLDER_MODE)
        if os.path.lexists(dest):
            raise AmberError(f"{dest} already exists: unpack the archive into a new folder.")
        os.rename(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Unpacked(root=dest.joinpath(*root), n_files=len(written.files), n_bytes=written.n_bytes,
                    n_tasks=len(tasks))


# --- the scan: every rule, counted; writing in the second pass ----------------------------------------------------

@dataclass
class _Tally:
    limits: Limits
    declared: bool  # count declared sizes (the checking pass), else the bytes written
    files: set[tuple[str, ...]] = field(default_factory=set)
    folders: set[tuple[str, ...]] = field(default_factory=set)  # made, named or implied by a file's path
    named_folders: set[tuple[str, ...]] = field(default_factory=set)  # entries of the archive
    tasks: set[tuple[str, ...]] = field(default_factory=set)  # folders holding a task.toml
    n_bytes: int = 0

    def add_bytes(self, n: int) -> None:
        self.n_bytes += n
        if self.n_bytes > self.limits.unpacked_bytes:
            raise refused(f"it unpacks to more than {shown_size(self.limits.unpacked_bytes)} (the limit)")

    def outermost_tasks(self) -> set[tuple[str, ...]]:
        return {t for t in self.tasks if not any(t[:i] in self.tasks for i in range(len(t)))}


class _Writer:
    """Writes checked entries under the staging folder; it creates every folder itself and follows no link."""

    def __init__(self, staging: Path, prefix: tuple[str, ...]) -> None:
        self.base = staging.joinpath(*prefix)
        self.made: set[tuple[str, ...]] = set()
        if prefix:
            self.folder(())

    def folder(self, parts: tuple[str, ...]) -> None:
        for i in range(len(parts) + 1):
            if parts[:i] not in self.made:
                path = self.base.joinpath(*parts[:i])
                if parts[:i] or not path.exists():
                    os.mkdir(path, FOLDER_MODE)
                os.chmod(path, FOLDER_MODE)  # exact, whatever the umask
                self.made.add(parts[:i])

    def file(self, parts: tuple[str, ...], entry: Entry, tally: _Tally) -> None:
        self.folder(parts[:-1])
        fd = os.open(self.base.joinpath(*parts),
                     os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        try:
            os.fchmod(fd, EXEC_MODE if entry.executable else FILE_MODE)
            with _reading(entry.name):
                src = entry.open()
            with src:
                while True:
                    with _reading(entry.name):
                        chunk = src.read(CHUNK)
                    if not chunk:
                        break
                    tally.add_bytes(len(chunk))  # before writing: never more than the limit on disk
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view):]
        finally:
            os.close(fd)


@contextlib.contextmanager
def _reading(name: str | None) -> Iterator[None]:
    """A malformed archive's reader errors, as one sentence (naming the entry when there is one)."""
    try:
        yield
    except READ_ERRORS:
        at = f" at entry {shown(name)}" if name else ""
        raise refused(f"it is corrupt or truncated{at} (make the archive again)") from None


def _scan(archive: Path, fmt: Format, tally: _Tally, writer: _Writer | None) -> None:
    """Check every entry in order, refusing at the first bad one; with a writer, also write them."""
    last: str | None = None
    most = tally.limits.files + tally.limits.folders + 1  # + 1: an entry for the root folder
    with contextlib.closing(entries(archive, fmt, most)) as stream:
        while True:
            with _reading(last):
                entry = next(stream, None)
            if entry is None:
                return
            last = entry.name
            parts = _check(entry, tally)
            if writer is None or (not parts and entry.kind == "folder"):
                continue
            if entry.kind == "folder":
                writer.folder(parts)
            else:
                writer.file(parts, entry, tally)


def _check(entry: Entry, tally: _Tally) -> tuple[str, ...]:
    """The entry's path as folder names, once every rule passed; its declared size is counted only when
    checking (writing counts the bytes written)."""
    name, limits = entry.name, tally.limits
    parts = _path(name)
    if entry.kind not in ("file", "folder"):
        raise bad(name, entry.kind)
    if entry.kind == "folder":
        if parts in tally.named_folders:
            raise bad(name, TWICE)
        if parts in tally.files:
            raise bad(name, "is a folder where an earlier entry has a file")
        tally.named_folders.add(parts)
        _add_folders(parts, name, tally)
        return parts
    if not parts:
        raise bad(name, "is a file with no name")
    if parts in tally.files:
        raise bad(name, TWICE)
    if parts in tally.folders:
        raise bad(name, "is a file where an earlier entry has a folder")
    _add_folders(parts[:-1], name, tally)
    tally.files.add(parts)
    if len(tally.files) > limits.files:
        raise refused(f"it holds more than {limits.files:,} files (the limit)")
    if parts[-1] == TASK_FILE:
        tally.tasks.add(parts[:-1])
        if len(tally.tasks) > limits.tasks:
            raise refused(f"it holds more than {limits.tasks:,} Tasks (the limit)")
    if tally.declared:
        tally.add_bytes(entry.size)
    return parts


def _add_folders(parts: tuple[str, ...], name: str, tally: _Tally) -> None:
    for i in range(len(parts) + 1):
        if parts[:i] in tally.files:
            raise bad(name, f"is inside {shown('/'.join(parts[:i]))}, which is a file")
        if parts[:i] not in tally.folders:
            tally.folders.add(parts[:i])
            if len(tally.folders) > tally.limits.folders + 1:  # + 1: the root
                raise refused(f"it makes more than {tally.limits.folders:,} folders (the limit)")


def _path(name: str) -> tuple[str, ...]:
    """A name's folder names, "." and empty ones dropped, or the rule it breaks."""
    if not name:
        raise refused("an entry has an empty name")
    if CONTROL.search(name):
        raise bad(name, "has a control character in its name")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise bad(name, "has a name that is not UTF-8") from None
    if name.startswith("/") or DRIVE.match(name):
        raise bad(name, "has an absolute path (use paths relative to the archive's root)")
    if "\\" in name:
        raise bad(name, "has a backslash in its path (use forward slashes)")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise bad(name, 'has a ".." in its path')
    if len(encoded) > MAX_PATH:
        raise bad(name, f"has a path longer than {MAX_PATH:,} bytes")
    if any(len(p.encode("utf-8")) > MAX_COMPONENT for p in parts):
        raise bad(name, f"has a name longer than {MAX_COMPONENT} bytes")
    return parts


# --- layout -------------------------------------------------------------------------------------------------------

def _layout(tasks: set[tuple[str, ...]], archive: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the folder every entry is written under, the Benchmark's root), both relative to the destination."""
    if not tasks:
        raise refused(f"it holds no {TASK_FILE} (each Task is a folder with a {TASK_FILE})")
    if tasks == {()}:
        return (_stem(archive),), ()
    parents = sorted({t[:-1] for t in tasks})
    if len(parents) > 1:
        a, b = ("/".join(p) or "the archive's root" for p in parents[:2])
        raise refused(f'its Tasks are in more than one folder ("{a}" and "{b}"); put every Task folder in one '
                      "folder")
    return (), parents[0]


def _stem(archive: Path) -> str:
    """A folder name for a single Task at the archive's root: the archive's name without its suffixes."""
    name = archive.name
    for suffix in (".tar.gz", ".tgz", ".tar", ".zip"):
        if name.lower().endswith(suffix):
            name = name[:-len(suffix)]
            break
    else:
        name = Path(name).stem
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-") or "task"
