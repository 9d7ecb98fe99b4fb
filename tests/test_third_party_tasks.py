"""Real Harbor Tasks published by others (tests/fixtures/third_party) through Amber, the way validation runs them.

The demo Tasks were written for Amber; these were not. They carry what real
Tasks carry: no `[task]` table and a legacy `version = "1.0"`, integer
timeouts, unknown tables and keys, digest-pinned base images, a
`.dockerignore`, stray files at the Task root, CRLF line endings, scripts
without the executable bit, Verifiers that install their test runner at run
time. Each is copied byte for byte; only its FROM line names a local stand-in
image, since no registry is reachable here (the fixtures' README lists every
source and change).

Each Task is uploaded as an archive of its own and validated as a user's
upload is (`amber benchmark upload`, then `validate`), its oracle and nop
Trials run in this process: every runnable Task must pass, oracle 1 and nop 0. A
Verifier that downloads its test runner when it runs cannot work in a sandbox
with no network: both bounds get 0 there, the mark of a broken Task (a hard
one gets oracle 1), and validation says so. Two of the Tasks are forks of one published Task and keep
its `[task]` name, so they cannot share a Benchmark.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from helpers import funded

from amber_pipeline.accounts.identity import local_user
from amber_pipeline.benchmarks import uploads
from amber_pipeline.benchmarks import versions as benchmark
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import cell_run, validation
from amber_pipeline.jobs.records import cells_of
from amber_pipeline.paths import AmberPaths
from amber_pipeline.sandbox.agent_image import host_ca_bundle
from amber_pipeline.warehouse.catalog import Warehouse

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "third_party"
BASE_IMAGES = FIXTURES / "base-images"
AMBER_BASE = "amber-base:bookworm"
# The stand-ins, in build order (the second is built on the first), with the folder of each Dockerfile.
STAND_INS = (("amber-tp-ubuntu:24.04", "ubuntu"), ("amber-tp-python:3", "python"))
RECIPE_LABEL = "org.amber.recipe"

# Folder: the Task's name as Amber reads it, its Agent and Verifier timeouts (seconds).
TASKS = {
    "fix-task-broken-log-report": ("log-report", 3600.0, 300.0),
    "Dynamo_BenchTask": ("log-report", 120.0, 120.0),
    "sql-query-optimizer": ("sql-query-optimizer", 600.0, 600.0),
    "dobariyakrish7-word-count": ("dobariyakrish7-word-count", 1800.0, 300.0),
}
RUNNABLE = ("fix-task-broken-log-report", "Dynamo_BenchTask", "sql-query-optimizer")
BROKEN_OFFLINE = "dobariyakrish7-word-count"  # its test.sh installs uv and runs `uvx -p 3.13` from the internet


# ---- loading: no Docker needed ------------------------------------------------------------------------------

@pytest.mark.parametrize("folder", sorted(TASKS))
def test_every_fixture_task_loads_with_its_name_and_timeouts(tmp_path, folder):
    version = benchmark.snapshot(FIXTURES / folder, tmp_path / "store")

    (task,) = version.tasks
    name, agent_timeout, verifier_timeout = TASKS[folder]
    assert (task.name, task.agent_timeout_sec, task.verifier_timeout_sec) == (name, agent_timeout, verifier_timeout)
    assert task.static is None and task.docker_image is None
    assert task.instruction.strip()


def test_the_fixtures_keep_the_quirks_they_are_chosen_for():
    word_count, dynamo = FIXTURES / "dobariyakrish7-word-count", FIXTURES / "Dynamo_BenchTask"
    assert (word_count / "task.toml").read_text().startswith('version = "1.0"\n')
    assert "[task]" not in (word_count / "task.toml").read_text()
    assert (word_count / "input.txt").is_file()  # a stray file at the Task root
    assert b"\r\n" in (dynamo / "task.toml").read_bytes()
    assert b"\r\n" in (dynamo / "tests" / "test_outputs.py").read_bytes()
    assert (FIXTURES / "fix-task-broken-log-report" / "environment" / ".dockerignore").is_file()
    scripts = [p for p in FIXTURES.rglob("*.sh") if "base-images" not in p.parts]
    assert scripts and not any(os.stat(p).st_mode & 0o111 for p in scripts)


def test_two_forks_of_one_task_cannot_share_a_benchmark(tmp_path):
    with pytest.raises(AmberError, match="log-report"):
        benchmark.snapshot(FIXTURES, tmp_path / "store")


# ---- oracle and nop, in Docker ------------------------------------------------------------------------------

def _ensure_stand_in(client, tag: str, folder: Path, ca: bytes, context: Path) -> None:
    """Build the stand-in unless an image of the same recipe (Dockerfile and CA bundle) has that tag already."""
    from docker.errors import BuildError, ImageNotFound

    dockerfile = (folder / "Dockerfile").read_bytes()
    recipe = hashlib.sha256(dockerfile + b"\0" + ca).hexdigest()[:16]
    try:
        if client.images.get(tag).labels.get(RECIPE_LABEL) == recipe:
            return
    except ImageNotFound:
        pass
    context.mkdir(parents=True)
    shutil.copyfile(folder / "Dockerfile", context / "Dockerfile")
    (context / "ca.crt").write_bytes(ca)
    try:
        client.images.build(path=str(context), tag=tag, pull=False, rm=True, forcerm=True,
                             labels={RECIPE_LABEL: recipe})
    except BuildError as e:
        pytest.fail(f"The stand-in {tag} does not build from {folder / 'Dockerfile'}: {e.msg}")


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> None:
    """The local base images the fixtures' FROM lines name, built once and reused while their recipe holds."""
    from amber_pipeline.sandbox import docker_engine

    try:
        client = docker_engine.connect(timeout=30)
        client.images.get(AMBER_BASE)
    except AmberError as e:
        pytest.skip(str(e))
    except Exception as e:  # noqa: BLE001 - the base image is missing
        pytest.skip(f"{AMBER_BASE} is not available: {e}")
    ca = host_ca_bundle()
    contexts = tmp_path_factory.mktemp("stand-ins")
    for tag, folder in STAND_INS:
        _ensure_stand_in(client, tag, BASE_IMAGES / folder, ca, contexts / folder)


