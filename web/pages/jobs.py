"""Jobs: every Job of the Workspace with its state (and, for one run with stop_when_decided, whether it stopped
early and after how many Tasks), Benchmark Version, cells, progress, spend against its Quote, who started it and
when."""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request

from web.render import Handler, Page
from web.viewer import Viewer


def jobs(request: Request, viewer: Viewer, _form: FormData | None) -> Page:
    workspace = request.path_params["workspace"]
    listed = viewer.run("job_list", workspace)
    return Page("jobs.html", {"jobs": listed.jobs}, title="Jobs")


ROUTES: list[tuple[str, Handler, list[str]]] = [("/w/{workspace}/jobs", jobs, ["GET"])]
