"""Tasks: the Task folders of a Benchmark, read and checked against Harbor 0.25's task.toml schema.

Tasks written by others load as Harbor loads them: task.toml is read as
UTF-8 and handed to Harbor's own `TaskConfig` (which takes a legacy root
`version`, the deprecated `allow_internet`, `memory = "2G"` and unknown
`[metadata]` keys in its stride). A multi-step Task (`[[steps]]`) is refused
in one sentence, as Amber runs one Instruction per Trial.

A Task whose task.toml breaks a limit (`limits.py`: what a sandbox has, time
limits positive and finite) still loads, so a Benchmark Version stored before
a rule existed still opens for its results; it carries the sentence
(`TaskSpec.limit_refusal`) and `within_limits` refuses it wherever it would
run, before anything is reserved or written.
"""

from __future__ import annotations

import copy
import io
import os
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from amber_pipeline.benchmarks import limits
from amber_pipeline.benchmarks.static import StaticChecks, static_checks
from amber_pipeline.errors import AmberError

if TYPE_CHECKING:
    from harbor.models.task.config import TaskConfig

TASK_FILE = "task.toml"
# A task.toml holds a Task's settings, a few kilobytes; past this it is refused before it is parsed, since TOML and
# Harbor's schema would hold many times its size in memory.
MAX_TASK_FILE_BYTES = 1 << 20
# A Task's name is also a folder name (of its Trials, of its copy in a Benchmark Version): letters, digits, '.', '_'
# and '-', starting with a letter or digit (so never '.', '..' or a hidden folder), at most 128 characters.
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


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
    limit_refusal: str | None = None  # why no Trial of it may run (`limits.py`); None: within every limit


def no_benchmark(path: Path | str) -> AmberError:
    """The sentence for a Benchmark folder that does not exist, or one inside Amber's home (its stored
    Versions are found by their labels, never by path: paths are not permissions)."""
    return AmberError(f"No Benchmark at {path}: give the path of a folder of Task folders, "
                      "or the label of a registered Benchmark Version (name@N).")


def find_task_dirs(path: Path) -> list[Path]:
    """The Task folders of a Benchmark folder: itself, or its sub-folders with a task.toml."""
    if not path.exists():
        raise no_benchmark(path)
    if not path.is_dir():
        raise AmberError(f"{path} is a file: give the folder that holds the Task folders.")
    if (path / TASK_FILE).is_file():
        return [path]
    dirs = sorted(d for d in path.iterdir() if d.is_dir() and (d / TASK_FILE).is_file())
    if not dirs:
        raise AmberError(f"No Task found in {path}: a Benchmark folder must contain Task folders, "
                         f"each with a {TASK_FILE}.")
    return dirs


def read_config(toml_path: Path) -> tuple[dict[str, Any], TaskConfig]:
    """A task.toml's table and Harbor's reading of it, or one sentence naming the problem."""
    from harbor.models.task.config import TaskConfig  # deferred: harbor imports are slow

    try:
        with toml_path.open("rb") as file:
            data = file.read(MAX_TASK_FILE_BYTES + 1)
        if len(data) > MAX_TASK_FILE_BYTES:
            raise AmberError(f"{toml_path} is larger than {MAX_TASK_FILE_BYTES >> 20} MB: a task.toml holds a Task's "
                             "settings, so keep data in the Task's other files.")
        text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()  # as Harbor reads it, whatever the locale
        if text.startswith("\ufeff"):  # tomllib, and so Harbor, refuses it
            raise AmberError(f"{toml_path} starts with a byte-order mark, which TOML does not allow: save it as "
                             "UTF-8 without one and submit again.")
        raw = tomllib.loads(text)
        config = TaskConfig.model_validate(copy.deepcopy(raw))  # its validators pop legacy keys from what they get
    except UnicodeDecodeError:
        raise AmberError(f"{toml_path} is not UTF-8 text: save it as UTF-8 and submit again.") from None
    except tomllib.TOMLDecodeError as e:
        raise AmberError(f"{toml_path} is not valid TOML ({e}): fix the file and submit again.") from None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise AmberError(f"{toml_path} breaks Harbor's task.toml schema at {where}: "
                         f"{first['msg']}; fix the file and submit again.") from None
    return raw, config


def task_name(task_dir: Path, config: TaskConfig) -> str:
    """The Task's name: the part after the slash of `[task].name`, else its folder's name."""
    return config.task.name.split("/", 1)[1] if config.task else task_dir.name


def task_spec(task_dir: Path, base: Path, raw: dict[str, Any], config: TaskConfig) -> TaskSpec:
    """A Task folder whose task.toml is read (`read_config`), as Amber runs it."""
    name = task_name(task_dir, config)
    if config.steps:
        raise AmberError(f"Task {name} is a multi-step Task ([[steps]] in its task.toml), which Amber cannot run: "
                         "give it one instruction.md and no [[steps]], or leave it out.")
    instruction_path = task_dir / "instruction.md"
    if not instruction_path.is_file():
        raise AmberError(f"Task {name} has no instruction.md: add one at {instruction_path}.")
    try:
        instruction = instruction_path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise AmberError(f"{instruction_path} is not UTF-8 text: save it as UTF-8 and submit again.") from None
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
        limit_refusal=limits.refusal(name, raw, config),
    )


def load_task(task_dir: Path, base: Path) -> TaskSpec:
    """Read one Task folder, checking task.toml against Harbor 0.25's schema."""
    raw, config = read_config(task_dir / TASK_FILE)
    return task_spec(task_dir, base, raw, config)


def within_limits(tasks: Iterable[TaskSpec]) -> None:
    """Refuse, in its own sentence, the first Task that breaks a limit of `limits.py`."""
    for task in tasks:
        if task.limit_refusal is not None:
            raise limits.OverLimits(task.limit_refusal)
