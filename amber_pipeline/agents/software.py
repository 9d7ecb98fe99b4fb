"""The software an installed Agent runs inside its sandbox, pinned.

Claude Code, Codex CLI, pi and mini-swe-agent run inside the Task's sandbox,
which has no network at run time: their software must already be in the image
the sandbox starts from. This record says what that software is (a registry
package at a pinned version, plus what else it needs) and which commands it
puts on the PATH; `sandbox.agent_image` turns it into an image once per
content. The version is part of the Agent Version, so a new release never
pools with an old one.

Each Agent lives under its own folder, `/opt/amber-agent/<agent>`, and its
commands are small wrappers in `/usr/local/bin`, so Harbor's own run commands
(`claude ...`, `codex exec ...`, `pi --print ...`, `mini-swe-agent ...`) find
them without the installers Harbor would otherwise run (nvm, curl, uv), none of
which can reach the internet from a sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Command:
    """A command an Agent's software puts on the PATH: a wrapper that runs ``target``."""

    name: str
    target: str  # relative to the Agent's folder (/opt/amber-agent/<agent>)
    node: bool = False  # a JavaScript entry point, run by the Node.js of the Agents' runtime image
    path: str | None = None  # a folder (relative to the Agent's folder) its own helpers are found in


@dataclass(frozen=True)
class Software:
    """One installed Agent's software: where it comes from and what it puts on the PATH."""

    installer: Literal["npm", "pip"]
    package: str
    version: str
    commands: tuple[Command, ...]
    requirements: tuple[str, ...] = ()  # pip: installed beside it, in place of its declared dependencies
    check: str = "--version"  # arguments that make the first command print its version and exit 0

    @property
    def node(self) -> bool:
        return any(c.node for c in self.commands)

    def snapshot(self) -> dict[str, object]:
        """Everything that changes what is installed: what an image of it is keyed by."""
        return {"installer": self.installer, "package": self.package, "version": self.version,
                "requirements": list(self.requirements),
                "commands": [[c.name, c.target, c.node, c.path] for c in self.commands]}
