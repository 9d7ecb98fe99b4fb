"""Every test gets its own user config file, so no test reads or writes the developer's; and the shared
fixtures: an AMBER_HOME in a temporary folder (subprocesses inherit it) and its warehouse.

When the installed Agents' tests are collected, their software images start building at once, all four
side by side in the background (their downloads overlap), while the tests before them run: on a bare machine
that halves the minutes `make test` spends on them. A test that needs an image still in the making waits for
it; one that failed to build is built again by the test itself, which reports why.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse


@pytest.fixture(autouse=True)
def _own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMBER_CONFIG", str(tmp_path / "amber-config.toml"))


@pytest.fixture
def amber_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "amber"
    monkeypatch.setenv("AMBER_HOME", str(home))
    return home


@pytest.fixture
def warehouse(amber_home: Path) -> Warehouse:
    return Warehouse(AmberPaths.from_env())


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(item.module is not None and item.module.__name__ == "test_installed_agents" for item in session.items):
        threading.Thread(target=_build_agent_images, name="agent-images", daemon=True).start()


def _build_agent_images() -> None:
    from amber_pipeline.agents.catalog import AGENTS
    from amber_pipeline.errors import AmberError
    from amber_pipeline.sandbox import agent_image, docker_engine

    with contextlib.suppress(AmberError):
        client = docker_engine.connect()
        installed = [a for a in AGENTS.values() if a.software is not None]
        with ThreadPoolExecutor(len(installed)) as pool:
            for spec in installed:
                pool.submit(agent_image.software_image, client, spec.name, spec.software)
