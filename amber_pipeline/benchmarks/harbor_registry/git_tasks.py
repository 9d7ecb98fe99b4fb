"""Git Tasks: the Tasks of a registry dataset that live in git, exported at their pinned commits into a cache.

A registry Task in git is a folder of a repository at a commit. Fetching it
is the slow, fallible part of adding a public Benchmark, so it is kept apart
from reading the registry (`harbor_registry`), which checks every pin before
anything here runs. Why it works this way:

- The content is exactly the blobs of the pinned tree: files are written from
  ``git cat-file --batch`` (no checkout, so no ``.gitattributes`` filter,
  ``export-ignore`` or line-ending conversion can change a byte), and a file
  keeps only whether it is executable, as Benchmark Versions do. A symbolic
  link or a submodule in a Task is refused: a Task holds files and folders.
- Fetching is cached under ``cache``: one bare, blobless clone per repository
  URL (``git/<sha256 of url>/``), kept and topped up with just the commits it
  lacks, and one exported copy per pinned Task
  (``tasks/<commit>/<sha256 of path>/``). A pinned Task never changes, so a
  later fetch of it copies from the cache without running git at all, even
  when the repository has gone. Both are written to a temporary name and
  renamed, so an interrupted fetch never leaves a half-written cache entry.
- Pinned commits get a ref (``refs/amber/<commit>``) in the clone, so a
  ``git gc`` never prunes a commit that was fetched by id.
- Blobs of a blobless clone are fetched in one request per repository before
  they are read, rather than one lazy request per file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, NoReturn

from amber_pipeline.errors import AmberError

GIT_TIMEOUT_SEC = 600.0  # per git command: a first clone of a large repository over a slow link
SYMLINK_MODE, GITLINK_MODE, EXECUTABLE_MODE = "120000", "160000", "100755"


@dataclass(frozen=True)
class GitTask:
    """One Task to fetch: a folder of a git repository at a pinned commit."""

    name: str
    url: str
    commit: str  # a full commit id, lower case
    path: str  # repository-relative, as the registry gives it (checked with `repo_path` before fetching)


def export_tasks(label: str, tasks: Sequence[GitTask], cache: Path) -> dict[str, Path]:
    """Each Task's cached export under ``cache``, by Task name, exporting those missing with one clone per
    repository URL. ``label`` names the dataset in errors."""
    sources: dict[str, Path] = {}
    missing: dict[str, list[GitTask]] = {}
    for task in tasks:
        sources[task.name] = _cached(cache, task)
        if not sources[task.name].is_dir():
            missing.setdefault(task.url, []).append(task)
    for url, group in missing.items():
        _GitExport(label, url, group, cache).run()
    return sources


def repo_path(path: str) -> str | None:
    """A repository-relative path in normal form ("" for the repository's root), or None if it leaves it."""
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or "\\" in path:
        return None
    return "" if str(pure) == "." else str(pure)


def _cached(cache: Path, task: GitTask) -> Path:
    return cache / "tasks" / task.commit / _sha256(repo_path(task.path) or ".")


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class _Entry:
    """A file of a Task in a git tree: its path below the Task folder, blob id and whether it is executable."""

    rel: str
    oid: str
    executable: bool


class _GitExport:
    """Exports the uncached Tasks of one repository URL into the Task cache, with one clone for them all."""

    def __init__(self, label: str, url: str, tasks: list[GitTask], cache: Path) -> None:
        self.label, self.url, self.tasks, self.cache = label, url, tasks, cache
        self.repo = cache / "git" / _sha256(url)

    def run(self) -> None:
        self._clone()
        commits: set[str] = set()
        for task in self.tasks:
            if task.commit not in commits:
                self._ensure_commit(task)
                commits.add(task.commit)
        listings = {task.name: self._list(task) for task in self.tasks}
        if self._git(["config", "--get", "remote.origin.promisor"], None, check=False).stdout.strip() == b"true":
            blobs = "".join(f"{e.oid}\n" for entries in listings.values() for e in entries)
            self._git(["-c", "fetch.negotiationAlgorithm=noop", "fetch", "--quiet", "--no-tags",
                       "--no-write-fetch-head", "--recurse-submodules=no", "--filter=blob:none", "--stdin",
                       "origin"], self.tasks[0], "git could not fetch the Tasks' files", stdin=blobs.encode())
        for task in self.tasks:
            self._export(task, listings[task.name])

    def _clone(self) -> None:
        if (self.repo / "HEAD").is_file():
            return
        self.repo.parent.mkdir(parents=True, exist_ok=True)
        staging = self.repo.parent / f".{self.repo.name}.{uuid.uuid4().hex}.tmp"
        try:
            self._git(["clone", "--quiet", "--bare", "--no-tags", "--filter=blob:none", "--", self.url,
                       str(staging)], self.tasks[0], "git could not clone the repository", in_repo=False)
            try:
                staging.rename(self.repo)
            except OSError:
                if not (self.repo / "HEAD").is_file():  # else another process cloned it first: use theirs
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _ensure_commit(self, task: GitTask) -> None:
        commit = task.commit
        # --missing makes rev-list answer from the clone alone; other commands would lazily fetch a missing commit
        present = self._git(["rev-list", "--missing=allow-any", "-n1", commit, "--"], None, check=False)
        if present.returncode == 0:
            self._git(["update-ref", f"refs/amber/{commit}", commit], task, "git could not keep the commit")
        else:
            self._git(["fetch", "--quiet", "--no-tags", "origin", f"{commit}:refs/amber/{commit}"], task,
                      "git could not fetch that commit")

    def _list(self, task: GitTask) -> list[_Entry]:
        commit, path = task.commit, repo_path(task.path) or ""
        out = self._git(["ls-tree", "-r", "-z", "--full-tree", commit, *(["--", path] if path else [])], task,
                        "git could not list the Task's files").stdout
        where = f"Task {task.name} of {self.label} ({self.url} at {commit})"
        entries = []
        for record in out.split(b"\0"):
            if not record:
                continue
            info, _, raw_name = record.partition(b"\t")
            mode, _, oid = info.decode().split(" ")
            name = os.fsdecode(raw_name)
            if path and not name.startswith(f"{path}/"):
                if name == path:
                    raise AmberError(f"{where} has the path {path}, which is a file, not a Task folder: "
                                     "fix its path in the registry.")
                continue
            rel = name[len(path) + 1:] if path else name
            if mode == SYMLINK_MODE:
                raise AmberError(f"{where} holds a symbolic link, {rel}: Tasks may hold only files and folders, "
                                 "so the registry must point to another commit or Task.")
            if mode == GITLINK_MODE:
                raise AmberError(f"{where} holds a git submodule, {rel}: Tasks may hold only files and folders, "
                                 "so the registry must point to another commit or Task.")
            if any(part in ("", ".", "..") for part in rel.split("/")):
                raise AmberError(f"{where} holds the unsafe path {rel!r}: the registry must point to another "
                                 "commit or Task.")
            entries.append(_Entry(rel=rel, oid=oid, executable=mode == EXECUTABLE_MODE))
        if not entries:
            raise AmberError(f"{where} cannot be fetched: the repository has no folder {path or '(root)'} at that "
                             "commit; fix the Task's path or commit in the registry.")
        if not any(e.rel == "task.toml" for e in entries):
            raise AmberError(f"{where} has no task.toml in {path or 'the repository root'}: fix the Task's path "
                             "or commit in the registry.")
        return entries

    def _export(self, task: GitTask, entries: list[_Entry]) -> None:
        """Write the Task's blobs into its cache folder (under a temporary name, then renamed into place)."""
        target = _cached(self.cache, task)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
        try:
            staging.mkdir()
            with tempfile.TemporaryFile() as requests, tempfile.TemporaryFile() as errors:
                requests.write("".join(f"{e.oid}\n" for e in entries).encode())
                requests.seek(0)
                self._write_blobs(task, entries, staging, requests, errors)
            try:
                staging.rename(target)
            except OSError:
                if not target.is_dir():  # else another process exported the same pinned Task first
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _write_blobs(self, task: GitTask, entries: list[_Entry], root: Path, requests: IO[bytes],
                     errors: IO[bytes]) -> None:
        process = subprocess.Popen(self._command(["cat-file", "--batch"]), stdin=requests, stdout=subprocess.PIPE,
                                   stderr=errors, env=_git_env())
        timed_out = threading.Event()

        def stop() -> None:
            timed_out.set()
            process.kill()

        timer = threading.Timer(GIT_TIMEOUT_SEC, stop)
        timer.start()
        try:
            assert process.stdout is not None
            for entry in entries:
                header = process.stdout.readline().split()
                if len(header) != 3 or header[1] != b"blob":
                    reason = (f"git took more than {GIT_TIMEOUT_SEC:.0f} s" if timed_out.is_set()
                              else b" ".join(header).decode(errors="replace") or "no answer")
                    self._fail(task, "git could not read the Task's files", f"{entry.rel}: {reason}")
                path = root / entry.rel
                path.parent.mkdir(parents=True, exist_ok=True)
                remaining = int(header[2])
                with open(path, "wb") as f:
                    while remaining:
                        chunk = process.stdout.read(min(remaining, 1 << 20))
                        if not chunk:
                            self._fail(task, "git could not read the Task's files",
                                       f"git took more than {GIT_TIMEOUT_SEC:.0f} s" if timed_out.is_set()
                                       else "git stopped early")
                        f.write(chunk)
                        remaining -= len(chunk)
                process.stdout.read(1)  # the newline after each blob
                os.chmod(path, 0o755 if entry.executable else 0o644)
        finally:
            timer.cancel()
            process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()

    def _git(self, args: list[str], task: GitTask | None, failure: str = "", *, check: bool = True,
             stdin: bytes | None = None, in_repo: bool = True) -> subprocess.CompletedProcess[bytes]:
        task = task or self.tasks[0]
        command = self._command(args, in_repo)
        try:
            # no terminal input: git must never wait on a prompt
            result = subprocess.run(command, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                                    capture_output=True, timeout=GIT_TIMEOUT_SEC, env=_git_env())
        except FileNotFoundError:
            raise AmberError("git is not installed: install git to fetch public Benchmarks from a "
                             "registry.") from None
        except subprocess.TimeoutExpired:
            self._fail(task, failure, f"git took more than {GIT_TIMEOUT_SEC:.0f} s")
        if check and result.returncode != 0:
            self._fail(task, failure, _git_reason(result))
        return result

    def _command(self, args: list[str], in_repo: bool = True) -> list[str]:
        # protocol.file.allow: a registry may name a repository on this machine by a file:// URL
        return ["git", "-c", "protocol.file.allow=always", "--literal-pathspecs",
                *(["-C", str(self.repo)] if in_repo else []), *args]

    def _fail(self, task: GitTask, failure: str, reason: str) -> NoReturn:
        raise AmberError(f"Task {task.name} of {self.label} cannot be fetched from {self.url} at commit "
                         f"{task.commit}: {failure} ({reason.rstrip('.')}); check that the repository can be "
                         "reached and holds that commit.")


def _git_reason(result: subprocess.CompletedProcess[bytes]) -> str:
    """git's own first complaint (its later lines are generic advice), else its last line."""
    lines = [line.strip() for line in result.stderr.decode(errors="replace").splitlines() if line.strip()]
    for line in lines:
        for prefix in ("fatal: ", "error: "):
            if line.startswith(prefix):
                return f"git: {line.removeprefix(prefix)}"
    return f"git: {lines[-1]}" if lines else f"git exited with status {result.returncode}"


def _git_env() -> dict[str, str]:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")  # never wait on a passphrase or host key prompt
    return env
