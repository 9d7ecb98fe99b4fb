"""Harbor's installed Agents as Amber runs them: software already in the image, every call through the proxy.

Harbor's Claude Code, Codex CLI, pi and mini-swe-agent install themselves in
the sandbox at setup (nvm, curl, uv, npm). An Amber sandbox has no network, so
their software is put into the image beforehand (`sandbox.agent_image`), and
setup only checks that it runs: a Task image it cannot run in fails the Trial
at once with one sentence, instead of after an installer's timeouts. None of
them reads the environment of the process that runs it (`agents.allowlist`).

How each one is pointed at the proxy is `agents.connection`'s.
"""

from __future__ import annotations

from typing import Any

from harbor.agents.installed.base import BaseInstalledAgent
from harbor.agents.installed.claude_code import ClaudeCode as _ClaudeCode
from harbor.agents.installed.codex import Codex as _Codex
from harbor.agents.installed.mini_swe_agent import MiniSweAgent as _MiniSweAgent
from harbor.agents.installed.pi import Pi as _Pi
from harbor.environments.base import BaseEnvironment

from amber_pipeline.agents.allowlist import OwnEnvironment
from amber_pipeline.agents.specs import agent_spec


async def _check_software(agent: BaseInstalledAgent, environment: BaseEnvironment) -> None:
    """Setup without installing: the Agent's first command must run in this sandbox."""
    software = agent_spec(agent.name()).software
    assert software is not None
    command = f"{software.commands[0].name} {software.check}"
    result = await environment.exec(command=f"{command} </dev/null 2>&1", timeout_sec=60)
    if result.return_code != 0:
        tail = " ".join((result.stdout or "").split())[-200:] or f"exit code {result.return_code}"
        raise RuntimeError(f"{agent.name()} {software.version} does not run in this Task's image "
                           f"(`{command}`: {tail}); its software is built for Debian bookworm (glibc) on "
                           "linux-x64.")


class ClaudeCode(OwnEnvironment, _ClaudeCode):
    # Harbor's run() copies these from os.environ into its commands' env itself. What Amber gives an Agent
    # reaches its commands another way (the Trial's env), so only the server's values are dropped.
    _READ_FROM_HOST = frozenset({"CLAUDE_CODE_MAX_OUTPUT_TOKENS", "CLAUDE_CODE_DISABLE_ADAPTIVE_THINKING"})

    async def install(self, environment: BaseEnvironment) -> None:
        await _check_software(self, environment)

    async def _exec(self, environment: BaseEnvironment, command: str, user: str | int | None = None,
                    env: dict[str, str] | None = None, cwd: str | None = None,
                    timeout_sec: int | None = None) -> Any:
        kept = {name: value for name, value in (env or {}).items() if name not in self._READ_FROM_HOST}
        return await super()._exec(environment, command, user=user, env=kept or None, cwd=cwd,
                                   timeout_sec=timeout_sec)


class Codex(OwnEnvironment, _Codex):
    async def install(self, environment: BaseEnvironment) -> None:
        await _check_software(self, environment)


class Pi(OwnEnvironment, _Pi):
    async def install(self, environment: BaseEnvironment) -> None:
        await _check_software(self, environment)

    def _build_custom_models_json(self, access: Any, model_id: str) -> dict[str, Any] | None:
        # Harbor writes the key as "$VAR", which newer pi releases expand; pi 0.73 reads a bare variable name
        # (and would send "$VAR" itself as the key).
        models = super()._build_custom_models_json(access, model_id)
        for provider in (models or {}).get("providers", {}).values():
            provider["apiKey"] = str(provider.get("apiKey", "")).removeprefix("$")
        return models


class MiniSweAgent(OwnEnvironment, _MiniSweAgent):
    async def install(self, environment: BaseEnvironment) -> None:
        await _check_software(self, environment)
