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
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from amber_pipeline.warehouse import sql
from amber_pipeline.warehouse.files import replacing

if TYPE_CHECKING:  # Arrow is imported where a file is read or written: listing files needs none of it
    import duckdb
    import pyarrow as pa

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
        """The file's rows, or None when there is no such file. Read through one open file: a writer replaces the
        file by a rename (`write_table`), and a read by path could take the size of one file and the bytes of the
        other (a torn footer). Read as one file, not as a dataset: Arrow's dataset module imports pandas."""
        import pyarrow.parquet as pq

        try:
            with self.where(path).open("rb") as file:
                return pq.ParquetFile(file).read(columns=columns)
        except (FileNotFoundError, IsADirectoryError):
            return None

    def row_count(self, path: Path) -> int | None:
        """How many rows the stored Parquet file has (from its footer), or None when it is not stored: read by
        DuckDB, so a count loads no Arrow."""
        from amber_pipeline.warehouse import instances

        where = self.where(path)
        if not where.is_file():
            return None
        with instances.scratch() as con:
            found = con.execute(f"select sum(num_rows) from parquet_file_metadata({sql.string(where)})").fetchone()
        return int(found[0] or 0) if found else 0

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
        import pyarrow.parquet as pq

        return pq.read_schema(self.where(path))

    def scan(self, con: duckdb.DuckDBPyConnection, files: Sequence[Path], schema: pa.Schema, name: str) -> str:
        """A FROM-clause over the Parquet ``files`` for ``con`` (``name``: what it registers, if it must)."""
        return sql.parquet_files(self.where(f) for f in files)

    def put_folder(self, folder: Path) -> None:
        """Copy a finished local folder into the store (nothing to do: it is there)."""

    def fetch_folder(self, folder: Path) -> bool:
        """Whether the folder is here, fetched from the store if it must be."""
        return self.where(folder).is_dir()


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


def write_local_parquet(table: pa.Table, path: Path) -> None:
    """Write an Arrow table to a temporary name beside ``path``, then rename: all or nothing."""
    import pyarrow.parquet as pq

    with replacing(path) as tmp:
        pq.write_table(table, tmp)
