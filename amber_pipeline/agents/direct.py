"""The Direct Agent: one Model call per turn of the Instruction, no tools.

It exists for static Tasks, where what is measured is the Model's answer and
nothing else. It talks to the model proxy only, in the wire format of the
Model Configuration's Provider ("messages" for Anthropic, "chat" otherwise),
with its Trial token as its key; a multi-turn Task is one conversation whose
last answer is the one checked. It is a plain async function over one shared
HTTP client, so the static fast path can keep many Trials in flight. The
client is aiohttp's: with many connections in flight httpx's pool spends
more time choosing a connection than the call takes (measured in
bench/static_throughput.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

MAX_OUTPUT_TOKENS = 4096  # Anthropic requires a limit; a Model Configuration's own one replaces it in the proxy
ANTHROPIC_VERSION = "2023-06-01"


class CallFailed(Exception):
    """A model call the proxy or the Provider refused: its HTTP status and the error's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Reply:
    text: str
    calls: int


async def answer(client: aiohttp.ClientSession, base_url: str, token: str, wire: str, model: str,
                 turns: list[str]) -> Reply:
    """The Model's answer to the last turn, the earlier turns answered in the same conversation."""
    messages: list[dict[str, Any]] = []
    text = ""
    for turn in turns:
        messages.append({"role": "user", "content": turn})
        if wire == "messages":
            async with client.post(
                    f"{base_url}/v1/messages", json={"model": model, "max_tokens": MAX_OUTPUT_TOKENS,
                                                     "messages": messages},
                    headers={"x-api-key": token, "anthropic-version": ANTHROPIC_VERSION}) as response:
                body = await _json(response)
            text = "".join(b.get("text", "") for b in body.get("content") or [] if b.get("type") == "text")
        else:
            async with client.post(f"{base_url}/v1/chat/completions", json={"model": model, "messages": messages},
                                   headers={"authorization": f"Bearer {token}"}) as response:
                body = await _json(response)
            choices = body.get("choices") or [{}]
            text = (choices[0].get("message") or {}).get("content") or ""
        messages.append({"role": "assistant", "content": text})
    return Reply(text, len(turns))


async def _json(response: aiohttp.ClientResponse) -> dict[str, Any]:
    text = await response.text()
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if response.status != 200 or not isinstance(body, dict):
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else text[:200]
        raise CallFailed(response.status, str(message) or f"HTTP {response.status}")
    return body
