r"""Static Tasks: Tasks without an Environment, and their built-in Verifier.

A static Task is a Task folder with `task.toml` and `instruction.md` and no
Environment (no `environment/` folder and no `[environment].docker_image`).
The Direct Agent sends its Instruction to the Model, and `verify` below checks
the answer text on the host; nothing runs in a sandbox.

Where the checks live. Harbor 0.25 validates `task.toml` with pydantic models
that ignore unknown keys: an extra top-level table such as `[amber.static]`
passes validation but is silently dropped, so it would vanish whenever Harbor
rewrites the file (`TaskConfig.model_dump_toml`). The `[metadata]` table is
typed `dict[str, Any]` ("arbitrary") and kept verbatim, so the checks live in
Amber's namespace inside it, `[metadata.amber.static]`:

    [metadata.amber.static]
    contains = ["Canberra"]        # each text must occur in the answer
    not_contains = ["Sydney"]      # none of these texts may occur
    case_sensitive = false         # for contains and not_contains only (default true)
    regex = '^\s*1969-07-20\s*$'   # re.search with re.MULTILINE
    number = 42.0                  # the answer's last number (1,234.5 allowed) ...
    tolerance = 1e-6               # ... equals it within this, inclusive (default 1e-6)
    program = "tests/check.py"     # an executable file in the Task folder

All declared checks must pass, in the order above; the first that fails names
the Verdict's detail. A static table with no check at all, an unknown key, an
invalid regular expression, a non-numeric number or a program missing from (or
outside) the Task folder is a format error (`AmberError`).

The program check runs the file itself (no shell, so it needs a `#!` line and
the executable bit), in the Task folder, with the answer on standard input, a
minimal environment (PATH and a UTF-8 locale, no credentials) and a
`PROGRAM_TIMEOUT_SEC` limit. Exit 0 accepts; otherwise the last non-blank line
of its standard error is the failure detail. It is the only check that starts
a process; the others are plain string work on regexes and numbers compiled
once per checks record.

Numbers are compared as decimals, as written: `number = 1` with
`tolerance = 0.1` accepts "1.1" and rejects "1.1000001" (no binary rounding at
the edge). The last number is the last match of an optional minus sign, digits
(with commas only in groups of three), an optional decimal part and exponent.

Multi-turn Tasks. The Instruction holds several user messages separated by a
line holding only `<!-- amber:next-turn -->` (an HTML comment, so invisible
when the markdown is rendered). `turns` splits it; the Direct Agent sends the
turns in one conversation and only the last answer is verified.
"""

from __future__ import annotations

import functools
import math
import os
import re
import signal
import subprocess
import tomllib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from amber_pipeline.errors import AmberError

NEXT_TURN = "<!-- amber:next-turn -->"
TABLE = "[metadata.amber.static]"
DEFAULT_TOLERANCE = 1e-6
PROGRAM_TIMEOUT_SEC = 10.0

_KEYS = ("contains", "not_contains", "case_sensitive", "regex", "number", "tolerance", "program")
_NUMBER = re.compile(r"(?<![\d.])-?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?", re.ASCII)


@dataclass(frozen=True)
class StaticChecks:
    """The checks of one static Task, as declared in its task.toml (all must pass)."""

    contains: tuple[str, ...] = ()
    not_contains: tuple[str, ...] = ()
    case_sensitive: bool = True
    regex: str | None = None
    number: float | None = None
    tolerance: float = DEFAULT_TOLERANCE
    program: str | None = None  # a relative path inside the Task folder, forward slashes


@dataclass(frozen=True)
class Verdict:
    """The built-in Verifier's Reward (1.0 or 0.0) and, on failure, one sentence naming the failed check."""

    reward: float
    detail: str

    @property
    def passed(self) -> bool:
        return self.reward == 1.0


PASS = Verdict(1.0, "")


