"""New Job: pick a Benchmark Version, an Agent, Model Configurations and Trials per Task, and whether the Job stops
once its comparison is decided (with a margin, if any); see the Quote priced per cell (`job_preview`: nothing is
reserved, no Quote is recorded); Confirm makes that Quote and starts the Job (`job_submit` given the preview's
signed `shown`: each cell's price reserved as shown, not priced again) and goes to the Job's page. Money moves only
on Confirm. A refusal is shown as its one sentence above the form, which keeps what was filled in."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from amber_pipeline.agents.specs import AGENTS, DEFAULT_AGENT
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs.request import MAX_MARGIN_POINTS, MAX_TRIALS, MIN_TRIALS
from amber_pipeline.user_text import quoted
from web.render import Page
from web.viewer import Viewer
from web.webapp import ws_url

PLAIN_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")


@dataclass
class Filled:
    """What the form holds: as sent back, or a first visit's defaults."""

    benchmark: str = ""
    agent: str = DEFAULT_AGENT
    models: list[str] = field(default_factory=list)
    trials: str = "1"
    bounds: bool = False
    stop: bool = False
    margin: str = ""  # points, as typed; empty for none

    @classmethod
    def of(cls, form: FormData) -> Filled:
        return cls(benchmark=str(form.get("benchmark") or ""), agent=str(form.get("agent") or DEFAULT_AGENT),
                   models=[str(m) for m in form.getlist("model_configurations")],
                   trials=str(form.get("trials_per_task") or "1"), bounds=form.get("bounds") == "on",
                   stop=form.get("stop_when_decided") == "on", margin=str(form.get("margin_points") or "").strip())

    def request(self) -> dict[str, Any]:
        """The fields of a Job request (`QuoteRequest`), or one sentence refusing what cannot be one."""
        if not self.benchmark:
            raise AmberError("Pick a Benchmark Version to run.")
        if not (self.trials.isascii() and self.trials.isdigit()):
            raise AmberError(f"Trials per Task must be a whole number from {MIN_TRIALS} to {MAX_TRIALS}, not "
                             f"{quoted(self.trials)}: pick a number in that range.")
        # Only the form's own reading is refused here: the request's rules (a margin without stopping, stopping
        # with fewer than two Model Configurations, the margin's range) are the server's, in its sentences.
        if self.margin and not PLAIN_NUMBER.fullmatch(self.margin):
            raise AmberError(f"The margin must be a number of points from 0 to {MAX_MARGIN_POINTS}, like 5 or 2.5, "
                             f"not {quoted(self.margin)}: type a plain number, or leave it empty for none.")
        return {"benchmark": self.benchmark, "agent": self.agent, "model_configurations": self.models,
                "trials_per_task": int(self.trials), "bounds": self.bounds, "stop_when_decided": self.stop,
                "margin_points": float(self.margin) if self.margin else None}


def new_job(request: Request, viewer: Viewer, form: FormData | None) -> Page | Response:
    workspace = request.path_params["workspace"]
    listing = viewer.run("benchmark_list", workspace)  # first: a Workspace not theirs reads as missing
    models = viewer.run("model_list", workspace).models
    filled = Filled(benchmark=request.query_params.get("benchmark", "")) if form is None else Filled.of(form)
    preview, problem, status = None, "", 200
    if form is not None:
        try:
            fields = filled.request()
            if form.get("action") == "confirm":
                shown = str(form.get("shown") or "")
                if not shown:
                    raise AmberError("Confirm a Quote you have seen: press See the Quote first.")
                started = viewer.run("job_submit", workspace, **fields, shown=shown)
                return RedirectResponse(ws_url(workspace, "jobs", started.job.id), status_code=303)
            preview = viewer.run("job_preview", workspace, **fields)
        except AmberError as refused:
            problem, status = str(refused), 400
    return Page("new_job.html", {
        "versions": listing.versions, "agents": list(AGENTS.values()), "models": models, "filled": filled,
        "preview": preview, "problem": problem, "min_trials": MIN_TRIALS, "max_trials": MAX_TRIALS,
        "max_margin": MAX_MARGIN_POINTS,
    }, status, "New Job")


ROUTES = [("/w/{workspace}/new", new_job, ["GET", "POST"])]
