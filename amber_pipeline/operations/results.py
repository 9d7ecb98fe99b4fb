"""A Job's results: the report of its Trials, with what its record adds (the Tasks a stopped Job left missing, where
the Agent's own token count disagrees with the proxy's, a stopping Job's decision).

An area of its own, apart from the Jobs area, so that quoting, starting and following a Job never load the report's
statistics (`analysis.report`, the scoring engine): `amber results` and a Job's page do.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from amber_pipeline.analysis import report, sources
from amber_pipeline.analysis.memo import Memo
from amber_pipeline.analysis.report import MeteringDisagreement, MissingTasks, RoundReport
from amber_pipeline.jobs import lifecycle, records, stopping
from amber_pipeline.jobs.decisions import Stopping
from amber_pipeline.operations.jobs import JobRef
from amber_pipeline.operations.operation import Acting, operation

REPORTS: Memo[RoundReport] = Memo(16)  # an unchanged Job's report (its bootstrap), computed once per process
METERING: Memo[list[MeteringDisagreement]] = Memo(64)  # an unchanged Job's metering disagreements (`job_record`)


class Results(BaseModel):
    job: records.Job
    report: RoundReport | None = Field(description="The report of its Trials; null when no Trial of it ran.")
    missing_tasks: list[MissingTasks] | None = Field(description="For a Job that stopped early (ceiling_reached "
                                                                 "or cancelled), its Tasks without a scored Trial "
                                                                 "per cell; else null.")
    metering_disagreements: list[MeteringDisagreement]
    stopping: Stopping | None = Field(None, description="For a Job run with stop_when_decided: its comparisons' "
                                                        "anytime-valid intervals and verdicts (at its stop, or so "
                                                        "far), and what stopping saved; else null.")


@dataclass(frozen=True)
class JobRecord:
    """What a Job's record adds to the report of its Trials (`job_record`)."""

    missing_tasks: list[MissingTasks] | None
    metering_disagreements: list[MeteringDisagreement]
    stopping: Stopping | None = None



@operation("GET", "/jobs/{job_id}/results")
def job_results(acting: Acting, params: JobRef) -> Results:
    """A Job's report: each cell's score with its 95% bootstrap CI, and the paired comparisons; for a Job that
    stopped early (ceiling_reached or cancelled), also the Tasks it left without a scored Trial."""
    job = records.get_job(acting.wh, params.job_id, acting.workspace)
    version = sources.job_version(acting.wh, acting.workspace, job.id)
    record = job_record(acting, job.id, job=job, version=version)
    key = (version, None if record.missing_tasks is None else tuple(m.model_dump_json() for m in record.missing_tasks),
           None if record.stopping is None else record.stopping.model_dump_json())
    try:
        found = REPORTS.get(key, lambda: report.build_report(sources.load(acting.wh, acting.workspace, job.id, version),
                                                             missing_tasks=record.missing_tasks,
                                                             stopping=record.stopping))
    except sources.NoTrials:
        found = None
    return Results(job=job, report=found, missing_tasks=record.missing_tasks,
                   metering_disagreements=record.metering_disagreements, stopping=record.stopping)


def job_record(acting: Acting, job_id: str, *, job: records.Job | None = None,
               version: sources.JobVersion | None = None) -> JobRecord:
    """What a Job's record adds to the report of its Trials: for a Job that stopped early (ceiling_reached or
    cancelled), its Tasks without a scored Trial per cell (`quotes.MissingCell`; else None), and where an Agent's
    own token count disagrees with what the model proxy metered (`job` and `version`: the caller's, read already).

    The disagreements are counts over the Job's stored Trial files alone, so they are kept per version of those
    files (`METERING`), as its report is; what is missing depends on prices and history too, and is priced anew."""
    job = job or records.get_job(acting.wh, job_id, acting.workspace)
    version = version or sources.job_version(acting.wh, acting.workspace, job.id)
    missing = ([MissingTasks.model_validate(m.as_json())
                for m in lifecycle.missing_tasks(acting.wh, acting.workspace, job.id)]
               if job.status in lifecycle.STOPPED_EARLY else None)
    return JobRecord(missing_tasks=missing, metering_disagreements=METERING.get(version, lambda: [
        MeteringDisagreement.model_validate(m)
        for m in records.metering_disagreements(acting.wh, acting.workspace, job.id)]),
        stopping=stopping.summary(acting.wh, job))
