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

from amber_pipeline.agents.software import Command, Software
from amber_pipeline.errors import AmberError

HARBOR_VERSION = version("harbor")


@dataclass(frozen=True)
class AgentSpec:
    name: str
    needs_model: bool
    version: str = ""  # the Agent's own version, for Agents without `software` (whose version is the software's)
    settings: dict[str, object] = field(default_factory=dict)
    description: str = ""
    providers: frozenset[str] | None = None  # the Model Configuration Providers it runs with (None: any)
    static: bool = False  # runs static Tasks (no Environment) and only those
    software: Software | None = None  # installed Agents: what goes into the sandbox image beside the Task

    @property
    def installed(self) -> bool:
        """Runs inside the sandbox (and so reaches the model proxy over the sandbox network)."""
        return self.software is not None

    @property
    def spec_id(self) -> str:
        return _digest(self._snapshot())[:8]

    def agent_version(self, image_id: str | None) -> str:
        return _digest({**self._snapshot(), "image": image_id or ""})[:16]

    def _snapshot(self) -> dict[str, object]:
        snapshot: dict[str, object] = {"agent": self.name, "harbor": HARBOR_VERSION, "settings": self.settings}
        if self.software is not None:
            snapshot["software"] = self.software.snapshot()
        else:
            snapshot["version"] = self.version
        return snapshot


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


_CODEX_VENDOR = "lib/node_modules/@openai/codex/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl"

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
        AgentSpec("claude-code", needs_model=True, providers=frozenset({"anthropic"}),
                  description="Anthropic's Claude Code, run in the sandbox (Anthropic Models only).",
                  # The native build for linux-x64 glibc: the npm wrapper package only picks it at install time.
                  software=Software("npm", "@anthropic-ai/claude-code-linux-x64", "2.1.332", (
                      Command("claude", "lib/node_modules/@anthropic-ai/claude-code-linux-x64/claude"),))),
        AgentSpec("codex", needs_model=True, providers=frozenset({"openai"}),
                  description="OpenAI's Codex CLI, run in the sandbox (OpenAI Models only).",
                  # Its static (musl) binary and the ripgrep beside it, as the npm wrapper script would run them.
                  software=Software("npm", "@openai/codex", "0.171.0", (
                      Command("codex", f"{_CODEX_VENDOR}/bin/codex", path=f"{_CODEX_VENDOR}/codex-path"),))),
        AgentSpec("pi", needs_model=True,
                  description="Mario Zechner's pi coding agent, run in the sandbox.",
                  software=Software("npm", "@mariozechner/pi-coding-agent", "0.73.1", (
                      Command("pi", "lib/node_modules/@mariozechner/pi-coding-agent/dist/cli.js", node=True),))),
        AgentSpec("mini-swe-agent", needs_model=True,
                  description="Princeton and Stanford's mini-swe-agent (a bash tool, through litellm), run in "
                              "the sandbox.",
                  # Without the dependencies only its SWE-bench runner (datasets) and its trajectory browser
                  # (textual) use: a third of the size, the same agent.
                  software=Software("pip", "mini-swe-agent", "2.4.6", (
                      Command("mini-swe-agent", "bin/mini-swe-agent"), Command("mini", "bin/mini")),
                      requirements=("pyyaml", "requests", "jinja2", "pydantic>=2", "litellm==1.110.2",
                                    "tenacity", "rich", "python-dotenv", "typer", "platformdirs",
                                    "prompt_toolkit", "openai"),
                      check="--help")),
    )
}
DEFAULT_AGENT = "terminus-2"


def agent_spec(name: str) -> AgentSpec:
    if name not in AGENTS:
        raise AmberError(f"Unknown Agent {name!r}: choose one of {', '.join(AGENTS)}.")
    return AGENTS[name]
