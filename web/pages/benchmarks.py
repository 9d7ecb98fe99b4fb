"""Benchmarks: the Benchmark Versions the Workspace sees and its uploads not yet published; one Version's Tasks,
or one upload's Tasks with each one's validation verdict and reason; one Task's Instruction and files."""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request

from web.render import Page
from web.viewer import Viewer


def benchmarks(request: Request, viewer: Viewer, _form: FormData | None) -> Page:
    workspace = request.path_params["workspace"]
    listing = viewer.run("benchmark_list", workspace)
    return Page("benchmarks.html", {"versions": listing.versions, "uploads": listing.uploads}, title="Benchmarks")


def benchmark(request: Request, viewer: Viewer, _form: FormData | None) -> Page:
    """A Version by label or id, or an upload by its id (upl-...), as `amber benchmark show` reads them."""
    workspace, ref = request.path_params["workspace"], request.path_params["ref"]
    if ref.startswith("upl-"):
        found = viewer.run("benchmark_validation", workspace, upload_id=ref)
        stored = {c.name for c in found.upload.checks if c.ok}  # the Tasks it kept, whose pages exist
        return Page("benchmarks_upload.html", {"upload": found.upload, "verdicts": found.verdicts,
                                               "stored": stored}, title=f"Upload {found.upload.id}")
    shown = viewer.run("benchmark_show", workspace, ref=ref)
    return Page("benchmarks_version.html", {"listed": shown.listed, "tasks": shown.tasks},
                title=f"Benchmark Version {shown.listed.label}")


def task(request: Request, viewer: Viewer, _form: FormData | None) -> Page:
    workspace, ref, name = (request.path_params[k] for k in ("workspace", "ref", "task"))
    shown = viewer.run("benchmark_task", workspace, ref=ref, task=name)
    return Page("benchmarks_task.html", {"task": shown}, title=f"Task {shown.name}")


ROUTES = [("/w/{workspace}/benchmarks", benchmarks, ["GET"]),
          ("/w/{workspace}/benchmarks/{ref}", benchmark, ["GET"]),
          ("/w/{workspace}/benchmarks/{ref}/tasks/{task}", task, ["GET"])]
