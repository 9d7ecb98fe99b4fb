"""Tasks: the Task folders of a Benchmark, read and checked against Harbor 0.25's task.toml schema."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from amber_pipeline.benchmarks.static import StaticChecks, static_checks
from amber_pipeline.errors import AmberError

TASK_FILE = "task.toml"


@dataclass(frozen=True)
class TaskSpec:
    """One Task of a Benchmark Version, as Amber needs to know it."""

    name: str
    folder: str  # relative to the Benchmark Version root
    instruction: str
    agent_timeout_sec: float | None
    static: StaticChecks | None = None  # set for a static Task (no Environment, built-in Verifier)
    verifier_timeout_sec: float | None = None
    build_timeout_sec: float = 0.0
    docker_image: str | None = None  # a prebuilt image named in task.toml instead of environment/Dockerfile


def find_task_dirs(path: Path) -> list[Path]:
    """The Task folders of a Benchmark folder: itself, or its sub-folders with a task.toml."""
    if not path.exists():
        raise AmberError(f"No Benchmark at {path}: give the path of a folder of Task folders, "
                         "or the label of a registered Benchmark Version (name@N).")
    if not path.is_dir():
        raise AmberError(f"{path} is a file: give the folder that holds the Task folders.")
    if (path / TASK_FILE).is_file():
        return [path]
    dirs = sorted(d for d in path.iterdir() if d.is_dir() and (d / TASK_FILE).is_file())
    if not dirs:
        raise AmberError(f"No Task found in {path}: a Benchmark folder must contain Task folders, "
                         f"each with a {TASK_FILE}.")
    return dirs


def load_task(task_dir: Path, base: Path) -> TaskSpec:
    """Read one Task folder, checking task.toml against Harbor 0.25's schema."""
    from harbor.models.task.config import TaskConfig  # deferred: harbor imports are slow

    toml_path = task_dir / TASK_FILE
    try:
        raw = tomllib.loads(toml_path.read_text())
        config = TaskConfig.model_validate(raw)
    except tomllib.TOMLDecodeError as e:
        raise AmberError(f"{toml_path} is not valid TOML ({e}): fix the file and submit again.") from None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise AmberError(f"{toml_path} breaks Harbor's task.toml schema at {where}: "
                         f"{first['msg']}; fix the file and submit again.") from None
    name = config.task.name.split("/", 1)[1] if config.task else task_dir.name
    instruction_path = task_dir / "instruction.md"
    if not instruction_path.is_file():
        raise AmberError(f"Task {name} has no instruction.md: add one at {instruction_path}.")
    instruction = instruction_path.read_text()
    folder, root = str(task_dir), str(base)  # plain strings: pathlib's relative_to is slow at 1,000 Tasks
    return TaskSpec(
        name=name,
        folder=folder[len(root) + 1:].replace(os.sep, "/") if folder != root else ".",
        instruction=instruction,
        agent_timeout_sec=config.agent.timeout_sec,
        static=static_checks(task_dir, raw, instruction),
        verifier_timeout_sec=config.verifier.timeout_sec,
        build_timeout_sec=config.environment.build_timeout_sec,
        docker_image=config.environment.docker_image,
    )
