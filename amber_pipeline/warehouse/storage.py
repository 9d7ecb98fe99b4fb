"""The result store: where Parquet results, Trial folders and Benchmark snapshots live (`AMBER_STORAGE_URL`).

One seam, two kinds. Every result keeps the path it has under AMBER_HOME
(`paths.py`); the store maps that path to where the bytes are:

- the local folder (the default, AMBER_HOME itself, or another folder): the
  path is the file, written to a temporary name then renamed, and DuckDB reads
  the files with ``read_parquet`` over their paths, as fast as it always did;
- ``s3://bucket/prefix`` (with ``AMBER_S3_ENDPOINT`` for a server of one's own):
  the path below AMBER_HOME is the key below the prefix, reached through
  ``pyarrow.fs`` (DuckDB's own S3 extension is not in its wheel). One PUT of a
  whole object is atomic, so no rename is needed; DuckDB scans the objects as a
  registered Arrow dataset, whose explicit schema reads missing columns as null
  as ``union_by_name`` does.

Folders (a cell run's Trial folders, a Benchmark Version's snapshot) stay local
where they are made and are copied up once whole (`put_folder`); a machine that
lacks one fetches it into the same place under its own AMBER_HOME, which is so
its local cache (`fetch_folder`). S3 keeps no executable bit, so a folder's
executable files are listed in one object beside it and restored on fetch.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import shutil
import stat
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from amber_pipeline import settings
from amber_pipeline.errors import AmberError
from amber_pipeline.warehouse import sql
from amber_pipeline.warehouse.files import replacing

EXECUTABLES = ".amber-executables"  # the object beside a folder's files naming those that are executable
_PARALLEL = 16  # concurrent requests when many small objects are read or sent


@dataclass(frozen=True)
class StoredFile:
    path: Path  # as it is named under AMBER_HOME
    size: int
    mtime_ns: int


class LocalStore:
    """Results as files of a local folder: ``root`` (AMBER_HOME itself unless AMBER_STORAGE_URL names another)."""

    remote = False

    def __init__(self, home: Path, root: Path | None = None):
        self.home = home
        self.root = root or home

    def where(self, path: Path) -> Path:
        return path if self.root == self.home else self.root / path.relative_to(self.home)

    def write_table(self, table: pa.Table, path: Path) -> None:
        """Write an Arrow table to a temporary name in the same folder, then rename: all or nothing."""
        write_local_parquet(table, self.where(path))

    def read_table(self, path: Path, columns: Sequence[str] | None = None) -> pa.Table | None:
        """The file's rows, or None when there is no such file."""
        where = self.where(path)
        return pq.read_table(where, columns=columns) if where.is_file() else None

    def write_bytes(self, path: Path, data: bytes) -> None:
        with replacing(self.where(path)) as tmp:
            tmp.write_bytes(data)

    def read_bytes(self, path: Path) -> bytes | None:
        with contextlib.suppress(FileNotFoundError):
            return self.where(path).read_bytes()
        return None

    def exists(self, path: Path) -> bool:
        return self.where(path).exists()

    def files(self, folder: Path, pattern: str) -> list[StoredFile]:
        """The files below ``folder`` matching ``pattern`` (a glob of its relative path, ``*`` within one name),
        sorted, without those being written or hidden (a name starting with ``.``)."""
        wanted = PurePosixPath(pattern).parts
        out: list[StoredFile] = []

        def walk(where: str, rel: tuple[str, ...]) -> None:
            try:
                entries = os.scandir(where)
            except (FileNotFoundError, NotADirectoryError):
                return
            with entries:
                for e in entries:
                    if e.name.startswith(".") or not fnmatch.fnmatchcase(e.name, wanted[len(rel)]):
                        continue
                    if len(rel) + 1 < len(wanted):
                        if e.is_dir():
                            walk(e.path, (*rel, e.name))
                    elif e.is_file():
                        st = e.stat()
                        out.append(StoredFile(folder.joinpath(*rel, e.name), st.st_size, st.st_mtime_ns))

        walk(str(self.where(folder)), ())
        return sorted(out, key=lambda f: f.path)

    def remove(self, path: Path) -> int:
        """Delete a file or a whole folder; the bytes freed."""
        return remove_local(self.where(path))

    def schema_of(self, path: Path) -> pa.Schema:
        return pq.read_schema(self.where(path))

    def scan(self, con: duckdb.DuckDBPyConnection, files: Sequence[Path], schema: pa.Schema, name: str) -> str:
        """A FROM-clause over the Parquet ``files`` for ``con`` (``name``: what it registers, if it must)."""
        return sql.parquet_files(self.where(f) for f in files)

    def put_folder(self, folder: Path) -> None:
        """Copy a finished local folder into the store (nothing to do: it is there)."""

    def fetch_folder(self, folder: Path) -> bool:
        """Whether the folder is here, fetched from the store if it must be."""
        return self.where(folder).is_dir()


