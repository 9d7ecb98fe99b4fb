#!/usr/bin/env python3
"""HumanEval's check: the answer's last Python function must pass the item's own tests.

The answer comes on standard input; the item (`prompt`, `test`, `entry_point`)
from `humaneval.json` beside this file. The code is the answer's ```python
blocks (else its untagged ``` blocks, else the whole answer); the function is,
in the last block that defines one, the last top-level function named
`entry_point`, else the last top-level function of any name. The program run
is: a guard (below), the prompt's imports and helper definitions (some
prompts define functions the solution calls), the block's top-level imports,
the function (bound to `entry_point` when named otherwise), the item's `test`,
`check(entry_point)` and the printing of a random token. It passes when it
exits 0 having printed the token, so a function that ends the process early
with status 0 fails. This script then exits 0; otherwise the last line of its
standard error says why: the tests' last error line, a timeout, an early end,
or no function found.

THIS IS NOT A SANDBOX. Static Tasks run on the host, so the candidate runs
on the host too, hardened as far as a plain process can be:
- a Python of its own, `python3 -I -S -B` (isolated: no user site, no
  environment variables, no site-packages, no bytecode written), with an
  empty environment, in a temporary folder that is removed afterwards;
- resource limits (`resource.setrlimit`): CPU seconds, address space, the
  size of files it writes, open files, no core dumps, and no new processes
  (the process limit does not bind root, hence the next point);
- an audit hook (PEP 578), installed before any of the candidate's code,
  that refuses process creation, signals, sockets, ctypes, file writes,
  deletions and renames, and reads outside Python's own installation and the
  temporary folder;
- a wall-clock limit, after which its process group is killed.
Anything that escapes an audit hook (a C extension, an interpreter bug) is not
stopped. Run untrusted answers in a container when that matters.
"""

from __future__ import annotations

import ast
import json
import os
import re
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

TIMEOUT_SEC = 3.0  # human-eval's own limit per program; the static Verifier gives this whole script 10 s
CPU_SEC = 4
MEMORY_BYTES = 1 << 30
FILE_BYTES = 1 << 20
OPEN_FILES = 64
DETAIL_CHARS = 300

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
_CODE_START = re.compile(r"^(?:async\s+def|def|class|import|from|@)\b", re.M)

# Runs first in the candidate's interpreter. Audit hooks cannot be removed once added.
GUARD = r'''
def _amber_guard():
    import os, sys
    roots = tuple(sorted({os.path.realpath(p) + os.sep for p in (
        sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, os.getcwd())}))
    refused = ("os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty", "os.kill",
               "os.killpg", "os.remove", "os.rmdir", "os.rename", "os.truncate", "os.chmod", "os.chown",
               "os.link", "os.symlink", "os.mkdir", "os.chdir", "os.chroot", "os.putenv", "os.unsetenv",
               "os.setxattr", "os.removexattr", "os.utime", "subprocess.", "socket.", "ctypes.", "shutil.",
               "pty.", "resource.", "signal.", "fcntl.", "mmap.", "syslog.", "webbrowser.", "urllib.",
               "http.", "ftplib.", "smtplib.", "imaplib.", "poplib.", "nntplib.", "telnetlib.", "sqlite3.")
    modules = {"_posixsubprocess", "_ctypes", "_socket", "_ssl", "_multiprocessing", "_posixshmem", "pty",
               "termios", "fcntl", "mmap", "resource", "_sqlite3"}
    writing = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    busy = []

    def hook(event, args):
        if busy:
            return
        if event.startswith(refused):
            raise PermissionError(f"{event} is not allowed in this check")
        if event == "import" and args[0] in modules:
            raise ImportError(f"importing {args[0]} is not allowed in this check")
        if event != "open" or isinstance(args[0], int):
            return
        path, mode, flags = args
        if (mode is not None and any(c in mode for c in "wax+")) or (mode is None and (flags or 0) & writing):
            raise PermissionError(f"writing {path} is not allowed in this check")
        busy.append(1)
        try:
            real = os.path.realpath(os.fsdecode(path))
        finally:
            busy.pop()
        if not (real + os.sep).startswith(roots):
            raise PermissionError(f"reading {path} is not allowed in this check")

    sys.addaudithook(hook)


_amber_guard()
del _amber_guard
'''


class Rejected(Exception):
    """The answer is rejected before anything runs: the message is the detail."""


def code_blocks(answer: str) -> list[str]:
    """Where the answer's code is: its ```python blocks, else its untagged ``` blocks, else all of it."""
    blocks = [(lang.lower(), textwrap.dedent(body)) for lang, body in _FENCE.findall(answer)]
    tagged = [body for lang, body in blocks if lang in ("python", "py", "python3")]
    return tagged or [body for lang, body in blocks if not lang] or [answer]


