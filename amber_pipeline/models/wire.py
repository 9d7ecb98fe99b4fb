"""The three wire formats, as the model proxy needs to read and pin them.

For each format (OpenAI Chat Completions, OpenAI Responses, Anthropic
Messages) this module knows how to pin a request to its Model Configuration
(the model id, the call settings, OpenRouter's provider routing) and how to
read a response's usage and serving Provider, whole or streamed. Field names
follow the Providers' API references:

- Chat: ``usage.prompt_tokens`` (cached ones included) with
  ``usage.prompt_tokens_details.cached_tokens``, ``completion_tokens``; a
  stream carries usage only in its last chunk and only when
  ``stream_options.include_usage`` is set, so the proxy sets it. OpenRouter
  adds a top-level ``provider``.
- Responses: ``usage.input_tokens`` with ``input_tokens_details.cached_tokens``,
  ``output_tokens``; a stream ends with a ``response.completed`` event.
- Messages: ``usage.input_tokens`` excludes cache reads and writes
  (``cache_read_input_tokens``, ``cache_creation_input_tokens``); a stream
  gives input usage in ``message_start`` and the running output count in each
  ``message_delta``, and ends with ``message_stop``.

Amber's `Usage.input_tokens` counts all input, cached included, so cost is
uncached input at the input price plus cached input at the cached price.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from amber_pipeline.models.configurations import ModelConfiguration
from amber_pipeline.models.providers import Wire


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0  # all input, cached included
    cached_input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.cached_input_tokens + other.cached_input_tokens,
                     self.output_tokens + other.output_tokens)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def usage_of(wire: Wire, usage: Any) -> Usage:
    """Usage from a format's ``usage`` object (absent or malformed fields count as 0)."""
    if not isinstance(usage, dict):
        return Usage()
    if wire is Wire.MESSAGES:
        cached = _int(usage.get("cache_read_input_tokens"))
        total = _int(usage.get("input_tokens")) + cached + _int(usage.get("cache_creation_input_tokens"))
        return Usage(total, cached, _int(usage.get("output_tokens")))
    if wire is Wire.CHAT:
        details = usage.get("prompt_tokens_details") or {}
        return Usage(_int(usage.get("prompt_tokens")), _int(details.get("cached_tokens")),
                     _int(usage.get("completion_tokens")))
    details = usage.get("input_tokens_details") or {}
    return Usage(_int(usage.get("input_tokens")), _int(details.get("cached_tokens")),
                 _int(usage.get("output_tokens")))


def _same_provider(a: str, b: str) -> bool:
    """OpenRouter names Providers by display name ("DeepInfra") in responses and by slug ("deepinfra") in routing."""
    def norm(s: str) -> str:
        return re.sub(r"[^a-z0-9]", "", s.lower())
    return norm(a) == norm(b)


def pin(wire: Wire, body: dict[str, Any], mc: ModelConfiguration) -> dict[str, Any]:
    """The request as the configuration makes it: its model, its settings, and (OpenRouter) its pinned upstream."""
    pinned = dict(body)
    pinned["model"] = mc.model
    s = mc.settings
    if s.temperature is not None:
        pinned["temperature"] = s.temperature
    if s.top_p is not None:
        pinned["top_p"] = s.top_p
    if wire is Wire.CHAT:
        if s.reasoning_effort is not None:
            pinned["reasoning_effort"] = s.reasoning_effort
        if s.max_output_tokens is not None:
            pinned.pop("max_tokens", None)
            pinned.pop("max_completion_tokens", None)
            pinned["max_completion_tokens" if mc.provider == "openai" else "max_tokens"] = s.max_output_tokens
        if pinned.get("stream"):
            pinned["stream_options"] = {**(pinned.get("stream_options") or {}), "include_usage": True}
        if mc.provider == "openrouter":
            routing: dict[str, Any] = {"order": [mc.upstream], "allow_fallbacks": False}
            if mc.quantization and mc.quantization != "unknown":
                routing["quantizations"] = [mc.quantization]
            pinned["provider"] = routing
    elif wire is Wire.RESPONSES:
        if s.reasoning_effort is not None:
            pinned["reasoning"] = {**(pinned.get("reasoning") or {}), "effort": s.reasoning_effort}
        if s.max_output_tokens is not None:
            pinned["max_output_tokens"] = s.max_output_tokens
    elif s.max_output_tokens is not None:
        pinned["max_tokens"] = s.max_output_tokens
    return pinned


