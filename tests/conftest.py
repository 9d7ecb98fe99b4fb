"""Every test gets its own user config file, so no test reads or writes the developer's; and the shared
fixtures: an AMBER_HOME in a temporary folder (subprocesses inherit it) and its warehouse."""

from __future__ import annotations

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