class S3Store(LocalStore):
    """Results as objects of an S3 bucket below a prefix; folders are copied beside in AMBER_HOME."""

    remote = True

    def __init__(self, home: Path, url: str, fs: pafs.S3FileSystem, base: str):
        super().__init__(home)
        self.url, self.fs, self.base = url, fs, base

    def key(self, path: Path) -> str:
        return f"{self.base}/{path.relative_to(self.home).as_posix()}"

    def write_table(self, table: pa.Table, path: Path) -> None:
        with _reaching(self.url):
            pq.write_table(table, self.key(path), filesystem=self.fs)

    def read_table(self, path: Path, columns: Sequence[str] | None = None) -> pa.Table | None:
        with _reaching(self.url):
            if self.fs.get_file_info(self.key(path)).type != pafs.FileType.File:
                return None
            return pq.read_table(self.key(path), columns=columns, filesystem=self.fs)

    def write_bytes(self, path: Path, data: bytes) -> None:
        with _reaching(self.url), self.fs.open_output_stream(self.key(path)) as out:
            out.write(data)

    def read_bytes(self, path: Path) -> bytes | None:
        with _reaching(self.url):
            try:
                with self.fs.open_input_stream(self.key(path)) as f:
                    return f.read()
            except FileNotFoundError:
                return None

    def exists(self, path: Path) -> bool:
        with _reaching(self.url):
            return self.fs.get_file_info(self.key(path)).type != pafs.FileType.NotFound

    def files(self, folder: Path, pattern: str) -> list[StoredFile]:
        base = self.key(folder)
        wanted = PurePosixPath(pattern).parts
        out = []
        for info in self._listing(base):
            rel = PurePosixPath(info.path[len(base) + 1:]).parts
            if (len(rel) == len(wanted) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(rel, wanted, strict=True))
                    and not any(p.startswith(".") for p in rel)):
                out.append(StoredFile(folder.joinpath(*rel), info.size or 0, info.mtime_ns or 0))
        return sorted(out, key=lambda f: f.path)

    def remove(self, path: Path) -> int:
        key = self.key(path)
        with _reaching(self.url):
            info = self.fs.get_file_info(key)
            if info.type == pafs.FileType.File:
                self.fs.delete_file(key)
                return info.size or 0
            found = self._listing(key)
            for f in found:
                self.fs.delete_file(f.path)
            return sum(f.size or 0 for f in found)

    def schema_of(self, path: Path) -> pa.Schema:
        with _reaching(self.url):
            return pq.read_schema(self.key(path), filesystem=self.fs)

    def scan(self, con: duckdb.DuckDBPyConnection, files: Sequence[Path], schema: pa.Schema, name: str) -> str:
        import pyarrow.dataset as ds  # deferred: half a second of import that only an S3 read needs

        dataset = ds.dataset([self.key(f) for f in files], schema=schema, format="parquet", filesystem=self.fs)
        con.register(name, dataset)
        return name

    def put_folder(self, folder: Path) -> None:
        if not folder.is_dir():
            return
        files = [f for f in folder.rglob("*") if f.is_file() and not f.is_symlink()]
        executables = sorted(f.relative_to(folder).as_posix() for f in files if f.stat().st_mode & stat.S_IXUSR)

        def send(f: Path) -> None:
            with open(f, "rb") as src, self.fs.open_output_stream(self.key(f)) as out:
                shutil.copyfileobj(src, out, 1 << 20)

        with _reaching(self.url), ThreadPoolExecutor(_PARALLEL) as pool:
            list(pool.map(send, files))
            with self.fs.open_output_stream(self.key(folder / EXECUTABLES)) as out:
                out.write("\n".join(executables).encode())

    def fetch_folder(self, folder: Path) -> bool:
        """Fetch the folder into its place under AMBER_HOME unless it is there: into a hidden folder beside,
        renamed once whole, so a reader never sees half of it and two fetchers do not collide."""
        if folder.is_dir():
            return True
        base = self.key(folder)
        with _reaching(self.url):
            found = self._listing(base)
            if not found:
                return False
            staging = folder.with_name(f".{folder.name}.{uuid.uuid4().hex}.tmp")
            try:
                executables: list[str] = []

                def get(info: pafs.FileInfo) -> None:
                    rel = info.path[len(base) + 1:]
                    if rel == EXECUTABLES:
                        with self.fs.open_input_stream(info.path) as f:
                            executables.extend(f.read().decode().split())
                        return
                    target = staging / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with self.fs.open_input_stream(info.path) as src, open(target, "wb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)

                with ThreadPoolExecutor(_PARALLEL) as pool:
                    list(pool.map(get, found))
                for rel in executables:
                    with contextlib.suppress(FileNotFoundError):
                        os.chmod(staging / rel, 0o755)
                try:
                    staging.rename(folder)
                except OSError:
                    if not folder.is_dir():  # another process fetched it first: that is fine
                        raise
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        return True

    def _listing(self, base: str) -> list[pafs.FileInfo]:
        with _reaching(self.url):
            try:
                infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True))
            except FileNotFoundError:
                return []
        return [i for i in infos if i.type == pafs.FileType.File]


