"""A Job's results as `amber results` and `--wait` print them: the cells of its report, its comparisons, what its
record adds. Apart from `cli/jobs.py`, so quoting and following a Job never load the report's records."""

from __future__ import annotations

from pydantic import BaseModel, Field

from amber_pipeline.analysis import render_report
from amber_pipeline.analysis.report import CellComparison, MeteringDisagreement, MissingTasks, ReportCell, absent
from amber_pipeline.cli.output import out
from amber_pipeline.jobs.decisions import Stopping
from amber_pipeline.operations.results import Results


class ShownResults(BaseModel):
    """What `amber results --json` prints: the Job, and the cells, comparisons, metering and missing Tasks of its
    report, and for a Job run with --stop-when-decided its decision and what stopping saved."""

    job: str
    benchmark: str
    status: str
    message: str | None
    cells: list[ReportCell]
    comparisons: list[CellComparison]
    metering_disagreements: list[MeteringDisagreement]
    missing_tasks: list[MissingTasks] | None = Field(None, exclude_if=absent)
    stopping: Stopping | None = Field(None, exclude_if=absent)



def shown_report(found: Results) -> ShownResults:
    """The report of a Job as the CLI prints it; with no Trial run, only what is missing."""
    job, report = found.job, found.report
    return ShownResults(job=job.id, benchmark=job.benchmark_label, status=job.status, message=job.message,
                        cells=[] if report is None else report.cells,
                        comparisons=[] if report is None else report.comparisons,
                        metering_disagreements=[] if report is None else found.metering_disagreements,
                        missing_tasks=found.missing_tasks, stopping=found.stopping)


def print_cells(shown: ShownResults) -> None:
    for line in (render_report.render_cells(shown.cells, shown.comparisons, shown.missing_tasks)
                 + render_report.render_stopping(shown.stopping)
                 + render_report.render_metering(shown.metering_disagreements)):
        out.line(line)
