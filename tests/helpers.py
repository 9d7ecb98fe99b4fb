"""Shared test helpers: a funded Workspace and a submitted Job, the way a user gets them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from amber_pipeline.accounts import workspaces
from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, Actor, local_user
from amber_pipeline.jobs import lifecycle
from amber_pipeline.jobs.records import Job
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money import wallet
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trial_key, trials_table

if TYPE_CHECKING:
    from servers.api import ApiMode
    from typer.testing import Result


def funded(wh: Warehouse, workspace: str = DEFAULT_WORKSPACE, amount: str = "100") -> str:
    """A Workspace of the local (staff) user with a Credit in its Wallet."""
    actor = Actor(local_user(), workspace)
    if workspace not in [name for name, _ in workspaces.list_for(wh, actor.user)]:
        workspaces.create(wh, actor, workspace)
    wallet.add_credit(wh, actor, workspace, amount, "test credit")
    return workspace


def submit(wh: Warehouse, benchmark: str, agent: str, models: list[str], trials: int, bounds: bool = False,
           workspace: str = DEFAULT_WORKSPACE, public: bool = False) -> Job:
    """Quote and start a Job in a funded Workspace."""
    funded(wh, workspace)
    _, job = lifecycle.submit(wh, workspace, local_user(), request(benchmark, agent, models, trials, bounds, public))
    return job


def request(benchmark: str, agent: str, models: list[str] | None = None, trials: int = 1, bounds: bool = False,
            public: bool = False) -> JobRequest:
    return JobRequest(benchmark=benchmark, agent=agent, model_configurations=models or [], trials_per_task=trials,
                      bounds=bounds, public=public)


def race(script: str, argv: list[list[str]], during: Callable[[], None] | None = None) -> list[dict]:
    """Start one `python -c script ARGS` per entry of argv, release them together, and collect their reports.

    Each worker prints "ready", waits for a "go" line, works, and prints a JSON object as its last line;
    `during` runs in this process while they race. Every worker must exit 0.
    """
    workers = [subprocess.Popen([sys.executable, "-c", script, *args], cwd=PROJECT_ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for args in argv]
    try:
        for w in workers:
            assert w.stdout is not None and w.stdout.readline().strip() == "ready", w.communicate()[1]
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        if during is not None:
            during()
        outputs = [w.communicate(timeout=90) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    for w, (_, err) in zip(workers, outputs, strict=True):
        assert w.returncode == 0, err
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


# ---- the CLI, in this process ----------------------------------------------------------------------------

def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    """`amber ARGS` run in this process by Typer's runner (AMBER_HOME and AMBER_CONFIG from the environment,
    `env` added for this call only); stdout and stderr come back apart. In a `cli_mode` "api" run, the command
    is the client of a hosted API on loopback over the same AMBER_HOME (`servers/api.py`)."""
    from typer.testing import CliRunner

    from amber_pipeline.cli.app import app

    given = list(args)
    if API_MODE is not None:  # the same command, as the hosted API's client (`cli_mode`)
        given, env = API_MODE.client(given, env)
    return CliRunner().invoke(app, given, env=env)


API_MODE: ApiMode | None = None  # set by conftest's `cli_mode` fixture for its "api" runs


def free_port() -> int:
    """A TCP port free on loopback now, for a server a test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sign_in(*args: str) -> None:
    """Against `amber serve`, make the token of the user `amber ARGS` acts as now (a catalog write), so a test
    that compares the catalog before and after a command sees only what the command did; nothing locally."""
    if API_MODE is not None:
        API_MODE.client(list(args), None)


def ok(result: Result) -> str:
    """The stdout of a command that succeeded (and wrote nothing on stderr)."""
    assert result.exit_code == 0 and result.exception is None, (result.stdout, result.stderr, result.exception)
    assert result.stderr == "", result.stderr
    return result.stdout