@pytest.fixture(scope="module")
def validated(stand_ins, tmp_path_factory) -> dict[str, validation.TaskValidation]:
    """Each fixture Task uploaded as an archive of its own, checked, and validated (its oracle and nop Trials
    run in this process): its verdict, by folder."""
    home = tmp_path_factory.mktemp("amber")
    verdicts: dict[str, validation.TaskValidation] = {}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AMBER_HOME", str(home / "home"))
        env.setenv("AMBER_CONFIG", str(home / "config.toml"))
        wh = Warehouse(AmberPaths.from_env())
        workspace = funded(wh)
        for folder in TASKS:
            archive = home / f"{folder}.tar.gz"
            with tarfile.open(archive, "w:gz") as tar:
                tar.add(FIXTURES / folder, arcname=folder)
            made = uploads.create(wh, workspace, local_user(), archive, "third-party")
            assert [(c.ok, c.reason) for c in made.checks] == [(True, None)], made.checks
            started = validation.start(wh, workspace, local_user(), made.id)
            assert started is not None
            for cell in cells_of(wh, started[1].id):
                cell_run.run_cell_of_job(wh, started[1].id, cell.cell_key)
            [verdicts[folder]] = validation.results(wh, uploads.get(wh, workspace, made.id))
    return verdicts


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.parametrize("folder", RUNNABLE)
def test_each_runnable_task_validates_with_oracle_1_and_nop_0(validated, folder):
    verdict = validated[folder]
    assert (verdict.name, verdict.passed, verdict.oracle, verdict.nop, verdict.reason) == (
        TASKS[folder][0], True, 1.0, 0.0, None), verdict


@pytest.mark.docker
def test_a_verifier_that_downloads_its_runner_is_reported_broken_not_hard(validated):
    verdict = validated[BROKEN_OFFLINE]
    # Its test.sh stops at the download, before it writes a Reward; on a private Benchmark that is the Task's
    # own failure, Reward 0 (not Errored), whatever the Agent did: both bounds at 0, the mark of a broken Task.
    assert (verdict.passed, verdict.oracle, verdict.nop) == (False, 0.0, 0.0), verdict
    assert (verdict.reason or "").startswith(validation.BROKEN + " (RewardFileNotFoundError: "), verdict.reason
