"""Benchmark lint: rules that catch unfair Tasks before anyone pays for a Trial.

Validation (amber-task-format.md) finds a broken Task by running it: the
oracle Agent must get Reward 1 and the nop Agent Reward 0. That costs sandbox
time and still lets through Tasks that are unfair in ways neither bound shows:
a grader that reads a file the Instruction never names (every Agent fails, the
oracle passes because the solution knows the name), an answer baked into the
image, an expected output quoted in the Instruction. These rules read the Task
folders, without Docker or a model, and name the file and line of the evidence.

The rules, each with why it exists and when it is wrong (its known false
positives):

`test-reads-unnamed-file` (error; a warning when the Instruction names the
file's folder). The Verifier (test.sh, the Python it runs, other tests/ files)
reads a file the Agent must make, but the Instruction names neither its path
nor its file name: only an Agent that guesses the name can pass. Files under
/tests, /logs, /solution, /tmp and the system folders, files the Verifier
writes itself and files the Dockerfile creates are inputs, not outputs.
Wrong for: a file the base image (`FROM`) already holds; a name the
Instruction gives as a pattern ("one `<service>.txt` per service"). Paths
built at run time are not seen at all.

`solution-in-image` (error). The Dockerfile COPYs or ADDs the reference
solution (`solution/`, `solve.sh`, a code file equal to one in solution/, or
the whole context `.` while one of those lives in environment/): the Agent can
read the answer. Wrong for: a folder named `solution` that is the project's
own code.

`tests-in-image` (error; a warning for a `tests/` folder that shares no file
with the Verifier). The Dockerfile copies the grader (`test.sh`, or code files
named like or equal to those of tests/) into the image: the Agent can read it.
Wrong for: a project's own test suite that the Agent is meant to run.

`start-state-passes` (error). The nop Agent would pass: test.sh writes Reward 1
on every path with no test before it, or every check the Verifier makes
(`[ -f P ]`, `grep -q TEXT P`, `assert os.path.exists(P)`, `assert TEXT in
open(P).read()`, `assert Path(P).read_text().strip() == TEXT`) is already
satisfied by a file the Dockerfile COPYs or writes. Any check it cannot read
keeps it silent; reward logic inverted (1 when a check fails) would be misread.
Validation's nop Trial catches the rest when it runs.

`verifier-ignores-exit-code` (error). test.sh runs its tests (pytest, python,
node, bash ...) and then writes a constant Reward whatever they returned: no
`if`, `&&`, `||`, `$?` or `set -e` before the write, as in
`pytest ...; echo 1 > /logs/verifier/reward.txt`. Harbor's convention writes
the Reward from the result: `if [ $? -eq 0 ]; then echo 1 ...; else echo 0
...; fi`. A Reward computed from a test report (a ctrf.json) is not flagged.

`instruction-quotes-expected-output` (warning). A literal the Verifier compares
against (a text of 8 or more characters, or a number of two or more digits, in
`grep`, `[ = ]`, `==`, `"text" in`, `assertEqual`, `approx`) appears verbatim
in instruction.md: the Agent can copy it instead of computing it. A warning,
not an error: sometimes the exact value or format is the point of the Task
(set the port to 8080, write exactly this header). Not counted: single
identifiers (`query_id`: keys and names the Instruction must give), the
allowed values of `x in [...]`, paths, and values the input files already
hold (a setting to keep). Wrong for: an answer the Task wants copied.

Static Tasks (`[metadata.amber.static]`, no Environment) are checked only by
`instruction-quotes-expected-output`, against their declared `contains`,
`regex` and `number` checks.

Reading is forgiving: a file that cannot be read (missing, binary, not UTF-8,
a bad task.toml) is skipped, never a traceback. The rules are plain string and
`ast` work with no process started: about a second for a thousand Tasks.

The reading is split by what is read: `task` (the folder, forgivingly),
`shell` (test.sh and RUN lines), `image` (what the Dockerfile puts into the
image; its instructions are read by `benchmarks.dockerfiles`, as the upload
checks read them), `verifier` and `verifier_python` (what tests/ reads and
checks, found as `evidence`); `rules` judges, `findings` is what it reports.
"""

from __future__ import annotations

from pathlib import Path

from amber_pipeline.benchmarks.lint.findings import RULES, Finding, Severity
from amber_pipeline.benchmarks.lint.image import Image
from amber_pipeline.benchmarks.lint.rules import (
    copied_answers,
    ignored_exit,
    quoted_outputs,
    start_passes,
    static_quotes,
    unnamed_reads,
)
from amber_pipeline.benchmarks.lint.task import TaskFolder
from amber_pipeline.benchmarks.lint.verifier import Verifier
from amber_pipeline.benchmarks.tasks import find_task_dirs

__all__ = ["RULES", "Finding", "Severity", "lint", "lint_task", "task_name"]


def lint(root: Path) -> list[Finding]:
    """Every finding of every Task under ``root`` (one Task folder, or a folder of Task folders)."""
    return [f for task_dir in find_task_dirs(root) for f in lint_task(task_dir)]


def task_name(task_dir: Path) -> str:
    """A Task's name as Amber calls it (``[task].name`` after the slash, else its folder's), never raising."""
    return TaskFolder.read(task_dir).name


def lint_task(task_dir: Path) -> list[Finding]:
    """The findings of one Task folder, in rule order; never raises on what the folder holds."""
    task = TaskFolder.read(task_dir)
    if task.static is not None:
        return static_quotes(task)
    image = Image.read(task)
    verifier = Verifier.read(task, image.workdir)
    return [*unnamed_reads(task, verifier, image), *copied_answers(task, image),
            *start_passes(task, verifier, image), *ignored_exit(task, verifier),
            *quoted_outputs(task, verifier, image)]
