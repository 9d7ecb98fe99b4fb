"""Jobs and their cells as the catalog holds them, and the reads everyone shares.

Every read of a Job for a user names the Workspace, so a Job of another
Workspace is reported with exactly the sentence of one that does not exist.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from amber_pipeline.benchmarks.registry import PUBLIC
from amber_pipeline.cells import NO_MODEL, cell_file_id, model_name
from amber_pipeline.errors import AmberError, NotFound
from amber_pipeline.jobs import cell_names
from amber_pipeline.jobs.decisions import JobDecision
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money import wallet
from amber_pipeline.warehouse.catalog import Connection, Warehouse

FINAL = ("completed", "cancelled", "ceiling_reached", "failed")
FOLDER_NAME = re.compile(r"[A-Za-z0-9._@+-]{1,200}")
FOLDER_UNSAFE = re.compile(r"[^A-Za-z0-9._@+-]")
ACTIVE_CELL = ("pending", "running")


@dataclass(frozen=True)
class Job:
    id: str
    seq: int  # counts the Workspace's Jobs from 1 (the catalog's `workspace_jobs`): no other Workspace's gaps
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
    purpose: str | None = None  # "validation" for an upload's validation Job
    stop: JobDecision | None = None  # the decision a Job run with stop_when_decided stopped early on

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
    engine_pool: str | None = None

    @property
    def label(self) -> str:
        if self.model_configuration == NO_MODEL:
            return self.agent
        return f"{self.agent} / {model_name(self.model_configuration)}"


@dataclass(frozen=True)
class CellLaunch:
    """A cell of a running Job, claimed for its run: what `launcher/cell_runs.py` turns into a cell run."""

    job_id: str
    cell_key: str
    cell_name: str  # the cell's name, its partition key in Dagster
    pool: str | None = None  # the engine pool it was placed on (`placement.py`)
    moves: int = 0  # times an engine that stopped answering handed it back
    rounds: int = 0  # times `amber job continue` ran the cell again

    @property
    def run_key(self) -> str:
        """One run per Job and cell, per placement and per round: a replayed request never starts a second, and
        a cell handed back by a dead engine, or run again by `amber job continue`, gets a new one."""
        placed = f":{self.moves}" if self.moves else ""
        again = f":r{self.rounds}" if self.rounds else ""
        return f"{self.job_id}:{cell_file_id(self.cell_key)}{placed}{again}"


_JOB_SELECT = """select j.id, j.seq, j.workspace, j.benchmark_version_id, j.benchmark_owner, b.label,
                        j.trials_per_task, j.status, j.quote_id, j.created_at, j.finished_at, j.message, j.request,
                        j.purpose, j.stop
                 from workspace_jobs j join benchmark_versions b
                   on b.id = j.benchmark_version_id and b.owner = j.benchmark_owner"""


def _job(row: tuple) -> Job:
    (id_, seq, workspace, version_id, owner, label, trials, status, quote_id, created_at, finished_at, message,
     request, purpose, stop) = row
    return Job(id_, seq, workspace, version_id, owner, label, trials, status, quote_id, created_at, finished_at,
               message, JobRequest.model_validate_json(request) if request else None, purpose,
               JobDecision.model_validate_json(stop) if stop else None)


def get_job(wh: Warehouse, job_id: str, workspace: str | None) -> Job:
    """A Job of the Workspace (None: any, for Amber's own runs)."""
    with wh.read() as con:
        row = con.execute(f"{_JOB_SELECT} where j.id = ? and (?::varchar is null or j.workspace = ?)",
                          [job_id, workspace, workspace]).fetchone()
    if row is None:
        raise NotFound(f"No Job {job_id} in Workspace {workspace}: list Jobs with `amber job status`.")
    return _job(row)


def list_jobs(wh: Warehouse, workspace: str) -> list[Job]:
    with wh.read() as con:
        return [_job(r) for r in con.execute(f"{_JOB_SELECT} where j.workspace = ? order by j.seq",
                                             [workspace]).fetchall()]


def cells_of(wh: Warehouse, job_id: str) -> list[JobCell]:
    with wh.read() as con:
        rows = con.execute("select job_id, cell_key, agent, model_configuration, n_trials, status, message, "
                           "engine_pool from job_cells where job_id = ? order by agent, model_configuration",
                           [job_id]).fetchall()
    return [JobCell(*r) for r in rows]


def claim_cells(wh: Warehouse, job_id: str | None = None) -> list[CellLaunch]:
    """Claim the pending cells of running Jobs (of one Job, or all) that nobody launched yet, each placed on an
    engine pool (`placement.py`).

    The claim is one statement, so whichever hand asks first (the warm worker told of a start, or the sensor's
    tick) gets a cell and the other does not: each cell of a Job gets one run.
    Placing asks the engines whether they answer, so it comes after, only for cells just claimed.
    """
    from amber_pipeline.jobs import placement  # deferred: it imports the Docker SDK, which most commands never use

    with wh.write() as con:
        rows = con.execute("""update job_cells set launched_at = now() from jobs j
                              where j.id = job_cells.job_id and j.status = 'running' and job_cells.status = 'pending'
                                and job_cells.launched_at is null and (?::varchar is null or j.id = ?)
                              returning job_cells.job_id, job_cells.cell_key, job_cells.agent""",
                           [job_id, job_id]).fetchall()
    if not rows:
        return []
    pools = placement.answering_pools()
    with wh.write() as con:
        for (job, key), pool in placement.place(con, rows, pools).items():
            con.execute("update job_cells set engine_pool = ? where job_id = ? and cell_key = ?", [pool, job, key])
        return _launches(con, [(job, key) for job, key, _ in rows])


def unstarted_claims(wh: Warehouse, older_than: timedelta) -> list[CellLaunch]:
    """Claimed cells of running Jobs whose run has not started them for a while: their launcher may have died
    between the claim and the run, so the sensor asks again (the run key keeps it to one run)."""
    with wh.read() as con:
        rows = con.execute("""select c.job_id, c.cell_key from job_cells c join jobs j on j.id = c.job_id
                              where j.status = 'running' and c.status = 'pending' and c.launched_at < ?""",
                           [datetime.now(UTC) - older_than]).fetchall()
        return _launches(con, rows)


def _launches(con: Connection, rows: list[tuple]) -> list[CellLaunch]:
    names = cell_names.of(con, [key for _, key in rows])
    placed = {(job, key): (pool, moves or 0, rounds or 0) for job, key, pool, moves, rounds in con.execute(
        "select job_id, cell_key, engine_pool, moves, rounds from job_cells where job_id in (select unnest(?))",
        [sorted({job for job, _ in rows})]).fetchall()} if rows else {}
    return sorted((CellLaunch(job_id, key, names[key], *placed.get((job_id, key), (None, 0, 0)))
                   for job_id, key in rows), key=lambda c: (c.job_id, c.cell_name))


def version_of_cell(wh: Warehouse, cell_key: str) -> str:
    """The Benchmark Version a cell of some Job belongs to."""
    with wh.read() as con:
        row = con.execute("select j.benchmark_version_id from job_cells c join jobs j on j.id = c.job_id "
                          "where c.cell_key = ? limit 1", [cell_key]).fetchone()
    if row is None:
        raise AmberError(f"No Job has the cell {cell_key}: submit one with `amber job submit`.")
    return row[0]


def cells_of_version(wh: Warehouse, benchmark_version_id: str) -> list[str]:
    """The keys of every cell any Job ran on a Benchmark Version, whoever's."""
    with wh.read() as con:
        return [r[0] for r in con.execute(
            "select distinct c.cell_key from job_cells c join jobs j on j.id = c.job_id "
            "where j.benchmark_version_id = ? order by 1", [benchmark_version_id]).fetchall()]


def run_dir(wh: Warehouse, job_id: str, cell_key: str) -> Path:
    """Where a cell's Trial folders go: a Harbor job folder named for the cell (`cell_folder`), so Harbor's
    viewer lists each cell of the Job by its name. A cell run before folders were named keeps its id's folder."""
    by_id = wh.paths.runs / job_id / cell_file_id(cell_key)
    if by_id.exists():
        return by_id
    return wh.paths.runs / job_id / cell_folder(cell_names.read(wh, [cell_key])[cell_key], cell_key)


def cell_folder(name: str, cell_key: str) -> str:
    """A cell's name as a folder name (`demo-bench@1__terminus-2__replay-strong`). Harbor's viewer puts it in
    its pages' URLs unescaped, so a name with any other character than these gets the cell's id after it, which
    keeps it unique."""
    folder = name.replace("/", "__")
    if FOLDER_NAME.fullmatch(folder) and not folder.startswith("."):
        return folder
    return f"{FOLDER_UNSAFE.sub('-', folder)[:80]}__{cell_file_id(cell_key)}"


def trials_finished(wh: Warehouse, job_id: str) -> int:
    """Trials of the Job that have a result so far: a cell's stored Trials once its run wrote them, else its
    Trial folders with a result (Harbor writes result.json last; static Trials have no folder)."""
    done = 0
    for cell in cells_of(wh, job_id):
        file_id = cell_file_id(cell.cell_key)
        stored = wh.store.row_count(wh.trials_file(file_id, job_id))
        if stored is not None:
            done += stored
        else:
            done += sum(1 for _ in run_dir(wh, job_id, cell.cell_key).glob("*/result.json"))
    return done


@dataclass(frozen=True)
class JobMoney:
    """Who started a Job and what it has reserved, been charged and been refunded, over all its Quotes."""

    started_by: str | None
    reserved: Decimal
    charged: Decimal
    refunded: Decimal


def job_money(wh: Warehouse, job_id: str) -> JobMoney:
    with wh.read() as con:
        reserved, charged, refunded = wallet.job_totals(con, job_id)
        row = con.execute("select user_name from audit where job_id = ? and action = 'start' order by seq limit 1",
                          [job_id]).fetchone()
    return JobMoney(None if row is None else row[0], reserved, charged, refunded)


# An Agent's own token count is compared with the proxy's only past this gap: tokenizers and rounding differ a little.
METERING_TOLERANCE = 0.01


def metering_disagreements(wh: Warehouse, workspace: str, job_id: str) -> list[dict]:
    """Per Agent x Model Configuration of the Job, where the Agent's own token count differs from what the model
    proxy metered (and charged) by more than 1%: both counts, so a report can show them side by side. Summed from
    the Job's own Trial files (the Workspace's rows), not through the `trials` view, which reads every Job's."""
    columns = ["workspace", "agent", "model_configuration", "input_tokens", "agent_input_tokens", "output_tokens",
               "agent_output_tokens"]
    sums: dict[str, list[int]] = {}  # route -> metered input, the Agent's input, metered output, the Agent's output
    for cell in cells_of(wh, job_id):
        table = wh.read_parquet(wh.trials_file(cell_file_id(cell.cell_key), job_id), columns)
        for r in [] if table is None else table.to_pylist():
            if r["workspace"] == workspace and r["agent_input_tokens"] is not None:
                found = sums.setdefault(f"{r['agent']}/{r['model_configuration']}", [0, 0, 0, 0])
                for i, name in enumerate(columns[3:]):
                    found[i] += r[name] or 0  # an unknown count adds nothing, as SQL's sum leaves it out

    def differs(metered: int, reported: int) -> bool:
        return abs(metered - reported) > METERING_TOLERANCE * max(metered, reported, 1)
    return [{"route": route, "metered_input": mi, "agent_input": ai, "metered_output": mo, "agent_output": ao}
            for route, (mi, ai, mo, ao) in sorted(sums.items()) if differs(mi, ai) or differs(mo, ao)]


def cell_verdict(wh: Warehouse, job_id: str, cell_key: str) -> tuple[str, str | None]:
    """How a cell whose Trials are stored ends: done, or failed when every Trial that ran errored (nothing was
    measured, so its Job must not read completed), naming the commonest error."""
    stored = wh.read_parquet(wh.trials_file(cell_file_id(cell_key), job_id), ["outcome", "error_type", "error_message"])
    rows = [] if stored is None else stored.to_pylist()
    ran = [r for r in rows if r["outcome"] != "cancelled"]
    if not ran or any(r["outcome"] == "scored" for r in ran):
        return "done", None
    errors = Counter(" ".join(filter(None, [r["error_type"], (r["error_message"] or "").partition("\n")[0]]))
                     for r in ran)
    error, count = errors.most_common(1)[0]
    return "failed", f"every Trial errored ({count} of {len(ran)}: {error or 'no reason given'})"
