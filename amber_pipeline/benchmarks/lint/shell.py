"""Shell: a small reader of the commands of test.sh and of a Dockerfile's RUN lines.

The rules ask questions of shell scripts that a regular expression answers
badly: does this `echo 1 > reward.txt` sit inside an `if`, after `&&`, or on
every path? Which words are file paths, and which are expansions known only at
run time? What does a here-document hold? So scripts are read into simple
commands (`Command`) with their words (quotes removed), their redirections,
their nesting and the operators joining them. It is a reader for linting, not
a shell: what it cannot follow it marks `dynamic` and the rules stay silent.

It is hand-written because `bashlex` (0.18, tried in its place) stops on
constructs that test.sh files use every day. On the scripts of examples/ and
tests/fixtures/ (test.sh, solve.sh, Dockerfile RUN lines) it raised on 22 of
89, and reading those 22 some other way would read one script two ways,
depending on a line that has nothing to do with the rule asking. It raises on:

- a quoted here-document delimiter, `python3 - <<'PY'` ... `PY`: it wants
  the closing line to read `'PY'` (idank/bashlex#99); 18 of the 22;
- `case $x in a|b) ;; esac` (NotImplementedError, idank/bashlex#91);
- arithmetic, `echo $(( status == 0 ))` (NotImplementedError);
- `[[ $(cat /app/a) == hi ]]`, `[[ -f a && -f b ]]`, `a=(x y)`,
  `time pytest`, `select`, and `EOF` closing a here-document on a CRLF line.

And what it accepts it does not always read right: `echo "a\\nb"` loses
the backslash (`anb`); `$'a\\nb'` becomes `$anb`; the branches after a
second `elif` hang under a reserved word, at positions that point back to
earlier lines. tests/test_parsers.py holds it to these and checks that this
reader finds the same commands wherever bashlex reads a script.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_OPS = ("&&", "||", ";;&", ";;", ";&", "<<<", "<<-", "<<", ">>", "&>", ">&", ">|", ";", "&", "|", "(", ")", "<",
        ">")
_ARM_ENDS = (";;", ";&", ";;&")  # what ends one `pattern) commands` arm of a case
_ARRAY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^]]*\])?\+?=")  # `a=(`, `a[1]+=(`: an array, not a function
_DELIMITER = re.compile(r"""[ \t]*(?:'([^']*)'|"([^"]*)"|\\?([^\s;&|()<>'"\\]+))""")
_METACHARS = " \t\n;&|()<>"
_KEYWORDS = {"if", "then", "elif", "else", "fi", "while", "until", "for", "select", "do", "done", "case", "esac",
             "{", "}", "!", "function"}


@dataclass
class Command:
    """One simple command: its words (quotes removed), where it sits and what it redirects."""

    line: int
    before: str  # the operator that joins it to the previous command: "\n", ";", "&&", "||", "|"
    depth: int  # open if/while/for/case/{}/() around it
    condition: bool  # in the condition of an if/while/until
    negated: bool
    words: list[str] = field(default_factory=list)
    dynamic: list[bool] = field(default_factory=list)  # the word holds an expansion ($, `)
    reads: list[str] = field(default_factory=list)  # `< file`
    writes: list[tuple[str, bool, bool]] = field(default_factory=list)  # (target, dynamic, appends)
    heredoc: list[Any] | None = None  # [first body line, body]
    after: str = ""

    @property
    def chained(self) -> bool:
        return self.before in ("&&", "||") or self.after in ("&&", "||")

    def static_words(self) -> Iterator[tuple[int, str]]:
        return ((i, w) for i, (w, d) in enumerate(zip(self.words, self.dynamic, strict=True)) if not d)