class _Invalid(ValueError):
    """A bad check definition: the problem and its fix, without the file name (the caller adds it)."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem, self.fix = problem, fix

    def error(self, task_dir: Path) -> AmberError:
        return AmberError(f"{task_dir / 'task.toml'} has an invalid static check: {self.problem}; {self.fix}.")


def static_checks(task_dir: Path, raw: dict[str, Any] | None = None,
                  instruction_text: str | None = None) -> StaticChecks | None:
    """The checks of a static Task, or None when the Task folder is not a static Task.

    A folder without `[metadata.amber.static]` is not static (with or without an
    Environment). A folder with it must have no Environment, valid checks and an
    Instruction whose turns are all non-empty. ``raw`` (its task.toml) and
    ``instruction_text`` are given when the caller has read them already.
    """
    toml_path = task_dir / "task.toml"
    try:
        raw = tomllib.loads(toml_path.read_text()) if raw is None else raw
    except tomllib.TOMLDecodeError as e:
        raise AmberError(f"{toml_path} is not valid TOML ({e}): fix the file and submit again.") from None
    metadata = raw.get("metadata")
    amber = metadata.get("amber") if isinstance(metadata, dict) else None
    table = amber.get("static") if isinstance(amber, dict) else None
    if table is None:
        return None
    environment = raw.get("environment")
    if (task_dir / "environment").exists() or (isinstance(environment, dict) and environment.get("docker_image")):
        raise AmberError(f"{toml_path} declares {TABLE} checks but the Task has an Environment: remove the "
                         f"{TABLE} table for a Task that runs in a sandbox, or remove the environment/ folder "
                         "and [environment].docker_image for a static Task.")
    try:
        checks = _parse(table)
        _compiled(checks)
        if checks.program is not None:
            _program_path(checks.program, task_dir)
    except _Invalid as e:
        raise e.error(task_dir) from None
    instruction = task_dir / "instruction.md"
    if instruction_text is None:
        if not instruction.is_file():
            raise AmberError(f"Static Task {task_dir.name} has no instruction.md: add one at {instruction}.")
        instruction_text = instruction.read_text()
    turns(instruction_text, source=instruction)
    return checks


def turns(instruction: str, source: str | Path = "instruction.md") -> list[str]:
    """The user messages of an Instruction, split at `NEXT_TURN` lines, without surrounding blank lines."""
    parts: list[list[str]] = [[]]
    for line in instruction.split("\n"):
        if line.strip() == NEXT_TURN:
            parts.append([])
        else:
            parts[-1].append(line)
    out = []
    for i, lines in enumerate(parts, 1):
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        if not lines:
            if len(parts) == 1:
                raise AmberError(f"{source} is empty: write the Instruction the Agent is given.")
            raise AmberError(f"{source} has an empty turn {i} of {len(parts)}: write a user message between "
                             f"the {NEXT_TURN} lines, or remove the extra marker line.")
        out.append("\n".join(lines))
    return out


def verify(checks: StaticChecks, answer: str, task_dir: Path) -> Verdict:
    """The built-in Verifier: Reward 1.0 if the answer passes every check, else 0.0 and the first failure."""
    try:
        compiled = _compiled(checks)
    except _Invalid as e:
        raise e.error(task_dir) from None
    if compiled.contains or compiled.not_contains:
        text = answer if checks.case_sensitive else answer.casefold()
        for needle, shown in zip(compiled.contains, checks.contains, strict=True):
            if needle not in text:
                return Verdict(0.0, f"The answer does not contain {_quote(shown)}.")
        for needle, shown in zip(compiled.not_contains, checks.not_contains, strict=True):
            if needle in text:
                return Verdict(0.0, f"The answer contains {_quote(shown)}, which it must not.")
    if compiled.pattern is not None and compiled.pattern.search(answer) is None:
        return Verdict(0.0, f"The answer does not match the regular expression {_quote(checks.regex or '')}.")
    if compiled.number is not None:
        written = _last_number(answer)
        expected = _show(checks.number)
        if checks.tolerance != DEFAULT_TOLERANCE:
            expected += f" (tolerance {_show(checks.tolerance)})"
        if written is None:
            return Verdict(0.0, f"The answer has no number; expected {expected}.")
        if abs(Decimal(written.replace(",", "")) - compiled.number) > compiled.tolerance:
            return Verdict(0.0, f"The answer's last number is {written}, not {expected}.")
    if checks.program is not None:
        return _run_program(checks.program, answer, task_dir)
    return PASS


@dataclass(frozen=True)
class _Compiled:
    contains: tuple[str, ...]
    not_contains: tuple[str, ...]
    pattern: re.Pattern[str] | None
    number: Decimal | None
    tolerance: Decimal


@functools.lru_cache(maxsize=4096)
def _compiled(checks: StaticChecks) -> _Compiled:
    """The checks ready to apply, built once per (equal) checks record."""
    def fold(text: str) -> str:
        return text if checks.case_sensitive else text.casefold()

    pattern = None
    if checks.regex is not None:
        try:
            pattern = re.compile(checks.regex, re.MULTILINE)
        except re.error as e:
            raise _Invalid(f"regex {_quote(checks.regex)} is not a valid regular expression ({e})",
                           f"fix the pattern in {TABLE}") from None
    return _Compiled(
        contains=tuple(fold(s) for s in checks.contains),
        not_contains=tuple(fold(s) for s in checks.not_contains),
        pattern=pattern,
        number=None if checks.number is None else Decimal(repr(float(checks.number))),
        tolerance=Decimal(repr(float(checks.tolerance))),
    )


def _parse(table: Any) -> StaticChecks:
    """A `[metadata.amber.static]` table as a checks record, checking every key's type."""
    if not isinstance(table, dict):
        raise _Invalid(f"{TABLE} is not a table", f"write it as a {TABLE} section with the checks as keys")
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise _Invalid(f"{TABLE} has an unknown key {unknown[0]!r}", f"use only {', '.join(_KEYS)}")
    if "tolerance" in table and "number" not in table:
        raise _Invalid(f"{TABLE} gives a tolerance without a number", "add number or remove tolerance")
    if not any(k in table for k in _KEYS if k not in ("case_sensitive", "tolerance")):
        raise _Invalid(f"{TABLE} declares no check",
                       "add at least one of contains, not_contains, regex, number or program")
    case_sensitive = table.get("case_sensitive", True)
    if not isinstance(case_sensitive, bool):
        raise _Invalid(f"case_sensitive is {case_sensitive!r}, not true or false", "write true or false")
    regex = table.get("regex")
    if regex is not None and (not isinstance(regex, str) or not regex):
        raise _Invalid(f"regex is {regex!r}, not a non-empty string", "give the pattern as a TOML string")
    program = table.get("program")
    if program is not None and (not isinstance(program, str) or not program):
        raise _Invalid(f"program is {program!r}, not a non-empty string",
                       "give the path of the program inside the Task folder, such as \"tests/check.py\"")
    tolerance = _finite(table, "tolerance")
    return StaticChecks(
        contains=_texts(table, "contains"),
        not_contains=_texts(table, "not_contains"),
        case_sensitive=case_sensitive,
        regex=regex,
        number=_finite(table, "number"),
        tolerance=DEFAULT_TOLERANCE if tolerance is None else tolerance,
        program=program,
    )


