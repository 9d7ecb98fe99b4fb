"""Which Parquet files of a warehouse folder hold Amber's rows: the others are left out of every reader.

Only Amber writes under the warehouse (`amber sql` cannot write files), but a
file dropped there by hand, a damaged copy, or a column of another type would
otherwise break every reader of its folder (scoring, reports, the views) with
DuckDB's conversion error, or add rows that are not Trials. So the readers
take a folder's files through :func:`fitting`: DuckDB's union of their
schemas is compared with the expected one, which costs one pass over the
files' footers, like the query itself. Only when a column differs, or a file
cannot be read, are the files looked at one by one; those that differ are
left out and each is named in a warning, so an operator can move it away.
A file of an older Amber that lacks newer columns fits (they read as null).
"""

from __future__ import annotations

import functools
import logging
import tempfile
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from amber_pipeline.errors import AmberError
from amber_pipeline.warehouse import instances, sql
from amber_pipeline.warehouse.storage import LocalStore

log = logging.getLogger(__name__)


def fitting(con: duckdb.DuckDBPyConnection, files: Sequence[Path], schema: pa.Schema,
            required: Collection[str] = (), store: LocalStore | None = None) -> list[Path]:
    """The files among ``files`` that have the ``required`` columns and whose columns all have the types
    ``schema`` gives them (``files`` named as under AMBER_HOME and kept in ``store``: local files if None).

    DuckDB cannot read a remote store's files, so there each file's footer is read on its own, several at once.
    """
    if not files:
        return []
    if store is not None and store.remote:
        with ThreadPoolExecutor(16) as pool:
            fits = list(pool.map(lambda f: _file_fits(f, schema, required, store.schema_of), files))
        return _kept(files, fits)
    if store is not None:
        local = {store.where(f): f for f in files}
        return [local[f] for f in fitting(con, list(local), schema, required)]
    try:
        listed = sql.path_list(files)
        union = {r[0]: r[1] for r in con.execute(f"describe select * from {sql.parquet_files(files)}").fetchall()}
        names = "[" + ", ".join(sql.string(r) for r in required) + "]::varchar[]"  # a literal: a bound list
        lacking = con.execute(f"select file_name from parquet_schema({listed}) group by file_name "  # imports pandas
                              f"having not list_has_all(list(name), {names})").fetchall()
        if not lacking and _fits(union, _duckdb_types(schema)):
            return list(files)
    except duckdb.Error:
        pass  # a file that is not Parquet at all: find it below
    return _kept(files, [_file_fits(f, schema, required) for f in files])


def _kept(files: Sequence[Path], fits: Sequence[bool]) -> list[Path]:
    for f, fit in zip(files, fits, strict=True):
        if not fit:
            log.warning("left out %s: its columns are not those Amber writes there; move it out of the warehouse",
                        f)
    return [f for f, fit in zip(files, fits, strict=True) if fit]


def _fits(columns: dict[str, str], expected: dict[str, str]) -> bool:
    return all(expected.get(name, kind) == kind for name, kind in columns.items())


@functools.cache
def _duckdb_types(schema: pa.Schema) -> dict[str, str]:
    """The DuckDB type of each column of `schema` as DuckDB reads it from a Parquet file: the same for every read of
    a kind of file, so asked once per schema in a connection of its own (callers only read it). Asked of an empty
    file of the schema, made by a writer given no table, not of an Arrow table: DuckDB (looking at a Python object)
    and Arrow (writing a table) import pandas for that, a quarter of a second."""
    with tempfile.TemporaryDirectory(prefix="amber-schema-") as folder, instances.scratch() as con:
        empty = Path(folder) / "expected.parquet"
        pq.ParquetWriter(empty, schema).close()
        return {r[0]: r[1] for r in con.execute(f"describe select * from read_parquet({sql.string(str(empty))})")
                .fetchall()}


def _file_fits(path: Path, schema: pa.Schema, required: Collection[str],
              read_schema: Callable[[Path], pa.Schema] = pq.read_schema) -> bool:
    try:
        found = read_schema(path)
    except AmberError:
        raise  # the store does not answer: that is not the file's fault
    except (OSError, pa.ArrowException):
        return False
    return set(required) <= set(found.names) and all(
        schema.field(f.name).type == f.type for f in found if f.name in schema.names)
