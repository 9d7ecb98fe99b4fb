"""Cell runs of started Jobs: the one recipe for their Dagster runs, whoever launches them.

A cell run is a run of `cell_job` for one partition (the cell's name) and one
Job. Three launchers make them from claimed cells (`records.claim_cells` hands
each cell to one of them): the warm worker, told by the CLI that a Job
started; `submit_job`, right after it starts its Job; and
`job_request_sensor`, at its next tick, for Jobs started any other way.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import dagster as dg
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.remote_representation.code_location import InProcessCodeLocation
from dagster._core.storage.dagster_run import DagsterRunStatus
from dagster._core.storage.tags import PARTITION_NAME_TAG, RUN_KEY_TAG
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from amber_pipeline.jobs.records import CellLaunch
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.sandbox.engines import POOL_TAG
from assets.cells import CELL_TAG, CELLS, JOB_TAG

LOCATION = "amber"  # workspace.yaml's code location, whose runs the daemon's queue launches
CELL_JOB = "cell_job"


def tags(cell: CellLaunch) -> dict[str, str]:
    """A cell run's tags: its Job (to see one Job's runs together), its cell key (the hashes its name leaves
    out) and its engine pool, which the run queue holds to the pool's slots (`placement.py`)."""
    pool = {POOL_TAG: cell.pool} if cell.pool else {}
    return {JOB_TAG: cell.job_id, CELL_TAG: cell.cell_key, **pool}


def run_request(cell: CellLaunch) -> dg.RunRequest:
    return dg.RunRequest(partition_key=cell.cell_name, run_key=cell.run_key, tags=tags(cell))


def submit(instance: dg.DagsterInstance, cells: Sequence[CellLaunch]) -> list[str]:
    """Create the cells' runs and put them in the run queue (as the sensor's requests would be); their ids.

    The code location is loaded in this process (its modules are imported already in the warm worker) under
    the name the daemon knows, so the daemon's queue launches these runs as any other.
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
                step_keys_to_execute=None, status=DagsterRunStatus.NOT_STARTED, op_selection=None,
                root_run_id=None, parent_run_id=None,
                tags={**(job.run_tags or {}), **tags(cell), PARTITION_NAME_TAG: cell.cell_name,
                      RUN_KEY_TAG: cell.run_key},
                job_snapshot=job.job_snapshot, execution_plan_snapshot=plan.execution_plan_snapshot,
                parent_job_snapshot=job.parent_job_snapshot, remote_job_origin=job.get_remote_origin(),
                job_code_origin=job.get_python_origin(), asset_selection=None, asset_check_selection=None,
                asset_graph=repository.asset_graph)
            instance.submit_run(run.run_id, workspace=None)  # type: ignore[arg-type]  # the queue needs none
            run_ids.append(run.run_id)
    return run_ids
