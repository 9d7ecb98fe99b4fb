"""Re-aggregation: every cell's score and every paired comparison, recomputed from the stored Trials.

The per-cell path (``pipeline.write_aggregates``, one Dagster run per cell)
aggregates one cell when it finishes. This module recomputes *all* of them in
one pass, so late Trials and a fix to the statistics reach every report, and
it writes the paired comparisons the per-cell path cannot (they need two cells):

* every (Workspace, cell) aggregate, to the file ``pipeline.write_aggregates``
  writes (``Warehouse.aggregates_file``, ``CELL_RESULT_SCHEMA``), with the same
  numbers, bit for bit, as ``report.cell_result`` on that Workspace's Trials;
* every paired comparison between two Model Configurations of one Agent on one
  Benchmark Version in one Workspace, to ``warehouse/comparisons/comparisons.parquet``
  (``COMPARISON_SCHEMA``), with the numbers of ``report.comparisons``.

How the numbers stay identical while the work is vectorized:

* Trial rows are read with DuckDB (the listed Parquet files; strings grouped
  into small cell, Task and Job tables, the rows sorted on integers) in the
  order ``Warehouse.trial_records`` gives them -- Task name, attempt -- then
  Job id, which ``trial_records`` leaves open: when two Jobs ran one cell, a
  per-Task sum of Rewards that are not exact in binary can differ from the
  per-cell path in its last bit, whose order for those Trials is arbitrary.
* Per-Task sums are formed in Trial order, one attempt rank at a time over all
  Tasks at once (``acc[tasks] += reward``), which is the left-to-right sum
  ``stats.per_task_means`` does, so per-Task means are the same floats.
  Cost and duration totals use Python's ``sum`` over each cell's column, as
  ``report.cell_result`` does.
* Every bootstrap in ``stats`` seeds ``default_rng(DEFAULT_SEED)`` afresh, so
  all vectors of the same length ``n`` resample with the *same* index matrix.
  :func:`bootstrap_cis` draws that matrix once per ``n`` (same chunks, same
  draws as ``stats.bootstrap_mean_ci``) and applies it to every vector of that
  length, in cache-sized tiles; each resample mean is the same row reduction
  over the same values, so each interval equals ``stats.bootstrap_mean_ci``'s
  exactly (the tests check it). Vectors with no Task or all values equal go to
  ``stats.bootstrap_mean_ci`` itself.

Idempotent: a fingerprint of the inputs (trial file paths, sizes, mtimes; the
source of ``stats`` and of this module; NumPy's version; resamples and seed) is
kept in ``warehouse/aggregates/_fingerprint.json``. When it is unchanged and the
outputs are still there, :func:`reaggregate` returns ``changed=False`` after a
directory scan and writes nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from amber_pipeline.cells import NO_MODEL, cell_file_id
from amber_pipeline.scoring import bootstrap as stats
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import CELL_RESULT_SCHEMA, COMPARISON_SCHEMA

ENGINE_VERSION = 1  # bump when the outputs of this module change meaning
FINGERPRINT_NAME = "_fingerprint.json"
CONFIDENCE = 0.95  # stats' default, which the per-cell path uses



_TILE_ELEMENTS = 64_000  # indices per tile (32 resamples of 2,000 Tasks): a tile stays in L2 across the vectors
_TILE_VECTORS = 4  # vectors gathered per np.take call
_MEANS_BYTES = 64 * 2**20  # resample means held at once (vectors x resamples x 8 bytes)


@dataclass
class Reaggregation:
    changed: bool  # False: inputs unchanged since the last run, nothing written
    cells: int  # (Workspace, cell) aggregates written (or, unchanged, last written)
    comparisons: int
    seconds: float


def comparisons_file(wh: Warehouse) -> Path:
    return wh.paths.warehouse / "comparisons" / "comparisons.parquet"


def fingerprint_file(wh: Warehouse) -> Path:
    return wh.paths.aggregates / FINGERPRINT_NAME


def reaggregate(wh: Warehouse, *, n_resamples: int = stats.N_RESAMPLES, force: bool = False) -> Reaggregation:
    """Recompute every cell aggregate and every comparison from the stored Trial rows.

    Cheap when nothing changed: returns ``changed=False`` without writing when
    the fingerprint of the inputs matches the stored one (unless ``force``).
    Runs are serialized across processes by a file lock.
    """
    start = time.perf_counter()
    if n_resamples < stats.MIN_RESAMPLES:
        raise ValueError(f"n_resamples must be >= {stats.MIN_RESAMPLES}, got {n_resamples}")
    with _locked(wh.paths.aggregates / "_reaggregate.lock"):
        files = _trial_files(wh.paths.trials)
        key = _fingerprint(files, n_resamples)
        stored = _read_fingerprint(fingerprint_file(wh))
        if (not force and stored is not None and stored.get("key") == key
                and all((wh.paths.warehouse / p).exists() for p in stored.get("outputs", []))):
            return Reaggregation(False, int(stored["cells"]), int(stored["comparisons"]),
                                 time.perf_counter() - start)

        cells, task_vectors, task_codes = _cells([f for f, _, _ in files])
        pairs = _pairs(cells, task_vectors, task_codes)
        intervals = bootstrap_cis([*task_vectors, *(d for _, _, d in pairs)], n_resamples=n_resamples)
        cell_cis, pair_cis = intervals[:len(task_vectors)], intervals[len(task_vectors):]

        outputs = []
        for cell, x, ci in zip(cells, task_vectors, cell_cis, strict=True):
            row = {**cell, "n_tasks": int(x.size), "mean_reward": float(x.mean()) if x.size else math.nan,
                   "ci_low": ci.low, "ci_high": ci.high}
            path = wh.aggregates_file(cell_file_id(cell["cell_key"]), cell["workspace"])
            wh.write_parquet(pa.Table.from_pylist([row], schema=CELL_RESULT_SCHEMA), path)
            outputs.append(path)
        rows = []
        for (better, worse, d), ci in zip(pairs, pair_cis, strict=True):
            rows.append({
                "workspace": better["workspace"], "benchmark_version_id": better["benchmark_version_id"],
                "agent": better["agent"], "better": better["model_configuration"],
                "worse": worse["model_configuration"],
                "mean_difference": float(d.mean()) if d.size else math.nan,
                "ci_low": ci.low, "ci_high": ci.high, "n_shared_tasks": int(d.size),
                "too_close_to_call": d.size < 2 or ci.contains(0.0),
                "better_cell_key": better["cell_key"], "worse_cell_key": worse["cell_key"]})
        wh.write_parquet(pa.Table.from_pylist(rows, schema=COMPARISON_SCHEMA), comparisons_file(wh))
        outputs.append(comparisons_file(wh))

        _write_fingerprint(fingerprint_file(wh), {
            "key": key, "trial_files": len(files), "n_resamples": n_resamples, "cells": len(cells),
            "comparisons": len(rows), "outputs": [str(p.relative_to(wh.paths.warehouse)) for p in outputs]})
        return Reaggregation(True, len(cells), len(rows), time.perf_counter() - start)


# ---- inputs and fingerprint ------------------------------------------------------------------------


def _trial_files(root: Path) -> list[tuple[Path, int, int]]:
    """Every stored Trial file (``<cell file id>/<job>.parquet``) with its size and mtime, sorted.

    Files being written (``.<name>.<uuid>.tmp``) are not listed.
    """
    out = []
    with contextlib.suppress(FileNotFoundError), os.scandir(root) as cells:
        for cell in cells:
            if not cell.is_dir() or cell.name.startswith("."):
                continue
            with os.scandir(cell.path) as entries:
                for e in entries:
                    if e.name.endswith(".parquet") and not e.name.startswith(".") and e.is_file():
                        st = e.stat()
                        out.append((Path(e.path), st.st_size, st.st_mtime_ns))
    return sorted(out)


def _fingerprint(files: Sequence[tuple[Path, int, int]], n_resamples: int) -> str:
    h = hashlib.sha256()
    for module in (stats.__file__, __file__):
        h.update(hashlib.sha256(Path(module).read_bytes()).digest())
    h.update(json.dumps([ENGINE_VERSION, np.__version__, n_resamples, stats.DEFAULT_SEED, CONFIDENCE]).encode())
    for path, size, mtime_ns in files:
        h.update(f"{path}\0{size}\0{mtime_ns}\n".encode())
    return h.hexdigest()


def _read_fingerprint(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_fingerprint(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# ---- cells -------------------------------------------------------------------------------------------


def _sql_list(paths: Sequence[Path]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def _cells(files: Sequence[Path]) -> tuple[list[dict], list[np.ndarray], list[np.ndarray]]:
    """One dict per (Workspace, cell) with its Trial counts, cost and duration; its per-Task means; their Tasks.

    Per-Task mean vectors are in sorted Task-name order, as ``stats.cell_score``
    takes them. Each comes with its Tasks' codes: the rank of the Task name
    among all Tasks of the cell's group (Workspace, Benchmark Version, Agent),
    which is how two cells of a group are paired Task by Task.
    Cancelled Trials are not results (``report.results_only``); a Trial without a
    Reward is left out of the means (``stats.per_task_means``).
    """
    if not files:
        return [], [], []
    con = duckdb.connect()
    try:
        # Strings are grouped once into small tables (cells, Tasks, Jobs); the million-row side is
        # joined to them and sorted on integers only.
        con.execute(f"""
            create temp view r as
            select workspace, cell_key, benchmark_version_id, agent, model_configuration, task_name, attempt,
                   job_id, reward, errored, cost_usd, duration_sec
            from read_parquet({_sql_list(files)}, union_by_name = true)
            where outcome is distinct from 'cancelled'""")
        con.execute("""
            create temp table c as
            select row_number() over (order by workspace, cell_key) - 1 as cell_ix, *
            from (select workspace, cell_key, min(benchmark_version_id) as benchmark_version_id,
                         min(agent) as agent, min(model_configuration) as model_configuration,
                         count(*) as n_trials, count(*) filter (where errored) as errored
                  from r group by workspace, cell_key)""")
        con.execute("""
            create temp table t as
            select workspace, benchmark_version_id, agent, task_name,
                   row_number() over (partition by workspace, benchmark_version_id, agent order by task_name) - 1
                       as task_code
            from (select distinct workspace, benchmark_version_id, agent, task_name from r)""")
        con.execute("create temp table j as select job_id, row_number() over (order by job_id) as job_ix "
                    "from (select distinct job_id from r)")
        meta = con.execute("""
            select workspace, cell_key, benchmark_version_id, agent, model_configuration, n_trials, errored
            from c order by cell_ix""").fetch_arrow_table()
        rows = con.execute("""
            select c.cell_ix, t.task_code, r.reward is not null as scored, coalesce(r.reward, 0.0) as reward,
                   r.cost_usd, r.duration_sec
            from r join c on c.workspace = r.workspace and c.cell_key = r.cell_key
                   join t on t.workspace = r.workspace and t.benchmark_version_id = r.benchmark_version_id
                         and t.agent = r.agent and t.task_name = r.task_name
                   join j on j.job_id = r.job_id
            order by c.cell_ix, t.task_code, r.attempt, j.job_ix""").fetch_arrow_table()
    finally:
        con.close()
    if meta.num_rows == 0:
        return [], [], []

    cell_ix = rows["cell_ix"].to_numpy()
    task_code = rows["task_code"].to_numpy()
    new_task = np.ones(cell_ix.size, dtype=bool)
    new_task[1:] = (cell_ix[1:] != cell_ix[:-1]) | (task_code[1:] != task_code[:-1])
    task_ix = np.cumsum(new_task) - 1
    scored = rows["scored"].to_numpy(zero_copy_only=False)
    reward = rows["reward"].to_numpy()
    cost = rows["cost_usd"].to_numpy()
    duration = rows["duration_sec"].to_numpy()
    del rows
    if not np.all(np.isfinite(reward)):
        bad = int(np.flatnonzero(~np.isfinite(reward))[0])
        raise ValueError(f"non-finite reward {reward[bad]!r} in the stored Trials")

    n_cells, n_tasks = meta.num_rows, int(task_ix[-1]) + 1
    cell_bounds = np.searchsorted(cell_ix, np.arange(n_cells + 1))
    task_first = np.searchsorted(task_ix, np.arange(n_tasks))
    task_cell = cell_ix[task_first]

    # Per-Task sums in Trial order: rank each scored Trial within its Task, then add rank by rank.
    s_task, s_reward = task_ix[scored], reward[scored]
    counts = np.bincount(s_task, minlength=n_tasks)
    rank = np.arange(s_task.size) - np.searchsorted(s_task, s_task)
    by_rank = np.argsort(rank, kind="stable")
    rank_bounds = np.searchsorted(rank[by_rank], np.arange(int(rank.max(initial=-1)) + 2))
    sums = np.zeros(n_tasks, dtype=np.float64)
    for lo, hi in itertools.pairwise(rank_bounds):
        at = by_rank[lo:hi]  # at most one Trial per Task at a given rank
        sums[s_task[at]] = sums[s_task[at]] + s_reward[at]
    has = counts > 0
    means = sums[has] / counts[has]
    codes = task_code[task_first][has]
    mean_bounds = np.searchsorted(task_cell[has], np.arange(n_cells + 1))

    cells, vectors, task_codes = [], [], []
    for i, cell in enumerate(meta.to_pylist()):
        lo, hi = cell_bounds[i], cell_bounds[i + 1]
        cell["cost_usd"] = sum(cost[lo:hi].tolist())  # Python's sum, in Trial order, as report.cell_result
        cell["mean_duration_sec"] = sum(duration[lo:hi].tolist()) / cell["n_trials"]
        cells.append(cell)
        vectors.append(np.ascontiguousarray(means[mean_bounds[i]:mean_bounds[i + 1]]))
        task_codes.append(codes[mean_bounds[i]:mean_bounds[i + 1]])
    return cells, vectors, task_codes


# ---- comparisons -------------------------------------------------------------------------------------


def _label(cell: dict) -> str:
    return f"{cell['agent']} / {cell['model_configuration']}"


def _pairs(cells: list[dict], vectors: list[np.ndarray],
           task_codes: list[np.ndarray]) -> list[tuple[dict, dict, np.ndarray]]:
    """Every (better, worse, per-Task differences) of two Model Configurations of one cell group.

    A cell group is one Workspace, Benchmark Version and Agent. Exactly what
    ``report.comparisons`` does on the group's cells: pairs are taken in
    ``report.cell_results`` order (mean descending, NaN last, then label);
    ``d = a - b`` over the shared Tasks in sorted name order, and when its mean
    is negative the pair is swapped and ``d = b - a``. Cells that call no model
    are not compared; nor are two cells with the same Model Configuration (two
    Agent Versions of one Agent), which are not a comparison of Model Configurations.
    """
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, c in enumerate(cells):
        if c["model_configuration"] != NO_MODEL:
            groups.setdefault((c["workspace"], c["benchmark_version_id"], c["agent"]), []).append(i)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        mean = {i: float(vectors[i].mean()) if vectors[i].size else -math.inf for i in members}
        members.sort(key=lambda i: (-mean[i], _label(cells[i])))
        width = 1 + max((int(task_codes[i].max()) for i in members if task_codes[i].size), default=-1)
        aligned = np.full((len(members), width), np.nan)
        for row, i in enumerate(members):
            aligned[row, task_codes[i]] = vectors[i]
        scored = ~np.isnan(aligned)
        for (ra, a), (rb, b) in itertools.combinations(enumerate(members), 2):
            if cells[a]["model_configuration"] == cells[b]["model_configuration"]:
                continue
            shared = scored[ra] & scored[rb]
            d = aligned[ra, shared] - aligned[rb, shared]
            if d.size and float(d.mean()) < 0:
                a, b, d = b, a, aligned[rb, shared] - aligned[ra, shared]
            out.append((cells[a], cells[b], d))
    return out


# ---- bootstrap ---------------------------------------------------------------------------------------


def bootstrap_cis(vectors: Sequence[np.ndarray], *, n_resamples: int = stats.N_RESAMPLES) -> list[stats.Interval]:
    """``stats.bootstrap_mean_ci(v, n_resamples=n_resamples)`` for every ``v``, identical numbers, much faster.

    ``stats.bootstrap_mean_ci`` seeds ``default_rng(DEFAULT_SEED)`` on every
    call, so its index matrix depends on ``n`` only. Here it is drawn once per
    ``n``, chunk by chunk exactly as there, and applied to every vector of that
    length; a tile of ``_TILE_ELEMENTS // n`` resamples is gathered for ``_TILE_VECTORS``
    vectors at a time and each resample mean is the same contiguous row
    reduction ``x[idx].mean(axis=1)`` does, so the means -- and the
    quantiles -- are the same floats.
    """
    out: list[stats.Interval | None] = [None] * len(vectors)
    by_n: dict[int, list[int]] = {}
    for i, v in enumerate(vectors):
        x = np.asarray(v, dtype=np.float64)
        if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)) or np.all(x == x[0]):
            out[i] = stats.bootstrap_mean_ci(x, n_resamples=n_resamples, confidence=CONFIDENCE)
        else:
            by_n.setdefault(x.size, []).append(i)
    if n_resamples < stats.MIN_RESAMPLES:
        raise ValueError(f"n_resamples must be >= {stats.MIN_RESAMPLES}, got {n_resamples}")
    tail = (1.0 - CONFIDENCE) / 2.0
    batch = max(1, _MEANS_BYTES // (8 * n_resamples))
    for _, members in sorted(by_n.items()):
        for b in range(0, len(members), batch):
            ids = members[b:b + batch]
            X = np.stack([np.asarray(vectors[i], dtype=np.float64) for i in ids])
            means = _resample_means(X, n_resamples)
            for i, m in zip(ids, means, strict=True):
                low, high = np.quantile(m, [tail, 1.0 - tail])
                out[i] = stats.Interval(float(low), float(high))
    return [ci for ci in out if ci is not None]


def _resample_means(X: np.ndarray, n_resamples: int) -> np.ndarray:
    """Bootstrap means of each row of ``X`` (k x n), drawn as ``stats.bootstrap_mean_ci`` draws them."""
    k, n = X.shape
    rng = np.random.default_rng(stats.DEFAULT_SEED)
    chunk = stats._chunk_size(n)
    means = np.empty((k, n_resamples), dtype=np.float64)
    tile_rows = max(1, _TILE_ELEMENTS // n)
    buf = np.empty((_TILE_VECTORS, tile_rows, n), dtype=np.float64)
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        for r in range(0, stop - start, tile_rows):
            tile = idx[r:r + tile_rows]
            rows = tile.shape[0]
            for j in range(0, k, _TILE_VECTORS):
                xs = X[j:j + _TILE_VECTORS]
                gathered = buf[:xs.shape[0], :rows]
                np.take(xs, tile, axis=1, out=gathered, mode="wrap")  # indices are in range: wrap = no check
                # gathered.mean(axis=2), which is add.reduce then true_divide by n, without allocating
                target = means[j:j + xs.shape[0], start + r:start + r + rows]
                np.add.reduce(gathered, axis=2, out=target)
                np.true_divide(target, n, out=target)
    return means