def upfront(size: int) -> Usage:
    """What a call is sure to use before it is made: its body as input tokens (about 4 bytes a token).

    Its output is unknown until it ends, so a budget refuses a call only once the input alone no longer
    fits; a Job can pass its ceiling by at most one call's output, which the ledger's ceiling then stops.
    """
    return Usage(size // 4 + 1, 0, 0)


@dataclass
class Reading:
    """What a response said about itself: usage, who served it, and whether a stream reached its end."""

    usage: Usage = Usage()
    served_by: str | None = None
    complete: bool = False

    def mismatch(self, mc: ModelConfiguration) -> str | None:
        """The other Provider that served a call pinned to ``mc.served_by``, if one did."""
        if mc.provider != "openrouter" or self.served_by is None:
            return None
        return None if _same_provider(self.served_by, mc.served_by) else self.served_by


def read_body(wire: Wire, body: Any) -> Reading:
    if not isinstance(body, dict):
        return Reading()
    served = body.get("provider") if isinstance(body.get("provider"), str) else None
    return Reading(usage_of(wire, body.get("usage")), served, complete=True)


@dataclass
class StreamTap:
    """Reads server-sent events as they pass through, without holding up or changing a byte of them."""

    wire: Wire
    reading: Reading = field(default_factory=Reading)
    _buffer: bytes = b""
    _messages_input: Usage = Usage()

    def feed(self, chunk: bytes) -> None:
        # SSE lines may end in CRLF (sse-starlette's default, so many OpenAI-compatible servers): a blank line is
        # then \r\n\r\n. Normalised on the joined buffer, so a CRLF split across chunks is caught too.
        self._buffer = (self._buffer + chunk).replace(b"\r\n", b"\n")
        while True:
            end = self._buffer.find(b"\n\n")
            if end < 0:
                return
            event, self._buffer = self._buffer[:end], self._buffer[end + 2:]
            self._event(event.replace(b"\r", b""))

    def _event(self, event: bytes) -> None:
        data = b"\n".join(line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
        if not data:
            return
        if data == b"[DONE]":
            self.reading.complete = True
            return
        try:
            payload = json.loads(data)
        except ValueError:
            return
        if not isinstance(payload, dict):
            return
        if self.reading.served_by is None and isinstance(payload.get("provider"), str):
            self.reading.served_by = payload["provider"]
        kind = payload.get("type")
        if self.wire is Wire.CHAT:
            if payload.get("usage"):
                self.reading.usage = usage_of(Wire.CHAT, payload["usage"])
        elif self.wire is Wire.RESPONSES:
            if kind in ("response.completed", "response.incomplete"):
                self.reading.usage = usage_of(Wire.RESPONSES, (payload.get("response") or {}).get("usage"))
                self.reading.complete = True
        elif kind == "message_start":
            self._messages_input = usage_of(Wire.MESSAGES, (payload.get("message") or {}).get("usage"))
            self.reading.usage = self._messages_input
        elif kind == "message_delta":
            delta = payload.get("usage") or {}
            start = self._messages_input
            if any(k in delta for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")):
                start = usage_of(Wire.MESSAGES, {**delta, "output_tokens": 0})
            self.reading.usage = Usage(start.input_tokens, start.cached_input_tokens, _int(delta.get("output_tokens")))
        elif kind == "message_stop":
            self.reading.complete = True
