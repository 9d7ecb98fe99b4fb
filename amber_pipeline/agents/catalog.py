"""The Agents Amber can run, and their Agent Versions.

Rewards are comparable only when their Agent Versions match, so an Agent
Version hashes everything that changes how the Agent behaves: its name,
Harbor's version (Harbor is the agent library), the Agent's own software
version, its settings, and the id of the image it ran in. The image differs per Task, so the Agent Version is
recorded per Trial; a cell is keyed by the part known before any image is
built (`AgentSpec.spec_id`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from importlib.metadata import version

from amber_pipeline.errors import AmberError

HARBOR_VERSION = version("harbor")


@dataclass(frozen=True)
class AgentSpec:
    name: str
    needs_model: bool
    version: str  # the Agent software's own version (Harbor's agents report theirs; the Direct Agent is Amber's)
    settings: dict[str, object] = field(default_factory=dict)
    description: str = ""
    providers: frozenset[str] | None = None  # the Model Configuration Providers it runs with (None: any)
    static: bool = False  # runs static Tasks (no Environment) and only those

    @property
    def spec_id(self) -> str:
        return _digest(self._snapshot())[:8]

    def agent_version(self, image_id: str | None) -> str:
        return _digest({**self._snapshot(), "image": image_id or ""})[:16]

    def _snapshot(self) -> dict[str, object]:
        return {"agent": self.name, "harbor": HARBOR_VERSION, "version": self.version, "settings": self.settings}


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


AGENTS: dict[str, AgentSpec] = {
    spec.name: spec
    for spec in (
        AgentSpec("terminus-2", needs_model=True, version="2.0.0",
                  settings={"record_terminal_session": False, "enable_summarize": False,
                            "proactive_summarization_threshold": 0, "max_turns": 30},
                  description="Harbor's Terminus-2: drives a tmux terminal in the sandbox (the default)."),
        AgentSpec("oracle", needs_model=False, version="1.0.0",
                  description="Runs the Task's own solution: the upper bound."),
        AgentSpec("nop", needs_model=False, version="1.0.0", description="Does nothing: the lower bound."),
        AgentSpec("direct", needs_model=True, version="1.0.0", static=True,
                  description="Amber's Direct Agent: one model call with the Instruction, no tools "
                              "(static Tasks only)."),
    )
}
DEFAULT_AGENT = "terminus-2"


def agent_spec(name: str) -> AgentSpec:
    if name not in AGENTS:
        raise AmberError(f"Unknown Agent {name!r}: choose one of {', '.join(AGENTS)}.")
    return AGENTS[name]