def remove_local(path: Path) -> int:
    """Delete a local file or a whole folder; the bytes freed (none if it is not there)."""
    if path.is_dir():
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        shutil.rmtree(path)
        return size
    if path.is_file():
        size = path.stat().st_size
        path.unlink()
        return size
    return 0


@dataclass(frozen=True)
class Location:
    """Where results are stored, as the settings say: AMBER_STORAGE_URL and AMBER_S3_ENDPOINT."""

    url: str | None
    endpoint: str | None

    @classmethod
    def configured(cls) -> Location:
        return cls(settings.storage_url(), settings.s3_endpoint())


def store(home: Path) -> LocalStore:
    """The result store of the Amber whose home is ``home``, as the settings say now."""
    return opened(home, Location.configured())


@functools.lru_cache(maxsize=16)
def opened(home: Path, location: Location) -> LocalStore:
    """The store at ``location``: a store of S3 is checked to answer the first time it is opened in a process."""
    url, endpoint = location.url, location.endpoint
    if url is None:
        return LocalStore(home)
    parts = urlsplit(url)
    if parts.scheme in ("", "file"):
        return LocalStore(home, Path(parts.path if parts.scheme else url).expanduser().resolve())
    if parts.scheme != "s3" or not parts.netloc:
        raise AmberError(f"AMBER_STORAGE_URL {url!r} is neither a folder nor s3://bucket/prefix: set it to one of "
                         "those, or unset it to keep results under AMBER_HOME.")
    options: dict = {"connect_timeout": 3, "request_timeout": 10,
                     "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=2)}
    if endpoint:
        where = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        options |= {"endpoint_override": where.netloc, "scheme": where.scheme or "https"}
    try:
        fs = pafs.S3FileSystem(**options)
    except (OSError, pa.ArrowException) as e:
        raise _unreachable(url, e) from None
    base = f"{parts.netloc}/{parts.path.strip('/')}".rstrip("/")
    with _reaching(url):
        if fs.get_file_info(parts.netloc).type == pafs.FileType.NotFound:
            raise AmberError(f"AMBER_STORAGE_URL {url} names bucket {parts.netloc}, which does not exist: create "
                             "it, or point AMBER_STORAGE_URL at a bucket that does.")
    return S3Store(home, url, fs, base)


@contextlib.contextmanager
def _reaching(url: str):  # type: ignore[no-untyped-def]
    """Turn a store that does not answer into the one sentence a user can act on."""
    try:
        yield
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise _unreachable(url, e) from None


def _unreachable(url: str, e: BaseException) -> AmberError:
    reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    return AmberError(f"The result store AMBER_STORAGE_URL={url} did not answer ({reason[:160]}): start it, check "
                      "AMBER_S3_ENDPOINT and the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY credentials, or unset "
                      "AMBER_STORAGE_URL to keep results under AMBER_HOME.")


def write_local_parquet(table: pa.Table, path: Path) -> None:
    """Write an Arrow table to a temporary name beside ``path``, then rename: all or nothing."""
    with replacing(path) as tmp:
        pq.write_table(table, tmp)