def refusal(result: Result) -> str:
    """The sentence of a refused command: exit status 1, exactly one line `amber: ...` on stderr, nothing on
    stdout, and no exception but the exit (in a process of its own that would have been a traceback)."""
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.stdout == "", result.stdout
    assert result.stderr.startswith("amber: ") and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.endswith("\n") and "Traceback" not in result.stderr, result.stderr
    return result.stderr.removeprefix("amber: ").strip()


def costs_and_charges(wh: Warehouse, job_id: str) -> tuple[dict[str, float], dict[str, float]]:
    """Per Trial of a Job: the `trials` view's cost (of Trials that cost something) and the ledger's charge,
    which must be equal, always."""
    with wh.query() as con:
        costs = {trial_key(job_id, cell, task, attempt): cost for cell, task, attempt, cost in con.execute(
            "select cell_key, task_name, attempt, cost_usd from trials where job_id = ? and cost_usd > 0",
            [job_id]).fetchall()}
        charges = dict(con.execute("select trial_key, amount::double from ledger where kind = 'charge' and "
                                   "job_id = ?", [job_id]).fetchall())
    return costs, charges


def stop_group(process: subprocess.Popen) -> None:
    """Stop a process a test started in a session of its own, with everything it started in that session."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def trial_rows(workspace: str, job_id: str, n: int) -> pa.Table:
    """``n`` scored Trial rows of one Workspace's Job, as a cell run stores them."""
    at = datetime(2026, 12, 2, tzinfo=UTC)
    return trials_table([TrialRecord(
        workspace=workspace, job_id=job_id, cell_key=f"bv=x|agent=direct@1|mc={workspace}", benchmark_version_id="x",
        task_name=f"{workspace}-task-{i}", attempt=1, trial_name=f"t{i}__1", agent="direct", agent_version="v",
        model_configuration="replay-strong", outcome="scored", reward=float(i % 2), errored=False, retries=0,
        error_type=None, error_message=None, input_tokens=10, output_tokens=5, cost_usd=0.001, started_at=at,
        finished_at=at, duration_sec=1.0, image_id=None, trial_dir=f"/x/{workspace}/{i}") for i in range(n)])


def stored_contents(home: Path) -> Iterator[tuple[Path, str, bytes]]:
    """Every file under ``home`` as its bytes ("raw"); Parquet and DuckDB files, whose pages are compressed (so a
    key in them need not appear as its bytes), also decoded: every value of every table ("parquet", "duckdb")."""
    for path in sorted(p for p in home.rglob("*") if p.is_file()):
        data = path.read_bytes()
        yield path, "raw", data
        if data[:4] == b"PAR1":
            yield path, "parquet", json.dumps(pq.read_table(path).to_pylist(), default=str).encode()
        elif data[8:12] == b"DUCK":
            with duckdb.connect(str(path), read_only=True) as con:
                tables = con.execute("select schema_name, table_name from duckdb_tables()").fetchall()
                for schema, table in tables:
                    values = con.execute(f'select * from "{schema}"."{table}"').fetchall()
                    yield path, "duckdb", json.dumps(values, default=str).encode()


def trial_sandboxes(client, folder: Path) -> list:
    """The sandboxes, running or not, of the Trials under ``folder`` (a Job's or a cell's run folder, or every
    run's) on the engine of ``client``."""
    from amber_pipeline.sandbox.container import sandboxes_on  # deferred: the Docker SDK

    return [c for found in sandboxes_on(client, folder).values() for c in found]


def children(pid: int) -> dict[int, tuple[bytes, bytes]]:
    """The running children of process ``pid``, each with its name (/proc/PID/comm) and command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            if entry.name.isdigit() and fields[1] == str(pid) and fields[0] != "Z":
                found[int(entry.name)] = ((entry / "comm").read_bytes().strip(),
                                          (entry / "cmdline").read_bytes().replace(b"\0", b" "))
        except OSError:
            continue
    return found
