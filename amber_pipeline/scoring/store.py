"""Scores in the warehouse: per-Task Rewards, cell aggregates and comparisons, written from the engine.

Three writers, one computation. :func:`write_cell` scores one cell over all
its stored Trials; when a cell run ends, :func:`write_version` scores every
cell of its Benchmark Version and replaces that version's comparisons, so a
report is current as soon as a cell is; :func:`reaggregate` scores every cell
and compares every pair, so late Trials and a fix to the statistics reach
every report. Both call :func:`engine.score` on the Trial files, and a cell's
numbers depend only on its own Trials (sums are exact and the resample rows
depend only on the number of Tasks), so both write the same numbers to the
same file: ``Warehouse.rewards_file`` and ``Warehouse.aggregates_file`` per
(cell, Workspace), and one comparisons file.

The re-aggregation is idempotent and cheap when nothing changed: a fingerprint
of its inputs (every Trial file's path, size and modification time; the source
of this package; NumPy's version; the resampling) is kept beside the outputs,
and an unchanged fingerprint with its outputs in place writes nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from amber_pipeline import failpoints
from amber_pipeline.cells import NO_MODEL, agent_version_sql, cell_file_id
from amber_pipeline.scoring import engine
from amber_pipeline.scoring.bootstrap import DEFAULT_RESAMPLING, Resampling
from amber_pipeline.warehouse import instances, sql
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.files import locked
from amber_pipeline.warehouse.fitting import fitting
from amber_pipeline.warehouse.schemas import (
    CELL_RESULT_SCHEMA,
    COMPARISON_SCHEMA,
    TASK_REWARD_SCHEMA,
    TRIAL_REQUIRED,
    TRIAL_SCHEMA,
)

FINGERPRINT_NAME = "_fingerprint.json"
_LIBRARY = Path(__file__).resolve().parents[1]
# The code the numbers depend on: the engine and its store, the cell key (pairing), the SQL and the schemas.
_SOURCES = [*sorted(Path(__file__).parent.glob("*.py")), _LIBRARY / "cells.py", _LIBRARY / "warehouse" / "sql.py",
            _LIBRARY / "warehouse" / "schemas.py"]


@dataclass(frozen=True)
class Reaggregation:
    changed: bool  # False: inputs unchanged since the last run, nothing written
    cells: int  # (cell, Workspace) scores written (or, unchanged, last written)
    comparisons: int
    seconds: float


def trial_rows(files: Sequence[Path], scan: str | None = None) -> str:
    """The engine's rows over stored Trial files (local paths, or ``scan``: a FROM-clause over them that the
    store gave, `storage.py`): every Trial that is a result (not cancelled with its Job)."""
    scan = scan or sql.parquet_files(files)
    return f"""select workspace as scope, cell_key as cell, benchmark_version_id as benchmark, agent,
                      {agent_version_sql('cell_key')} as agent_version,
                      nullif(model_configuration, {sql.string(NO_MODEL)}) as model, task_name as task, reward,
                      errored, cost_usd, duration_sec
               from {scan}
               where outcome is distinct from 'cancelled'"""


def cell_trial_files(wh: Warehouse, cell_key: str) -> list[Path]:
    return [f.path for f in wh.store.files(wh.paths.trials / cell_file_id(cell_key), "*.parquet")]


def write_cell(wh: Warehouse, cell_key: str) -> engine.Scores:
    """Score one cell over all its stored Trials (each Workspace's apart) and write its Rewards and aggregates."""
    with instances.scratch() as con:
        scores = _score(con, wh, cell_trial_files(wh, cell_key), DEFAULT_RESAMPLING)
        written = _write_cells(con, wh, scores.cells)
    folder = cell_file_id(cell_key)
    _remove_others(wh, [wh.paths.rewards / folder, wh.paths.aggregates / folder], written)
    return scores


def write_version(wh: Warehouse, benchmark_version_id: str, cell_keys: Sequence[str]) -> engine.Scores:
    """Score the cells of one Benchmark Version (``cell_keys``: all of them) over all their stored Trials, write
    their Rewards and aggregates, and replace that version's rows of the comparisons file with theirs.

    Each cell's numbers are those :func:`write_cell` gives (they depend only on its own Trials); the other
    versions' comparisons are kept as they were. Serialized with :func:`reaggregate` by its lock.
    """
    files = [f for key in sorted(set(cell_keys)) for f in cell_trial_files(wh, key)]
    with locked(wh.paths.aggregates / "_reaggregate.lock", fcntl.LOCK_EX), instances.scratch() as con:
        scores = _score(con, wh, files, DEFAULT_RESAMPLING)
        written = _write_cells(con, wh, scores.cells)
        _remove_others(wh, [root / cell_file_id(key) for key in cell_keys
                        for root in (wh.paths.rewards, wh.paths.aggregates)], written)
        path = comparisons_file(wh)
        ours = _comparison_table(con, scores.comparisons)
        stored = wh.read_parquet(path)
        if stored is not None:  # the other versions' rows, as they were
            con.register("_stored_comparisons", stored)
            kept = con.execute("select * from _stored_comparisons where benchmark_version_id <> ?",
                               [benchmark_version_id]).to_arrow_table()
            con.unregister("_stored_comparisons")
            ours = pa.concat_tables([_as(COMPARISON_SCHEMA, kept), ours])
        wh.write_parquet(ours, path)
    return scores


# A Trial file is rewritten once per finished Trial (or batch of them): a third clash in a row is not that race.
SCORE_ATTEMPTS = 3


def _score(con: duckdb.DuckDBPyConnection, wh: Warehouse, files: Sequence[Path],
           resampling: Resampling) -> engine.Scores:
    """The engine over stored Trial files (no file: no cell; a file that is not Amber's Trials is left out).

    Another cell's run may replace its Trial file while this one reads it (a whole new file, renamed into
    place), and DuckDB reads a file's footer and its data at different moments: it then fails on data that no
    longer matches the footer. Only when a file did change under the query is it asked again, of the files as
    they are now; any other failure is the caller's.
    """
    attempt = 1
    while True:
        seen = _stamps(wh, files)
        try:
            fit = fitting(con, files, TRIAL_SCHEMA, TRIAL_REQUIRED, wh.store)
            if not fit:
                return engine.Scores([], [])
            return engine.score(con, trial_rows(fit, wh.store.scan(con, fit, TRIAL_SCHEMA, "_trial_files")),
                                resampling)
        except duckdb.Error:
            if attempt == SCORE_ATTEMPTS or _stamps(wh, files) == seen:
                raise
        attempt += 1


def _stamps(wh: Warehouse, files: Sequence[Path]) -> set[tuple[Path, int, int]]:
    """Path, size and modification time of the stored files among ``files``: what changes when one is replaced."""
    wanted = set(files)
    return {(f.path, f.size, f.mtime_ns) for folder in {p.parent for p in files}
            for f in wh.store.files(folder, "*.parquet") if f.path in wanted}


def _write_cells(con: duckdb.DuckDBPyConnection, wh: Warehouse, cells: Sequence[engine.CellScore]) -> list[Path]:
    """Each (cell, Workspace)'s per-Task Rewards and aggregate, one file each.

    Arrow tables come from DuckDB (values as SQL literals), never from Python
    objects: that conversion would import pandas (``warehouse.sql``).
    """
    aggregates = _table(con, CELL_RESULT_SCHEMA, (
        [c.scope, c.cell, c.benchmark, c.agent, c.model or NO_MODEL, c.n_tasks, c.n_trials, c.mean, c.ci95.low,
         c.ci95.high, c.cost_usd, c.mean_duration_sec, c.errored] for c in cells))
    written = []
    for i, c in enumerate(cells):
        rewards = wh.rewards_file(cell_file_id(c.cell), c.scope)
        wh.write_parquet(_as(TASK_REWARD_SCHEMA, c.task_rewards.rename_columns(TASK_REWARD_SCHEMA.names)), rewards)
        failpoints.reach("aggregates")
        aggregate = wh.aggregates_file(cell_file_id(c.cell), c.scope)
        wh.write_parquet(aggregates.slice(i, 1), aggregate)
        written += [rewards, aggregate]
    return written


def _write_comparisons(con: duckdb.DuckDBPyConnection, wh: Warehouse,
                       comparisons: Sequence[engine.Comparison]) -> Path:
    wh.write_parquet(_comparison_table(con, comparisons), comparisons_file(wh))
    return comparisons_file(wh)


def _comparison_table(con: duckdb.DuckDBPyConnection, comparisons: Sequence[engine.Comparison]) -> pa.Table:
    return _table(con, COMPARISON_SCHEMA, (
        [c.better.scope, c.better.benchmark, c.better.agent, c.better.model, c.worse.model, c.difference.mean,
         c.difference.ci95.low, c.difference.ci95.high, c.difference.n_shared_tasks,
         c.difference.too_close_to_call, c.better.cell, c.worse.cell] for c in comparisons))


def _table(con: duckdb.DuckDBPyConnection, schema: pa.Schema, rows: Iterable[list[object]]) -> pa.Table:
    """An Arrow table of ``schema`` holding ``rows``, made by DuckDB from SQL literals."""
    types = {pa.string(): "varchar", pa.int64(): "bigint", pa.float64(): "double", pa.bool_(): "boolean"}
    columns = ", ".join(f"{f.name} {types[f.type]}" for f in schema)
    con.execute(f"create or replace table _rows ({columns})")
    listed = sql.values(rows)
    if listed:
        con.execute(f"insert into _rows values {listed}")
    return _as(schema, con.execute("select * from _rows").to_arrow_table())


def _as(schema: pa.Schema, table: pa.Table) -> pa.Table:
    """``table``, checked to have ``schema`` (DuckDB's types are the documented ones; a cast would load
    pyarrow.compute, a tenth of a second)."""
    if not table.schema.equals(schema):
        raise TypeError(f"expected {schema}, got {table.schema}")
    return table


def _remove_others(wh: Warehouse, folders: Sequence[Path], written: Sequence[Path],
                   pattern: str = "*.parquet") -> None:
    """Remove the scores in these folders that were not just written: a (cell, Workspace) whose Trials are
    no longer results has no score, and an old file must not keep one in the views."""
    keep = set(written)
    for folder in folders:
        for stale in wh.store.files(folder, pattern):
            if stale.path not in keep:
                wh.store.remove(stale.path)


def comparisons_file(wh: Warehouse) -> Path:
    return wh.paths.comparisons / "comparisons.parquet"


def fingerprint_file(wh: Warehouse) -> Path:
    return wh.paths.aggregates / FINGERPRINT_NAME


def reaggregate(wh: Warehouse, *, resampling: Resampling = DEFAULT_RESAMPLING, force: bool = False) -> Reaggregation:
    """Recompute every cell's Rewards and score and every comparison from the stored Trials.

    Writes nothing when the fingerprint of the inputs matches the stored one and
    its outputs are in place (unless ``force``). Runs are serialized across
    processes by a file lock.
    """
    start = time.perf_counter()
    with locked(wh.paths.aggregates / "_reaggregate.lock", fcntl.LOCK_EX):
        files = wh.trial_files()
        key = _fingerprint(files, resampling)
        stored = _read_json(wh.store.read_bytes(fingerprint_file(wh)))
        if (not force and stored is not None and stored.get("key") == key
                and all(wh.store.exists(wh.paths.warehouse / p) for p in stored.get("outputs", []))):
            return Reaggregation(False, int(stored["cells"]), int(stored["comparisons"]),
                                 time.perf_counter() - start)
        with instances.scratch() as con:
            scores = _score(con, wh, [path for path, _, _ in files], resampling)
            outputs = _write_cells(con, wh, scores.cells)
            outputs.append(_write_comparisons(con, wh, scores.comparisons))
        _remove_others(wh, [wh.paths.rewards, wh.paths.aggregates], outputs, "*/*.parquet")
        wh.store.write_bytes(fingerprint_file(wh), json.dumps({
            "key": key, "trial_files": len(files), "cells": len(scores.cells),
            "comparisons": len(scores.comparisons),
            "outputs": [str(p.relative_to(wh.paths.warehouse)) for p in outputs]}, indent=1).encode())
        return Reaggregation(True, len(scores.cells), len(scores.comparisons), time.perf_counter() - start)


def _fingerprint(files: Sequence[tuple[Path, int, int]], resampling: Resampling) -> str:
    h = hashlib.sha256()
    for module in _SOURCES:
        h.update(hashlib.sha256(module.read_bytes()).digest())
    h.update(json.dumps([np.__version__, duckdb.__version__, resampling.n_resamples, resampling.seed,
                         resampling.confidence]).encode())
    for path, size, mtime_ns in files:
        h.update(f"{path}\0{size}\0{mtime_ns}\n".encode())
    return h.hexdigest()


def _read_json(text: bytes | None) -> dict | None:
    try:
        data = json.loads(text or b"")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
