"""Jobs: requests to run a Benchmark Version against Agent x Model Configuration pairs.

A Job is quoted, then running, then ends as exactly one of completed,
cancelled, ceiling_reached or failed (`TRANSITIONS`; anything else is
refused). The sensor turns running Jobs into cell runs; each cell run reports
its start and end here. When the last cell of an ended Job stops, the unspent
rest of its reservation is refunded, so for every Job
reserved = charged + refunded.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb

from amber_pipeline.agents import catalog as agents
from amber_pipeline.benchmarks import tasks as benchmark
from amber_pipeline.benchmarks.tasks import BenchmarkVersion
from amber_pipeline.cells import NO_MODEL, Cell
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs.trial_runner import CellRun
from amber_pipeline.models import configurations as model_configs
from amber_pipeline.money import wallet, workspaces
from amber_pipeline.warehouse.catalog import Warehouse

MIN_TRIALS, MAX_TRIALS = 1, 10
PUBLIC = "public"
LABEL = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)@(?P<number>\d+)$")
FINAL = ("completed", "cancelled", "ceiling_reached", "failed")
TRANSITIONS: dict[str, set[str]] = {
    "quoted": {"running", "cancelled"},
    "running": {"completed", "cancelled", "ceiling_reached", "failed"},
}
ACTIVE_CELL = ("pending", "running")


@dataclass(frozen=True)
class Job:
    id: str
    seq: int
    workspace: str
    benchmark_version_id: str
    benchmark_owner: str
    benchmark_label: str
    trials_per_task: int
    status: str
    quote_id: str | None
    created_at: datetime
    finished_at: datetime | None
    message: str | None

    @property
    def private(self) -> bool:
        return self.benchmark_owner != PUBLIC


@dataclass(frozen=True)
class JobCell:
    job_id: str
    cell_key: str
    agent: str
    model_configuration: str
    n_trials: int
    status: str
    message: str | None

    @property
    def label(self) -> str:
        return self.agent if self.model_configuration == NO_MODEL else f"{self.agent} / {self.model_configuration}"


def _scalar(con: duckdb.DuckDBPyConnection, query: str, params: list) -> Any:
    row = con.execute(query, params).fetchone()
    assert row is not None, query
    return row[0]


# ---- Benchmark Versions --------------------------------------------------------

def register_benchmark(wh: Warehouse, source: Path, owner: str) -> tuple[BenchmarkVersion, str]:
    """Snapshot a Benchmark folder for an owner (a Workspace, or public); a new version gets name@N."""
    version = benchmark.snapshot(source, wh.paths.benchmarks)
    with wh.write() as con:
        row = con.execute("select label from benchmark_versions where id = ? and owner = ?",
                          [version.id, owner]).fetchone()
        if row:
            return version, row[0]
        number = _scalar(con, "select coalesce(max(number), 0) + 1 from benchmark_versions "
                              "where name = ? and owner = ?", [version.name, owner])
        label = f"{version.name}@{number}"
        con.execute("insert into benchmark_versions (id, owner, name, number, label, source_path, n_tasks) "
                    "values (?, ?, ?, ?, ?, ?, ?)",
                    [version.id, owner, version.name, number, label, str(source.resolve()), len(version.tasks)])
    return version, label


def resolve_benchmark(wh: Warehouse, ref: str, workspace: str, user: str,
                      public: bool = False) -> tuple[BenchmarkVersion, str, str]:
    """(version, owner, label) from a label name@N seen by the Workspace, or from a folder path.

    A folder becomes a private Benchmark Version of the Workspace; staff may
    register it as public instead.
    """
    if LABEL.match(ref) and not Path(ref).exists():
        with wh.read() as con:
            row = con.execute("""select id, owner, name, label from benchmark_versions
                                 where label = ? and owner in (?, ?) order by owner = ? desc limit 1""",
                              [ref, workspace, PUBLIC, workspace]).fetchone()
        if row is None:
            raise AmberError(f"No Benchmark Version {ref} in Workspace {workspace}: list them with "
                             "`amber sql \"select label from benchmark_versions\"`, or give a folder path.")
        return benchmark.open_snapshot(row[0], row[2], wh.paths.benchmarks), row[1], row[3]
    if public:
        with wh.read() as con:
            if not workspaces.is_staff(con, user):
                raise AmberError("Only Amber staff can register a public Benchmark: drop --public.")
    owner = PUBLIC if public else workspace
    version, label = register_benchmark(wh, Path(ref), owner)
    return version, owner, label


def benchmark_of(wh: Warehouse, job: Job) -> BenchmarkVersion:
    with wh.read() as con:
        name = _scalar(con, "select name from benchmark_versions where id = ? and owner = ?",
                       [job.benchmark_version_id, job.benchmark_owner])
    return benchmark.open_snapshot(job.benchmark_version_id, name, wh.paths.benchmarks)


# ---- Jobs ----------------------------------------------------------------------

def check_trials(trials_per_task: int) -> None:
    if not MIN_TRIALS <= trials_per_task <= MAX_TRIALS:
        raise AmberError(f"Trials per Task must be from {MIN_TRIALS} to {MAX_TRIALS}, not {trials_per_task}: "
                         "pick a number in that range.")


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


def insert_job(con: duckdb.DuckDBPyConnection, workspace: str, user: str, version: BenchmarkVersion, owner: str,
               cells: list[Cell], trials_per_task: int, quote_id: str, now: datetime) -> str:
    """Write a quoted Job and its cells, inside the caller's transaction."""
    job_id = f"job-{uuid.uuid4().hex[:10]}"
    con.execute("insert into jobs (id, workspace, submitted_by, benchmark_version_id, benchmark_owner, "
                "trials_per_task, status, quote_id, created_at) values (?, ?, ?, ?, ?, ?, 'quoted', ?, ?)",
                [job_id, workspace, user, version.id, owner, trials_per_task, quote_id, now])
    n_trials = len(version.tasks) * trials_per_task
    con.executemany(
        "insert into job_cells (job_id, cell_key, agent, model_configuration, n_trials, status) "
        "values (?, ?, ?, ?, ?, 'pending')",
        [[job_id, c.key, c.agent, c.model_configuration, n_trials] for c in cells])
    return job_id