def _balanced(text: str, start: int) -> int:
    """The index after the parenthesis that closes the one at ``start``.

    Quotes, comments and here-document bodies inside are skipped as the shell skips them, so that the `don't` in
    `$(cat <<EOF` ... `EOF` or in a `# it's` comment does not open a quote that swallows the rest of the script.
    """
    levels: list[str] = []  # each open one: "(", "a" (arithmetic, where << shifts and # is a digit) or '"'
    pending: list[tuple[str, bool]] = []  # here-documents whose bodies start at the next newline
    i, n = start, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif levels and levels[-1] == '"':
            if c == '"':
                levels.pop()
            elif text.startswith("$(", i):
                levels.append("(")
                i += 1
            i += 1
        elif c == "'":
            j = text.find("'", i + 1)
            i = n if j < 0 else j + 1
        elif c == '"' or c == "(":
            arithmetic = text.startswith("((", i)
            levels += ["a", "a"] if arithmetic else [c]
            i += 1 + arithmetic
        elif c == ")":
            if levels:
                levels.pop()
            i += 1
            if not levels:
                return i
        elif c == "#" and "a" not in levels and text[i - 1] in " \t\n;&|(":
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("<<", i) and not text.startswith("<<<", i) and "a" not in levels:
            dash = text.startswith("<<-", i)
            found = _DELIMITER.match(text, i + 2 + dash)
            if found:
                pending.append((next(g for g in found.groups() if g is not None), dash))
            i = found.end() if found else i + 2
        elif c == "\n" and pending:
            i += 1
            for delimiter, dash in pending:
                i = _heredoc(text, i, delimiter, dash)[1]
            pending = []
        else:
            i += 1
    return n


def _heredoc(text: str, i: int, delimiter: str, dash: bool) -> tuple[list[str], int]:
    """The lines of a here-document whose body starts at ``i``, and the index after its delimiter's line."""
    body: list[str] = []
    while i < len(text):
        j = text.find("\n", i)
        j = len(text) if j < 0 else j
        raw, i = text[i:j], j + 1
        if (raw.lstrip("\t") if dash else raw).strip() == delimiter:
            break
        body.append(raw)
    return body, i


def _word(text: str, i: int) -> tuple[str, bool, int]:
    """The shell word starting at ``i``: its text without quotes, whether it expands anything, where it ends."""
    out: list[str] = []
    dynamic, n = False, len(text)
    while i < n and text[i] not in _METACHARS:
        c = text[i]
        if c == "\\":
            if text[i + 1:i + 2] not in ("", "\n"):
                out.append(text[i + 1])
            i += 2
        elif c == "'":
            j = text.find("'", i + 1)
            j = n if j < 0 else j
            out.append(text[i + 1:j])
            i = j + 1
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n and text[j + 1] in '"\\$`\n':
                    out.append("" if text[j + 1] == "\n" else text[j + 1])
                    j += 2
                    continue
                if text[j] in "$`":
                    dynamic = True
                if text[j:j + 2] == "$(":
                    k = _balanced(text, j + 1)
                    out.append(text[j:k])
                    j = k
                    continue
                out.append(text[j])
                j += 1
            i = j + 1
        elif c == "$" and text[i + 1:i + 2] == "(":
            dynamic = True
            k = _balanced(text, i + 1)
            out.append(text[i:k])
            i = k
        elif c in "$`":
            dynamic = True
            if c == "`":
                j = text.find("`", i + 1)
                j = n if j < 0 else j
                out.append(text[i:j + 1])
                i = j + 1
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out), dynamic, i


