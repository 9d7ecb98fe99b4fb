"""Verifier: what a Task's tests/ folder reads, writes, compares against and checks.

test.sh is read with `lint.shell`, the Python files it runs (and Python
inlined in it) with `lint.verifier_python`, JavaScript only for the absolute
paths it opens. Where a check is beyond this reader (code in another language,
a computed path, a negated test), the Verifier is marked not `readable` and
`start-state-passes` concludes nothing: a missed finding is cheaper than a
false one.
"""

from __future__ import annotations

import ast
import json
import posixpath
import re
from dataclasses import dataclass, field

from amber_pipeline.benchmarks.lint.observations import Expected, FileCheck, FileRead
from amber_pipeline.benchmarks.lint.shell import Command, file_like, path_like, program, shell_commands
from amber_pipeline.benchmarks.lint.task import CODE_SUFFIXES, TaskFolder, read_text
from amber_pipeline.benchmarks.lint.verifier_python import PythonFacts


@dataclass
class Verifier:
    """What tests/ reads, writes, compares against and checks, as far as this reader can follow it."""

    workdir: str  # where test.sh starts (the image's working directory)
    test_sh: list[Command] | None
    reads: list[FileRead] = field(default_factory=list)
    writes: set[str] = field(default_factory=set)  # absolute
    literals: list[Expected] = field(default_factory=list)
    checks: list[FileCheck] = field(default_factory=list)
    readable: bool = True  # every check it makes is one `FileCheck` can express
    runs_tests: bool = False  # test.sh runs Python test files of tests/

    @classmethod
    def read(cls, task: TaskFolder, workdir: str) -> Verifier:
        tests = task.dir / "tests"
        script = read_text(tests / "test.sh")
        verifier = cls(workdir, None if script is None else shell_commands(script))
        if script is None:
            verifier.readable = False
            return verifier
        verifier._shell("tests/test.sh", verifier.test_sh or [])
        try:
            files = sorted(p for p in tests.rglob("*") if p.is_file() and p.name != "test.sh")
        except OSError:
            files = []
        for path in files[:200]:
            rel = path.relative_to(task.dir).as_posix()
            if "__pycache__" in rel:
                continue
            text = read_text(path)
            if path.suffix == ".py":
                if text is None:
                    verifier.readable = False
                else:
                    verifier._python(rel, text, 1)
            elif path.name.endswith(CODE_SUFFIXES) or path.name == "Dockerfile":
                verifier.readable = False  # code whose checks this reader does not follow
                if text is not None and path.suffix in (".sh", ".bash"):
                    verifier._shell(rel, shell_commands(text), checks=False)
                elif text is not None and path.suffix in (".js", ".mjs", ".ts"):
                    verifier._javascript(rel, text)
        return verifier

    def _at(self, path: str, cwd: str | None = None) -> str:
        return posixpath.normpath(posixpath.join(cwd or self.workdir, path))

    def _shell(self, rel: str, commands: list[Command], checks: bool = True) -> None:
        cwd = self.workdir
        for cmd in commands:
            prog, at = program(cmd)
            self.writes.update(self._at(target, cwd) for target, dynamic, _ in cmd.writes if not dynamic)
            self.reads += [FileRead(rel, cmd.line, source, self._at(source, cwd)) for source in cmd.reads]
            operands = [(k, w) for k, w in cmd.static_words() if k > at and not w.startswith("-")]
            if prog == "cd" and operands and cmd.depth == 0:
                cwd = self._at(operands[0][1], cwd)
            elif prog in ("rm", "mkdir", "touch"):
                self.writes.update(self._at(w, cwd) for _, w in operands)
            elif prog not in ("echo", "printf", "export", "set", "chmod", "apt-get", "apt", "pip", "pip3", "curl",
                              "wget", "uv"):
                pattern = _grep_pattern(cmd, at) if prog == "grep" else None
                for k, word in operands:
                    if k != pattern and (word.startswith("/") and path_like(word)
                                         or prog in _RELATIVE_READERS and file_like(word)):
                        self.reads.append(FileRead(rel, cmd.line, word, self._at(word, cwd)))
            self._shell_literals(rel, cmd, prog, at)
            if re.fullmatch(r"python[\d.]*", prog) and cmd.heredoc is not None:
                self._python(rel, str(cmd.heredoc[1]), int(cmd.heredoc[0]))
            elif re.fullmatch(r"python[\d.]*", prog) and cmd.words[at + 1:at + 2] == ["-c"] and len(cmd.words) > at + 2:
                self._python(rel, cmd.words[at + 2], cmd.line)
            elif checks:
                self._shell_check(rel, cmd, prog, at)

    def _shell_check(self, rel: str, cmd: Command, prog: str, at: int) -> None:
        """Record the checks of one test.sh command, or mark the Verifier unreadable."""
        if writes_reward(cmd) or prog in _BOILERPLATE or (prog == "rm" and all(
                w.startswith(("/logs", "-")) for w in cmd.words[at + 1:])):
            return
        if prog in ("pytest", "py.test") or re.fullmatch(r"python[\d.]*", prog):
            # The checks are those of the tests/ files it runs, read on their own; anything else is not followed.
            targets = [w for k, w in cmd.static_words() if k > at and (w.endswith(".py") or w.rstrip("/") == "/tests")]
            if not targets or any(not t.startswith("/tests") for t in targets) or any(cmd.dynamic[at + 1:]):
                self.readable = False
            self.runs_tests = True
            return
        check = _file_check(rel, cmd, prog, at)
        if check is None or cmd.negated:
            self.readable = False
        else:
            self.checks.append(check)

    def _shell_literals(self, rel: str, cmd: Command, prog: str, at: int) -> None:
        if prog == "grep":
            k = _grep_pattern(cmd, at)
            if k is not None and not cmd.dynamic[k]:
                fixed = any(re.fullmatch(r"-[a-zA-Z]*F[a-zA-Z]*", w) for w in cmd.words[at + 1:k])
                for text in ([cmd.words[k]] if fixed else regex_literals(cmd.words[k])):
                    self.literals.append(Expected(rel, cmd.line, text))
        elif prog in ("[", "[[", "test"):
            words = cmd.words
            for k in range(at + 1, len(words) - 1):
                if words[k] in ("=", "==", "-eq"):
                    for side in (k - 1, k + 1):
                        if side > at and not cmd.dynamic[side]:
                            self.literals.append(Expected(rel, cmd.line, _number_or_text(words[side])))

    def _javascript(self, rel: str, text: str) -> None:
        call = re.compile(r"(?:readFileSync|existsSync|readFile|statSync|accessSync|open|spawn\w*|exec\w*)"
                          r"\(\s*[\[]?\s*['\"`](/[^'\"`\s]+)['\"`]")
        for match in call.finditer(text):
            path = match.group(1)
            self.reads.append(FileRead(rel, text.count("\n", 0, match.start()) + 1, path, self._at(path)))

    def _python(self, rel: str, text: str, first: int) -> None:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            self.readable = False
            return
        facts = PythonFacts(rel, tree, first - 1)
        self.reads += [FileRead(rel, line, path, self._at(path)) for line, path in facts.reads]
        self.writes |= {self._at(path) for path in facts.writes}
        self.literals += facts.literals
        checks = facts.checks()
        if checks is None:
            self.readable = False
        else:
            self.checks += checks