def _texts(table: dict[str, Any], key: str) -> tuple[str, ...]:
    if key not in table:
        return ()
    value = table[key]
    if not isinstance(value, list) or not value or not all(isinstance(s, str) and s for s in value):
        raise _Invalid(f"{key} is {value!r}, not a list of non-empty texts", f"write {key} = [\"text\", ...]")
    return tuple(value)


def _finite(table: dict[str, Any], key: str) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _Invalid(f"{key} is {value!r}, not a finite number",
                       f"write {key} as a TOML number without quotes, such as {key} = 42.0")
    if key == "tolerance" and value < 0:
        raise _Invalid(f"tolerance is {value!r}, which is negative", "give a tolerance of 0 or more")
    return float(value)


def _program_path(program: str, task_dir: Path) -> Path:
    """The program's file, which must be an executable file inside the Task folder."""
    root = task_dir.resolve()
    path = (root / program).resolve()
    if program.startswith("/") or "\\" in program or not path.is_relative_to(root):
        raise _Invalid(f"program {_quote(program)} is outside the Task folder",
                       "ship the program in the Task folder and give its relative path, such as \"tests/check.py\"")
    if not path.is_file():
        raise _Invalid(f"program {_quote(program)} does not exist in the Task folder",
                       "add the file or fix the path")
    if not os.access(path, os.X_OK):
        raise _Invalid(f"program {_quote(program)} is not executable",
                       "give it a first line such as #!/usr/bin/env python3 and mark it executable (chmod +x)")
    return path


def _run_program(program: str, answer: str, task_dir: Path) -> Verdict:
    try:
        path = _program_path(program, task_dir)
    except _Invalid as e:
        raise e.error(task_dir) from None
    env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    try:
        proc = subprocess.Popen([str(path)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, cwd=task_dir, env=env, start_new_session=True)
    except OSError as e:
        raise AmberError(f"{task_dir / 'task.toml'} has a check program {_quote(program)} that cannot be started "
                         f"({e.strerror}): give it a first line such as #!/usr/bin/env python3.") from None
    with proc:
        try:
            _, err = proc.communicate(answer.encode(), timeout=PROGRAM_TIMEOUT_SEC)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole session: helpers it started could hold the pipe open
            proc.communicate()
            return Verdict(0.0, f"The check program {program} did not finish within {PROGRAM_TIMEOUT_SEC:g} seconds.")
    if proc.returncode == 0:
        return PASS
    lines = [line.strip() for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
    if not lines:
        return Verdict(0.0, f"The check program {program} rejected the answer (exit code {proc.returncode}).")
    last = lines[-1] if lines[-1][-1] in ".!?" else lines[-1] + "."
    return Verdict(0.0, f"The check program {program} rejected the answer: {last}")


def _last_number(answer: str) -> str | None:
    """The last number in the answer, as written (commas kept)."""
    found = _NUMBER.findall(answer)
    return found[-1] if found else None


def _show(x: float | None) -> str:
    s = repr(x)
    return s[:-2] if s.endswith(".0") else s


def _quote(text: str, limit: int = 80) -> str:
    return '"' + (text if len(text) <= limit else text[:limit - 1] + "…") + '"'
