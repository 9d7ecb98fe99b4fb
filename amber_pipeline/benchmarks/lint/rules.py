"""Rules: the five checks of a Task, each from what the readers found (why each exists: the package docstring).

Each rule takes the Task folder and what `image` and `verifier` read of it,
and returns its findings with the file and line of the evidence. They only
judge; reading is done before, once per Task.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from amber_pipeline.benchmarks.lint.findings import (
    IGNORES_EXIT,
    QUOTES_OUTPUT,
    SOLUTION_IN_IMAGE,
    START_PASSES,
    TESTS_IN_IMAGE,
    UNNAMED_FILE,
    Finding,
)
from amber_pipeline.benchmarks.lint.image import Image
from amber_pipeline.benchmarks.lint.observations import FileCheck
from amber_pipeline.benchmarks.lint.shell import Command, is_test_command, program
from amber_pipeline.benchmarks.lint.task import CODE_SUFFIXES, MAX_FILE_BYTES, TaskFolder, read_text
from amber_pipeline.benchmarks.lint.verifier import Verifier, regex_literals, reward_value, writes_reward
from amber_pipeline.benchmarks.tasks import TASK_FILE

MIN_TEXT = 8  # shorter literals ("yes", "api 4") occur in Instructions by chance
EXCLUDED_ROOTS = ("/tests", "/logs", "/solution", "/tmp", "/proc", "/usr", "/bin", "/etc", "/dev", "/sys", "/sbin",
                  "/lib", "/lib64", "/run", "/var/lib", "/var/cache", "/installed-agent", "/opt/amber-agent")


def unnamed_reads(task: TaskFolder, verifier: Verifier, image: Image) -> list[Finding]:
    """test-reads-unnamed-file."""
    if not image.present:
        return []  # a prebuilt image: what it holds is unknown, so any file could be an input
    found: list[Finding] = []
    seen: set[str] = set()
    for read in verifier.reads:
        path = read.resolved
        if path in seen or not _maybe_output(path, image.workdir, verifier.writes):
            continue
        seen.add(path)
        if image.may_exist(path) or task.names(path) or task.names(read.path):
            continue
        folder = posixpath.dirname(path)
        named_folder = folder.count("/") > 1 and folder in task.instruction
        if named_folder:
            message = (f"{read.file} reads {path}; instruction.md names its folder {folder} but never the file "
                       f"{posixpath.basename(path)}: unless the name follows from the Instruction, name the file.")
        else:
            message = (f"{read.file} reads {path}, which instruction.md never names and the Dockerfile does not "
                       "create, so the Agent cannot know to make it: name the file (its path) in the Instruction.")
        found.append(task.finding(UNNAMED_FILE, "warning" if named_folder else "error", message, read.file,
                                  read.line))
    return found


def _maybe_output(path: str, workdir: str, written: set[str]) -> bool:
    """Whether a file the Verifier reads could be one the Agent must make (not a system, test or log file, not a
    top-level folder, not the working directory, not something the Verifier wrote itself)."""
    if path == workdir or path.count("/") == 1 and "." not in path:
        return False
    if any(path == root or path.startswith(root + "/") for root in EXCLUDED_ROOTS):
        return False
    return not any(path == w or path.startswith(w.rstrip("/") + "/") for w in written)


def copied_answers(task: TaskFolder, image: Image) -> list[Finding]:
    """solution-in-image and tests-in-image."""
    if not image.present:
        return []
    verifier_files = _folder_files(task.dir / "tests")
    solution_files = _folder_files(task.dir / "solution")
    found: list[Finding] = []
    for copy in image.copies:
        named = [s for s in copy.sources if not re.match(r"[a-z]+://", s)]
        taken = copy.files or [posixpath.normpath(s.lstrip("/")) for s in named]
        env = task.dir / "environment"
        solution = [f for f in taken if _is_answer(f, env, "solution", "solve.sh", solution_files)]
        tests = [f for f in taken if _is_answer(f, env, "tests", "test.sh", verifier_files)]
        if solution:
            found.append(task.finding(
                SOLUTION_IN_IMAGE, "error",
                f"environment/Dockerfile line {copy.line} {copy.keyword}s {_shown(solution)} into the image, so the "
                "Agent can read the reference solution: copy only the inputs the Task needs.",
                "environment/Dockerfile", copy.line))
        if tests:
            grader = [f for f in tests
                      if posixpath.basename(f) == "test.sh" or _same_as(env / f, verifier_files, by_name=True)]
            if grader:
                message = (f"environment/Dockerfile line {copy.line} {copy.keyword}s {_shown(grader)} into the "
                           "image, a copy of the Verifier the Agent can read: keep the grader in tests/ only.")
            else:
                message = (f"environment/Dockerfile line {copy.line} {copy.keyword}s {_shown(tests)} into the image: "
                           "if these are the grader's tests the Agent can read them (keep them in tests/ only); if "
                           "they are the project's own tests for the Agent to run, ignore this warning.")
            found.append(task.finding(TESTS_IN_IMAGE, "error" if grader else "warning", message,
                                      "environment/Dockerfile", copy.line))
    return found


def _folder_files(folder: Path) -> dict[str, bytes]:
    """File name -> content of a Task's tests/ or solution/ folder (small files only)."""
    out: dict[str, bytes] = {}
    try:
        for path in folder.rglob("*"):
            if path.is_file() and path.stat().st_size <= MAX_FILE_BYTES and len(out) < 500:
                out[path.name] = path.read_bytes()
    except OSError:
        pass
    return out


