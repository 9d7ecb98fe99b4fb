"""A Job's Trials: its Task matrix, and one Trial in full (what the web app's Job and Trial pages read)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from amber_pipeline.analysis import task_matrix, trial_view
from amber_pipeline.analysis.task_matrix import TaskMatrix
from amber_pipeline.analysis.trial_view import TrialDetail
from amber_pipeline.jobs import lifecycle, records
from amber_pipeline.operations.jobs import JobRef
from amber_pipeline.operations.operation import Acting, operation
from amber_pipeline.operations.results import job_record


class TrialRequest(BaseModel):
    job_id: str = Field(description="An Amber Job id (job-...).")
    trial: str = Field(description="The Trial's name (<task>__<attempt>).")
    cell_key: str | None = Field(None, description="The Trial's cell, as the Job's Tasks name it: needed when "
                                                   "more than one cell has a Trial of that name.")


@operation("GET", "/jobs/{job_id}/tasks")
def job_tasks(acting: Acting, params: JobRef) -> TaskMatrix:
    """A Job's Trials by Task and cell: each attempt's outcome and Reward, each cell's mean Reward per Task, the
    Tasks where the cells differ first.

    For a Job that stopped early (ceiling_reached or cancelled), each cell also lists the Tasks it still misses,
    as `results` does.
    """
    job = records.get_job(acting.wh, params.job_id, acting.workspace)
    # Only a Job that stopped early has missing Tasks: the rest of its record (metering) is not read for nothing.
    missing = job_record(acting, job.id).missing_tasks if job.status in lifecycle.STOPPED_EARLY else None
    return task_matrix.task_matrix(acting.wh, acting.workspace, job, missing)


@operation("GET", "/jobs/{job_id}/trials/{trial}")
def trial_detail(acting: Acting, params: TrialRequest) -> TrialDetail:
    """One Trial in full: its outcome and why, the Verifier's output, its timing, the Agent's trajectory step by
    step, every model call the proxy metered, and the Trials around it.

    Long texts (logs, messages, request and response bodies) are cut at a bound and flagged `truncated`.
    """
    job = records.get_job(acting.wh, params.job_id, acting.workspace)
    return trial_view.trial_detail(acting.wh, acting.workspace, job, params.trial, params.cell_key)
