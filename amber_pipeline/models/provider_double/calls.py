"""What the three wire formats share: a model call as the double reads it, and the answer it sends back.

A request in any format becomes one ``Call`` (its prompt as texts in order, who said each, its output limit,
the shell tool it offers) and the script's reply becomes one ``Answer``, sized in tokens. A format module only
reads its request into a ``Prompt`` and writes an ``Answer`` in its own shape (``WireFormat``), so the rules
here (where the text of a content is, how tokens are counted and cached, how a stream is framed) are the same
for all of them.

Tokens are ``ceil(chars / 4)``: deterministic, and close enough for cost arithmetic. Cached input is modelled
without state, so the same request always gets the same usage: from the second turn on, every message but the
last is a prefix the Provider has seen (``Answer.seen``), which OpenAI and OpenRouter count as cached.
Output beyond the request's limit (``max_tokens`` and the like) is cut and reported as such.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from amber_pipeline.models.provider_double.replay import Replay

Flavour = Literal["openai", "openrouter", "anthropic"]  # whose error shape and auth a route has
Route = Literal["chat", "responses", "messages"]
CHUNK = 64  # characters of text per streamed delta


class ProviderError(Exception):
    """A failed call; rendered in the shape of the route's Provider (``flavours.error_body``).

    kind: invalid_request, authentication, not_found, rate_limit, server or overloaded.
    """

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.code, self.param = status, kind, code, param
        self.headers = headers or {}
        self.upstream: str | None = None  # OpenRouter names the upstream that failed


@dataclass(frozen=True)
class Prompt:
    """A request's prompt as its format gives it, before the double looks up the model."""

    roles: list[str]  # who said each segment: system/instructions, user, assistant, a tool's output
    segments: list[str]  # the prompt's texts in order
    limit: Any  # the request's output limit as sent; only a positive int counts
    breakpoint: int | None = None  # Anthropic: index of the last segment marked cache_control


@dataclass
class Call:
    """One model call, read from any of the three formats."""

    route: Route
    flavour: Flavour
    body: dict[str, Any]
    requested: str
    replay: Replay
    users: list[str]  # the user messages' texts, in order
    turn: int
    segments: list[str]  # the prompt's texts in order: system/instructions, then each message
    breakpoint: int | None  # Anthropic: index of the last segment marked cache_control
    stream: bool
    limit: int | None  # the most output tokens the request allows
    shell: ShellTool | None = None  # the request's shell tool, when it offers one


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text
    id: str


@dataclass(frozen=True)
class ShellTool:
    """A tool that runs a shell command, as the request declares it."""

    name: str
    argument: str  # the property that takes the command
    argv: bool  # the command is an argv array (``["bash", "-lc", ...]``), not a string

    def call(self, command: str) -> ToolCall:
        value: Any = ["bash", "-lc", command] if self.argv else command
        return ToolCall(self.name, json.dumps({self.argument: value}), new_id("call_"))


_SHELL_TOOLS = ("bash", "shell", "exec_command", "run_shell_command", "terminal")


def shell_tool(tools: Any) -> ShellTool | None:
    """The first tool offered whose name says it runs shell commands (any of the three formats)."""
    if not isinstance(tools, list):
        return None
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        spec: dict[str, Any] = tool["function"] if isinstance(tool.get("function"), dict) else tool
        name = spec.get("name")
        if not isinstance(name, str) or name.lower() not in _SHELL_TOOLS:
            continue
        schema = spec.get("parameters") or spec.get("input_schema") or {}
        props = (schema.get("properties") or {}) if isinstance(schema, dict) else {}
        for argument in ("command", "cmd"):
            if argument in props:
                return ShellTool(name, argument, (props[argument] or {}).get("type") == "array")
    return None


@dataclass(frozen=True)
class Answer:
    """The script's reply to one call, sized in tokens as every format reports it."""

    text: str  # empty when the reply is a tool call
    tool: ToolCall | None
    truncated: bool  # cut at the request's output limit
    prompt: int  # input tokens, all of the prompt
    seen: int  # input tokens of the prefix an earlier turn sent
    out: int  # output tokens
    served_by: str  # the upstream a chat reply names (OpenRouter's ``provider``)


def answer(call: Call, text: str, tool: ToolCall | None, served_by: str) -> Answer:
    """Size a reply. A tool call cut at the output limit is dropped, as its arguments would not be whole JSON."""
    out = tokens(text or (tool.arguments if tool else ""))
    truncated = call.limit is not None and out > call.limit
    if truncated and call.limit is not None:
        text, out, tool = text[: call.limit * 4], call.limit, None
    prompt = tokens("".join(call.segments))
    seen = tokens("".join(call.segments[:-1])) if call.turn > 0 else 0
    return Answer(text, tool, truncated, prompt, seen, out, served_by)


class WireFormat(Protocol):
    """What the server needs of a format module: read its request, write its reply whole or streamed."""

    def read(self, body: dict[str, Any]) -> Prompt: ...

    def body(self, call: Call, answer: Answer) -> Mapping[str, Any]: ...

    def events(self, call: Call, answer: Answer) -> Iterator[bytes]: ...

    def headers(self) -> dict[str, str]: ...


def content_text(content: Any) -> str:
    """Text of a message content: a string, or a list of parts/blocks with text (or nested content)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part_text(p) for p in content)
    return ""


def part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return ""
    if isinstance(part.get("text"), str):
        return str(part["text"])
    return content_text(part.get("content"))


def tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def chunks(text: str) -> Iterator[str]:
    """A streamed text or tool-call argument in deltas of ``CHUNK`` characters; none for an empty one."""
    for i in range(0, len(text), CHUNK):
        yield text[i : i + CHUNK]


def sse(data: Mapping[str, Any], name: str | None = None) -> bytes:
    """One server-sent event; ``name``: its ``event:`` line (Responses and Messages name theirs, Chat does not)."""
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def typed_event(kind: str, **fields: Any) -> bytes:
    """An event whose ``type`` is also its name, as Responses and Messages stream them."""
    return sse({"type": kind, **fields}, kind)
