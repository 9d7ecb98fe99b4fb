"""Static Jobs end to end: nothing between `amber job submit --wait` and the scored cell waits on a poll interval.

- `--wait` (the CLI's `watch`) reads the Job again as soon as this machine's catalog changes, so it returns as soon
  as the last cell is scored, not a poll interval later; with nothing changing it still reads every `POLL_SEC`.
- A static cell's Trials reach the run's log a batch at a time (one line per stored batch, not a row of the run's
  event log per Trial); a container's Trial still has a line of its own.
- The warm worker has imported what each fork used to import on its own (the run coordinator's dagster_graphql,
  the instance's parts), so a cell run's launch and its run start import nothing more.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import submit

from amber_pipeline.cli import jobs as cli_jobs
from amber_pipeline.cli.context import Context
from amber_pipeline.jobs import cell_run, lifecycle, records, static_run
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord
from assets.cell_job import trials_line

STATIC_BENCH = PROJECT_ROOT / "examples" / "static-bench"


@pytest.fixture
def static_job(warehouse: Warehouse) -> tuple[str, str]:
    """A started Job of the static example's 12 Tasks, its one cell not launched yet: (job id, cell key)."""
    job = submit(warehouse, str(STATIC_BENCH), "direct", ["replay-strong"], 1)
    (cell,) = records.cells_of(warehouse, job.id)
    return job.id, cell.cell_key


def _end_later(wh: Warehouse, job_id: str, cell_key: str, delay: float) -> tuple[threading.Thread, list[float]]:
    ended: list[float] = []

    def end() -> None:
        time.sleep(delay)
        ended.append(time.monotonic())  # when ending it began
        lifecycle.end_cell(wh, job_id, cell_key, "done")
        ended.append(time.monotonic())  # and when it was done

    thread = threading.Thread(target=end)
    thread.start()
    return thread, ended


