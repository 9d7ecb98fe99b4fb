"""The suite's own scheduling: under `make test` (pytest-xdist, `--dist loadgroup`), the tests of a module that
share one of its module-scoped fixtures run on one worker, so the fixture (a deployment, an instance with its
daemon, images built) is made once, not once per worker (`tests/scheduling.py`).

Nothing else would notice if that stopped: the tests pass either way, only slower. It did stop once, silently:
pytest-xdist 3.8 names a test's group through `Item._nodeid`, which pytest 9 no longer reads (pyproject.toml
keeps pytest below 9)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def test_a_modules_tests_that_share_a_module_fixture_run_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    log = tmp_path / "log"
    env = {**os.environ, "PROBE_LOG": str(log), "PYTHONPATH": str(PROJECT_ROOT / "tests")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "scheduling",
                          "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "test_probe.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = log.read_text().splitlines()
    sharing = {line.split()[1] for line in lines if line.startswith("sharing")}
    assert len([line for line in lines if line.startswith("sharing")]) == 6
    assert len(sharing) == 1, lines  # all six on one worker
    assert lines.count("made") == 1, lines  # so the fixture was made once
    assert len([line for line in lines if line.startswith("alone")]) == 6
