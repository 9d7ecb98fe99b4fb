"""Static Task folders written from a dataset's items: the one writer every adapter shares.

Why one writer: a Benchmark Version is named by a hash of its Task files'
bytes, so an adapter must write the same item the same way every time, or the
same dataset would become a new Benchmark Version on every conversion. Every
byte written here is a function of the item alone: keys in a fixed order,
numbers in their shortest round-trip form, text as UTF-8 with `\\n` line ends,
no timestamp and no path of the machine it ran on.

What a Task folder holds (`examples/static-bench` has hand-written ones):

    <name>/task.toml            version, [metadata] provenance, [metadata.amber.static] checks, [agent] timeout
    <name>/instruction.md       the turns, joined by `<!-- amber:next-turn -->` lines
    <name>/solution/answer.txt  the dataset's reference answer, which passes the checks (the oracle idea)
    <name>/tests/...            what a program check needs (the program and the item's data)

The long-input guard: an Instruction over `MAX_INSTRUCTION_BYTES` (2 MiB of
UTF-8, about half a million tokens, more than any current Model's context) is
refused, per item, in one sentence, and the other items are written. An item
whose text holds a line that reads as the turn marker is refused the same way,
since it would split into turns the dataset never had.

The whole Benchmark is written into a hidden staging folder beside the
destination and renamed into place at the end, so a conversion that fails
half-way leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from amber_pipeline.benchmarks.static import NEXT_TURN, TABLE, StaticChecks, turns
from amber_pipeline.benchmarks.tasks import TASK_NAME
from amber_pipeline.errors import AmberError

MAX_INSTRUCTION_BYTES = 2 * 1024 * 1024
_ILLEGAL = re.compile(r"[^A-Za-z0-9._-]+")

Provenance = tuple[tuple[str, str | int], ...]


@dataclass(frozen=True)
class TaskFile:
    """A file of a Task folder beside task.toml and instruction.md."""

    path: str  # relative to the Task folder, forward slashes
    content: bytes
    executable: bool = False


@dataclass(frozen=True)
class StaticTask:
    """One dataset item as a static Task, before it is written."""

    name: str
    turns: tuple[str, ...]  # the user messages; one for a single-turn Task
    checks: StaticChecks
    answer: str  # the reference answer: solution/answer.txt
    provenance: Provenance  # [metadata] entries: the dataset and the item's position and id in it
    timeout_sec: float  # [agent] timeout_sec
    where: str  # how a sentence names the item: "test.jsonl line 3"
    files: tuple[TaskFile, ...] = ()

    @property
    def instruction(self) -> str:
        return f"\n\n{NEXT_TURN}\n\n".join(self.turns) + "\n"


@dataclass(frozen=True)
class AdaptedItem:
    """An item an adapter read: its Task, where it sits in the file, and the request that closes its Instruction.

    The sharded adapter rebuilds the Instruction from fragments and ends it with ``request`` (what form the answer
    must take for the checks to read it), keeping the checks, files and reference answer.
    """

    index: int  # 0-based position among the file's items
    item_id: str | None  # the dataset's own id, when its items have one
    task: StaticTask
    request: str


@dataclass(frozen=True)
class AdaptedBenchmark:
    """A folder of static Task folders written by an adapter, and the items it refused (one sentence each)."""

    root: Path
    name: str
    n_tasks: int
    kind: str
    refused: tuple[str, ...] = ()


def task_name(prefix: str, item_id: str) -> str:
    """A legal Task name from a dataset's id: runs of other characters than letters, digits, '.', '_', '-' become
    one '-' (``HumanEval/0`` -> ``HumanEval-0``)."""
    name = _ILLEGAL.sub("-", f"{prefix}{item_id}").strip("-._")
    return name[:128].rstrip("-._")


def refusal(task: StaticTask) -> str | None:
    """Why an item cannot be a static Task (one sentence), or None when it can."""
    size = len(task.instruction.encode())
    if size > MAX_INSTRUCTION_BYTES:
        return (f"{task.where} is left out: its Instruction is {size:,} bytes, over the {MAX_INSTRUCTION_BYTES:,} "
                "(2 MiB) a static Task may hold, so shorten the item or use a smaller variant of the dataset.")
    if len(turns(task.instruction, source=task.where)) != len(task.turns):
        return (f"{task.where} is left out: its text holds a line that reads as Amber's turn marker "
                f"{NEXT_TURN}, which would split it into turns the dataset does not have.")
    return None


@contextlib.contextmanager
def staged(dest: Path) -> Iterator[Path]:
    """A new, empty staging folder that becomes ``dest`` when the block succeeds (and vanishes when it fails)."""
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise AmberError(f"{dest} already exists and is not an empty folder: give a new folder for the adapted "
                         "Benchmark, or remove that one first.")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f".{dest.name}.{uuid.uuid4().hex}.tmp"
    staging.mkdir()
    try:
        yield staging
        if dest.is_dir():
            dest.rmdir()  # empty, checked above
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_tasks(tasks: Iterable[StaticTask], folder: Path, source: Path) -> tuple[int, tuple[str, ...]]:
    """Write each Task a folder under ``folder``; (how many were written, the refusal of each left out)."""
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    refused: list[str] = []
    for task in tasks:
        if not TASK_NAME.fullmatch(task.name):
            raise AmberError(f"{task.where} gives no usable Task name (\"{task.name}\"): give the item an id of "
                             "letters, digits, '.', '_' or '-'.")
        if task.name in written:
            raise AmberError(f"{written[task.name]} and {task.where} both make the Task {task.name}: give the "
                             "items different ids.")
        try:
            why = refusal(task)
            if why is not None:
                refused.append(why)
                continue
            _write(task, folder / task.name)
        except UnicodeEncodeError:
            raise AmberError(f"{task.where} holds text that is not valid Unicode (a lone surrogate escape): "
                             "fix the item's text.") from None
        written[task.name] = task.where
    if not written:
        if refused:
            raise AmberError(f"No item of {source} could be written, as all {len(refused)} were left out (the "
                             "first for its size or a turn marker line): shorten the items or use a smaller "
                             "variant of the dataset.")
        raise AmberError(f"{source} holds no item: give the dataset's file with at least one item.")
    return len(written), tuple(refused)


def _write(task: StaticTask, task_dir: Path) -> None:
    task_dir.mkdir()
    _put(task_dir / "task.toml", task_toml(task).encode())
    _put(task_dir / "instruction.md", task.instruction.encode())
    _put(task_dir / "solution" / "answer.txt", _text_file(task.answer).encode())
    for f in task.files:
        _put(task_dir / f.path, f.content, f.executable)


def _put(path: Path, content: bytes, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    os.chmod(path, 0o755 if executable else 0o644)


def _text_file(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def task_toml(task: StaticTask) -> str:
    """The Task's task.toml: Harbor's fields, the provenance, and the checks in Amber's table."""
    lines = ['version = "1.0"', "", "[metadata]"]
    lines += [f"{key} = {_value(value)}" for key, value in task.provenance]
    lines += ["", TABLE]
    c = task.checks
    if c.contains:
        lines.append(f"contains = {_value(list(c.contains))}")
    if c.not_contains:
        lines.append(f"not_contains = {_value(list(c.not_contains))}")
    if not c.case_sensitive:
        lines.append("case_sensitive = false")
    if c.regex is not None:
        lines.append(f"regex = {_value(c.regex)}")
    if c.number is not None:
        lines.append(f"number = {_value(c.number)}")
        lines.append(f"tolerance = {_value(c.tolerance)}")
    if c.program is not None:
        lines.append(f"program = {_value(c.program)}")
    lines += ["", "[agent]", f"timeout_sec = {_value(float(task.timeout_sec))}", ""]
    return "\n".join(lines)


def _value(value: str | int | float | list[str]) -> str:
    """A TOML value: JSON's string escapes are TOML's, except that TOML also wants DEL escaped."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back as the same float; TOML takes 1e-06 and 72.0
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
