"""Files into and out of a sandbox's container, through the engine's archive API (no bind mounts).

Uploaded files are owned by root, whatever their owner on the host, and keep of their mode only whether they
are executable (755 or 644).

A Trial's round trips to the engine are what it costs over the bare container lifecycle, and each one that
copies files or runs a process costs about as much as another (Docker 20.10 starts a helper process for every
copy). So, within the sandbox's rules:

- files go in by one put at /, whose entries carry their whole path: Docker makes the missing folders on the
  way (root's, mode 755, as `mkdir -p`);
- Harbor's log folders (mode 777, as its `ensure_dirs` makes them) are known empty when the image has none of
  them. They then go in with the first copy into the sandbox, their mtime at the epoch, or just before the
  first command or copy out, whichever comes first (no command of the Trial runs before, so none misses them);
  until then the sandbox answers for them as for empty folders. A folder that went in so and still has that
  mtime is still empty (making, removing or renaming anything in it moves the mtime to now), so copying it
  out, or an empty folder into it, takes a stat and no copy. Only a command that sets the mtime back on
  purpose could hide what it put there, as deleting it could;
- what a stat tells (a HEAD request: no process) is not asked of a command: `is_dir` and `is_file` as root
  (`kind_as_seen_by`), and Harbor's bookkeeping commands (`commands`).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import tarfile
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path, PurePosixPath

import docker

from amber_pipeline.sandbox.container import SandboxContainer

ROOT = ("root", "0", 0)  # the ways a command's user names root
# Go's os.FileMode, as Docker's path stat gives it: the file type in high bits, permissions in the low ones
_GO_MODE_DIR, _GO_MODE_SYMLINK = 1 << 31, 1 << 27
_GO_MODE_TYPE = _GO_MODE_DIR | _GO_MODE_SYMLINK | 1 << 26 | 1 << 25 | 1 << 24 | 1 << 21 | 1 << 19
_EVERYONE_RUNS = 0o111
_EPOCH = "1970-01-01T00:00:00Z"
_UNKNOWN: dict = {"mode": None}  # a path Docker could not stat (one through a file, say): only a command tells


class ContainerFiles:
    """The files of one sandbox's container, and Harbor's log folders still to go in."""

    def __init__(self, client: docker.DockerClient, sandbox: SandboxContainer) -> None:
        self._client = client
        self._sandbox = sandbox
        # Harbor's log folders still to go in (until then there and empty), and those that went in empty with
        # their mtime at the epoch; the lock keeps one copy in at a time, so a folder goes in once.
        self.pending: tuple[PurePosixPath, ...] = ()
        self._made_empty: set[PurePosixPath] = set()
        self._copy_in = threading.Lock()

    def defer(self, log_dirs: Sequence[PurePosixPath]) -> None:
        """Harbor's log folders are to go in with the first copy in when the image has none of them."""
        if all(stat is None for stat in self.stats([str(d) for d in log_dirs])):
            self._made_empty.update(log_dirs)
            self.pending = tuple(log_dirs)

    async def settled(self) -> None:
        """Put in the log folders still pending, before anything that could tell they are not there yet."""
        if self.pending:
            await asyncio.to_thread(self._settle)

    def _settle(self) -> None:
        if self.pending:
            self._put([])

    # ---- what is there -----------------------------------------------------------

    async def kind_as_seen_by(self, path: str, user: str | int | None) -> str | None:
        """What a path is, as `test` run by ``user`` (as Harbor resolved it) would see it, from a stat; "ask" when
        only running `test` can tell: a relative path hangs on the command's folder, another user on permissions,
        a symlink on its target."""
        if not PurePosixPath(path).is_absolute() or user not in ROOT:
            return "ask"
        found = _kind(await asyncio.to_thread(self._stat, path))
        return "ask" if found in ("symlink", "unknown") else found

    def _stat(self, path: str) -> dict | None:
        return self.stats([path])[0]

    def stats(self, paths: Sequence[str]) -> list[dict | None]:
        """Docker's stat of paths in the container, None where nothing is there: a HEAD request each, no helper
        process. Raises NotFound when it is the container that is gone, as an exec would."""
        container = self._sandbox.require()
        api = self._client.api
        stats: list[dict | None] = []
        for path in paths:
            wanted = PurePosixPath(path)
            if wanted in self.pending:
                stats.append({"name": wanted.name, "mode": _GO_MODE_DIR | 0o777, "mtime": _EPOCH})
                continue
            if any(d.is_relative_to(wanted) for d in self.pending):
                self._settle()  # a folder above them: what it holds is to change
            response = api.head(api._url("/containers/{0}/archive", container.id), params={"path": path})
            stats.append(_stat_of(response))
        if None in stats:
            api.inspect_container(container.id)  # a 404 of the container itself raises here
        return stats

    # ---- in ------------------------------------------------------------------------

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        target = PurePosixPath("/", target_path)
        await asyncio.to_thread(self._put, [(Path(source_path), target)])

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        source, target = Path(source_dir), PurePosixPath("/", target_dir)
        files = [(p, target / p.relative_to(source).as_posix()) for p in sorted(source.rglob("*"))]
        if files:
            await asyncio.to_thread(self._put, files)
        else:
            await self._make_dir(target)

    async def _make_dir(self, path: PurePosixPath) -> None:
        """`mkdir -p` of an empty upload's folder: nothing when it is there, else one put of it."""
        found = _kind(await asyncio.to_thread(self._stat, str(path)))
        if found is None:
            await asyncio.to_thread(self._put, [], [_dir_entry(path, mode=0o755, mtime=time.time())])
        elif found != "dir":  # Docker follows a symlink, and refuses what is no folder, as before
            await asyncio.to_thread(self._sandbox.require().put_archive, str(path), _tar([]))

    def _put(self, files: list[tuple[Path, PurePosixPath]], dirs: Sequence[tarfile.TarInfo] = ()) -> None:
        """Copy host files and empty folders in by one put at /, with the log folders still to go in, if any."""
        with self._copy_in:
            pending = self.pending
            filled = {p for _, p in files} | {PurePosixPath("/", d.name) for d in dirs}
            self._made_empty -= {d for d in pending if any(p.is_relative_to(d) and p != d for p in filled)}
            entries = [_dir_entry(d, mode=0o777, mtime=0) for d in pending] + list(dirs)
            if files or entries:
                self._sandbox.require().put_archive("/", _tar(files, entries))
            self.pending = ()

    # ---- out -----------------------------------------------------------------------

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        members = await self._get(source_path)
        with tarfile.open(fileobj=io.BytesIO(members)) as tar:
            member = next(m for m in tar.getmembers() if m.isfile())
            extracted = tar.extractfile(member)
            assert extracted is not None
            target = Path(target_path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(extracted.read())

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        target = Path(target_dir)
        if await self._still_empty(source_dir):
            target.mkdir(parents=True, exist_ok=True)
            return
        data = await self._get(source_dir.rstrip("/") + "/.")
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(target, filter="data")

    async def _still_empty(self, path: str) -> bool:
        """Whether a log folder that went in empty still is: its mtime is still the epoch."""
        if PurePosixPath(path) not in self._made_empty:
            return False
        stat = await asyncio.to_thread(self._stat, path)
        return stat is not None and _kind(stat) == "dir" and datetime.fromisoformat(stat["mtime"]).timestamp() == 0

    async def _get(self, path: str) -> bytes:
        container = self._sandbox.require()
        await self.settled()
        stream, _ = await asyncio.to_thread(container.get_archive, path)
        return b"".join(await asyncio.to_thread(list, stream))


def _kind(stat: dict | None) -> str | None:
    """"dir", "file", "symlink", "other" or "unknown" from a Docker path stat; None when nothing is there."""
    if stat is None:
        return None
    if stat["mode"] is None:
        return "unknown"
    found = stat["mode"] & _GO_MODE_TYPE
    return {0: "file", _GO_MODE_DIR: "dir", _GO_MODE_SYMLINK: "symlink"}.get(found, "other")


def runnable_by_all(stat: dict | None) -> bool:
    """A regular file that `chmod +x` would not change."""
    return stat is not None and _kind(stat) == "file" and stat["mode"] & _EVERYONE_RUNS == _EVERYONE_RUNS


def _tar(files: Sequence[tuple[Path, PurePosixPath]], dirs: Sequence[tarfile.TarInfo] = ()) -> bytes:
    """A tar to put in at /: empty folders, then host files whose entries belong to root, keeping only the
    executable bit."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info in dirs:
            tar.addfile(info)
        for path, target in files:
            info = tar.gettarinfo(str(path), arcname=_from_root(target))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isdir():
                tar.addfile(info)
            elif info.isfile():
                info.mode = 0o755 if info.mode & 0o100 else 0o644
                with path.open("rb") as f:
                    tar.addfile(info, f)
    return buf.getvalue()


def _dir_entry(path: PurePosixPath, *, mode: int, mtime: float) -> tarfile.TarInfo:
    """An empty folder belonging to root, as an entry of a tar put in at /."""
    info = tarfile.TarInfo(_from_root(path))
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, mtime
    info.uname = info.gname = "root"
    return info


def _from_root(path: PurePosixPath) -> str:
    """A container path as the name of an entry of a tar put in at /."""
    return PurePosixPath("/", path).relative_to("/").as_posix()


def _stat_of(response) -> dict | None:
    """The stat in the answer to a HEAD of a container path; None when nothing is there."""
    if response.status_code == 404:
        return None
    header = response.headers.get("X-Docker-Container-Path-Stat")
    return json.loads(base64.b64decode(header)) if response.ok and header else _UNKNOWN
