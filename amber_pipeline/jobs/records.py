"""Jobs and their cells as the catalog holds them, and the reads everyone shares.

Every read of a Job for a user names the Workspace, so a Job of another
Workspace is reported with exactly the sentence of one that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq

from amber_pipeline.benchmarks.registry import PUBLIC
from amber_pipeline.cells import NO_MODEL, Cell, cell_file_id, model_name
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.warehouse.catalog import Warehouse

FINAL = ("completed", "cancelled", "ceiling_reached", "failed")
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
    request: JobRequest | None  # None for Jobs recorded before requests were kept

    @property
    def private(self) -> bool:
        return self.benchmark_owner != PUBLIC

    @property
    def ended(self) -> bool:
        return self.status in FINAL


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
        if self.model_configuration == NO_MODEL:
            return self.agent
        return f"{self.agent} / {model_name(self.model_configuration)}"


@dataclass(frozen=True)
class CellRequest:
    """A cell of a started Job that still waits for its run: what the sensor turns into a run request."""

    start_seq: int  # the Job's place in start order, the sensor's cursor
    job_id: str
    cell_key: str


_JOB_SELECT = """select j.id, j.seq, j.workspace, j.benchmark_version_id, j.benchmark_owner, b.label,
                        j.trials_per_task, j.status, j.quote_id, j.created_at, j.finished_at, j.message, j.request
                 from jobs j join benchmark_versions b
                   on b.id = j.benchmark_version_id and b.owner = j.benchmark_owner"""


def _job(row: tuple) -> Job:
    (id_, seq, workspace, version_id, owner, label, trials, status, quote_id, created_at, finished_at, message,
     request) = row
    return Job(id_, seq, workspace, version_id, owner, label, trials, status, quote_id, created_at, finished_at,
               message, JobRequest.model_validate_json(request) if request else None)


def get_job(wh: Warehouse, job_id: str, workspace: str | None) -> Job:
    """A Job of the Workspace (None: any, for Amber's own runs)."""
    with wh.read() as con:
        row = con.execute(f"{_JOB_SELECT} where j.id = ? and (?::varchar is null or j.workspace = ?)",
                          [job_id, workspace, workspace]).fetchone()
    if row is None:
        raise AmberError(f"No Job {job_id} in Workspace {workspace}: list Jobs with `amber job status`.")
    return _job(row)


def list_jobs(wh: Warehouse, workspace: str) -> list[Job]:
    with wh.read() as con:
        return [_job(r) for r in con.execute(f"{_JOB_SELECT} where j.workspace = ? order by j.seq",
                                             [workspace]).fetchall()]


def cells_of(wh: Warehouse, job_id: str) -> list[JobCell]:
    with wh.read() as con:
        rows = con.execute("select job_id, cell_key, agent, model_configuration, n_trials, status, message "
                           "from job_cells where job_id = ? order by agent, model_configuration",
                           [job_id]).fetchall()
    return [JobCell(*r) for r in rows]


def waiting_cells(wh: Warehouse, after: int) -> list[CellRequest]:
    """The pending cells of Jobs started after the sensor's cursor (a Job's place in start order)."""
    with wh.read() as con:
        rows = con.execute("""select j.start_seq, j.id, c.cell_key from jobs j join job_cells c on c.job_id = j.id
                              where j.start_seq > ? and c.status = 'pending'
                              order by j.start_seq, c.cell_key""", [after]).fetchall()
    return [CellRequest(*r) for r in rows]


def run_dir(wh: Warehouse, job_id: str, cell: Cell) -> Path:
    """Where a cell's Trial folders go: Harbor's own layout, so `harbor view` reads them."""
    return wh.paths.runs / job_id / cell.file_id


def trials_finished(wh: Warehouse, job_id: str) -> int:
    """Trials of the Job that have a result so far: a cell's stored Trials once its run wrote them, else its
    Trial folders with a result (Harbor writes result.json last; static Trials have no folder)."""
    done = 0
    for cell in cells_of(wh, job_id):
        file_id = cell_file_id(cell.cell_key)
        stored = wh.trials_file(file_id, job_id)
        if stored.is_file():
            done += pq.ParquetFile(stored).metadata.num_rows
        else:
            done += sum(1 for _ in (wh.paths.runs / job_id / file_id).glob("*/result.json"))
    return done


# An Agent's own token count is compared with the proxy's only past this gap: tokenizers and rounding differ a little.
METERING_TOLERANCE = 0.01


def metering_disagreements(wh: Warehouse, workspace: str, job_id: str) -> list[dict]:
    """Per Agent x Model Configuration of the Job, where the Agent's own token count differs from what the model
    proxy metered (and charged) by more than 1%: both counts, so a report can show them side by side."""
    with wh.query(workspace) as con:
        rows = con.execute("""
            select agent || '/' || model_configuration, sum(input_tokens), sum(agent_input_tokens),
                   sum(output_tokens), sum(agent_output_tokens)
            from trials where job_id = ? and agent_input_tokens is not null group by all order by 1""",
                           [job_id]).fetchall()
    def differs(metered: int, reported: int) -> bool:
        return abs(metered - reported) > METERING_TOLERANCE * max(metered, reported, 1)
    return [{"route": route, "metered_input": int(mi), "agent_input": int(ai), "metered_output": int(mo),
             "agent_output": int(ao)} for route, mi, ai, mo, ao in rows
            if differs(int(mi), int(ai)) or differs(int(mo), int(ao or 0))]
