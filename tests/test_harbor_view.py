"""Harbor's viewer over a real Amber run folder: each cell a named Harbor job with its Trial counts, and no
request the viewer offers changes the folder.

A Job of one Task with oracle and nop as bounds, 2 Trials per Task, runs its two cells in Docker sandboxes
(`cell_run.run_trials`, as a cell run does), on a temporary AMBER_HOME. Harbor 0.25's viewer backend
(`harbor.viewer.create_app`, what `harbor view` serves) then reads the Job's run folder in process, behind
Amber's read-only gate (`amber view`), and every route of it that is not a plain read is sent.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from helpers import funded, request
from starlette.routing import Route
from starlette.testclient import TestClient

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.analysis.trial_folders import read_harbor_folder
from amber_pipeline.jobs import cell_names, harbor_view, lifecycle, records
from amber_pipeline.jobs import cell_run as pipeline
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse

pytestmark = [pytest.mark.docker]

TRIALS = 2


def tree(folder: Path) -> dict[str, str]:
    """Every file and folder below `folder` with what it holds, to compare before and after."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def job_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Warehouse, str, Path]]:
    root = tmp_path_factory.mktemp("harbor-view")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_HOME", str(root / "amber"))
        mp.setenv("AMBER_CONFIG", str(root / "config.toml"))
        from amber_pipeline.paths import AmberPaths

        wh = Warehouse(AmberPaths.from_env())
        funded(wh)
        bench = root / "viewed"
        shutil.copytree(PROJECT_ROOT / "examples" / "demo-bench" / "fix-off-by-one", bench / "fix-off-by-one")
        _, job = lifecycle.submit(wh, DEFAULT_WORKSPACE, local_user(),
                                  request(str(bench), "nop", trials=TRIALS, bounds=True))
        for cell in records.cells_of(wh, job.id):
            pipeline.run_trials(wh, job.id, cell.cell_key)
        yield wh, job.id, wh.paths.runs / job.id


def test_each_cell_is_a_named_harbor_job_with_its_trial_counts(job_folder: tuple[Warehouse, str, Path]) -> None:
    wh, job_id, folder = job_folder
    cells = records.cells_of(wh, job_id)
    names = cell_names.read(wh, [c.cell_key for c in cells])
    assert sorted(names.values()) == ["viewed@1/nop", "viewed@1/oracle"]
    assert sorted(p.name for p in folder.iterdir()) == ["viewed@1__nop", "viewed@1__oracle"]
    with TestClient(harbor_view.read_only_viewer(folder), client=("127.0.0.1", 50000)) as viewer:
        listed = viewer.get("/api/jobs").json()
        assert listed["total"] == 2
        shown = {j["name"]: j for j in listed["items"]}
        assert sorted(shown) == ["viewed@1__nop", "viewed@1__oracle"]
        for name, job in shown.items():
            agent = name.rpartition("__")[2]
            assert (job["n_total_trials"], job["n_completed_trials"], job["n_errored_trials"]) == (TRIALS, TRIALS, 0)
            assert job["agents"] == [agent] and job["datasets"] == ["viewed"] and job["finished_at"]
            tasks = viewer.get(f"/api/jobs/{name}/tasks").json()["items"]
            assert [(t["task_name"], t["n_trials"]) for t in tasks] == [("fix-off-by-one", TRIALS)]
            assert tasks[0]["avg_reward"] == (1.0 if agent == "oracle" else 0.0)
            trial = viewer.get(f"/api/jobs/{name}/trials").json()["items"][0]["name"]
            assert viewer.get(f"/api/jobs/{name}/trials/{trial}").status_code == 200
        assert viewer.get("/").status_code == 200  # the viewer's pages themselves
    # Amber's own readers of the folder are unchanged: its Trial folders, and nothing else, are Trials.
    assert records.trials_finished(wh, job_id) == 2 * TRIALS
    for cell in cells:
        run_dir = records.run_dir(wh, job_id, cell.cell_key)
        assert run_dir.parent == folder and len(read_harbor_folder(run_dir)) == TRIALS


def test_no_request_the_viewer_offers_changes_the_folder(job_folder: tuple[Warehouse, str, Path],
                                                          tmp_path: Path) -> None:
    _, _, folder = job_folder
    from harbor.viewer import create_app

    app = create_app(folder, mode="jobs")
    job = "viewed@1__oracle"
    trial = next(p.name for p in (folder / job).iterdir() if p.is_dir())
    acting = [(method, r.path) for r in app.routes if isinstance(r, Route)
              for method in sorted((r.methods or set()) - {"GET", "HEAD"})]
    # What the viewer offers that writes or acts: Delete, Summarize, the launcher, upload, streams, sign-out.
    assert {("DELETE", "/api/jobs/{job_name}"), ("POST", "/api/jobs/{job_name}/summarize"),
            ("POST", "/api/run"), ("POST", "/api/jobs/{job_name}/upload")} <= set(acting)
    before = tree(folder)
    with TestClient(harbor_view.read_only_viewer(folder), client=("127.0.0.1", 50000)) as viewer:
        for method, path in acting:
            url = path.replace("{job_name}", job).replace("{trial_name}", trial)
            response = viewer.request(method, url, json={})
            assert response.status_code == 405 and response.json()["detail"] == harbor_view.READ_ONLY, (method, url)
        for url in (f"/api/jobs/{job}/upload", f"/api/jobs/{job}/trials/{trial}/stream", "/api/run/options",
                    "/api/auth/login-url", "/auth/callback"):
            assert viewer.get(url).status_code == 403, url
    assert tree(folder) == before

    # Without the gate, Harbor's own Delete removes a cell's folder and its Trials whole: the gate is what keeps
    # them (shown on a copy).
    copy = tmp_path / "runs"
    shutil.copytree(folder, copy)
    with TestClient(create_app(copy, mode="jobs"), client=("127.0.0.1", 50000)) as harbor:
        assert harbor.delete(f"/api/jobs/{job}").status_code == 200
    assert not (copy / job).exists()


def test_a_running_cells_sandboxes_under_its_named_folder_are_never_swept(
        amber_home: Path, warehouse: Warehouse, primary: docker.DockerClient) -> None:
    """The sweep of sandboxes left by dead runs tells a running cell's by its folder's name, which is the cell's
    name now: a sandbox of a cell still running stays, and once its Job has ended it is swept."""
    from amber_pipeline.jobs import recovery
    from amber_pipeline.sandbox.agent_image import BASE_IMAGE
    from amber_pipeline.sandbox.container import TRIAL_DIR_LABEL

    funded(warehouse)
    _, job = lifecycle.submit(warehouse, DEFAULT_WORKSPACE, local_user(),
                              request(str(PROJECT_ROOT / "examples" / "demo-bench"), "nop"))
    [cell] = records.cells_of(warehouse, job.id)
    folder = records.run_dir(warehouse, job.id, cell.cell_key)
    assert "__nop" in folder.name  # named for the cell, not its id
    trial_dir = folder / "some-task__1"
    trial_dir.mkdir(parents=True)
    sandbox = primary.containers.run(BASE_IMAGE, ["sleep", "300"], detach=True,
                                     labels={TRIAL_DIR_LABEL: str(trial_dir.resolve())})
    try:
        assert sandbox.id not in recovery.sweep_sandboxes(warehouse)
        sandbox.reload()
        assert sandbox.status == "running"
        lifecycle.cancel(warehouse, DEFAULT_WORKSPACE, job.id)  # its pending cell ends
        assert sandbox.id in recovery.sweep_sandboxes(warehouse)
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            sandbox.remove(force=True)
