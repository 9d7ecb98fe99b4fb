"""The suite's own scheduling: under `make test` (pytest-xdist, `--dist loadgroup`), the tests of a module that
share one of its module-scoped fixtures run on one worker, so the fixture (a deployment, an instance with its
daemon, images built) is made once, not once per worker (`tests/scheduling.py`); and so do the tests of any module
that use a session fixture too costly to make on every worker (a second Docker engine). Tests that need no Docker
run first, and the longest first within each part.

Nothing else would notice if that stopped: the tests pass either way, only slower. It did stop once, silently:
pytest-xdist 3.8 names a test's group through `Item._nodeid`, which pytest 9 no longer reads (pyproject.toml
keeps pytest below 9)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from amber_pipeline.paths import PROJECT_ROOT

PROBE = '''
import os
from pathlib import Path

import pytest

LOG = Path(os.environ["PROBE_LOG"])


@pytest.fixture(scope="module")
def made_once():
    with LOG.open("a") as log:
        log.write("made\\n")


@pytest.mark.parametrize("i", range(6))
def test_sharing(made_once, i):
    with LOG.open("a") as log:
        log.write(f"sharing {os.environ['PYTEST_XDIST_WORKER']}\\n")


@pytest.mark.parametrize("i", range(6))
def test_alone(i):
    with LOG.open("a") as log:
        log.write(f"alone {os.environ['PYTEST_XDIST_WORKER']}\\n")
'''


# A session fixture of the shared ones (`scheduling.SHARED_SESSION_FIXTURES`), used by the tests of two modules.
SESSION_CONFTEST = '''
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def engine2():
    with Path(os.environ["PROBE_LOG"]).open("a") as log:
        log.write("made engine\\n")
'''

ENGINE_USER = '''
import os
from pathlib import Path

import pytest


@pytest.mark.parametrize("i", range(4))
def test_engine(engine2, i):
    with Path(os.environ["PROBE_LOG"]).open("a") as log:
        log.write(f"engine {os.environ['PYTEST_XDIST_WORKER']}\\n")
'''


@pytest.fixture(scope="module")
def probe_log(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The lines a probe suite's tests logged, run on two workers under the suite's scheduling: PROBE's module,
    and two modules whose tests use a shared session fixture."""
    folder = tmp_path_factory.mktemp("probe")
    files = {"test_probe.py": PROBE, "conftest.py": SESSION_CONFTEST, "test_one.py": ENGINE_USER,
             "test_two.py": ENGINE_USER}
    for name, text in files.items():
        (folder / name).write_text(text)
    log = folder / "log"
    env = {**os.environ, "PROBE_LOG": str(log), "PYTHONPATH": str(PROJECT_ROOT / "tests")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "scheduling",
                          "-p", "no:cacheprovider", "--rootdir", str(folder), "test_probe.py", "test_one.py",
                          "test_two.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return log.read_text().splitlines()


def test_a_modules_tests_that_share_a_module_fixture_run_on_one_worker(probe_log: list[str]) -> None:
    lines = probe_log
    sharing = {line.split()[1] for line in lines if line.startswith("sharing")}
    assert len([line for line in lines if line.startswith("sharing")]) == 6
    assert len(sharing) == 1, lines  # all six on one worker
    assert lines.count("made") == 1, lines  # so the fixture was made once
    assert len([line for line in lines if line.startswith("alone")]) == 6


def test_the_tests_of_two_modules_that_use_a_shared_session_fixture_run_on_one_worker(probe_log: list[str]) -> None:
    lines = probe_log
    assert len([line for line in lines if line.startswith("engine ")]) == 8
    assert len({line.split()[1] for line in lines if line.startswith("engine ")}) == 1, lines
    assert lines.count("made engine") == 1, lines


ORDER_PROBE = '''
import pytest


def test_quick():
    pass


@pytest.mark.docker
def test_docker_quick():
    pass


@pytest.mark.docker
@pytest.mark.slow
def test_docker_slow():
    pass


@pytest.mark.slow
def test_slow():
    pass


@pytest.mark.docker
@pytest.mark.slow(120)
def test_docker_longest():
    pass


@pytest.mark.slow(90)
def test_longest():
    pass
'''


def test_tests_without_docker_come_first_and_the_longest_first_in_each_part(tmp_path: Path) -> None:
    (tmp_path / "test_order.py").write_text(ORDER_PROBE)
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT / "tests")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "scheduling", "-p",
                          "no:cacheprovider", "--rootdir", str(tmp_path), "test_order.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    order = [line.split("::")[1] for line in run.stdout.splitlines() if "::" in line]
    assert order == ["test_longest", "test_slow", "test_quick",
                     "test_docker_longest", "test_docker_slow", "test_docker_quick"], run.stdout
