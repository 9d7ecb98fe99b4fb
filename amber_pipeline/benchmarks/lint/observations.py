"""Evidence: what the Verifier's readers found, each with the file and line a finding will name.

Kept apart from the readers (`verifier` for test.sh and other files,
`verifier_python` for Python) because both produce these records and the
rules consume them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class FileRead:
    """A file the Verifier reads."""

    file: str  # relative to the Task folder
    line: int
    path: str  # as written
    resolved: str  # absolute, against the working directory it is read from


@dataclass(frozen=True)
class Expected:
    """A literal the Verifier compares against: an expected text or number."""

    file: str
    line: int
    value: str | float


@dataclass(frozen=True)
class FileCheck:
    """A check the Verifier makes of one file: it exists, contains a text, or equals one (after stripping)."""

    file: str
    line: int
    kind: Literal["exists", "contains", "equals", "line"]
    path: str
    text: str = ""
    strip: str | None = None

