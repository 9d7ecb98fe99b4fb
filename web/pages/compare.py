"""Compare: a baseline and candidates (whole Jobs, or one cell of a Job each), and what `amber compare` gives:
the verdict, the intervals, McNemar's test, the caveats, and the improved and regressed Tasks linked to their
Trials. The form is a GET, so a comparison is a link to share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request

from amber_pipeline.analysis.task_matrix import route_of
from amber_pipeline.errors import AmberError
from web.render import Handler, Page
from web.viewer import Viewer

SEPARATOR = " "  # between a Job id and a cell's route in a choice: a Job id never holds one


@dataclass(frozen=True)
class Choice:
    """A side one may compare: a Job (route None) or one of its cells."""

    job_id: str
    route: str | None
    label: str

    @property
    def value(self) -> str:
        return self.job_id if self.route is None else f"{self.job_id}{SEPARATOR}{self.route}"


def choices(viewer: Viewer, workspace: str) -> list[Choice]:
    """Every Job of the Workspace with a Trial, then each of its cells."""
    found: list[Choice] = []
    for progress in viewer.run("job_list", workspace).jobs:
        if progress.finished == 0:
            continue
        job = progress.job
        found.append(Choice(job.id, None, f"{job.id} ({job.benchmark_label}, every cell)"))
        routes = sorted({route_of(c) for c in progress.cells})
        found += [Choice(job.id, route, f"{job.id} {route}") for route in routes] if len(routes) > 1 else []
    return found


def parse(value: str) -> tuple[str, str | None]:
    job_id, _, route = value.strip().partition(SEPARATOR)
    return job_id, route or None


def compare(request: Request, viewer: Viewer, _form: FormData | None) -> Page:
    workspace = request.path_params["workspace"]
    asked = request.query_params
    baseline = asked.get("baseline", "")
    candidates = [c for c in asked.getlist("candidate") if c]
    margin = asked.get("margin", "").strip()
    context: dict[str, Any] = {"choices": choices(viewer, workspace), "baseline": baseline, "candidates": candidates,
               "margin": margin, "results": None, "problem": "", "base_side": None, "sides": {}}
    if baseline and candidates:
        try:
            margin_points = float(margin) if margin else None
        except ValueError:
            margin_points = None
            context["problem"] = f"The margin {margin!r} is not a number of points: give one like 5, or none."
        if not context["problem"]:
            try:
                context |= run(viewer, workspace, baseline, candidates, margin_points)
            except AmberError as e:
                context["problem"] = str(e)
    elif baseline or candidates:
        context["problem"] = "Pick a baseline and at least one candidate."
    return Page("compare.html", context, title="Compare")


def run(viewer: Viewer, workspace: str, baseline: str, candidates: list[str], margin: float | None) -> dict[str, Any]:
    """The comparison as `amber compare` asks for it: sides named by their choice, one route per side."""
    base = parse(baseline)
    sides = [parse(c) for c in candidates]
    names: list[str] = []
    for value in candidates:
        names.append(value if value not in names else f"{value} #{len(names) + 1}")
    found = viewer.run("compare", workspace, baseline=base[0], candidates=[s[0] for s in sides],
                       margin_points=margin, routes=[base[1], *(s[1] for s in sides)], names=names,
                       baseline_name=baseline)
    return {"results": found.by_candidate(), "base_side": base, "sides": dict(zip(names, sides, strict=True))}


ROUTES: list[tuple[str, Handler, list[str]]] = [("/w/{workspace}/compare", compare, ["GET"])]