def _parse(code: str) -> tuple[ast.Module, str] | None:
    """The code's syntax tree and the text it is of: for prose around unfenced code, from its first line that
    starts code."""
    try:
        return ast.parse(code), code
    except SyntaxError:
        pass
    start = _CODE_START.search(code)
    if start is None or start.start() == 0:
        return None
    try:
        return ast.parse(code[start.start():]), code[start.start():]
    except SyntaxError:
        return None


def _segment(code: str, node: ast.stmt) -> str:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    end = node.end_lineno if node.end_lineno is not None else node.lineno
    return "\n".join(code.split("\n")[first - 1:end])


def last_function(answer: str, entry_point: str) -> tuple[str, str, list[str]]:
    """(its source, its name, the block's top-level imports) of the function the answer gives."""
    for block in reversed(code_blocks(answer)):
        parsed = _parse(block)
        if parsed is None:
            continue
        tree, source = parsed
        functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        if not functions:
            continue
        named = [n for n in functions if n.name == entry_point]
        chosen = (named or functions)[-1]
        imports = [_segment(source, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        return _segment(source, chosen), chosen.name, imports
    raise Rejected(f"The answer holds no Python function that parses (expected one named {entry_point}).")


def program(item: dict, answer: str, token: str) -> str:
    """The program that runs the item's tests on the answer's function, and prints ``token`` once they passed."""
    entry_point = item["entry_point"]
    function, name, imports = last_function(answer, entry_point)
    prompt = ast.parse(item["prompt"])
    context = [_segment(item["prompt"], n) for n in prompt.body
               if isinstance(n, (ast.Import, ast.ImportFrom))
               or (isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name != entry_point)]
    parts = [GUARD, *context, *imports, function]
    if name != entry_point:
        parts.append(f"{entry_point} = {name}")
    done = repr("\n" + token)  # on a line of its own, whatever the function printed last
    parts += [item["test"], f"check({entry_point})", f"print({done}, flush=True)", ""]
    return "\n\n".join(parts)


def _limits() -> None:
    """In the candidate's process, before it starts Python: its own process group and its resource limits."""
    os.setpgid(0, 0)
    for limit, value in ((resource.RLIMIT_CPU, CPU_SEC), (resource.RLIMIT_AS, MEMORY_BYTES),
                         (resource.RLIMIT_FSIZE, FILE_BYTES), (resource.RLIMIT_NOFILE, OPEN_FILES),
                         (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, 0)):
        resource.setrlimit(limit, (value, value))


def _tail(path: Path) -> list[str]:
    """The last non-blank lines of a file the candidate wrote (at most its last 64 KiB)."""
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - 64 * 1024))
        return [line.strip() for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]


def run(item: dict, answer: str) -> str | None:
    """Run the item's tests on the answer; None when they passed, else one sentence saying why not.

    Passing is exit status 0 AND a random token printed after `check` returned: a function that ends the
    process early with status 0 (`sys.exit(0)`, `os._exit(0)`) never reaches the token.
    """
    token = secrets.token_hex(16)
    source = program(item, answer, token)
    with tempfile.TemporaryDirectory(prefix="amber-humaneval-") as tmp:
        script = Path(tmp, "candidate.py")
        script.write_text(source, encoding="utf-8")
        errors, output = Path(tmp, "stderr.txt"), Path(tmp, "stdout.txt")
        with open(errors, "wb") as err, open(output, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-B", script.name], cwd=tmp, env={},
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    preexec_fn=_limits, close_fds=True)
            try:
                code = proc.wait(timeout=TIMEOUT_SEC)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return f"The function did not finish its tests within {TIMEOUT_SEC:g} seconds."
        printed, lines = _tail(output), _tail(errors)
    if code == 0 and printed[-1:] == [token]:
        return None
    if code == 0:
        return "The function ended the program before the tests finished."
    last = lines[-1] if lines else ""
    if len(last) > DETAIL_CHARS:
        last = last[:DETAIL_CHARS - 1] + "\u2026"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        return f"The tests were stopped by signal {name} (a resource limit){': ' + last if last else ''}."
    return f"The function fails the item's tests: {last or f'exit code {code}'}."


def main() -> None:
    item = json.loads(Path(__file__).resolve().with_name("humaneval.json").read_text(encoding="utf-8"))
    answer = sys.stdin.read()
    try:
        failure = run(item, answer)
    except Rejected as e:
        failure = str(e)
    if failure is not None:
        sys.exit(failure)


if __name__ == "__main__":
    main()