_RELATIVE_READERS = {"cat", "head", "tail", "wc", "diff", "cmp", "grep", "jq", "sort", "uniq", "md5sum", "sha256sum",
                     "python", "python3", "node", "bash", "sh", "source", ".", "test", "[", "[[", "stat", "file"}
_BOILERPLATE = {"mkdir", "cd", "echo", "printf", "set", "export", "source", ".", "apt-get", "apt", "apk", "pip",
                "pip3", "uv", "curl", "wget", "chmod", "true", ":", "exit", "unset", "trap", "sleep", "cat", "ls"}


def _grep_pattern(cmd: Command, at: int) -> int | None:
    """The index of grep's pattern word (after -e, or its first non-option argument)."""
    k = at + 1
    while k < len(cmd.words):
        word = cmd.words[k]
        if word in ("-e", "--regexp"):
            return k + 1 if k + 1 < len(cmd.words) else None
        if word == "--":
            return k + 1 if k + 1 < len(cmd.words) else None
        if word.startswith("-") and word != "-":
            k += 2 if word in ("-f", "-m", "-A", "-B", "-C", "--max-count") else 1
            continue
        return k
    return None


def _file_check(rel: str, cmd: Command, prog: str, at: int) -> FileCheck | None:
    """A test.sh check of a file (`[ -f P ]`, `grep -q TEXT P`, `[ "$(cat P)" = TEXT ]`), or None."""
    words = cmd.words[at:]
    if prog in ("[", "[[", "test"):
        inner = words[1:-1] if prog != "test" else words[1:]
        if len(inner) == 2 and inner[0] in ("-f", "-e", "-d", "-r") and not cmd.dynamic[at + 2]:
            return FileCheck(rel, cmd.line, "exists", inner[1])
        if len(inner) == 3 and inner[1] in ("=", "==") and not cmd.dynamic[at + 3]:
            read = re.fullmatch(r"\$\(\s*cat\s+([^\s;|&()$]+)\s*\)", inner[0])
            if read:
                return FileCheck(rel, cmd.line, "equals", read.group(1), inner[2], strip="trailing newlines")
        return None
    if prog == "grep":
        k = _grep_pattern(cmd, at)
        options = "".join(w[1:] for w in cmd.words[at + 1:k or at] if re.fullmatch(r"-[a-zA-Z]+", w))
        if k is None or k + 2 != len(cmd.words) or cmd.dynamic[k] or cmd.dynamic[k + 1] or set(options) - set("qsFx"):
            return None
        pattern = cmd.words[k]
        if "F" not in options and re.search(r"[\\.*\[\]^$]", pattern):
            return None
        return FileCheck(rel, cmd.line, "line" if "x" in options else "contains", cmd.words[k + 1], pattern)
    return None


