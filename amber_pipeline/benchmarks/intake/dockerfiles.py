"""Dockerfiles: a Task's Dockerfiles read as BuildKit reads them, for the two things the checks need of them.

Amber builds `environment/Dockerfile` offline, so two things about every
Dockerfile under `environment/` decide whether a Task can be built at all:
where each COPY and ADD reads from (only from inside `environment/`, never a
URL) and which base images each FROM and `COPY --from` names (each must
already be on this machine). Finding them means reading the file as BuildKit
does: parser directives, comments, line continuations, here-documents, --flags
and ARG/ENV substitution. That reading is its own problem, so it lives here
(`instructions`) and `checks` and the lint rules (`benchmarks.lint.image`)
only ask for its answers.

The reader is hand-written because `dockerfile-parse` (2.0.1, tried in its
place) reads less of a Dockerfile than BuildKit does, and what it misses is
a COPY source nobody checks:

- no here-documents: in `RUN <<EOF` / `COPY ../ignored /x` / `EOF` it takes
  the body's lines for instructions (a COPY from outside, then `EOF`);
- a blank line inside a continuation ends the instruction, where BuildKit
  skips it: `COPY ok.txt \\` / (blank) / `../secret /app/` becomes
  `COPY ok.txt` and an instruction named `../SECRET`, so ../secret goes
  unchecked;
- it knows the `syntax` and `escape` directives but not `check`, so after
  `# check=skip=all` it stops reading directives and misses an escape
  directive that makes the backtick the continuation character: the lines
  it continues are not joined and the next line's source goes unchecked;
- its substitution has no `${VAR:-default}` or `${VAR:+word}`: `FROM
  $REPO:${TAG:-latest}` names `amber-base:bookworm:-latest}`;
- `ARG A=1 B` (one default, one declared) raises ValueError.

The tests in tests/test_parsers.py hold it to these and compare the two on
every Dockerfile of examples/ and tests/fixtures/ it can read.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from amber_pipeline.benchmarks.intake.task_refusals import Refused

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://|^git@")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")
# a quoted string (skipped: "a <<b" is no heredoc), or a word that opens one: <<EOF, << EOF, <<-EOF, <<"EOF",
# 3<<EOF. BuildKit splits the line into words first, so `cat<<EOF` opens none, and neither does <<< (a here-string).
_HEREDOC = re.compile(r"""("(?:\\.|[^"\\])*"|'[^']*')|(?<!\S)\d*<<(-|[ \t]*)(["']?)([^\s<"']+)\3(?!\S)""")
_DIRECTIVE = re.compile(r"^\s*#\s*([A-Za-z][A-Za-z0-9]*)\s*=\s*(.+?)\s*$")
_DIRECTIVES = ("syntax", "check", "escape")  # BuildKit's; any other `# key=value` is a comment and ends them


@dataclass(frozen=True)
class BaseImage:
    """A base image a Task needs, and how to say where it needs it."""

    ref: str  # as written, ARG values filled in
    where: str  # e.g. "Task t's Dockerfile starts FROM"


def find_dockerfiles(environment: Path) -> list[Path]:
    """Every Dockerfile (or Containerfile, Dockerfile.x, x.dockerfile) under `environment`, in a stable order."""
    out = []
    for folder, dirs, files in os.walk(environment):  # never follows links
        dirs.sort()
        for f in sorted(files):
            low = f.lower()
            if low in ("dockerfile", "containerfile") or low.startswith("dockerfile.") or low.endswith(".dockerfile"):
                out.append(Path(folder, f))
    return out


@dataclass(frozen=True)
class Heredoc:
    """A here-document of a RUN, COPY or ADD: its delimiter word and the lines between (as written)."""

    name: str
    body: str


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction as BuildKit reads it."""

    keyword: str  # upper case
    value: str  # the rest of the logical line, continuations joined
    line: int  # where it starts
    heredocs: tuple[Heredoc, ...]  # the here-documents it opens, whose lines are not instructions

    @property
    def flags(self) -> dict[str, str]:
        """Its leading `--flag=value` options, by lower-case name (`--from`, `--chown`, `--mount` ...)."""
        return _split_flags(self.value)[0]

    @property
    def rest(self) -> str:
        """Its value after the leading --flags: a shell command, a JSON array or plain arguments."""
        return _split_flags(self.value)[1]

    @property
    def arguments(self) -> list[str]:
        """Its arguments after the leading --flags: the JSON-array form's strings, else shell-like words."""
        return _arguments(self.rest)