def transition(con: duckdb.DuckDBPyConnection, job_id: str, to: str, message: str | None = None,
               at: datetime | None = None) -> None:
    """Move a Job to another state, or refuse an illegal move."""
    current = _scalar(con, "select status from jobs where id = ?", [job_id])
    if to not in TRANSITIONS.get(current, set()):
        raise AmberError(f"Job {job_id} is {current}: it cannot become {to}.")
    if to == "running":  # start_seq orders Jobs by start, for the sensor's cursor
        con.execute("update jobs set status = ?, started_at = ?, start_seq = nextval('start_seq') where id = ?",
                    [to, at or datetime.now(UTC), job_id])
    else:
        con.execute("update jobs set status = ?, message = coalesce(?, message), finished_at = ? where id = ?",
                    [to, message, at or datetime.now(UTC), job_id])


_JOB_SELECT = """select j.id, j.seq, j.workspace, j.benchmark_version_id, j.benchmark_owner, b.label,
                        j.trials_per_task, j.status, j.quote_id, j.created_at, j.finished_at, j.message
                 from jobs j join benchmark_versions b
                   on b.id = j.benchmark_version_id and b.owner = j.benchmark_owner"""


def get_job(wh: Warehouse, job_id: str, workspace: str | None) -> Job:
    """A Job of the Workspace (None: any, for Amber's own runs)."""
    with wh.read() as con:
        row = con.execute(f"{_JOB_SELECT} where j.id = ? and (?::varchar is null or j.workspace = ?)",
                          [job_id, workspace, workspace]).fetchone()
    if row is None:
        raise AmberError(f"No Job {job_id} in Workspace {workspace}: list Jobs with `amber job status`.")
    return Job(*row)


def list_jobs(wh: Warehouse, workspace: str) -> list[Job]:
    with wh.read() as con:
        return [Job(*r) for r in con.execute(f"{_JOB_SELECT} where j.workspace = ? order by j.seq",
                                             [workspace]).fetchall()]


def cells_of(wh: Warehouse, job_id: str) -> list[JobCell]:
    with wh.read() as con:
        rows = con.execute("select job_id, cell_key, agent, model_configuration, n_trials, status, message "
                           "from job_cells where job_id = ? order by agent, model_configuration",
                           [job_id]).fetchall()
    return [JobCell(*r) for r in rows]


def new_cell_requests(wh: Warehouse, after: int) -> list[tuple[int, str, str]]:
    """(start seq, Job id, cell key) of the cells of Jobs started after the sensor's cursor."""
    with wh.read() as con:
        return con.execute("""select j.start_seq, j.id, c.cell_key from jobs j join job_cells c on c.job_id = j.id
                              where j.start_seq > ? and c.status = 'pending'
                              order by j.start_seq, c.cell_key""", [after]).fetchall()