def _number_or_text(word: str) -> str | float:
    return float(word) if re.fullmatch(r"-?\d+(\.\d+)?", word) else word


def regex_literals(pattern: str) -> list[str]:
    """The runs of literal characters in a regular expression (escaped punctuation counts as literal)."""
    runs: list[str] = []
    run: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt.isalnum():  # \d, \s, \b ...: a class, not a literal
                runs.append("".join(run))
                run = []
            else:
                run.append(nxt)
            i += 2
            continue
        if c in "*?{" or (c == "+" and run):
            if run:
                run.pop()  # the quantified character is optional or repeated
            runs.append("".join(run))
            run = []
            if c == "{":
                j = pattern.find("}", i)
                i = len(pattern) if j < 0 else j
        elif c in ".^$|()[]":
            runs.append("".join(run))
            run = []
            if c == "[":
                j = pattern.find("]", i + 2)
                i = len(pattern) if j < 0 else j
        else:
            run.append(c)
        i += 1
    runs.append("".join(run))
    return [r for r in runs if r]


_REWARD_FILE = re.compile(r"(^|/)reward\.(txt|json)$")


def reward_value(cmd: Command) -> float | None:
    """The constant Reward a command writes (echo/printf of a literal), or None when it is computed."""
    prog, at = program(cmd)
    if prog not in ("echo", "printf") or any(cmd.dynamic[at + 1:]):
        return None
    args = [w for w in cmd.words[at + 1:] if not re.fullmatch(r"-[neE]+", w)]
    text = " ".join(args).replace("\\n", "\n").strip()
    if cmd.heredoc is not None and not args:
        text = str(cmd.heredoc[1]).strip()
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict) and len(value) == 1:
        value = next(iter(value.values()))
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def writes_reward(cmd: Command) -> bool:
    """Whether a command writes the Reward file (reward.txt or reward.json, wherever it is)."""
    return any(_REWARD_FILE.search(target) for target, _, _ in cmd.writes)