def _same_as(path: Path, files: dict[str, bytes], by_name: bool) -> bool:
    """Whether a build-context file is one of ``files``: the same bytes, or (``by_name``) a test file's name.
    A solution's files share names with the inputs they fix (main.py), so only their bytes count."""
    if by_name and path.name in files and re.match(r"test_|.*_test\.|test\.sh$", path.name):
        return True
    try:
        return path.is_file() and path.stat().st_size <= MAX_FILE_BYTES and path.read_bytes() in files.values()
    except OSError:
        return False


def _is_answer(rel: str, env: Path, folder: str, script: str, originals: dict[str, bytes]) -> bool:
    """A copied context file that is the solution (or the Verifier): its script, in a top-level folder of its name,
    or a code file equal to one of its files (data files are often shared with inputs, so they do not count)."""
    parts = rel.split("/")
    return parts[-1] == script or parts[0] == folder or (
        parts[-1].endswith(CODE_SUFFIXES) and _same_as(env / rel, originals, by_name=folder == "tests"))


def _shown(files: list[str]) -> str:
    """The copied files as a user finds them: their paths, or their top folders when there are many."""
    names = sorted(set(files)) if len(set(files)) <= 3 else sorted({f.split("/")[0] + "/" for f in files})
    return ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")


def start_passes(task: TaskFolder, verifier: Verifier, image: Image) -> list[Finding]:
    """start-state-passes: a constant Reward 1 with no test before it, or checks the image already satisfies."""
    commands = verifier.test_sh or []
    always = _constant_reward(commands)
    if always is not None and always[1] == 1.0 and always[0] is None:
        write = always[2]
        return [task.finding(
            START_PASSES, "error",
            f"tests/test.sh writes Reward 1 at line {write.line} on every path, so an Agent that does nothing "
            "passes: write 1 only when a check of the end state passes, and 0 otherwise.", "tests/test.sh",
            write.line)]
    passes = any(writes_reward(c) and reward_value(c) == 1.0 for c in commands)
    from_files = any(c.file != "tests/test.sh" for c in verifier.checks)
    if not image.present or not verifier.readable or not verifier.checks or not passes or (
            from_files and not verifier.runs_tests):
        return []
    evidence = []
    for check in verifier.checks:
        path = posixpath.normpath(posixpath.join(image.workdir, check.path))
        if not _satisfied(check, path, image):
            return []
        evidence.append((check, path))
    check, path = evidence[0]
    made = image.files.get(path)
    where = f"environment/Dockerfile line {made.line}" if made is not None else "environment/Dockerfile"
    what = "exists" if check.kind == "exists" else f"holds {_quote(check.text)}"
    more = f" (and its {len(evidence) - 1} other checks pass too)" if len(evidence) > 1 else ""
    return [task.finding(
        START_PASSES, "error",
        f"{check.file} line {check.line} checks that {check.path} {what}, and {where} already puts it in the image"
        f"{more}, so an Agent that does nothing passes: check something only the Agent's work produces.",
        check.file, check.line)]


def _satisfied(check: FileCheck, path: str, image: Image) -> bool:
    if check.kind == "exists":
        return image.surely_exists(path)
    content = image.content(path)
    if content is None:
        return False
    if check.kind == "contains":
        return check.text in content
    if check.kind == "line":
        return check.text in content.split("\n")
    if check.strip == "trailing newlines":
        return content.rstrip("\n") == check.text
    stripped = getattr(content, check.strip)() if check.strip else content
    return stripped == check.text


def _constant_reward(commands: list[Command]) -> tuple[Command | None, float, Command] | None:
    """(the last test command before it, its value, the write) when test.sh ends on one unconditional constant
    Reward write: nothing before it can stop it (exit, set -e) and nothing after it writes another value."""
    errexit, stopper, last_test = False, False, None
    final: tuple[Command | None, float, Command] | None = None
    for cmd in commands:
        prog, at = program(cmd)
        if prog == "set" and any(re.fullmatch(r"-[a-z]*e[a-z]*", w) or w == "errexit" for w in cmd.words[at + 1:]):
            errexit = True
        elif prog == "set" and any(re.fullmatch(r"\+[a-z]*e[a-z]*", w) for w in cmd.words[at + 1:]):
            errexit = False
        if prog in ("exit", "return") or any("$?" in w or "PIPESTATUS" in w for w in cmd.words):
            stopper = True
        if writes_reward(cmd):
            value = reward_value(cmd)
            top = cmd.depth == 0 and not cmd.chained and not cmd.condition
            if value is not None and top and not errexit and not stopper:
                final = (last_test, value, cmd)
            elif final is None or value != final[1]:
                final = None
                stopper = stopper or not top
            continue
        if cmd.depth == 0 and is_test_command(cmd) and not cmd.chained and not cmd.condition:
            last_test = cmd
        elif is_test_command(cmd):
            stopper = True  # a test whose result is used (if, &&, ||)
    return final


