"""Image: what a Task's Dockerfile is known to put into the image, without building it.

Three rules need it. A file the Dockerfile creates is an input, not something
the Agent must make (`test-reads-unnamed-file`); a COPY of solution/ or tests/
hands the Agent the answer or the grader (`solution-in-image`,
`tests-in-image`); a checked output the image already holds lets an Agent that
does nothing pass (`start-state-passes`). So the last stage's COPY, ADD, RUN
and WORKDIR are followed: which files exist, what text they hold when a COPY
or an `echo`/`cat <<EOF` makes it plain, and which folders a script may have
filled with anything (`opaque`), where the rules must assume nothing.

The Dockerfile's instructions are read by `benchmarks.dockerfiles`, as the
upload checks read them; RUN lines by `lint.shell`.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from amber_pipeline.benchmarks.intake.dockerfiles import Instruction, instructions
from amber_pipeline.benchmarks.lint.shell import Command, path_like, program, shell_commands
from amber_pipeline.benchmarks.lint.task import MAX_FILE_BYTES, TaskFolder, read_text

_ARCHIVE = re.compile(r"\.(tar|tar\.gz|tgz|tar\.xz|txz|tar\.bz2|tbz2?)$")
_NO_EFFECT = {"apt-get", "apt", "apk", "yum", "dnf", "pip", "pip3", "uv", "gem", "useradd", "groupadd", "adduser",
              "chmod", "chown", "ln", "true", ":", "set", "export", "ls", "echo", "printf", "cat", "rm", "mkdir",
              "touch", "cd", "curl", "wget", "update-ca-certificates", "locale-gen", "ldconfig"}
_FILE_TOOLS = {"sed", "awk", "perl", "tee", "truncate", "dos2unix", "sort", "patch", "cp", "mv", "install"}


@dataclass(frozen=True)
class ImageFile:
    """A file the image holds: where it came from, and its text when that is known."""

    line: int  # of the Dockerfile instruction that made it
    source: Path | None  # the build-context file it was copied from
    text: str | None  # its content when a RUN wrote a literal
    known: bool = True  # False when a RUN wrote it with what cannot be read here (a download, a computed text)

    def content(self) -> str | None:
        if not self.known:
            return None
        return self.text if self.source is None else read_text(self.source)


@dataclass(frozen=True)
class Copy:
    """One COPY or ADD of the build context, for the rules that look at what it takes in."""

    line: int
    keyword: str
    sources: list[str]  # as written
    files: list[str]  # the build-context files they take (relative to environment/)


@dataclass
class Image:
    """What the Dockerfile's last stage is known to create. ``opaque`` folders may hold anything."""

    present: bool = False
    workdir: str = "/"
    files: dict[str, ImageFile] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    opaque: set[str] = field(default_factory=set)
    copies: list[Copy] = field(default_factory=list)
    context: list[str] = field(default_factory=list)  # build-context files, relative to environment/

    def inputs(self, limit: int = 4 * MAX_FILE_BYTES) -> str:
        """The text of the files the Dockerfile copies in (as far as they are text), up to ``limit`` characters."""
        parts: list[str] = []
        for entry in self.files.values():
            text = entry.content() if entry.source is not None else None
            if text:
                parts.append(text)
            if sum(map(len, parts)) > limit:
                break
        return "\n".join(parts)

    def may_exist(self, path: str) -> bool:
        return path in self.files or path in self.dirs or self._in_opaque(path)

    def surely_exists(self, path: str) -> bool:
        return path in self.files or path in self.dirs

    def content(self, path: str) -> str | None:
        entry = self.files.get(path)
        return None if entry is None or self._in_opaque(path) else entry.content()

    def _in_opaque(self, path: str) -> bool:
        return any(path == o or path.startswith(o.rstrip("/") + "/") for o in self.opaque)

    def _add(self, path: str, entry: ImageFile) -> None:
        self.files[path] = entry
        self._parents(path)

    def _parents(self, path: str) -> None:
        parent = posixpath.dirname(path)
        while parent not in ("/", "") and parent not in self.dirs:
            self.dirs.add(parent)
            parent = posixpath.dirname(parent)

    @classmethod
    def read(cls, task: TaskFolder) -> Image:
        env = task.dir / "environment"
        image = cls()
        text = read_text(env / "Dockerfile")
        if text is None:
            return image
        image.present = True
        image.context = _context(env)
        for ins in instructions(text):
            if ins.keyword == "FROM":
                image.files, image.dirs, image.opaque, image.copies = {}, set(), set(), []
                image.workdir = "/"
            elif ins.keyword == "WORKDIR" and "$" not in ins.value:
                image.workdir = posixpath.normpath(posixpath.join(image.workdir, ins.value.strip("\"'")))
                image.dirs.add(image.workdir)
                image._parents(image.workdir)
            elif ins.keyword in ("COPY", "ADD"):
                image._copy(env, ins)
            elif ins.keyword == "RUN":
                image._run(ins)
        if task.workdir:
            image.workdir = task.workdir
        return image

    def _resolve(self, path: str, cwd: str | None = None) -> str:
        return posixpath.normpath(posixpath.join(cwd or self.workdir, path))

    def _copy(self, env: Path, ins: Instruction) -> None:
        if "from" in ins.flags:
            return  # from another image or stage: what it holds is not in the build context
        line, keyword, items = ins.line, ins.keyword, ins.arguments
        if len(items) < 2:
            return
        sources, dest = items[:-1], self._resolve(items[-1])
        into = items[-1].endswith("/") or len(sources) > 1 or dest in self.dirs
        if ins.heredocs and sources[0].startswith("<<"):  # COPY <<EOF /path: a file written inline
            self._add(dest, ImageFile(line, None, ins.heredocs[0].body + "\n"))
            return
        taken: list[str] = []
        for source in sources:
            if re.match(r"[a-z]+://", source):
                downloaded = posixpath.join(dest, posixpath.basename(source)) if into else dest
                self._add(downloaded, ImageFile(line, None, None))
                continue
            pattern = posixpath.normpath(source.lstrip("/"))
            if keyword == "ADD" and _ARCHIVE.search(pattern):
                self.opaque.add(dest)
                continue
            for rel in self.context:
                if pattern == ".":
                    target, under = rel, True
                elif rel == pattern or fnmatch.fnmatchcase(rel, pattern):
                    target, under = posixpath.basename(rel), False
                elif rel.startswith(pattern + "/"):
                    target, under = rel[len(pattern) + 1:], True
                else:
                    parts = rel.split("/")
                    top = next((k for k in range(1, len(parts)) if fnmatch.fnmatchcase("/".join(parts[:k]), pattern)),
                               None)
                    if top is None:
                        continue
                    target, under = "/".join(parts[top:]), True
                taken.append(rel)
                path = posixpath.join(dest, target) if (into or under) else dest
                self._add(path, ImageFile(line, env / rel, None))
            if not any(r == pattern or r.startswith(pattern + "/") for r in self.context) and "*" not in pattern:
                self.dirs.add(dest)
        self.copies.append(Copy(line, keyword, sources, taken))

    def _run(self, ins: Instruction) -> None:
        line, command = ins.line, ins.rest  # after --mount, --network ...
        if command.startswith("["):
            words = ins.arguments
            script = words[2] if len(words) > 2 and words[1] == "-c" else shlex.join(words)
        elif command.startswith("<<") and ins.heredocs:
            script = ins.heredocs[0].body  # RUN <<EOF: the body is the script
        else:
            script = "\n".join([command, *(f"{doc.body}\n{doc.name}" for doc in ins.heredocs)])
        cwd = self.workdir
        for cmd in shell_commands(script, line):
            prog, at = program(cmd)
            args_ = [self._resolve(w, cwd) for k, w in cmd.static_words() if k > at and not w.startswith("-")]
            paths = [self._resolve(w, cwd) for k, w in cmd.static_words() if k > at and path_like(w)]
            for target, dynamic, appends in cmd.writes:
                if dynamic or target.startswith("/dev/"):
                    continue
                path = self._resolve(target, cwd)
                written = _echoed(cmd)
                if appends and written is not None:
                    old = self.files.get(path)
                    before = old.content() if old is not None else ""
                    written = None if before is None else before + written
                self._add(path, ImageFile(line, None, written, known=written is not None))
            if prog == "cd" and args_:
                cwd = args_[0]
            elif prog == "mkdir":
                for path in args_:
                    self.dirs.add(path)
                    self._parents(path)
            elif prog == "touch":
                for path in args_:
                    if path not in self.files:
                        self._add(path, ImageFile(line, None, ""))
            elif prog == "rm":
                for path in args_:
                    self.files = {p: f for p, f in self.files.items() if p != path and not p.startswith(path + "/")}
            elif prog in ("curl", "wget"):
                out = [cmd.words[k + 1] for k, w in enumerate(cmd.words[:-1]) if w in ("-o", "-O", "--output")]
                for path in out:
                    self._add(self._resolve(path, cwd), ImageFile(line, None, None, known=False))
            elif prog in ("npm", "yarn", "pnpm"):
                self.opaque.add(posixpath.join(cwd, "node_modules"))
            elif prog in _FILE_TOOLS:
                self.opaque.update(paths)
            elif prog not in _NO_EFFECT and not _pip(cmd, prog, at):
                self.opaque.update(paths)  # a script or tool: it may write wherever it is pointed, and where it runs
                self.opaque.add(cwd)