def cell_run(wh: Warehouse, job_id: str, cell_key: str) -> CellRun:
    job = get_job(wh, job_id, None)
    matches = [c for c in cells_of(wh, job_id) if c.cell_key == cell_key]
    if not matches:
        raise AmberError(f"Job {job_id} has no cell {cell_key}: launch cells through `amber job submit`.")
    jc = matches[0]
    version = benchmark_of(wh, job)
    cell = Cell(version.id, jc.agent, agents.get(jc.agent).spec_id, jc.model_configuration)
    if cell.key != cell_key:
        raise AmberError(f"The Agent {jc.agent} changed since Job {job_id} was submitted: submit the Job again.")
    return CellRun(job_id, cell, version, job.trials_per_task, run_dir(wh, job_id, cell), job.workspace,
                   private=job.private)


def run_dir(wh: Warehouse, job_id: str, cell: Cell) -> Path:
    return wh.paths.runs / job_id / cell.file_id


def is_running(wh: Warehouse, job_id: str) -> bool:
    with wh.read() as con:
        return _scalar(con, "select status from jobs where id = ?", [job_id]) == "running"


def start_cell(wh: Warehouse, job_id: str, cell_key: str) -> bool:
    """Mark a cell running, in one step with the check that its Job still runs and the cell was not stopped."""
    with wh.write() as con:
        status = _scalar(con, "select status from jobs where id = ?", [job_id])
        if status == "running":
            updated = con.execute("update job_cells set status = 'running', started_at = now() "
                                  "where job_id = ? and cell_key = ? and status in ('pending', 'running') "
                                  "returning 1", [job_id, cell_key]).fetchall()
            if updated:
                return True
        con.execute("update job_cells set status = 'cancelled', finished_at = now(), message = ? "
                    "where job_id = ? and cell_key = ? and status in ('pending', 'running')",
                    ["the Job stopped before this cell began", job_id, cell_key])
        _end_if_idle(con, job_id)
        return False


def mark_cell(wh: Warehouse, job_id: str, cell_key: str, status: str, message: str | None = None) -> None:
    """Record that a cell stopped (done or failed); when the last cell stops, end the Job and refund the rest."""
    with wh.write() as con:
        con.execute("update job_cells set status = ?, message = ?, finished_at = now() "
                    "where job_id = ? and cell_key = ?", [status, message, job_id, cell_key])
        _end_if_idle(con, job_id)


def _end_if_idle(con: duckdb.DuckDBPyConnection, job_id: str) -> None:
    statuses = [r[0] for r in con.execute("select status from job_cells where job_id = ?", [job_id]).fetchall()]
    if any(s in ACTIVE_CELL for s in statuses):
        return
    job_status, workspace, quote_id = con.execute("select status, workspace, quote_id from jobs where id = ?",
                                                  [job_id]).fetchone() or (None, None, None)
    if job_status == "running":
        failed = statuses.count("failed")
        transition(con, job_id, "failed" if failed else "completed",
                   f"{failed} of {len(statuses)} cells could not run" if failed else None)
        job_status = "failed" if failed else "completed"
    if job_status in FINAL and quote_id:
        wallet.release(con, workspace, quote_id, job_id, f"unspent when the Job ended {job_status}")


def cancel(wh: Warehouse, workspace: str, job_id: str) -> Job:
    """Stop scheduling; running cells stop their in-flight Trials and the rest is refunded when they have."""
    get_job(wh, job_id, workspace)
    with wh.write() as con:
        transition(con, job_id, "cancelled", message="cancelled by a user")
        con.execute("update job_cells set status = 'cancelled', finished_at = now() "
                    "where job_id = ? and status = 'pending'", [job_id])
        _end_if_idle(con, job_id)
    return get_job(wh, job_id, workspace)


def charge_trial(wh: Warehouse, job_id: str, trial_key: str, cost: float) -> wallet.Charge:
    """Charge one Trial attempt to its Job's Quote; at the ceiling the Job ends ceiling_reached."""
    with wh.write() as con:
        workspace, quote_id, status = con.execute("select workspace, quote_id, status from jobs where id = ?",
                                                  [job_id]).fetchone() or (None, None, None)
        if quote_id is None:
            return wallet.Charge(Decimal(0), ceiling_reached=False)
        result = wallet.charge(con, workspace, quote_id, job_id, trial_key, wallet.usd(cost))
        if result.ceiling_reached and status == "running":
            transition(con, job_id, "ceiling_reached", message="the Job's charges reached its Quote")
            con.execute("update job_cells set status = 'cancelled', finished_at = now() "
                        "where job_id = ? and status = 'pending'", [job_id])
    return result


def trials_finished(wh: Warehouse, job_id: str) -> int:
    """Trials of the Job that have a result so far (Harbor writes result.json last)."""
    return sum(1 for _ in (wh.paths.runs / job_id).glob("*/*/result.json"))
