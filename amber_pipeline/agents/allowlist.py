"""An Agent's environment is what Amber gives it (its `AgentConfig` env and kwargs), never the server's.

Harbor's agents fill whatever a Trial's configuration leaves out from the environment of the process that runs
them, and in Amber that process holds the Providers' keys (the model proxy's) and whatever else its operator's
environment has: each such read would hand a value of the server to a user's sandbox (or put it in Terminus-2's
calls). So Claude Code would take its OAuth token and Bedrock's AWS credentials, pi Anthropic's OAuth token,
Codex CLI a login file (CODEX_AUTH_JSON_PATH), every Agent Provider keys, base URLs, model aliases, settings.
Harbor 0.25 reads that environment four ways, and `OwnEnvironment` closes each for the Agents Amber runs:

- `_env_sources`, behind `_get_env`, `_get_env_prefixed`, the legacy descriptors' ``env_fallback`` and MCP
  header templates: the Agent's own environment and what Harbor made of it, without `os.environ`;
- `parse_options`: an option whose annotation names a fallback variable takes it from the Agent's own
  environment, else keeps its default;
- `resolve_model_connection_config`, the model connection (key, base URL, the Bedrock, OAuth and login-file
  switches): looked up in the Agent's own environment only;
- `os.environ` read by name in an Agent's own code: its class in `agents.installed` drops those variables
  from what it runs.

`tests/test_sandbox_credentials.py` puts a canary in every variable Harbor's code for these Agents reads, and
looks for it everywhere a Trial leaves something.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from harbor.agents.base import BaseAgent
from harbor.agents.options import cli_annotation, env_annotation
from pydantic.fields import FieldInfo


class OwnEnvironment(BaseAgent):
    """A Harbor agent that reads only the environment Amber gave it. Put it first among a class's bases."""

    def _env_sources(self) -> tuple[Mapping[str, str], ...]:
        return tuple(source for source in super()._env_sources() if source is not os.environ)

    @classmethod
    def parse_options(cls, kwargs: dict[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Any:
        given = dict(kwargs or {})
        own = env or {}
        # Harbor fills an option left out from its fallback variable, looked up in `env` and then `os.environ`;
        # an option given (its default, when `env` lacks the variable) is never looked up.
        for name, option in (cls.options_model.model_fields.items() if cls.options_model else ()):
            variable = _fallback(option)
            if variable is not None and name not in given and variable not in own:
                given[name] = option.get_default(call_default_factory=True)
        return super().parse_options(given, env)

    @classmethod
    def resolve_model_connection_config(cls, model_name: str | None, resolve_env: Callable[..., Any],
                                        **options: Any) -> Any:
        # Harbor's `resolve_env` looks in the Agent's own environment (``explicit_env``), then in os.environ.
        return super().resolve_model_connection_config(model_name, _looked_up_in(options.get("explicit_env") or {}),
                                                       **options)


def _fallback(option: FieldInfo) -> str | None:
    """The variable Harbor fills an option from, as `harbor.agents.options.apply_env_fallbacks` picks it."""
    env, cli = env_annotation(option), cli_annotation(option)
    if env is not None and env.fallback is not None:
        return env.fallback
    return cli.fallback if cli is not None else None


def _looked_up_in(own: Mapping[str, str]) -> Callable[..., tuple[str, str] | None]:
    """Harbor's connection lookup (the first of ``names`` set, and its value) over the Agent's own environment."""
    def resolve(*names: str) -> tuple[str, str] | None:
        return next(((name, own[name]) for name in names if name in own), None)

    return resolve