def ignored_exit(task: TaskFolder, verifier: Verifier) -> list[Finding]:
    """verifier-ignores-exit-code."""
    always = _constant_reward(verifier.test_sh or [])
    if always is None:
        return []
    test, value, write = always
    if test is None:
        return []
    prog, _ = program(test)
    outcome = "every Agent passes" if value == 1.0 else "no Agent can pass" if value == 0.0 else "every Agent ties"
    return [task.finding(
        IGNORES_EXIT, "error",
        f"tests/test.sh runs {prog} (line {test.line}) and then writes Reward {value:g} at line {write.line} whatever "
        f"it returned, so {outcome}: write the Reward from its exit status "
        f"(if {prog} ...; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi).",
        "tests/test.sh", write.line)]


def _significant(value: str | float, names: bool = False) -> bool:
    """Long enough not to occur in an Instruction by chance: 8+ characters, or a number of 2+ digits. A single
    identifier ("query_id", "database") is a key or name the Instruction must give, unless ``names`` says that
    such a word is an answer (a static Task's check)."""
    if isinstance(value, str):
        text = value.strip()
        if not names and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
            return False
        return len(text) >= MIN_TEXT and not re.fullmatch(r"[\W_]+", text)
    digits = re.sub(r"\D", "", repr(abs(value)).removesuffix(".0")).lstrip("0")
    return len(digits) >= 2


def _number_forms(value: float) -> set[str]:
    if float(value).is_integer():
        n = int(value)
        return {str(n), f"{n:,}"}
    return {repr(float(value)), f"{value:,}"}


def _quoted(instruction: str, value: str | float, case_sensitive: bool = True) -> bool:
    if isinstance(value, str):
        text = value.strip()
        return text in instruction if case_sensitive else text.casefold() in instruction.casefold()
    return any(re.search(rf"(?<![\w.,]){re.escape(form)}(?![\w]|[.,]\d)", instruction) for form in _number_forms(value))


def _quote(value: str | float, limit: int = 60) -> str:
    if not isinstance(value, str):
        return f"{value:g}"
    text = value.strip()
    return '"' + (text if len(text) <= limit else text[:limit - 1] + "…") + '"'


_FORMAT_NOTE = ("if the exact value or format is the point of the Task this is fine, otherwise describe it instead "
                "of quoting it")


def quoted_outputs(task: TaskFolder, verifier: Verifier, image: Image) -> list[Finding]:
    """instruction-quotes-expected-output, for a Task with an Environment. A literal the input files already hold
    (a value to keep, a section name) gives the Agent nothing it could not read anyway, so it is left alone."""
    found, seen = [], set()
    inputs: str | None = None
    for literal in sorted(verifier.literals, key=lambda lit: (lit.file != "tests/test.sh", lit.file, lit.line)):
        key = literal.value if isinstance(literal.value, str) else float(literal.value)
        if key in seen or not _significant(literal.value) or not _quoted(task.instruction, literal.value):
            continue
        seen.add(key)
        inputs = image.inputs() if inputs is None else inputs
        if _quoted(inputs, literal.value):
            continue
        found.append(task.finding(
            QUOTES_OUTPUT, "warning",
            f"{literal.file} line {literal.line} expects {_quote(literal.value)}, which instruction.md quotes "
            f"verbatim, so the Agent can copy it instead of computing it: {_FORMAT_NOTE}.", literal.file,
            literal.line))
    return found


def static_quotes(task: TaskFolder) -> list[Finding]:
    """instruction-quotes-expected-output for a static Task: its declared checks against its Instruction."""
    table = task.static or {}
    toml_lines = (read_text(task.dir / TASK_FILE) or "").split("\n")
    case_sensitive = table.get("case_sensitive", True) is not False
    expected: list[tuple[str, str | float]] = []
    contains = table.get("contains")
    if isinstance(contains, list):
        expected += [("contains", s) for s in contains if isinstance(s, str)]
    regex = table.get("regex")
    if isinstance(regex, str):
        expected += [("regex", run) for run in regex_literals(regex)]
    number = table.get("number")
    if isinstance(number, int | float) and not isinstance(number, bool):
        expected.append(("number", float(number)))
    found = []
    for key, value in expected:
        if not _significant(value, names=True) or not _quoted(task.instruction, value,
                                                              case_sensitive or key != "contains"):
            continue
        line = next((k + 1 for k, text in enumerate(toml_lines) if re.match(rf"\s*{key}\s*=", text)), None)
        found.append(task.finding(
            QUOTES_OUTPUT, "warning",
            f"task.toml's {key} check expects {_quote(value)}, which instruction.md quotes verbatim, so the Model "
            f"can copy it instead of working it out: {_FORMAT_NOTE}.", TASK_FILE, line))
    return found