def test_wait_returns_as_soon_as_the_cell_is_scored_not_a_poll_interval_later(
        warehouse: Warehouse, static_job: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    job_id, cell_key = static_job
    monkeypatch.setattr(cli_jobs, "POLL_SEC", 60.0)  # a poll would come a minute later: only the change can end it
    thread, ended = _end_later(warehouse, job_id, cell_key, 1.0)
    meanwhile: list[str] = []
    job = cli_jobs.watch(Context(paths=AmberPaths.from_env()), job_id,
                         meanwhile=lambda found: meanwhile.append(found.job.id))
    returned = time.monotonic()
    thread.join()
    assert job.status == "completed"
    assert meanwhile == [job_id]  # once, while the Job ran, given its state (what its results need, for `follow`)
    assert returned - ended[1] < 5.0, f"--wait returned {returned - ended[1]:.2f} s after the cell ended"


def test_a_follower_draws_its_reports_resample_rows_while_the_job_runs(
        static_job: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """What `follow` does while the Job runs: the rows of the report's intervals over the cell's 12 Tasks are drawn
    then (the report is then the same to the byte: `test_analysis_report`), and nothing else is kept."""
    from amber_pipeline.scoring import bootstrap

    monkeypatch.setattr(bootstrap, "_PREPARED", {})
    found = Context(paths=AmberPaths.from_env()).call("job_status", job_id=static_job[0])
    cli_jobs._ready_for_results(found)
    assert list(bootstrap._PREPARED) == [(bootstrap.DEFAULT_RESAMPLING, 12)]


def test_wait_reads_every_poll_interval_when_nothing_signals_a_change(
        warehouse: Warehouse, static_job: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a server (or on PostgreSQL) there is no file to look at: the Job is read every POLL_SEC, and the
    wait still ends at the first read after the cell ended."""
    job_id, cell_key = static_job
    monkeypatch.setattr(cli_jobs, "POLL_SEC", 0.2)
    monkeypatch.setattr(cli_jobs, "_catalog_changes", lambda c: lambda: None)
    reads: list[float] = []
    call = Context.call

    def counted(self: Context, name: str, *args: Any, **fields: Any) -> Any:
        reads.append(time.monotonic())
        return call(self, name, *args, **fields)

    monkeypatch.setattr(Context, "call", counted)
    thread, ended = _end_later(warehouse, job_id, cell_key, 2.5)
    assert cli_jobs.watch(Context(paths=AmberPaths.from_env()), job_id).status == "completed"
    thread.join()
    assert sum(r < ended[0] for r in reads) >= 2, reads  # read again with no change signalled
    assert reads[-1] > ended[0]  # the read that saw it ended (one begun while it ended waits for its commit)


def test_the_catalog_signature_changes_with_each_write(warehouse: Warehouse, static_job: tuple[str, str]) -> None:
    job_id, _ = static_job
    changed = cli_jobs._catalog_changes(Context(paths=AmberPaths.from_env()))
    before = changed()
    assert changed() == before  # a read changes nothing
    with warehouse.read() as con:
        con.execute("select count(*) from jobs").fetchone()
    assert changed() == before
    lifecycle.reach_ceiling(warehouse, job_id, "a write the follower must see")
    assert changed() != before


def test_a_static_cell_reports_its_trials_a_batch_at_a_time(
        warehouse: Warehouse, static_job: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    job_id, cell_key = static_job
    monkeypatch.setattr(static_run, "BATCH", 5)
    batches: list[list[TrialRecord]] = []
    ran = cell_run.run_trials(warehouse, job_id, cell_key, on_trials_done=batches.append)
    n = len(ran)
    assert n == 12
    sizes = [len(b) for b in batches]  # a batch is what finished while the one before was being stored: 5 or more
    assert sum(sizes) == 12 and len(sizes) <= 3 and all(size >= 5 for size in sizes[:-1]), sizes
    assert sorted(r.trial_name for b in batches for r in b) == sorted(r.trial_name for r in ran)
    line = trials_line(batches[0])
    assert line.startswith(f"5 Trials, {batches[0][0].trial_name} to {batches[0][-1].trial_name}: "), line
    assert line.endswith("s each on average"), line


def test_a_trial_alone_keeps_its_own_log_line(warehouse: Warehouse, static_job: tuple[str, str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    job_id, cell_key = static_job
    monkeypatch.setattr(static_run, "BATCH", 1)
    batches: list[list[TrialRecord]] = []
    cell_run.run_trials(warehouse, job_id, cell_key, on_trials_done=batches.append)
    (r,) = batches[0]
    outcome = "Errored" if r.errored else f"Reward {r.reward}"
    assert trials_line(batches[0]) == f"Trial {r.trial_name}: {outcome} in {r.duration_sec:.1f} s"


WARM_FORK = """
import gc, json, os, sys, time
from launcher import warm_worker
warm_worker.preload()
frozen = gc.get_freeze_count() > 10 * len(gc.get_objects())
collects = gc.isenabled()
before = set(sys.modules)
import dagster as dg
from alembic.script import ScriptDirectory
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.sql import check_alembic_revision, get_alembic_config
from dagster._core.storage.event_log.sqlite import sqlite_event_log
with dg.DagsterInstance.get() as instance:
    instance.run_coordinator, instance.run_launcher, instance.compute_log_manager
    from launcher.cell_runs import _submit
    imported = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in
                      ("dagster_graphql", "graphene", "graphql", "upath", "fsspec", "launcher"))
    config = get_alembic_config(sqlite_event_log.__file__)
    shared = ScriptDirectory.from_config(config) is ScriptDirectory.from_config(config)
    storage = instance.event_log_storage  # a new run's file: made, stamped and checked with the shared scripts
    storage.store_event(EventLogEntry(error_info=None, level=20, user_message="hello", run_id="run-1",
                                      timestamp=time.time()))
    with storage.run_connection("run-1") as conn:
        revision, head = check_alembic_revision(config, conn)
    print(json.dumps({"imported": imported, "shared": shared, "frozen": frozen, "collects": collects,
                      "stamped": revision == head is not None,
                      "logs": [e.user_message for e in storage.get_logs_for_run("run-1")]}))
"""


# A new SQLite instance on new files, three times, as a code server makes one at each sensor tick: how many
# migration scripts the process has read after each (argv[1]: "code-location" loads Amber's code location first).
INSTANCES = """
import json, sys, tempfile
if sys.argv[1] == "code-location":
    import amber_pipeline.definitions
import dagster as dg
from alembic.script.base import Script
read = []
original = Script._from_path.__func__
def counted(cls, *args, **kwargs):
    read.append(1)
    return original(cls, *args, **kwargs)
Script._from_path = classmethod(counted)
after = []
for _ in range(3):
    with dg.DagsterInstance.local_temp(tempfile.mkdtemp()) as instance:
        instance.get_runs()
    after.append(len(read))
print(json.dumps(after))
"""


def test_a_process_with_ambers_code_location_reads_the_migration_scripts_once() -> None:
    """A code server makes a Dagster instance for every sensor evaluation (three sensors, every 5-10 s), and each
    new SQLite instance read Dagster's migration scripts seven times over: most of an idle Amber's code server
    time. Once Amber's code location is loaded, a process reads each script once for its whole life."""
    def reads(mode: str) -> list[int]:
        done = subprocess.run([sys.executable, "-c", INSTANCES, mode], cwd=PROJECT_ROOT, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    shared, alone = reads("code-location"), reads("bare")
    assert shared[0] > 50 and shared == [shared[0]] * 3, shared  # every script of the three storages, once
    assert alone[0] > shared[0] and alone[2] == 3 * alone[0], alone  # without: all of them again, per instance


def test_a_fork_of_the_warm_worker_imports_nothing_more_and_reads_no_migration_script(tmp_path: Path) -> None:
    """Each fork (a launch, a run) used to import the run coordinator's dagster_graphql and the instance's parts
    on its own, half a second each time, and to read Dagster's migration scripts for each SQLite file it opened;
    a run's new file is still made and stamped at the head revision. What the worker imported is frozen out of
    the garbage collector's sight, so a fork's collections walk what it made (a full one walked 700,000 objects
    more, a third of a second); the collector, off while the worker imported them, is on again for its forks."""
    from amber_pipeline import embedded

    paths = AmberPaths(tmp_path / "amber")
    env = embedded.environment(paths)
    (paths.dagster_home).mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", WARM_FORK], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"imported": [], "shared": True, "frozen": True,
                                                                 "collects": True, "stamped": True, "logs": ["hello"]}
