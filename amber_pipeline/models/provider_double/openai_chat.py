"""OpenAI Chat Completions (``POST /v1/chat/completions``), as OpenAI, OpenRouter and OpenAI-compatible APIs serve it.

Usage with ``prompt_tokens_details.cached_tokens``; a stream carries usage only in an extra last chunk (empty
``choices``) when ``stream_options.include_usage`` is set; every body and chunk names the upstream in a
top-level ``provider``, as OpenRouter's do. OpenRouter's ``provider`` routing object is checked here as
OpenRouter checks it, and decides which upstream a reply names (``pinned_upstream``).
"""

from __future__ import annotations

import time
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
    sse,
)

_QUANTIZATIONS = {"int4", "int8", "fp4", "fp6", "fp8", "fp16", "bf16", "fp32", "unknown"}


class ChatUsage(TypedDict):
    prompt_tokens: int  # cached ones included
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int]
    completion_tokens_details: dict[str, int]


class ChatFunction(TypedDict):
    name: str
    arguments: str  # JSON text; streamed in pieces


class ChatToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: ChatFunction


def read(body: dict[str, Any]) -> Prompt:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ProviderError(400, "'messages' must be a non-empty array", param="messages")
    _check_provider_field(body.get("provider"))
    roles: list[str] = []
    segments: list[str] = []
    for m in messages:
        if isinstance(m, dict):
            roles.append(str(m.get("role")))
            segments.append(content_text(m.get("content")))
    return Prompt(roles, segments, body.get("max_completion_tokens") or body.get("max_tokens"))


def _check_provider_field(routing: Any) -> None:
    """OpenRouter's ``provider`` routing object, checked as OpenRouter checks it."""
    if routing is None:
        return
    if not isinstance(routing, dict):
        raise ProviderError(400, "provider: Expected object", param="provider")
    for key in ("order", "only", "ignore", "quantizations"):
        value = routing.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ProviderError(400, f"provider.{key}: Expected array of strings", param="provider")
    for key in ("allow_fallbacks", "require_parameters"):
        if routing.get(key) is not None and not isinstance(routing[key], bool):
            raise ProviderError(400, f"provider.{key}: Expected boolean", param="provider")
    unknown = set(routing.get("quantizations") or []) - _QUANTIZATIONS
    if unknown:
        raise ProviderError(400, f"provider.quantizations: Invalid value {sorted(unknown)[0]!r}", param="provider")


def pinned_upstream(body: dict[str, Any], keys: tuple[str, ...] = ("order", "only")) -> str | None:
    """The first upstream the request's OpenRouter routing lists under ``keys``, None when it lists none.

    OpenRouter sends a call to the first of ``provider.order`` (or ``provider.only``) when it is up, whether
    ``allow_fallbacks`` is false (pinned) or not; so that one is the upstream a reply names.
    """
    routing = body.get("provider")
    if isinstance(routing, dict):
        for key in keys:
            names = routing.get(key)
            if isinstance(names, list) and names:
                return str(names[0])
    return None


def _usage(answer: Answer) -> ChatUsage:
    return {
        "prompt_tokens": answer.prompt,
        "completion_tokens": answer.out,
        "total_tokens": answer.prompt + answer.out,
        "prompt_tokens_details": {"cached_tokens": answer.seen, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _finish_reason(answer: Answer) -> str:
    return "tool_calls" if answer.tool is not None else "length" if answer.truncated else "stop"


def _head(call: Call, served_by: str) -> dict[str, Any]:
    return {
        "id": new_id("chatcmpl-"),
        "created": int(time.time()),
        "model": call.requested,
        "provider": served_by,
        "system_fingerprint": "amber-replay",
        "service_tier": "default",
    }


def _tool_call(tool: ToolCall, arguments: str | None = None) -> ChatToolCall:
    function: ChatFunction = {"name": tool.name, "arguments": tool.arguments if arguments is None else arguments}
    return {"id": tool.id, "type": "function", "function": function}


def body(call: Call, answer: Answer) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text, "refusal": None, "annotations": []}
    if answer.tool is not None:
        message |= {"content": None, "tool_calls": [_tool_call(answer.tool)]}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": _finish_reason(answer)}
    head = _head(call, answer.served_by)
    return {**head, "object": "chat.completion", "choices": [choice], "usage": _usage(answer)}


def events(call: Call, answer: Answer) -> Iterator[bytes]:
    """A role chunk, text chunks, a chunk with finish_reason, (a usage chunk), ``[DONE]``."""
    include_usage = bool((call.body.get("stream_options") or {}).get("include_usage"))
    chunk = {**_head(call, answer.served_by), "object": "chat.completion.chunk"}
    if include_usage:
        chunk["usage"] = None  # every chunk but the last has a null usage

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse({**chunk, "choices": [choice]})

    tool = answer.tool
    yield event({"role": "assistant", "content": "" if tool is None else None, "refusal": None})
    if tool is not None:
        yield event({"tool_calls": [{"index": 0, **_tool_call(tool, "")}]})
        for piece in chunks(tool.arguments):
            yield event({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    else:
        for piece in chunks(answer.text):
            yield event({"content": piece})
    yield event({}, _finish_reason(answer))
    if include_usage:
        yield sse({**chunk, "choices": [], "usage": _usage(answer)})
    yield b"data: [DONE]\n\n"


def headers() -> dict[str, str]:
    return {}
