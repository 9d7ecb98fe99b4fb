"""Harbor's Terminus-2 as Amber runs it: on this machine, reading none of its environment (`agents.allowlist`).

Terminus-2 drives a terminal in the sandbox from the process that runs the Trials, and makes its model calls
from there, through litellm, to the model proxy (`agents.connection`). It is Harbor's own agent; only where it
looks for its settings and credentials differs.
"""

from __future__ import annotations

from harbor.agents.terminus_2 import Terminus2 as _Terminus2

from amber_pipeline.agents.allowlist import OwnEnvironment


class Terminus2(OwnEnvironment, _Terminus2):
    pass
