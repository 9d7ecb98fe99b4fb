"""Providers: whose servers run a Model for a call, and how Amber reaches them.

One row per kind of Provider: the wire formats it speaks, where its API
lives, and which environment variable holds its key. The model proxy is the
only caller; Agents never see a base URL or a key from this table.

A Provider's base URL can be pointed elsewhere with ``AMBER_<PROVIDER>_BASE_URL``
(for example at the provider double on loopback in tests, or at a company
gateway). The default is the Provider's public API.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum


class Wire(StrEnum):
    """A wire format: the request and response bodies of one kind of model call."""

    CHAT = "chat"  # OpenAI Chat Completions: POST /v1/chat/completions
    RESPONSES = "responses"  # OpenAI Responses: POST /v1/responses
    MESSAGES = "messages"  # Anthropic Messages: POST /v1/messages

    @property
    def path(self) -> str:
        return {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}[self.value]


@dataclass(frozen=True)
class Provider:
    name: str
    wires: frozenset[Wire]
    base_url: str | None  # None: given by each Model Configuration (OpenAI-compatible endpoints)
    key_env: str | None  # None: given by each Model Configuration, or no key needed
    litellm_prefix: str  # how litellm-based Agents (Terminus-2, mini-swe-agent) name a model of this Provider

    @property
    def env_base_url(self) -> str:
        return f"AMBER_{self.name.upper().replace('-', '_')}_BASE_URL"

    def url(self, configured: str | None = None) -> str:
        """The base URL calls go to (ending in /v1): the override, the configuration's, or the public one."""
        base = os.environ.get(self.env_base_url) or configured or self.base_url
        assert base is not None, f"{self.name} needs a base URL"  # checked when the configuration is read
        return base.rstrip("/")


ANTHROPIC = Provider("anthropic", frozenset({Wire.MESSAGES}), "https://api.anthropic.com/v1", "ANTHROPIC_API_KEY",
                     "anthropic")
OPENAI = Provider("openai", frozenset({Wire.CHAT, Wire.RESPONSES}), "https://api.openai.com/v1", "OPENAI_API_KEY",
                  "openai")
OPENROUTER = Provider("openrouter", frozenset({Wire.CHAT}), "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY",
                      "openai")
OPENAI_COMPATIBLE = Provider("openai-compatible", frozenset({Wire.CHAT, Wire.RESPONSES}), None, None, "openai")
# The provider double on loopback serving scripted replies, an endpoint Amber starts itself. It speaks all three
# wires, so a replay drives every Agent in that Agent's own protocol (Claude Code's Messages included).
REPLAY = Provider("replay", frozenset({Wire.CHAT, Wire.RESPONSES, Wire.MESSAGES}), None, None, "openai")

PROVIDERS: dict[str, Provider] = {p.name: p for p in (ANTHROPIC, OPENAI, OPENROUTER, OPENAI_COMPATIBLE, REPLAY)}
