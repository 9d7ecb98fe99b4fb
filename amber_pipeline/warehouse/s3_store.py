"""The result store on S3 (`storage.py`): objects of a bucket below a prefix, reached through ``pyarrow.fs``.

Apart from `storage.py` so that Arrow's S3 client is loaded only by a process whose store is on S3.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import duckdb
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from amber_pipeline.errors import AmberError
from amber_pipeline.warehouse.storage import _PARALLEL, EXECUTABLES, LocalStore, StoredFile

_READS = 5  # attempts at a Parquet read of an object that others rewrite


def _whole[T](read: Callable[[], T]) -> T:
    """A Parquet read of an object that may be rewritten meanwhile (a cell's Trial rows are, batch by batch).

    Arrow asks an object's size, then reads its footer by byte ranges from that size: an object replaced in
    between by one of another size reads torn, its footer not where the old size put it ("Parquet magic bytes
    not found") or past its end (S3's InvalidRange). S3 replaces an object whole, so the next attempt reads one
    version throughout; a file that is really broken, or a store that does not answer, fails every attempt."""
    for _ in range(_READS - 1):
        try:
            return read()
        except pa.ArrowInvalid:
            continue
        except OSError as e:
            if "InvalidRange" not in str(e):
                raise
    return read()


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
            return _whole(lambda: pq.read_table(self.key(path), columns=columns, filesystem=self.fs))

    def row_count(self, path: Path) -> int | None:
        with _reaching(self.url):
            if self.fs.get_file_info(self.key(path)).type != pafs.FileType.File:
                return None
            return _whole(lambda: pq.read_metadata(self.key(path), filesystem=self.fs).num_rows)

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
            return _whole(lambda: pq.read_schema(self.key(path), filesystem=self.fs))

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


def opened(home: Path, url: str, endpoint: str | None) -> S3Store:
    """The store of ``url`` (s3://bucket/prefix), checked to answer."""
    parts = urlsplit(url)
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