def instructions(text: str) -> list[Instruction]:
    """A Dockerfile's instructions, as BuildKit reads them: parser directives, comments, continuations, heredocs."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]  # as BuildKit splits: \v, \f, \x85 are no breaks
    escape = "\\"
    for line in lines:
        directive = _DIRECTIVE.match(line)
        if not directive or directive[1].lower() not in _DIRECTIVES:
            break
        if directive[1].lower() == "escape" and directive[2] in ("\\", "`"):
            escape = directive[2]
    out: list[Instruction] = []
    i = 0
    while i < len(lines):
        start, logical = i + 1, lines[i].rstrip()
        i += 1
        if not logical.strip() or logical.lstrip().startswith("#"):
            continue
        while logical.endswith(escape):
            logical = logical[:-1]
            while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith("#")):
                i += 1
            if i == len(lines):
                break
            logical += lines[i].rstrip()
            i += 1
        keyword, value = (logical.split(None, 1) + [""])[:2]
        keyword = keyword.upper()
        heredocs: list[Heredoc] = []
        if keyword in ("RUN", "COPY", "ADD"):
            for quoted, dash, _, word in _HEREDOC.findall(value):
                end = next((j for j in range(i, len(lines))
                            if (lines[j].lstrip("\t") if dash == "-" else lines[j]) == word), None)
                if quoted or end is None:  # not a heredoc, or one never closed: read on as Docker would fail
                    continue
                heredocs.append(Heredoc(word, "\n".join(lines[i:end])))
                i = end + 1
        out.append(Instruction(keyword, value.strip(), start, tuple(heredocs)))
    return out


def _expand(word: str, values: dict[str, str]) -> str:
    """Dockerfile variable substitution; an unset variable is empty, as Docker makes it."""
    def one(m: re.Match[str]) -> str:
        name = m[1] or m[4]
        value = values.get(name)
        if m[2] in (":-", "-"):
            return value if value or (m[2] == "-" and value is not None) else m[3]
        if m[2] in (":+", "+"):
            return m[3] if value or (m[2] == "+" and value is not None) else ""
        return value or ""
    return _VARIABLE.sub(one, word)


def _words(value: str) -> list[str]:
    try:
        return shlex.split(value, comments=False)
    except ValueError:  # an unbalanced quote: Docker would split on blanks
        return value.split()


def _split_flags(value: str) -> tuple[dict[str, str], str]:
    """An instruction's leading --flags, and the rest of its value."""
    flags: dict[str, str] = {}
    rest = value
    while (flag := re.match(r"--(\S+)\s*", rest)) is not None:
        key, _, setting = flag[1].partition("=")
        flags[key.lower()] = setting
        rest = rest[flag.end():]
    return flags, rest


def _arguments(rest: str) -> list[str]:
    """Arguments in the JSON-array form, else shell-like words."""
    if rest.startswith("["):
        try:
            args = json.loads(rest)
            if isinstance(args, list) and all(isinstance(a, str) for a in args):
                return args
        except ValueError:
            pass
    return _words(rest)


def _args(words: list[str]) -> dict[str, str]:
    """`ARG a=1 b` as values (an ARG without a default is declared but unset)."""
    out = {}
    for word in words:
        key, eq, default = word.partition("=")
        if eq:
            out[key] = default
    return out


def check_dockerfile(name: str, path: Path, rel: str) -> list[BaseImage]:
    """Refuse a COPY or ADD from outside environment/; the images its FROMs (and COPY --from) need, in order."""
    text = path.read_bytes().decode("utf-8", "replace").removeprefix("\ufeff")
    shown = "Dockerfile" if rel == "Dockerfile" else f"environment/{rel}"  # the Dockerfile, or another one
    here = posixpath.dirname(rel)
    global_args: dict[str, str] = {}
    stage_values: dict[str, str] = {}
    stages: set[str] = set()
    images: list[BaseImage] = []
    seen_from = False
    for ins in instructions(text):
        if ins.keyword == "ARG":
            values = _args(_words(ins.value))
            (stage_values if seen_from else global_args).update(
                {k: _expand(v, {**global_args, **stage_values}) for k, v in values.items()})
        elif ins.keyword == "ENV" and seen_from:
            words = _words(ins.value)
            if words and "=" not in words[0] and len(words) >= 2:  # the legacy `ENV KEY value` form
                values = {words[0]: " ".join(words[1:])}
            else:
                values = _args(words)
            stage_values.update({k: _expand(v, {**global_args, **stage_values}) for k, v in values.items()})
        elif ins.keyword == "FROM":
            words = ins.arguments
            if not words:
                continue
            image = _expand(words[0], global_args)
            if not image:
                raise Refused(f"Task {name}'s {shown} (line {ins.line}) starts a stage FROM {words[0]}, which is "
                              "empty once its ARG values are filled in: give the ARG a default, as Amber builds "
                              "without build arguments.")
            if image.lower() != "scratch" and image.lower() not in stages:
                verb = "has a build stage FROM" if seen_from else "starts FROM"
                images.append(BaseImage(image, f"Task {name}'s {shown} {verb}"))
            if len(words) >= 3 and words[1].lower() == "as":
                stages.add(words[2].lower())
            seen_from = True
            stage_values = {}
        elif ins.keyword in ("COPY", "ADD"):
            flags, words = ins.flags, ins.arguments
            if "from" in flags:
                source = _expand(flags["from"], global_args)
                if source and source.lower() not in stages and not source.isdigit():
                    images.append(BaseImage(source, f"Task {name}'s {shown} (line {ins.line}) copies from the image"))
                continue
            values = {**global_args, **stage_values}
            for word in words[:-1]:
                if word.startswith("<<") and word.lstrip("<-\"'").rstrip("\"'") in {h.name for h in ins.heredocs}:
                    continue
                _check_source(name, shown, ins, here, word, _expand(word, values))
    return images


def _check_source(name: str, shown: str, ins: Instruction, here: str, written: str, source: str) -> None:
    where = f"Task {name}'s {shown} (line {ins.line})"
    if ins.keyword == "ADD" and _URL.match(source):
        raise Refused(f"{where} ADDs {written}, a download from the network: put the file in environment/ "
                      "and COPY it instead.")
    if source.startswith("/"):
        raise Refused(f"{where} copies from {written}, an absolute path: COPY and ADD read only from inside "
                      "environment/, so give the path relative to it.")
    resolved = posixpath.normpath(posixpath.join(here, source)) if source else "."
    if resolved == ".." or resolved.startswith("../"):
        raise Refused(f"{where} copies from {written}, which is outside environment/: COPY and ADD read only "
                      "from inside environment/, so move the file there.")
