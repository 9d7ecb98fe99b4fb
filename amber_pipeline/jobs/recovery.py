"""Crash recovery: a cell whose run died for good is ended, so its Job settles and nothing is charged twice.

A cell run can die anywhere: killed, out of memory, its engine restarted.
Dagster's run monitoring resumes it (twice at most), and the resumed run
keeps the Trials stored (`cell_run.run_trials`). A cell whose run died for
good (monitoring gave up, or a cell run no Dagster run started, whose
process is gone: `workers.py`) stays `running`, its Job never ends, its
reservation is never refunded and its sandboxes keep running. Whoever
notices (the Dagster sensor that watches cell runs, or `amber job cancel`
for the Job it cancels) calls :func:`end_dead_cell`, which finishes what the
run would have done:

- the cell's sandboxes and its sandbox network are removed;
- its stored Trial rows are settled with the ledger. A Trial's row is written
  before its charge (`cell_run.run_trials`), so a row may still lack its
  charge (charged now, once: a charge is keyed by the Trial attempt) or show
  more than the ledger took at the ceiling (the row takes the ledger's
  amount). Afterwards every row's cost is its ledger charge;
- the cell's Benchmark Version is scored again over the stored Trials, and
  the cell ends `done` when every Trial it owed is stored, else `failed`
  with the reason; the last cell to end ends the Job and refunds the rest
  of its reservation.

Each step is idempotent, so a recovery that is itself interrupted is simply
run again, and a cell no longer running is left as it is.
"""

from __future__ import annotations

import logging

from amber_pipeline import settings
from amber_pipeline.cells import cell_file_id
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import cell_names, lifecycle, placement, records, workers
from amber_pipeline.sandbox import engines
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trials_table

log = logging.getLogger(__name__)


def running_cells(wh: Warehouse, job_id: str | None = None) -> list[tuple[str, str, str | None]]:
    """(Job, cell key, worker) of every cell a run has started and not ended (of one Job, or of all)."""
    with wh.read() as con:
        return con.execute("select job_id, cell_key, worker from job_cells where status = 'running' "
                           "and (?::varchar is null or job_id = ?) order by job_id, cell_key",
                           [job_id, job_id]).fetchall()


def _dead_keys(wh: Warehouse, job_id: str) -> list[str]:
    """The Job's running cells whose run's process on this machine is gone."""
    return [key for _, key, worker in running_cells(wh, job_id) if workers.is_dead(worker)]


def dead_cells(wh: Warehouse, job_id: str) -> list[str]:
    """The names of the Job's running cells whose run's process on this machine is gone: what a read shows
    while the daemon has not yet resumed or ended them (a read never does either)."""
    dead = _dead_keys(wh, job_id)
    return sorted(cell_names.read(wh, dead).values()) if dead else []


def recover(wh: Warehouse, job_id: str) -> list[str]:
    """End the Job's running cells whose run's process on this machine is gone; the cell keys ended."""
    dead = _dead_keys(wh, job_id)
    for cell_key in dead:
        end_dead_cell(wh, job_id, cell_key, "its run's process died")
    return dead


def end_dead_cell(wh: Warehouse, job_id: str, cell_key: str, reason: str) -> str | None:
    """Finish a cell whose run died (see the module's docstring); its new status, or None if it was not
    running."""
    with wh.read() as con:
        row = con.execute("select c.status, c.n_trials, j.benchmark_version_id, c.engine_pool from job_cells c "
                          "join jobs j on j.id = c.job_id where c.job_id = ? and c.cell_key = ?",
                          [job_id, cell_key]).fetchone()
    if row is None or row[0] != "running":
        return None
    _, owed, version_id, pool = row
    from amber_pipeline.scoring import store  # the engine (NumPy, Arrow): not for a read that only finds dead cells

    _remove_sandboxes(wh, job_id, cell_key, pool)
    stored = len(settle_rows(wh, job_id, cell_key))
    try:
        wh.store.put_folder(records.run_dir(wh, job_id, cell_key))  # the Trial folders it left, as a run sends them
        store.write_version(wh, version_id, records.cells_of_version(wh, version_id))
    except Exception as exc:  # noqa: BLE001 - the money settles even when the store or scoring cannot be reached
        log.warning("cell %s of Job %s: storing and scoring after its run died failed: %s", cell_key, job_id, exc)
    if stored >= owed:
        status, message = records.cell_verdict(wh, job_id, cell_key)
        message = message or f"{reason}; its {stored} Trials were stored and scored by recovery"
    else:
        status, message = "failed", f"{reason} after {stored} of {owed} Trials"
    lifecycle.end_cell(wh, job_id, cell_key, status, message)
    return status


def settle_rows(wh: Warehouse, job_id: str, cell_key: str) -> list[TrialRecord]:
    """Charge the cell's stored scored Trials not yet charged and make each row show its ledger charge; the
    rows stored."""
    path = wh.trials_file(cell_file_id(cell_key), job_id)
    stored = wh.read_parquet(path)
    if stored is None:
        return []
    rows = [TrialRecord(**r) for r in stored.to_pylist()]
    if lifecycle.charge_records(wh, job_id, rows):
        wh.write_parquet(trials_table(rows), path)
    return rows


def _remove_sandboxes(wh: Warehouse, job_id: str, cell_key: str, pool: str | None) -> None:
    """The dead run's containers (on its pool's engine) and network; an engine that does not answer leaves them
    to the next sweep."""
    from amber_pipeline.jobs.trial_runner import network_name  # deferred: imports Harbor
    from amber_pipeline.sandbox.container import remove_sandboxes_under
    from amber_pipeline.sandbox.network import NETWORK_LABEL, remove_sandbox_networks

    try:
        remove_sandboxes_under(records.run_dir(wh, job_id, cell_key), placement.engine_of(pool))
        remove_sandbox_networks({NETWORK_LABEL: network_name(job_id, cell_key)})
    except Exception as exc:  # noqa: BLE001 - the Docker engine may be down; the money settles regardless
        log.warning("cell %s of Job %s: sandboxes not removed yet: %s", cell_key, job_id, exc)


def sweep_sandboxes(wh: Warehouse) -> list[str]:
    """Remove sandboxes left under the run folder of a cell that is no longer running (its run died while the
    engine was down, say); the ids removed."""
    from amber_pipeline.sandbox.container import remove_sandboxes, sandboxes_under  # deferred: imports Docker's SDK

    left: dict[tuple[str, str], list] = {}
    listed = [None] if settings.sandbox_hosts_file() is None else engines.engines()
    for engine in listed:
        try:
            found = sandboxes_under(wh.paths.runs, engine)
        except AmberError:  # an engine that does not answer is swept once it does
            if len(listed) == 1:
                raise
            continue
        for trial_dir, containers in found.items():
            job_id, cell_folder = trial_dir.split("/")[:2]
            left.setdefault((job_id, cell_folder), []).extend(containers)
    if not left:
        return []
    with wh.read() as con:
        running = con.execute("select job_id, cell_key from job_cells "
                              "where status in ('pending', 'running')").fetchall()
    active = {(job_id, records.run_dir(wh, job_id, key).name) for job_id, key in running}  # their folders' names
    return remove_sandboxes([c for owner, containers in left.items() if owner not in active for c in containers])
