"""Archive refusals: the one sentence an uploaded archive is refused with, and how names and sizes read in it.

Both the format readers (`archive_entries`) and the rules of the scan
(`archive`) refuse an archive, and a user must read every refusal the same
way: "The archive is refused: <problem>; nothing of it was kept.", with an
entry's name printable whatever bytes the archive gave it and a size as the
limit was set. So the error and its sentence live here, below both.
"""

from __future__ import annotations

import re

from amber_pipeline.errors import AmberError

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class ArchiveRejected(AmberError):
    """An uploaded archive refused as a whole; nothing of it was kept."""


def refused(problem: str) -> ArchiveRejected:
    return ArchiveRejected(f"The archive is refused: {problem}; nothing of it was kept.")


def bad(name: str, problem: str) -> ArchiveRejected:
    return refused(f"entry {shown(name)} {problem}")


def shown(name: str) -> str:
    """A name as it can be printed: bytes that are not UTF-8 and control characters as \\xNN, long ones cut."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    text = CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return f'"{text[:200]}..."' if len(text) > 200 else f'"{text}"'


def shown_size(n: int, exact: bool = True) -> str:
    """A size for a sentence: a limit as it was set ("1 GB"), or a file's size to a tenth of its unit."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale and (n % scale == 0 or not exact):
            return f"{n // scale:,} {unit}" if n % scale == 0 else f"{n / scale:,.1f} {unit}"
    return f"{n:,} bytes"
