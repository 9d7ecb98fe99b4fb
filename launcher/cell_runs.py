"""Cell runs of started Jobs: the one place that makes them, whoever asks.

A cell run is a run of `cell_job` for one partition (the cell's name) and one
Job. Starting a Job only records it (its cells `pending`). Its cell runs come
from :func:`requests`, which claims the cells nobody launched and turns each
into a run request, by one of two hands:

- `job_request_sensor`, at each tick (Dagster's own mechanism: the daemon
  submits the requests, tagged `dagster/sensor_name`), for every Job;
- the warm worker, at once, when whoever started a Job (the CLI, the API,
  `start_quote`) asks for its cell runs the one way,
  `amber_pipeline.worker_socket.start_cell_runs`; it submits the same
  requests itself (:func:`launch`, tagged `amber/launched_by`), since a sensor
  tick comes every five seconds at best.

Why here: submitting a run outside a sensor needs Dagster's internals (a code
location loaded in this process, the run's snapshots), and this package is the
one that may touch them, beside the run launcher and the run coordinator that
take the run from there. Either way the run goes into Dagster's run queue, so
the queue's limits, the run launcher and run monitoring treat it as any other.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import timedelta

import dagster as dg
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.remote_representation.code_location import InProcessCodeLocation
from dagster._core.storage.tags import PARTITION_NAME_TAG, RUN_KEY_TAG
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from amber_pipeline.jobs import records
from amber_pipeline.jobs.records import CellLaunch
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.sandbox.engines import POOL_TAG
from amber_pipeline.warehouse.catalog import Warehouse
from assets.cell_job import CELL_TAG, CELLS, JOB_TAG

LOCATION = "amber"  # workspace.yaml's code location, whose runs the daemon's queue launches
CELL_JOB = "cell_job"
LAUNCHED_BY_TAG = "amber/launched_by"
STALE_CLAIM = timedelta(minutes=1)  # a claim this old with no run: its launcher died in between


def tags(cell: CellLaunch) -> dict[str, str]:
    """A cell run's tags: its Job (to see one Job's runs together), its cell key (the hashes its name leaves
    out) and its engine pool, which the run queue holds to the pool's slots (`placement.py`)."""
    pool = {POOL_TAG: cell.pool} if cell.pool else {}
    return {JOB_TAG: cell.job_id, CELL_TAG: cell.cell_key, **pool}


def requests(instance: dg.DagsterInstance, wh: Warehouse, job_id: str | None = None) -> list[CellLaunch]:
    """Claim the cells of started Jobs (of `job_id`, or of every Job) that no run took yet; the cells to launch.

    A claim is one statement (`records.claim_cells`), so the two hands never launch one cell twice; for every
    Job, a claim left without a run for a minute (its launcher died in between) is launched again.
    """
    claimed = records.claim_cells(wh, job_id)
    if job_id is None:
        claimed += _lost(instance, records.unstarted_claims(wh, STALE_CLAIM))
    return claimed


def run_request(cell: CellLaunch) -> dg.RunRequest:
    """A cell's run, as the sensor asks Dagster for it (its run key keeps it to one run)."""
    return dg.RunRequest(partition_key=cell.cell_name, run_key=cell.run_key, tags=tags(cell))


def _lost(instance: dg.DagsterInstance, claimed: list[CellLaunch]) -> list[CellLaunch]:
    """The claimed cells that have no run."""
    if not claimed:
        return []
    runs = instance.get_runs(dg.RunsFilter(tags={JOB_TAG: sorted({c.job_id for c in claimed})}))
    have = {(run.tags.get(JOB_TAG), run.tags.get(CELL_TAG)) for run in runs}
    return [c for c in claimed if (c.job_id, c.cell_key) not in have]


def launch(instance: dg.DagsterInstance, wh: Warehouse, job_id: str) -> list[str]:
    """The warm worker's hand: the started Job's cell runs, submitted to the run queue now; their ids."""
    return _submit(instance, requests(instance, wh, job_id))


def _submit(instance: dg.DagsterInstance, cells: Sequence[CellLaunch]) -> list[str]:
    """Create the cells' runs and submit them to the run queue, as the sensor's requests would be; their ids.

    The code location is loaded in this process (its modules are imported already in the warm worker and the
    code server) under the name the daemon knows, so the daemon's queue launches these runs as any other.
    """
    if not cells:
        return []
    known = set(instance.get_dynamic_partitions(CELLS))
    new = sorted({c.cell_name for c in cells} - known)
    if new:
        instance.add_dynamic_partitions(CELLS, new)
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(executable_path=sys.executable, module_name="amber_pipeline.definitions",
                             working_directory=str(PROJECT_ROOT)), location_name=LOCATION)
    with InProcessCodeLocation(origin, instance) as location:
        repository = location.get_repository("__repository__")
        job = repository.get_full_job(CELL_JOB)
        plan = location.get_execution_plan(job, {}, step_keys_to_execute=None, known_state=None,
                                           instance=instance)
        run_ids = []
        for cell in cells:
            run = instance.create_run(
                job_name=CELL_JOB, run_id=None, run_config={}, resolved_op_selection=None,
                step_keys_to_execute=None, status=dg.DagsterRunStatus.NOT_STARTED, op_selection=None,
                root_run_id=None, parent_run_id=None,
                tags={**(job.run_tags or {}), **tags(cell), PARTITION_NAME_TAG: cell.cell_name,
                      RUN_KEY_TAG: cell.run_key, LAUNCHED_BY_TAG: "warm worker"},
                job_snapshot=job.job_snapshot, execution_plan_snapshot=plan.execution_plan_snapshot,
                parent_job_snapshot=job.parent_job_snapshot, remote_job_origin=job.get_remote_origin(),
                job_code_origin=job.get_python_origin(), asset_selection=None, asset_check_selection=None,
                asset_graph=repository.asset_graph)
            instance.submit_run(run.run_id, workspace=None)  # type: ignore[arg-type]  # the queue needs none
            run_ids.append(run.run_id)
    return run_ids
