"""Named points where the crash tests kill a cell run, as an out-of-memory kill or a power cut would.

Recovery has to be right at the worst moments: between a Trial's row and its
charge, between the charge and the row's cost, halfway through scoring. A
test cannot hit those moments reliably from outside, so the code names them:
when `AMBER_FAILPOINT` names a file whose text is a point's name, the process
kills itself with SIGKILL on reaching that point (no cleanup, no exception
handler runs). It removes the file first, so the point fires once: the run
that takes over after the crash goes past it. Unset, a point costs one
environment lookup.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

ENV = "AMBER_FAILPOINT"


def reach(name: str) -> None:
    """Die here, at once, if the failpoint file names this point."""
    control = os.environ.get(ENV)
    if not control:
        return
    try:
        armed = Path(control).read_text().strip()
    except OSError:
        return
    if armed == name:
        Path(control).unlink(missing_ok=True)
        os.kill(os.getpid(), signal.SIGKILL)
