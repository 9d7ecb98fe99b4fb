"""A Trial: the Agent's trajectory step by step, every model call the proxy recorded, the Verifier's output and
Reward, the timing bar, the outcome and its attempts; keys step to the previous or next Trial of the cell
(ArrowLeft, ArrowRight) and to the same Task in the other cells (ArrowUp, ArrowDown)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from amber_pipeline.analysis.task_matrix import TrialRef
from amber_pipeline.analysis.trial_view import Bounded, TrialDetail
from amber_pipeline.errors import NotFound
from web import plots
from web.render import Handler, Page
from web.viewer import Viewer
from web.webapp import ws_url

PHASE_NAMES = {"environment_setup": "environment", "agent_setup": "agent setup", "agent_execution": "agent",
               "verifier": "Verifier"}


def trial_url(workspace: str, job_id: str, ref: TrialRef) -> str:
    """A Trial's page: its name within the cell the URL's query names (a name repeats across cells)."""
    return ws_url(workspace, "jobs", job_id, "trials", ref.trial) + f"?cell={quote(ref.cell_key, safe='')}"


def trial(request: Request, viewer: Viewer, _form: FormData | None) -> Page:
    workspace, job_id = request.path_params["workspace"], request.path_params["job_id"]
    detail = viewer.run("trial_detail", workspace, job_id=job_id, trial=request.path_params["trial"],
                        cell_key=request.query_params.get("cell") or None)
    phases = [(PHASE_NAMES.get(p.phase, p.phase), p.seconds) for p in detail.phases]
    near = detail.neighbours
    others = near.other_cells
    return Page("trial.html", {
        "t": detail, "parts": parts(detail), "timing": plots.timing_bar(phases) if phases else None,
        "url": lambda ref: trial_url(workspace, job_id, ref),
        "keys": [("ArrowLeft", near.previous, "previous Trial of the cell"),
                 ("ArrowRight", near.next, "next Trial of the cell"),
                 ("ArrowUp", others[-1] if others else None, "the same Task in another cell"),
                 ("ArrowDown", others[0] if others else None, "the same Task in another cell")],
    }, title=f"Trial {detail.trial} — {detail.cell.route}")


def parts(detail: TrialDetail) -> dict[str, list[list[Any]]]:
    """What each trajectory step and model call shows when opened, as data the page's script draws (`amber.js`):
    300 steps and 300 calls are thousands of elements as HTML, which the browser parses before it shows anything;
    as data they cost one parse of a string, and a part becomes elements when it is opened. Each part is a list of
    (heading, text, cut) with the text shown inert."""
    def shown(heading: str, text: Bounded | None) -> list[Any] | None:
        return None if text is None or not text.text else [heading, text.text, text.truncated]

    steps = [[b for b in (shown("", s.message), shown("Reasoning", s.reasoning),
                          *(shown(f"Tool call: {c.name}", c.arguments) for c in s.tool_calls),
                          *(shown("Observation", o.content) for o in s.observations)) if b is not None]
             for s in (detail.trajectory.steps if detail.trajectory else [])]
    calls = [[b for b in (shown("Request", c.request), shown("Response", c.response)) if b is not None]
             for c in detail.model_calls]
    return {"s": steps, "c": calls}


def task_trial(request: Request, viewer: Viewer, _form: FormData | None) -> Response:
    """The latest Trial of a Task in the cell of a route (`?route=`): where a comparison's Tasks link."""
    workspace, job_id, task = (request.path_params[k] for k in ("workspace", "job_id", "task"))
    route = request.query_params.get("route")
    matrix = viewer.run("job_tasks", workspace, job_id=job_id)
    for row in matrix.rows:
        if row.task != task:
            continue
        for column, entry in zip(matrix.columns, row.entries, strict=True):
            if (route is None or column.route == route) and entry.attempts:
                return RedirectResponse(trial_url(workspace, job_id, entry.attempts[-1]), status_code=303)
    raise NotFound(f"No Trial of Task {task!r} in Job {job_id}{f' on {route!r}' if route else ''}.")


ROUTES: list[tuple[str, Handler, list[str]]] = [
    ("/w/{workspace}/jobs/{job_id}/trials/{trial}", trial, ["GET"]),
    ("/w/{workspace}/jobs/{job_id}/task/{task}", task_trial, ["GET"]),
]
