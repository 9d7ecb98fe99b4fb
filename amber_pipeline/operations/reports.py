"""Reports of rounds: one round's report, comparisons of rounds, a round's place on a public board, and a model
judge's stages. A round is an Amber Job, `harbor:<name>` of an imported Harbor folder, or (on the server's host
only) a Harbor job folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from amber_pipeline.accounts.identity import SIGNED_IN
from amber_pipeline.analysis import compare as comparison
from amber_pipeline.analysis import judge as judging
from amber_pipeline.analysis import leaderboard as board_of
from amber_pipeline.analysis import source_paths, sources
from amber_pipeline.analysis.compare import NamedComparison, NamedComparisons, named
from amber_pipeline.analysis.evidence import TrialEvidence
from amber_pipeline.analysis.judge import JudgeReport
from amber_pipeline.analysis.leaderboard import NamedPlacing
from amber_pipeline.analysis.report import RoundReport, build_report
from amber_pipeline.analysis.trial_folders import HARBOR_PREFIX
from amber_pipeline.errors import AmberError
from amber_pipeline.operations.operation import Acting, operation
from amber_pipeline.operations.results import JobRecord, job_record
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.files import write_text

REPORT_FILE = "amber-report.json"


class ReportRequest(BaseModel):
    source: str = Field(description="An Amber Job id, or harbor:<name> of an imported Harbor folder.")
    all_tasks: list[str] | None = Field(None, description="Every Task of the Benchmark, for the strict pass rate.")
    task_time_limits: dict[str, float] | None = Field(None, description="Agent time limits per Task, seconds.")
    labels: dict[str, str] | None = Field(None, description="Trial name -> cause, to check the causes.")
    write_json: bool = Field(False, description=f"Also write {REPORT_FILE} next to the source (on the server).")


class Report(BaseModel):
    report: RoundReport
    path: str | None = Field(description=f"Where {REPORT_FILE} was written (write_json), else null.")


@operation("POST", "/reports")
def report(acting: Acting, params: ReportRequest) -> Report:
    """Pass rates with 95% intervals, why attempts failed, near misses and the cells of one round."""
    evidence = load(acting, params.source)
    job = _job_record(acting, params.source)
    result = build_report(evidence, all_tasks=params.all_tasks, task_time_limits=params.task_time_limits,
                          labels=params.labels, missing_tasks=None if job is None else job.missing_tasks,
                          metering_disagreements=None if job is None else job.metering_disagreements,
                          stopping=None if job is None else job.stopping)
    path = None
    if params.write_json:
        path = report_path(acting.wh, acting.workspace, params.source, evidence)
        write_text(path, json.dumps(result.model_dump(mode="json"), indent=2, allow_nan=False) + "\n")
    return Report(report=result, path=None if path is None else str(path))


def load(acting: Acting, source: str) -> list[TrialEvidence]:
    """The evidence of a round; a signed-in user names only what Amber keeps, never a folder of the server's."""
    if SIGNED_IN.get() is not None and not is_stored(source):
        raise AmberError(f"{source!r} is a folder, which only the server's host can read: give an Amber Job id, or "
                         "import the folder there and give harbor:<name>.")
    return sources.load(acting.wh, acting.workspace, source)


class CompareRequest(BaseModel):
    baseline: str = Field(description="The baseline: an Amber Job id (or harbor:<name>).")
    candidates: list[str] = Field(description="One or more candidates, of the same kinds.")
    margin_points: float | None = Field(None, description="The margin in points (0 to 100], chosen before the runs.")
    routes: list[str | None] = Field(description="The route (agent/model) kept on each side, baseline first "
                                                 "(null: every route).")
    names: list[str] = Field(description="What to call each candidate in the answer.")
    baseline_name: str = Field(description="What to call the baseline in the answer.")


class BoardRequest(BaseModel):
    source: str = Field(description="The round: an Amber Job id (or harbor:<name>).")
    rows: list[dict[str, Any]] = Field(description="The public board's rows: agent, model, pass_rate (percent), "
                                                   "trials_per_task.")
    route: str | None = Field(None, description="The route to place, when the round has several.")
    total_tasks: int | None = Field(None, description="Tasks in the Benchmark Version, for the strict pass rate.")


