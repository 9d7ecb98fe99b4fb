"""Every test gets its own user config file, so no test reads or writes the developer's."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMBER_CONFIG", str(tmp_path / "amber-config.toml"))
