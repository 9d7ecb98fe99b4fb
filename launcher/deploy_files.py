"""A deploy file (dagster.yaml, workspace.yaml) checked as Dagster reads it, before any process starts on it.

Dagster checks an instance file's own schema when it loads it, but the config of each class the file names
(the run launcher, the run coordinator, ...) only when it makes the class, which for a Docker or Kubernetes
launcher happens on another machine. These checks do both without making anything, through Dagster's own
schema code, which only its internals expose: hence this package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from dagster._config import process_config, resolve_to_config_type
from dagster._core.errors import DagsterInvalidConfigError
from dagster._core.instance.config import dagster_instance_config
from dagster._core.workspace.config_schema import ensure_workspace_config
from dagster._serdes.config_class import class_from_code_pointer

CLASS_SECTIONS = ("run_launcher", "run_coordinator", "compute_logs", "local_artifact_storage", "scheduler")


def instance_config(path: Path) -> dict[str, Any]:
    """A dagster.yaml loaded as Dagster loads it (the instance schema), each configured class's own config
    checked against that class's schema as Dagster would when it makes the class; raises
    DagsterInvalidConfigError naming the file and section."""
    config, _ = dagster_instance_config(str(path.parent), path.name)
    for section in CLASS_SECTIONS:
        if section not in config:
            continue
        klass = class_from_code_pointer(config[section]["module"], config[section]["class"])
        checked = process_config(resolve_to_config_type(klass.config_type()),  # type: ignore[attr-defined]
                                 config[section].get("config") or {})
        if not checked.success:
            raise DagsterInvalidConfigError(f"{path.name}: {section}", checked.errors, config[section])
    return dict(config)


def code_locations(path: Path) -> list[dict[str, Any]]:
    """A workspace file's code locations, as Dagster's workspace schema reads them."""
    entries = ensure_workspace_config(yaml.safe_load(path.read_text()), str(path))["load_from"]
    assert isinstance(entries, list)
    return entries
