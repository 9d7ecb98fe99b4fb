"""A stored Task's files as a reader sees them: every file's path, size and executable bit, and the text of the
small text ones, all bounded, so a Task of 50,000 files or a 1 GB file is shown in the same few hundred kilobytes.

It reads only inside the Task's folder of a stored Benchmark Version and never follows a link (a stored Version
has none: `intake/archive.py` refuses them, and a folder's are not copied); a file that is not UTF-8 text, or
holds a NUL byte, is listed without its text.
"""

from __future__ import annotations

import codecs
import os
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_LISTED = 500  # files listed per Task; the rest are counted
MAX_TEXT_BYTES = 32 * 1024  # of one file's text; a longer file shows its start
MAX_TOTAL_TEXT_BYTES = 256 * 1024  # of all the Task's file texts together; past it, files are listed only
MAX_INSTRUCTION_CHARS = 100_000


@dataclass(frozen=True)
class TaskFile:
    path: str  # relative to the Task's folder, "/"-separated
    size: int  # bytes
    executable: bool
    text: str | None  # None: not UTF-8 text, or past the bound on all texts
    clipped: bool = False  # the text is the file's first MAX_TEXT_BYTES only


@dataclass(frozen=True)
class TaskFiles:
    files: list[TaskFile]  # sorted by path, at most MAX_LISTED
    n_files: int  # all of them
    total_bytes: int


def read(folder: Path) -> TaskFiles:
    """The files under a stored Task's ``folder``, bounded as the module says."""
    found: list[tuple[str, os.stat_result]] = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in names:
            full = os.path.join(root, name)
            info = os.lstat(full)
            if stat.S_ISREG(info.st_mode):
                found.append((os.path.relpath(full, folder).replace(os.sep, "/"), info))
    found.sort(key=lambda f: f[0])
    files, budget = [], MAX_TOTAL_TEXT_BYTES
    for path, info in found[:MAX_LISTED]:
        text, clipped = (None, False) if budget <= 0 else _text(folder / path, min(MAX_TEXT_BYTES, budget))
        budget -= len(text.encode()) if text is not None else 0
        files.append(TaskFile(path, info.st_size, bool(info.st_mode & stat.S_IXUSR), text, clipped))
    return TaskFiles(files, len(found), sum(info.st_size for _, info in found))


def _text(path: Path, limit: int) -> tuple[str | None, bool]:
    """The file's first ``limit`` bytes as text, and whether there is more; (None, False) when it is not text."""
    with path.open("rb") as file:
        data = file.read(limit + 1)
    clipped = len(data) > limit
    data = data[:limit]
    if b"\0" in data:
        return None, False
    try:  # a clipped file may end inside a character: that partial character is left out, not refused
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=not clipped), clipped
    except UnicodeDecodeError:
        return None, False


def instruction(text: str) -> tuple[str, bool]:
    """A Task's Instruction as shown, and whether it was clipped to MAX_INSTRUCTION_CHARS."""
    return text[:MAX_INSTRUCTION_CHARS], len(text) > MAX_INSTRUCTION_CHARS
