"""A Task folder as the lint reads it: forgiving, never a traceback.

A Task under lint may be anything a user wrote, so every file is read the
same way (`read_text`): what is missing, too big, binary or not UTF-8 is
None, and the rules skip it instead of raising.
"""

from __future__ import annotations

import posixpath
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amber_pipeline.benchmarks.lint.findings import Finding, Severity
from amber_pipeline.benchmarks.tasks import TASK_FILE

MAX_FILE_BYTES = 1_000_000
CODE_SUFFIXES = (".py", ".sh", ".bash", ".js", ".mjs", ".ts", ".rb", ".go", ".rs", ".java", ".c", ".cc", ".cpp",
                 ".pl")


def read_text(path: Path) -> str | None:
    """A text file's content with LF line ends, or None when it is missing, too big, binary or not UTF-8."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data:
        return None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    return text.replace("\r\n", "\n").replace("\r", "\n")


@dataclass(frozen=True)
class TaskFolder:
    """What the rules need of a Task folder: its name, Instruction, static checks and working directory."""

    dir: Path
    name: str
    instruction: str
    static: dict[str, Any] | None
    workdir: str | None  # [environment].workdir

    @classmethod
    def read(cls, task_dir: Path) -> TaskFolder:
        text = read_text(task_dir / TASK_FILE) or ""
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            raw = {}
        info = raw.get("task")
        name = task_dir.name
        if isinstance(info, dict) and isinstance(info.get("name"), str) and info["name"]:
            name = info["name"].split("/", 1)[-1]
        metadata = raw.get("metadata")
        amber = metadata.get("amber") if isinstance(metadata, dict) else None
        static = amber.get("static") if isinstance(amber, dict) else None
        environment = raw.get("environment")
        workdir = environment.get("workdir") if isinstance(environment, dict) else None
        return cls(task_dir, name, read_text(task_dir / "instruction.md") or "",
                   static if isinstance(static, dict) else None, workdir if isinstance(workdir, str) else None)

    def finding(self, rule: str, severity: Severity, message: str, path: str | None, line: int | None) -> Finding:
        return Finding(self.name, rule, severity, message, path, line)

    def names(self, path: str) -> bool:
        """Whether the Instruction names ``path``: its full path or its file name, as a whole word."""
        if path in self.instruction:
            return True
        base = posixpath.basename(path)
        return bool(base) and re.search(rf"(?<![\w-]){re.escape(base)}(?![\w-])", self.instruction) is not None
