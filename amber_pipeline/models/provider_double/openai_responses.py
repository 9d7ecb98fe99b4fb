"""OpenAI Responses (``POST /v1/responses``).

``input`` a string or a list of items, optional ``instructions``; usage with
``input_tokens_details.cached_tokens``; streamed as named events ``response.created`` ...
``response.completed`` (no ``[DONE]``). A conversation is always sent whole: ``previous_response_id`` is
refused as a Response the double never stored.
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
    part_text,
    typed_event,
)

Status = Literal["in_progress", "incomplete", "completed"]


class ResponsesUsage(TypedDict):
    input_tokens: int  # cached ones included
    input_tokens_details: dict[str, int]
    output_tokens: int
    output_tokens_details: dict[str, int]
    total_tokens: int


class OutputText(TypedDict):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]
    logprobs: list[Any]


class OutputMessage(TypedDict):
    id: str
    type: Literal["message"]
    status: Status
    role: Literal["assistant"]
    content: list[OutputText]


class FunctionCall(TypedDict):
    id: str
    type: Literal["function_call"]
    status: Status
    call_id: str
    name: str
    arguments: str  # JSON text; streamed in pieces


def read(body: dict[str, Any]) -> Prompt:
    if body.get("previous_response_id"):
        message = f"Previous response with id '{body['previous_response_id']}' not found."
        raise ProviderError(400, message, param="previous_response_id")
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise ProviderError(400, "'input' must be a string or an array of input items", param="input")
    roles: list[str] = []
    segments: list[str] = []
    if isinstance(body.get("instructions"), str):
        roles.append("instructions")
        segments.append(body["instructions"])
    for item in items:
        if isinstance(item, dict):
            kind = item.get("type")
            calls_tool = kind in ("function_call", "custom_tool_call", "local_shell_call")
            roles.append("assistant" if calls_tool else str(item.get("role") or kind))
            text = content_text(item.get("content")) or part_text({"content": item.get("output")})
            segments.append(text or str(item.get("arguments") or ""))
    return Prompt(roles, segments, body.get("max_output_tokens"))


def _usage(answer: Answer) -> ResponsesUsage:
    return {
        "input_tokens": answer.prompt,
        "input_tokens_details": {"cached_tokens": answer.seen},
        "output_tokens": answer.out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": answer.prompt + answer.out,
    }


def _output_text(text: str) -> OutputText:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _output_message(item_id: str, text: str | None, status: Status) -> OutputMessage:
    content = [] if text is None else [_output_text(text)]
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def _function_call(item_id: str, tool: ToolCall, status: Status, arguments: str | None = None) -> FunctionCall:
    return {"id": item_id, "type": "function_call", "status": status, "call_id": tool.id, "name": tool.name,
            "arguments": tool.arguments if arguments is None else arguments}


def _response(
    call: Call, resp_id: str, item_id: str, answer: Answer | None, created: int | None = None
) -> dict[str, Any]:
    """The Response; ``answer`` None: the in-progress one that opens a stream."""
    b = call.body
    status: Status = "in_progress" if answer is None else "incomplete" if answer.truncated else "completed"
    output: list[OutputMessage | FunctionCall] = []
    if answer is not None:
        output = [_function_call(item_id, answer.tool, status) if answer.tool is not None
                  else _output_message(item_id, answer.text, status)]
    return {
        "id": resp_id,
        "object": "response",
        "created_at": created or int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": b.get("instructions"),
        "max_output_tokens": b.get("max_output_tokens"),
        "model": call.requested,
        "output": output,
        "parallel_tool_calls": b.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None, **(b.get("reasoning") or {})},
        "store": b.get("store", True),
        "temperature": b.get("temperature", 1.0),
        "text": b.get("text") or {"format": {"type": "text"}},
        "tool_choice": b.get("tool_choice", "auto"),
        "tools": b.get("tools") or [],
        "top_p": b.get("top_p", 1.0),
        "truncation": b.get("truncation", "disabled"),
        "usage": None if answer is None else _usage(answer),
        "user": b.get("user"),
        "metadata": b.get("metadata") or {},
    }


def body(call: Call, answer: Answer) -> dict[str, Any]:
    return _response(call, new_id("resp_"), new_id("msg_"), answer)


def events(call: Call, answer: Answer) -> Iterator[bytes]:
    """response.created, .in_progress, .output_item.added, .content_part.added, .output_text.delta
    (one or more), .output_text.done, .content_part.done, .output_item.done, then .completed
    (.incomplete when cut at the output limit); each with ``event:`` and ``sequence_number``. A tool call
    instead: .output_item.added, .function_call_arguments.delta (one or more), .function_call_arguments.done,
    .output_item.done."""
    tool, text = answer.tool, answer.text
    resp_id, item_id, created = new_id("resp_"), new_id("fc_" if tool else "msg_"), int(time.time())
    seq = iter(range(1_000_000))
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}

    def event(kind: str, **fields: Any) -> bytes:
        return typed_event(kind, sequence_number=next(seq), **fields)

    opening = _response(call, resp_id, item_id, None, created)
    yield event("response.created", response=opening)
    yield event("response.in_progress", response=opening)
    final = _response(call, resp_id, item_id, answer, created)
    if tool is not None:
        yield event("response.output_item.added", output_index=0,
                    item=_function_call(item_id, tool, "in_progress", ""))
        for piece in chunks(tool.arguments):
            yield event("response.function_call_arguments.delta", item_id=item_id, output_index=0, delta=piece)
        yield event("response.function_call_arguments.done", item_id=item_id, output_index=0,
                    arguments=tool.arguments)
        yield event("response.output_item.done", output_index=0, item=final["output"][0])
        yield event("response.completed", response=final)
        return
    yield event("response.output_item.added", output_index=0, item=_output_message(item_id, None, "in_progress"))
    yield event("response.content_part.added", **where, part=_output_text(""))
    for piece in chunks(text):
        yield event("response.output_text.delta", **where, delta=piece, logprobs=[])
    yield event("response.output_text.done", **where, text=text, logprobs=[])
    yield event("response.content_part.done", **where, part=_output_text(text))
    yield event("response.output_item.done", output_index=0, item=final["output"][0])
    yield event("response.incomplete" if answer.truncated else "response.completed", response=final)


def headers() -> dict[str, str]:
    return {}
