"""Anthropic Messages (``POST /v1/messages``; its clients take the root, ``anthropic_base_url``).

Top-level ``system``, ``max_tokens`` and the ``anthropic-version`` header required, as Anthropic requires them;
usage with ``input_tokens`` excluding cache reads and writes; streamed as ``message_start`` ...
``message_stop``. Errors in Anthropic's shape (``flavours``).

Anthropic caches only what the request marks with ``cache_control``: the prefix up to the last breakpoint is
written (``cache_creation_input_tokens``) except the part already seen, which is read
(``cache_read_input_tokens``); ``input_tokens`` is what follows the breakpoint. Like the other formats' caching
this has no state: what counts as seen is the prompt but its last message, from the second turn on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal, TypedDict

from amber_pipeline.models.provider_double.calls import (
    Answer,
    Call,
    Prompt,
    ProviderError,
    ToolCall,
    chunks,
    content_text,
    new_id,
    tokens,
    typed_event,
)
from amber_pipeline.models.provider_double.flavours import request_id


class MessagesUsage(TypedDict):
    input_tokens: int  # after the last cache breakpoint
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    output_tokens: int


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ToolUse(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]  # the tool's arguments, as JSON


class Message(TypedDict):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[TextBlock | ToolUse]
    stop_reason: str | None
    stop_sequence: None
    usage: MessagesUsage


def read(body: dict[str, Any]) -> Prompt:
    if not isinstance(body.get("max_tokens"), int):
        raise ProviderError(400, "max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ProviderError(400, "messages: Field required")
    roles: list[str] = []
    segments: list[str] = []
    breakpoint_: int | None = None
    system = body.get("system")
    if system is not None:
        roles.append("system")
        segments.append(content_text(system))
        if _has_cache_control(system):
            breakpoint_ = 0
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            role = m.get("role") if isinstance(m, dict) else None
            message = (
                f'messages: Unexpected role "{role}". The Messages API accepts a top-level '
                '`system` parameter, not "system" as an input message role.'
                if role == "system"
                else f'messages: Unexpected role "{role}"'
            )
            raise ProviderError(400, message)
        roles.append(m["role"])
        segments.append(content_text(m.get("content")))
        if _has_cache_control(m.get("content")):
            breakpoint_ = len(segments) - 1
    if body.get("cache_control"):  # automatic caching: the breakpoint is the last block
        breakpoint_ = len(segments) - 1
    return Prompt(roles, segments, body["max_tokens"], breakpoint_)


def _has_cache_control(content: Any) -> bool:
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("cache_control") for b in content)


def _usage(call: Call, answer: Answer) -> MessagesUsage:
    read = written = 0
    if call.breakpoint is not None:
        upto = tokens("".join(call.segments[: call.breakpoint + 1]))
        read = min(answer.seen, upto)
        written = upto - read
    return {
        "input_tokens": answer.prompt - read - written,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": answer.out,
    }


def _stop_reason(answer: Answer) -> str:
    return "tool_use" if answer.tool is not None else "max_tokens" if answer.truncated else "end_turn"


def _tool_use(tool: ToolCall, empty: bool = False) -> ToolUse:
    return {"type": "tool_use", "id": tool.id.replace("call_", "toolu_"), "name": tool.name,
            "input": {} if empty else json.loads(tool.arguments)}


def _message(call: Call, answer: Answer, usage: MessagesUsage, opening: bool = False) -> Message:
    """The Message; ``opening``: the empty one ``message_start`` carries."""
    content: list[TextBlock | ToolUse] = []
    if not opening:
        content = [_tool_use(answer.tool) if answer.tool is not None else {"type": "text", "text": answer.text}]
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": call.requested,
        "content": content,
        "stop_reason": None if opening else _stop_reason(answer),
        "stop_sequence": None,
        "usage": usage,
    }


def body(call: Call, answer: Answer) -> Message:
    return _message(call, answer, _usage(call, answer))


def events(call: Call, answer: Answer) -> Iterator[bytes]:
    """message_start (input usage), content_block_start, ping, content_block_delta (one or more; a tool call's
    as ``input_json_delta``), content_block_stop, message_delta (stop_reason, cumulative usage), message_stop."""
    usage, tool = _usage(call, answer), answer.tool
    yield typed_event("message_start", message=_message(call, answer, usage | {"output_tokens": 1}, opening=True))
    block: TextBlock | ToolUse = _tool_use(tool, empty=True) if tool is not None else {"type": "text", "text": ""}
    yield typed_event("content_block_start", index=0, content_block=block)
    yield typed_event("ping")
    if tool is not None:
        for piece in chunks(tool.arguments):
            yield typed_event("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": piece})
    else:
        for piece in chunks(answer.text):
            yield typed_event("content_block_delta", index=0, delta={"type": "text_delta", "text": piece})
    yield typed_event("content_block_stop", index=0)
    yield typed_event("message_delta", delta={"stop_reason": _stop_reason(answer), "stop_sequence": None}, usage=usage)
    yield typed_event("message_stop")


def headers() -> dict[str, str]:
    return request_id("anthropic")
