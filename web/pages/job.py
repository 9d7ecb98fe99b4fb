"""A Job: its cells with their scores and intervals, the paired comparisons, the forest plot and cost against
score, the Task-by-cell matrix, the Tasks still missing with what finishing them costs, and the Job's report and
Harbor folder to take away; for a Job run with stop_when_decided, where its comparisons stand (at its stop, or so
far) and what stopping saved, with the cells that ran only some Tasks marked partial. Continue and cancel act
through the API's operations."""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
from typing import Any

from starlette.background import BackgroundTask
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response

from amber_pipeline.analysis.task_matrix import MatrixEntry, TaskMatrix, route_of
from amber_pipeline.errors import AmberError, NotFound
from amber_pipeline.jobs.lifecycle import CONTINUABLE
from web import plots
from web.render import Handler, Page
from web.viewer import Viewer
from web.webapp import ws_url

REFRESH_S = 3  # a running Job's page refreshes its live parts this often


def job(request: Request, viewer: Viewer, _form: FormData | None) -> Page:
    workspace, job_id = request.path_params["workspace"], request.path_params["job_id"]
    progress = viewer.run("job_status", workspace, job_id=job_id)
    results = viewer.run("job_results", workspace, job_id=job_id)
    matrix = viewer.run("job_tasks", workspace, job_id=job_id)
    report = results.report
    states = {route_of(c): c.status for c in progress.cells}
    missing_cost = sum((m.cost_usd for m in results.missing_tasks or []), 0.0)
    return Page("job.html", {
        "progress": progress, "job": progress.job, "states": states, "report": report, "matrix": matrix,
        "missing": results.missing_tasks or [], "missing_cost": missing_cost,
        "metering": results.metering_disagreements, "stopping": results.stopping,
        "forest": None if report is None else plots.forest(report),
        "cost_score": None if report is None else plots.cost_score(report),
        "matrix_data": matrix_data(matrix), "differing": sum(r.differs for r in matrix.rows),
        "continuable": progress.job.status in CONTINUABLE and bool(results.missing_tasks),
        "refresh": REFRESH_S if not progress.settled else None,
    }, title=f"Job {progress.job.id}")


def matrix_data(matrix: TaskMatrix) -> dict[str, Any]:
    """The Task matrix as the page's script draws it (`amber.js`): 10 cells x 500 Tasks would be 5,000 table
    entries of HTML, a megabyte; as data it is a tenth of that, and sorting needs no round trip. Per entry: the
    mean Reward, the latest attempt's Trial name and outcome, the attempts, and the Trials still missing."""
    def entry(e: MatrixEntry) -> list[Any]:
        last = e.attempts[-1] if e.attempts else None
        return [e.mean_reward, last and last.trial, last and last.outcome, len(e.attempts), e.missing_trials]

    return {"cells": [c.cell_key for c in matrix.columns],
            "rows": [[r.task, r.differs, [entry(e) for e in r.entries]] for r in matrix.rows]}


def report_json(request: Request, viewer: Viewer, _form: FormData | None) -> Response:
    """The Job's results as the API gives them (`GET .../jobs/{job_id}/results`)."""
    workspace, job_id = request.path_params["workspace"], request.path_params["job_id"]
    results = viewer.run("job_results", workspace, job_id=job_id)
    return Response(json.dumps(results.model_dump(mode="json"), indent=2), media_type="application/json",
                    headers={"Content-Disposition": f'attachment; filename="{job_id}-results.json"'})


def harbor_folder(request: Request, viewer: Viewer, _form: FormData | None) -> Response:
    """The Job's Harbor job folders (one per cell), as a .tar.gz made for this download; `harbor view` reads it."""
    workspace, job_id = request.path_params["workspace"], request.path_params["job_id"]
    found = viewer.run("job_status", workspace, job_id=job_id).job  # membership checked: another's reads as missing
    folder = viewer.wh.paths.runs / found.id
    if not folder.is_dir():
        raise AmberError(f"Job {found.id} has no Trial folders (its Trials ran without a sandbox, or none ran).")
    spool = tempfile.NamedTemporaryFile(prefix="amber-harbor-", suffix=".tar.gz", delete=False)  # noqa: SIM115
    with spool, tarfile.open(fileobj=spool, mode="w:gz", compresslevel=3) as tar:
        tar.add(folder, arcname=found.id, filter=_regular)
    return FileResponse(spool.name, media_type="application/gzip", filename=f"{found.id}.tar.gz",
                        background=BackgroundTask(_remove, spool.name))


def _regular(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Files and folders only: a link a sandbox left in its logs is not followed out of the Job's folder."""
    return member if member.isfile() or member.isdir() else None


def _remove(path: str) -> None:
    os.unlink(path)


ACTIONS = {"continue": "job_continue", "cancel": "job_cancel"}


def act(request: Request, viewer: Viewer, _form: FormData | None) -> Response:
    """Continue or cancel the Job, then back to its page."""
    workspace, job_id = request.path_params["workspace"], request.path_params["job_id"]
    operation = ACTIONS.get(request.path_params["action"])
    if operation is None:
        raise NotFound(f"No action {request.path_params['action']!r} on a Job: continue or cancel it.")
    viewer.run(operation, workspace, job_id=job_id)
    return RedirectResponse(ws_url(workspace, "jobs", job_id), status_code=303)


ROUTES: list[tuple[str, Handler, list[str]]] = [
    ("/w/{workspace}/jobs/{job_id}", job, ["GET"]),
    ("/w/{workspace}/jobs/{job_id}/report.json", report_json, ["GET"]),
    ("/w/{workspace}/jobs/{job_id}/harbor.tar.gz", harbor_folder, ["GET"]),
    ("/w/{workspace}/jobs/{job_id}/{action:str}", act, ["POST"]),
]