class JudgeRequest(BaseModel):
    source: str = Field(description="The round: an Amber Job id (or harbor:<name>).")
    model: str = Field(description="The judge's Model Configuration.")
    samples: int = Field(3, description="Judgements per failed Trial, 1 to 10.")
    stage_labels: dict[str, str] | None = Field(None, description="Trial name -> stage, to check the judge.")


@operation("POST", "/comparisons")
def compare(acting: Acting, params: CompareRequest) -> NamedComparison | NamedComparisons:
    """Compare candidates with a baseline on paired cases: interval, verdict, caveats, advice and costs.

    One candidate: its comparison, the sides named. Several: each one's comparison by its name, with
    Benjamini-Hochberg q-values."""
    base = load(acting, params.baseline)
    cands = {n: load(acting, s) for n, s in zip(params.names, params.candidates, strict=True)}
    routes = params.routes
    if len(cands) == 1:
        result = comparison.compare(base, cands[params.names[0]], margin_points=params.margin_points,
                                    route=routes[0], candidate_route=routes[1])
        return named(result, params.baseline_name, params.names[0])
    many = comparison.compare_many(base, cands, params.margin_points, route=routes[0],
                                   candidate_routes={n: r for n, r in zip(params.names, routes[1:], strict=True)
                                                     if r is not None})
    return named(many, params.baseline_name)


@operation("POST", "/leaderboards")
def leaderboard(acting: Acting, params: BoardRequest) -> NamedPlacing:
    """Place a round on a public board by pass rate and strict pass rate, each as a range of ranks."""
    placing = board_of.leaderboard(load(acting, params.source), params.rows, all_tasks=params.total_tasks,
                                   route=params.route)
    return NamedPlacing(source=params.source, **dict(placing))


@operation("POST", "/judgements")
def judge(acting: Acting, params: JudgeRequest) -> JudgeReport:
    """Sort a round's failed Trials into stages (understand, write, verify, other) with a model judge."""
    return judging.judge(load(acting, params.source), params.model, params.samples, params.stage_labels)


def is_stored(source: str) -> bool:
    """A source Amber keeps (a Job, an imported folder), not a folder on this machine."""
    return source.startswith(HARBOR_PREFIX) or sources.is_amber_job(source)


def _job_record(acting: Acting, source: str) -> JobRecord | None:
    """What an Amber Job's record adds to its report (the Tasks it left missing, where the Agent's own token
    count disagrees with the proxy's); nothing for a folder or a Job whose Trials are here but whose record
    is not."""
    if not sources.is_amber_job(source):
        return None
    try:
        return job_record(acting, source)
    except AmberError:
        return None


def report_path(wh: Warehouse, workspace: str, source: str, evidence: list[TrialEvidence]) -> Path:
    """Where the JSON report goes, next to the source.

    A Harbor job folder: inside it. ``harbor:<name>``: the folder that holds its Trial folders when
    they share one, else ``$AMBER_HOME/runs/<name>``. An Amber Job: ``$AMBER_HOME/runs/<job>``. A folder
    or harbor:<name> place inside Amber's home must be the Workspace's own (`source_paths.writable`); an
    Amber Job's is, since its evidence loaded.
    """
    folder = Path(source)
    if not source.startswith(HARBOR_PREFIX) and folder.is_dir():
        return source_paths.writable(wh, workspace, folder / REPORT_FILE)
    name = source.removeprefix(HARBOR_PREFIX)
    if source.startswith(HARBOR_PREFIX):
        parents = {Path(e.trial_dir).parent for e in evidence if e.trial_dir}
        if len(parents) == 1 and (parent := parents.pop()).is_dir():
            return source_paths.writable(wh, workspace, parent / REPORT_FILE)
    if not name or Path(name).name != name or name in (".", ".."):
        raise AmberError(f"{source!r} is neither a folder nor an Amber Job id: give one of them.")
    path = wh.paths.runs / name / REPORT_FILE
    return source_paths.writable(wh, workspace, path) if source.startswith(HARBOR_PREFIX) else path
