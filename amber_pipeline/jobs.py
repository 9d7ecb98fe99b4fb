"""Jobs: requests to run a Benchmark Version against Agent x Model Configuration pairs.

Submitting writes the Job and its cells to the catalog and nothing else; the
Dagster sensor turns new Jobs into cell runs. Each cell run reports its start
and end here, and the Job ends when its last cell does: completed when every
cell ran, failed when any cell could not run at all (its Trials' own failures
are rows, not Job failures).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from amber_pipeline import agents, benchmark, model_configs
from amber_pipeline.benchmark import BenchmarkVersion
from amber_pipeline.cells import NO_MODEL, Cell
from amber_pipeline.errors import AmberError
from amber_pipeline.trial_runner import CellRun
from amber_pipeline.warehouse import Warehouse

MIN_TRIALS, MAX_TRIALS = 1, 10
LABEL = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)@(?P<number>\d+)$")


@dataclass(frozen=True)
class Job:
    id: str
    seq: int
    benchmark_version_id: str
    benchmark_label: str
    trials_per_task: int
    status: str
    created_at: datetime
    finished_at: datetime | None
    message: str | None


@dataclass(frozen=True)
class JobCell:
    job_id: str
    cell_key: str
    agent: str
    model_configuration: str
    n_trials: int
    status: str
    message: str | None


# ---- Benchmark Versions --------------------------------------------------------

def register_benchmark(wh: Warehouse, source: Path) -> tuple[BenchmarkVersion, str]:
    """Snapshot a Benchmark folder; a new content hash gets the next label name@N."""
    version = benchmark.snapshot(source, wh.paths.benchmarks)
    with wh.write() as con:
        row = con.execute("select label from benchmark_versions where id = ?", [version.id]).fetchone()
        if row:
            return version, row[0]
        number = _scalar(con, "select coalesce(max(number), 0) + 1 from benchmark_versions where name = ?",
                         [version.name])
        label = f"{version.name}@{number}"
        con.execute("insert into benchmark_versions (id, name, number, label, source_path, n_tasks) "
                    "values (?, ?, ?, ?, ?, ?)",
                    [version.id, version.name, number, label, str(source.resolve()), len(version.tasks)])
    return version, label


def resolve_benchmark(wh: Warehouse, ref: str) -> tuple[BenchmarkVersion, str]:
    """A Benchmark Version from a label (name@N) or a folder path."""
    if LABEL.match(ref) and not Path(ref).exists():
        with wh.read() as con:
            row = con.execute("select id, name, label from benchmark_versions where label = ?", [ref]).fetchone()
        if row is None:
            raise AmberError(f"No Benchmark Version is labelled {ref}: list them with "
                             "`amber sql \"select label from benchmark_versions\"`, or give a folder path.")
        return benchmark.open_snapshot(row[0], row[1], wh.paths.benchmarks), row[2]
    return register_benchmark(wh, Path(ref))


def benchmark_of(wh: Warehouse, job: Job) -> BenchmarkVersion:
    with wh.read() as con:
        name = _scalar(con, "select name from benchmark_versions where id = ?", [job.benchmark_version_id])
    return benchmark.open_snapshot(job.benchmark_version_id, name, wh.paths.benchmarks)


def _scalar(con: duckdb.DuckDBPyConnection, query: str, params: list) -> Any:
    row = con.execute(query, params).fetchone()
    assert row is not None, query
    return row[0]


# ---- Jobs ----------------------------------------------------------------------

def plan_cells(version: BenchmarkVersion, agent: str, models: list[str], bounds: bool) -> list[Cell]:
    """The cells of a Job: the Agent with each Model Configuration, plus oracle and nop as bounds."""
    spec = agents.get(agent)
    if spec.needs_model and not models:
        raise AmberError(f"{agent} needs a Model Configuration: add --model NAME "
                         f"(known: {', '.join(sorted(model_configs.known()))}).")
    if not spec.needs_model and models:
        raise AmberError(f"{agent} calls no model: drop --model.")
    for m in models:
        model_configs.get(m)
    cells = ([Cell(version.id, agent, spec.spec_id, m) for m in dict.fromkeys(models)] if spec.needs_model
             else [Cell(version.id, agent, spec.spec_id, NO_MODEL)])
    if bounds:
        for bound in ("oracle", "nop"):
            cell = Cell(version.id, bound, agents.get(bound).spec_id, NO_MODEL)
            if cell not in cells:
                cells.append(cell)
    return cells


def submit(wh: Warehouse, benchmark_ref: str, agent: str, models: list[str], trials_per_task: int,
           bounds: bool = False) -> Job:
    if not MIN_TRIALS <= trials_per_task <= MAX_TRIALS:
        raise AmberError(f"Trials per Task must be from {MIN_TRIALS} to {MAX_TRIALS}, not {trials_per_task}: "
                         "pick a number in that range.")
    version, _ = resolve_benchmark(wh, benchmark_ref)
    cells = plan_cells(version, agent, models, bounds)
    job_id = f"job-{uuid.uuid4().hex[:10]}"
    n_trials = len(version.tasks) * trials_per_task
    with wh.write() as con:
        con.execute("insert into jobs (id, benchmark_version_id, trials_per_task, status) values (?, ?, ?, ?)",
                    [job_id, version.id, trials_per_task, "running"])
        con.executemany(
            "insert into job_cells (job_id, cell_key, agent, model_configuration, n_trials, status) "
            "values (?, ?, ?, ?, ?, 'pending')",
            [[job_id, c.key, c.agent, c.model_configuration, n_trials] for c in cells])
    return get_job(wh, job_id)


_JOB_SELECT = """select j.id, j.seq, j.benchmark_version_id, b.label, j.trials_per_task, j.status,
                        j.created_at, j.finished_at, j.message
                 from jobs j join benchmark_versions b on b.id = j.benchmark_version_id"""


def get_job(wh: Warehouse, job_id: str) -> Job:
    with wh.read() as con:
        row = con.execute(f"{_JOB_SELECT} where j.id = ?", [job_id]).fetchone()
    if row is None:
        raise AmberError(f"No Job {job_id}: list Jobs with `amber job status`.")
    return Job(*row)


def list_jobs(wh: Warehouse) -> list[Job]:
    with wh.read() as con:
        return [Job(*r) for r in con.execute(f"{_JOB_SELECT} order by j.seq").fetchall()]


def cells_of(wh: Warehouse, job_id: str) -> list[JobCell]:
    with wh.read() as con:
        rows = con.execute("select job_id, cell_key, agent, model_configuration, n_trials, status, message "
                           "from job_cells where job_id = ? order by agent, model_configuration",
                           [job_id]).fetchall()
    return [JobCell(*r) for r in rows]


def new_cell_requests(wh: Warehouse, after_seq: int) -> list[tuple[int, str, str]]:
    """(job seq, job id, cell key) of running Jobs submitted after `after_seq`, for the sensor."""
    with wh.read() as con:
        return con.execute("""select j.seq, j.id, c.cell_key from jobs j join job_cells c on c.job_id = j.id
                              where j.seq > ? and j.status = 'running' order by j.seq, c.cell_key""",
                           [after_seq]).fetchall()


def cell_run(wh: Warehouse, job_id: str, cell_key: str) -> CellRun:
    job = get_job(wh, job_id)
    matches = [c for c in cells_of(wh, job_id) if c.cell_key == cell_key]
    if not matches:
        raise AmberError(f"Job {job_id} has no cell {cell_key}: launch cells through `amber job submit`.")
    jc = matches[0]
    version = benchmark_of(wh, job)
    cell = Cell(version.id, jc.agent, agents.get(jc.agent).spec_id, jc.model_configuration)
    if cell.key != cell_key:
        raise AmberError(f"The Agent {jc.agent} changed since Job {job_id} was submitted: submit the Job again.")
    return CellRun(job_id, cell, version, job.trials_per_task, run_dir(wh, job_id, cell))


def run_dir(wh: Warehouse, job_id: str, cell: Cell) -> Path:
    return wh.paths.runs / job_id / cell.file_id


def mark_cell(wh: Warehouse, job_id: str, cell_key: str, status: str, message: str | None = None) -> None:
    """Record a cell's progress; when the last cell ends, end the Job."""
    stamp = "started_at" if status == "running" else "finished_at"
    with wh.write() as con:
        con.execute(f"update job_cells set status = ?, message = ?, {stamp} = now() "
                    "where job_id = ? and cell_key = ?", [status, message, job_id, cell_key])
        statuses = [r[0] for r in con.execute("select status from job_cells where job_id = ?", [job_id]).fetchall()]
        if all(s in ("done", "failed") for s in statuses):
            failed = statuses.count("failed")
            con.execute("update jobs set status = ?, finished_at = now(), message = ? "
                        "where id = ? and status = 'running'",
                        ["failed" if failed else "completed",
                         f"{failed} of {len(statuses)} cells could not run" if failed else None, job_id])


def trials_finished(wh: Warehouse, job_id: str) -> int:
    """Trials of the Job that have a result so far (Harbor writes result.json last)."""
    return sum(1 for _ in (wh.paths.runs / job_id).glob("*/*/result.json"))
