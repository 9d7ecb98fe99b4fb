"""Findings: what a lint rule reports, and the rules' stable ids.

The result schema lives apart from the rules that compute it: the command
line prints it, the tests compare it, and `task` builds it without depending
on the rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]

UNNAMED_FILE = "test-reads-unnamed-file"
SOLUTION_IN_IMAGE = "solution-in-image"
TESTS_IN_IMAGE = "tests-in-image"
START_PASSES = "start-state-passes"
IGNORES_EXIT = "verifier-ignores-exit-code"
QUOTES_OUTPUT = "instruction-quotes-expected-output"

RULES: dict[str, str] = {  # id -> what it catches, for --help and docs
    UNNAMED_FILE: "the Verifier reads a file the Agent must make that the Instruction never names",
    SOLUTION_IN_IMAGE: "the Dockerfile copies the reference solution into the image",
    TESTS_IN_IMAGE: "the Dockerfile copies the Verifier into the image",
    START_PASSES: "the start state already passes (Reward 1 on every path, or the checked output is baked in)",
    IGNORES_EXIT: "test.sh writes a constant Reward whatever its tests returned",
    QUOTES_OUTPUT: "a literal the Verifier compares against appears verbatim in the Instruction",
}


@dataclass(frozen=True)
class Finding:
    """One rule broken by one Task, with where the evidence is (relative to the Task folder)."""

    task: str
    rule: str
    severity: Severity
    message: str
    path: str | None
    line: int | None