def _pip(cmd: Command, prog: str, at: int) -> bool:
    return re.fullmatch(r"python[\d.]*", prog) is not None and cmd.words[at + 1:at + 3] == ["-m", "pip"]


def _echoed(cmd: Command) -> str | None:
    """What an echo, printf or `cat <<EOF` of literals prints, or None when it cannot be known."""
    prog, at = program(cmd)
    if prog == "cat" and cmd.heredoc is not None and len(cmd.words) == at + 1:
        return str(cmd.heredoc[1]) + "\n"
    if prog not in ("echo", "printf") or any(cmd.dynamic[at + 1:]):
        return None
    args, newline, escapes = cmd.words[at + 1:], prog == "echo", prog == "printf"
    while args and re.fullmatch(r"-[neE]+", args[0]) and prog == "echo":
        newline = newline and "n" not in args[0]
        escapes = escapes or "e" in args[0]
        args = args[1:]
    if prog == "printf":
        if not args or "%" in args[0]:
            return None
        text = args[0]
    else:
        text = " ".join(args)
    if escapes:
        text = text.replace("\\n", "\n").replace("\\t", "\t")
    return text + ("\n" if newline else "")


def _context(env: Path, limit: int = 20_000) -> list[str]:
    """The build-context files (relative, forward slashes), without what .dockerignore leaves out."""
    ignore = [p.strip().strip("/") for p in (read_text(env / ".dockerignore") or "").split("\n")
              if p.strip() and not p.startswith(("#", "!"))]
    found: list[str] = []
    for folder, subdirs, files in os.walk(env):
        subdirs[:] = sorted(d for d in subdirs if d != ".git")
        base = os.path.relpath(folder, env).replace(os.sep, "/")
        for name in sorted(files):
            rel = name if base == "." else f"{base}/{name}"
            parts = rel.split("/")
            if not any(fnmatch.fnmatchcase("/".join(parts[:k]), p) for p in ignore for k in range(1, len(parts) + 1)):
                found.append(rel)
            if len(found) >= limit:
                return found
    return found