def _tokens(text: str, line: int) -> list[tuple[str, Any, int]]:
    """("word", (text, dynamic)), ("op", op), ("nl", None) and ("doc", [line, body]) tokens with their lines."""
    tokens: list[tuple[str, Any, int]] = []
    pending: list[tuple[str, bool, list[Any]]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and text[i + 1:i + 2] == "\n":
            i, line = i + 2, line + 1
        elif c == "\n":
            tokens.append(("nl", None, line))
            i, line = i + 1, line + 1
            for delimiter, strip, box in pending:
                body, end = _heredoc(text, i, delimiter, strip)
                box[0], box[1] = line, "\n".join(body)
                i, line = end, line + text.count("\n", i, end)
            pending = []
        elif c in " \t":
            i += 1
        elif c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c.isdigit() and text[i + 1:i + 2] in ("<", ">"):
            i += 1  # a file descriptor number: 2>, 1>
        elif text.startswith(("<(", ">("), i):  # a process substitution: a word known at run time, not a redirection
            end = _balanced(text, i + 1)
            tokens.append(("word", (text[i:end], True), line))
            i, line = end, line + text.count("\n", i, end)
        else:
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op is not None:
                tokens.append(("op", op, line))
                i += len(op)
                if op in ("<<", "<<-"):
                    while i < n and text[i] in " \t":
                        i += 1
                    delimiter, _, i = _word(text, i)
                    doc: list[Any] = [line + 1, ""]
                    tokens += [("word", (delimiter, False), line), ("doc", doc, line)]
                    pending.append((delimiter, op == "<<-", doc))
                continue
            start = i
            word, dynamic, i = _word(text, i)
            if text.startswith("(", i) and _ARRAY.fullmatch(word):
                end = _balanced(text, i)
                word, i = word + text[i:end], end
            tokens.append(("word", (word, dynamic), line))
            line += text.count("\n", start, i)
    return tokens


def shell_commands(text: str, line: int = 1) -> list[Command]:
    """The simple commands of a shell script, with their nesting (a reader for linting, not a full parser)."""
    tokens = _tokens(text, line)
    commands: list[Command] = []
    stack: list[list[Any]] = []  # [kind, in its condition], and for a case where it is: subject, in, pattern or arm
    cur: Command | None = None
    before, header, negated, skip = "\n", False, False, 0

    def new(at: int) -> Command:
        return Command(at, before, len(stack), bool(stack and stack[-1][1]), negated)

    def finish(op: str) -> None:
        nonlocal cur, before, negated
        if cur is not None and (cur.words or cur.writes or cur.reads):
            cur.after = op
            commands.append(cur)
        cur, before, negated = None, op, False

    i = 0
    while i < len(tokens):
        kind, value, at = tokens[i]
        i += 1
        if kind == "nl":
            finish("\n")
            header = False
        elif kind == "word":
            word, dynamic = value
            top = stack[-1] if stack else None
            if top is not None and top[0] == "case" and top[2] != "arm":
                if top[2] == "subject":
                    top[2] = "in"
                elif top[2] == "in" and word == "in":
                    top[2] = "pattern"
                elif top[2] == "pattern" and word == "esac" and not dynamic:
                    stack.pop()
                continue  # the word a case tests and its patterns are no commands
            if header or skip:
                skip = max(0, skip - 1)
                continue
            if (cur is None or not cur.words) and not dynamic and word in _KEYWORDS:
                if word in ("if", "while", "until"):
                    stack.append([word, True])
                elif word in ("then", "do", "else") and stack:
                    stack[-1][1] = False
                elif word == "elif" and stack:
                    stack[-1][1] = True
                elif word in ("for", "select"):
                    stack.append([word, False])
                    header = True
                elif word == "case":
                    stack.append([word, False, "subject"])
                elif word == "{":
                    stack.append(["{", bool(stack and stack[-1][1])])
                elif word in ("fi", "done", "esac", "}") and stack:
                    stack.pop()
                elif word == "!":
                    negated = True
                elif word == "function":
                    skip = 1
                continue
            if cur is None:
                cur = new(at)
            cur.words.append(word)
            cur.dynamic.append(dynamic)
        elif kind == "op":
            top = stack[-1] if stack else None
            if top is not None and top[0] == "case" and top[2] != "arm":
                if value == ")" and top[2] == "pattern":
                    top[2] = "arm"
                continue  # the ( and | of a pattern
            if value in ("<", ">", ">>", "&>", ">&", ">|", "<<<", "<<", "<<-"):
                target = tokens[i][1] if i < len(tokens) and tokens[i][0] == "word" else None
                i += target is not None
                if cur is None:
                    cur = new(at)
                if target is not None and value in (">", ">>", "&>", ">|") and not target[0].startswith("&"):
                    cur.writes.append((target[0], target[1], value == ">>"))
                elif target is not None and value == "<":
                    cur.reads.append(target[0])
                elif value in ("<<", "<<-") and i < len(tokens) and tokens[i][0] == "doc":
                    cur.heredoc = tokens[i][1]
                    i += 1
            elif value in (";", "&", "&&", "||", "|", *_ARM_ENDS):
                finish(value)
                header = header and value != ";" and value not in _ARM_ENDS
                if value in _ARM_ENDS and stack and stack[-1][0] == "case":
                    stack[-1][2] = "pattern"
            elif value == "(":
                if cur is not None and cur.words:  # name() { ... }: a function definition
                    cur = None
                    if i < len(tokens) and tokens[i][:2] == ("op", ")"):
                        i += 1
                else:
                    stack.append(["(", bool(stack and stack[-1][1])])
            elif value == ")" and stack and stack[-1][0] == "(":
                finish(")")
                stack.pop()
    finish("\n")
    return commands


_WRAPPERS = {"timeout", "env", "sudo", "nice", "nohup", "stdbuf", "time", "command", "exec", "xvfb-run"}
_RUNNERS = {"pytest", "py.test", "python", "python3", "node", "npm", "npx", "yarn", "pnpm", "bash", "sh", "zsh",
            "go", "cargo", "make", "ruby", "rspec", "jest", "java", "mvn", "gradle", "deno", "bun", "perl", "php",
            "dotnet", "ctest", "diff", "cmp", "grep", "test", "[", "[[", "jq", "Rscript", "julia"}


def program(cmd: Command) -> tuple[str, int]:
    """The program a command runs and the index of its word, looking through env assignments and wrappers."""
    words, i = cmd.words, 0
    while i < len(words):
        w = words[i]
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", w) or w.startswith("-"):
            i += 1
        elif w in _WRAPPERS:
            i += 1
            if w == "timeout" and i < len(words) and re.fullmatch(r"[\d.]+[smhd]?", words[i]):
                i += 1
        elif w in ("uvx", "uv", "poetry", "pipenv", "pdm", "hatch", "bunx"):
            if words[i + 1:i + 2] and words[i + 1] in ("pip", "add", "sync", "venv", "lock", "tool", "init",
                                                        "install", "python"):
                return w, i  # installing, not running
            runner = next((k for k in range(i + 1, len(words)) if words[k] in _RUNNERS), None)
            return (words[runner], runner) if runner is not None else (w, i)
        else:
            return posixpath.basename(w) if w.startswith(("./", "/")) and "/bin/" in w else w, i
    return "", len(words)


def is_test_command(cmd: Command) -> bool:
    """A command that runs tests or checks (not an install, a mkdir or an echo)."""
    prog, at = program(cmd)
    rest = cmd.words[at + 1:]
    if prog in ("npm", "yarn", "pnpm") and rest[:1] and rest[0] in ("install", "ci", "i", "add"):
        return False
    if prog in ("sh", "bash") and cmd.before == "|" and not rest:
        return False  # curl ... | sh: an installer
    if re.fullmatch(r"python[\d.]*", prog) and rest[:2] in (["-m", "pip"], ["-m", "venv"]):
        return False
    return (prog in _RUNNERS or re.fullmatch(r"python[\d.]*", prog) is not None
            or (prog.startswith(("./", "/")) and not prog.startswith("/usr/")))


_PATH = re.compile(r"/?[A-Za-z0-9._+@%-]+(?:/[A-Za-z0-9._+@%-]+)*/?")


def path_like(word: str) -> bool:
    """An absolute path, or a relative one with a folder in it (no spaces, globs or expansions)."""
    return _PATH.fullmatch(word) is not None and (word.startswith("/") or "/" in word.strip("/"))


def file_like(word: str) -> bool:
    """A relative word that names a file: a path with a folder, or a name with an extension."""
    return (_PATH.fullmatch(word) is not None and not word.startswith(("-", "/"))
            and ("/" in word or re.search(r"\.[A-Za-z0-9]{1,8}$", word) is not None)
            and not re.fullmatch(r"[\d.]+", word))
