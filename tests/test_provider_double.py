"""Tests of the provider double: a real server on loopback, real HTTP clients, no mocks."""

from __future__ import annotations

import http.client
import json
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from amber_pipeline.cli.client import tls
from amber_pipeline.models.provider_double import (  # noqa: E402
    DONE_REPLY,
    Fault,
    ProviderDouble,
    Replay,
    load_replay,
)

# One client for the module: creating one per request costs ~50 ms. No proxies for loopback.
HTTP = httpx.Client(verify=tls(), timeout=5, trust_env=False)

FIX_INSTR = "Fix the failing test in calc.py so that add() returns the sum."
FIX_INSTR_STRICT = FIX_INSTR + " Do not touch the tests."
HELLO_INSTR = "Create /app/hello.txt containing the word hello."

FIX_SCRIPT = [
    {
        "analysis": "Look first.",
        "plan": "List files.",
        "commands": [{"keystrokes": "ls\n", "duration": 0.1}],
        "task_complete": False,
    },
    {
        "analysis": "Found it.",
        "plan": "Patch add().",
        "commands": [{"keystrokes": "sed -i 's/a - b/a + b/' calc.py\n", "duration": 0.1}],
        "task_complete": True,
    },
]
STRICT_SCRIPT = [
    {
        "analysis": "Strict variant.",
        "plan": "Only edit calc.py.",
        "commands": [],
        "task_complete": False,
    }
]
HELLO_SCRIPT = [
    {
        "analysis": "Empty dir.",
        "plan": "Write the file.",
        "commands": [{"keystrokes": "echo hello > /app/hello.txt\n", "duration": 0.1}],
        "task_complete": True,
    }
]


def prompt(instruction: str) -> str:
    """A user message shaped like Terminus-2's: the instruction inside a template."""
    return (
        "You are an AI assistant solving tasks in a terminal.\n\n"
        f"Task Description:\n{instruction}\n\nCurrent terminal state:\n$ "
    )


@pytest.fixture
def replay_path(tmp_path: Path) -> Path:
    path = tmp_path / "replay-strong.json"
    path.write_text(
        json.dumps(
            {
                "model": "replay-strong",
                "description": "Scripted strong agent (replay, not a model).",
                "tasks": {
                    "fix-calc": FIX_SCRIPT,
                    "fix-calc-strict": STRICT_SCRIPT,
                    "hello": HELLO_SCRIPT,
                },
            }
        )
    )
    return path


@pytest.fixture
def double(replay_path: Path) -> Iterator[ProviderDouble]:
    instructions = {
        "fix-calc": f"\n{FIX_INSTR}\n",  # stripped before matching
        "fix-calc-strict": FIX_INSTR_STRICT,
        "hello": HELLO_INSTR,
        "unscripted": "An instruction with no script in the replay.",
    }
    with ProviderDouble([load_replay(replay_path)], instructions) as d:
        yield d


def chat(
    double: ProviderDouble,
    messages: list[dict[str, Any]],
    model: str = "replay-strong",
    v1: bool = True,
    **extra: Any,
) -> httpx.Response:
    base = double.base_url if v1 else double.base_url.removesuffix("/v1")
    body = {"model": model, "messages": messages, **extra}
    return HTTP.post(base + "/chat/completions", json=body)


def content_of(resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 200, resp.text
    return json.loads(resp.json()["choices"][0]["message"]["content"])


def conversation(instruction: str, turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": prompt(instruction)},
    ]
    for i in range(turns):
        messages += [
            {"role": "assistant", "content": f"reply {i}"},
            {"role": "user", "content": f"terminal output {i}"},
        ]
    return messages


def test_load_replay(replay_path: Path) -> None:
    replay = load_replay(replay_path)
    assert replay == Replay(
        "replay-strong",
        "Scripted strong agent (replay, not a model).",
        {"fix-calc": FIX_SCRIPT, "fix-calc-strict": STRICT_SCRIPT, "hello": HELLO_SCRIPT},
    )


def test_load_replay_rejects_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": "x", "tasks": {"t": {"not": "a list"}}}))
    with pytest.raises(ValueError, match="list of objects"):
        load_replay(bad)


def test_reply_per_turn_and_past_the_end(double: ProviderDouble) -> None:
    assert content_of(chat(double, conversation(FIX_INSTR, 0))) == FIX_SCRIPT[0]
    assert content_of(chat(double, conversation(FIX_INSTR, 1))) == FIX_SCRIPT[1]
    assert content_of(chat(double, conversation(FIX_INSTR, 2))) == DONE_REPLY
    assert content_of(chat(double, conversation(FIX_INSTR, 7))) == DONE_REPLY
    assert double.requests_served("replay-strong") == 4
    assert double.requests_served("openai/replay-strong") == 4


def test_task_selected_by_instruction(double: ProviderDouble) -> None:
    assert content_of(chat(double, conversation(HELLO_INSTR, 0))) == HELLO_SCRIPT[0]
    # FIX_INSTR is a substring of FIX_INSTR_STRICT: the most specific match wins.
    assert content_of(chat(double, conversation(FIX_INSTR_STRICT, 0))) == STRICT_SCRIPT[0]
    # Content as a list of text parts; later user messages do not affect selection.
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": "Task Description:\n"},
        {"type": "text", "text": HELLO_INSTR},
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": parts},
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": FIX_INSTR},
    ]
    assert content_of(chat(double, messages)) == DONE_REPLY
    assert content_of(chat(double, messages[:1])) == HELLO_SCRIPT[0]


def test_response_shape_and_usage(double: ProviderDouble) -> None:
    messages = conversation(HELLO_INSTR, 0)
    resp = chat(double, messages, model="openai/replay-strong", v1=False, temperature=0.7)
    body = resp.json()
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert isinstance(body["created"], int)
    assert body["model"] == "openai/replay-strong"
    choice = body["choices"][0]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant"
    content = choice["message"]["content"]
    assert content == json.dumps(HELLO_SCRIPT[0])
    prompt_chars = sum(len(m["content"]) for m in messages)
    # OpenAI's usage also breaks the counts down; the first turn has nothing cached.
    assert body["usage"] == {
        "prompt_tokens": math.ceil(prompt_chars / 4),
        "completion_tokens": math.ceil(len(content) / 4),
        "total_tokens": math.ceil(prompt_chars / 4) + math.ceil(len(content) / 4),
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    assert body["provider"] == "amber-double"  # OpenRouter's field: who served the call
    # Deterministic: the same request gives the same content and usage.
    again = chat(double, messages).json()
    assert again["usage"] == body["usage"]
    assert again["choices"][0]["message"]["content"] == content


def test_unknown_model_is_404(double: ProviderDouble) -> None:
    resp = chat(double, conversation(HELLO_INSTR, 0), model="gpt-4o")
    assert resp.status_code == 404
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "model_not_found"
    assert "gpt-4o" in error["message"]
    assert double.requests_served("gpt-4o") == 0


def test_no_matching_task_is_400(double: ProviderDouble) -> None:
    for messages in (
        conversation("Write a haiku about terminals.", 0),
        conversation("An instruction with no script in the replay.", 0),  # known, unscripted
        [{"role": "system", "content": FIX_INSTR}],  # no user message at all
    ):
        resp = chat(double, messages)
        assert resp.status_code == 400
        error = resp.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert "No scripted Task" in error["message"]
    assert double.requests_served("replay-strong") == 0


def test_bad_requests(double: ProviderDouble) -> None:
    resp = HTTP.post(double.base_url + "/chat/completions", content=b"{not json")
    assert resp.status_code == 400 and "error" in resp.json()
    resp = HTTP.get(double.base_url + "/nowhere")
    assert resp.status_code == 404 and "error" in resp.json()


def test_streaming(double: ProviderDouble) -> None:
    # OpenAI sends usage in a stream only when stream_options.include_usage is set: then every
    # chunk has "usage": null except an extra last one, with empty choices, before [DONE].
    messages = conversation(FIX_INSTR, 1)
    for include_usage in (False, True):
        extra = {"stream_options": {"include_usage": True}} if include_usage else {}
        with HTTP.stream(
            "POST",
            double.base_url + "/chat/completions",
            timeout=5,
            json={"model": "replay-strong", "messages": messages, "stream": True, **extra},
        ) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["transfer-encoding"] == "chunked"
            lines = [line for line in r.iter_lines() if line]
        assert all(line.startswith("data: ") for line in lines)  # chat streams have no event: lines
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
        assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
        assert len({c["id"] for c in chunks}) == 1
        assert {c["provider"] for c in chunks} == {"amber-double"}
        if include_usage:
            usage_chunk, chunks = chunks[-1], chunks[:-1]
            assert usage_chunk["choices"] == []
            assert usage_chunk["usage"] == chat(double, messages).json()["usage"]
            assert all(c["usage"] is None for c in chunks)
        else:
            assert all("usage" not in c for c in chunks)
        assert len(chunks) >= 3
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        assert json.loads(text) == FIX_SCRIPT[1]
        assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_models_endpoint(double: ProviderDouble, tmp_path: Path) -> None:
    body = HTTP.get(double.base_url + "/models").json()
    assert body["object"] == "list"
    assert [(m["id"], m["object"]) for m in body["data"]] == [("replay-strong", "model")]


def test_litellm_client(double: ProviderDouble) -> None:
    import litellm

    messages = conversation(FIX_INSTR, 1)
    response = litellm.completion(
        model="openai/replay-strong", api_base=double.base_url, api_key="x", messages=messages
    )
    content = response.choices[0].message.content
    assert json.loads(content) == FIX_SCRIPT[1]
    expected = chat(double, messages).json()["usage"]
    assert response.usage.prompt_tokens == expected["prompt_tokens"]
    assert response.usage.completion_tokens == expected["completion_tokens"]
    assert response.usage.total_tokens == expected["total_tokens"]
    assert double.requests_served("replay-strong") == 2

    stream = litellm.completion(
        model="openai/replay-strong",
        api_base=double.base_url,
        api_key="x",
        messages=conversation(HELLO_INSTR, 0),
        stream=True,
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
    assert json.loads(text) == HELLO_SCRIPT[0]


def test_stop_frees_the_port(replay_path: Path) -> None:
    started = time.monotonic()
    double = ProviderDouble([load_replay(replay_path)], {"hello": HELLO_INSTR})
    double.start()
    port = int(double.base_url.rsplit(":", 1)[1].removesuffix("/v1"))
    assert double.base_url == f"http://127.0.0.1:{port}/v1"
    assert content_of(chat(double, conversation(HELLO_INSTR, 0))) == HELLO_SCRIPT[0]
    double.stop()
    assert time.monotonic() - started < 1.0
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    # The same port can be bound again, by a new double.
    with ProviderDouble([load_replay(replay_path)], {"hello": HELLO_INSTR}, port=port) as again:
        assert again.base_url == f"http://127.0.0.1:{port}/v1"
        assert content_of(chat(again, conversation(HELLO_INSTR, 0))) == HELLO_SCRIPT[0]
        # Served by the new double, not by the old one over a kept-alive connection: stop() closes those.
        assert again.requests_served("replay-strong") == 1
    double.stop()  # idempotent


def test_stop_ends_a_slow_call(replay_path: Path) -> None:
    double = ProviderDouble([load_replay(replay_path)], {"hello": HELLO_INSTR})
    double.start()
    double.inject(Fault("slow", delay_sec=30))
    errors: list[Exception] = []

    def call() -> None:
        try:
            chat(double, conversation(HELLO_INSTR, 0))
        except httpx.HTTPError as exc:
            errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.2)
    started = time.monotonic()
    double.stop()
    caller.join(timeout=5)
    assert time.monotonic() - started < 1.0 and not caller.is_alive()
    assert len(errors) == 1  # the call ends without a reply


# -- helpers for the other formats ---------------------------------------------------------------
ANTHROPIC = {"anthropic-version": "2023-06-01"}


def post(double: ProviderDouble, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    """POST to a path under the double's root, e.g. ``/v1/messages``."""
    return HTTP.post(double.anthropic_base_url + path, json=body, headers=headers)


def events_of(double: ProviderDouble, path: str, body: dict[str, Any], **headers: str) -> list[tuple[str, Any]]:
    """A whole SSE stream as (event name or "", data) pairs; checks each event line names its data."""
    url = double.anthropic_base_url + path
    with HTTP.stream("POST", url, json={**body, "stream": True}, headers=headers) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return parse_sse(r.iter_lines())


def parse_sse(lines: Iterator[str]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    name = ""
    for line in lines:
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            raw = line.removeprefix("data: ")
            data = raw if raw == "[DONE]" else json.loads(raw)
            if name:
                assert data["type"] == name  # the event line and the data agree
            out.append((name, data))
            name = ""
    return out


def tokens(*texts: str) -> int:
    return math.ceil(len("".join(texts)) / 4)


def messages_body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "replay-strong", "max_tokens": 1024, "messages": messages, **extra}


def anthropic_conversation(instruction: str, turns: int) -> list[dict[str, Any]]:
    return [m for m in conversation(instruction, turns) if m["role"] != "system"]


# -- Chat Completions: cached tokens and plain-text replies -----------------------------------
def test_chat_cached_tokens_from_the_second_turn(double: ProviderDouble) -> None:
    first = chat(double, conversation(FIX_INSTR, 0)).json()["usage"]
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    messages = conversation(FIX_INSTR, 2)
    usage = chat(double, messages).json()["usage"]
    # Everything but the last message was seen before: it counts as cached (and stays in prompt_tokens).
    assert usage["prompt_tokens"] == tokens(*(m["content"] for m in messages))
    assert usage["prompt_tokens_details"]["cached_tokens"] == tokens(*(m["content"] for m in messages[:-1]))
    assert 0 < usage["prompt_tokens_details"]["cached_tokens"] < usage["prompt_tokens"]
    assert chat(double, messages).json()["usage"] == usage  # deterministic


@pytest.fixture
def direct_double(tmp_path: Path) -> Iterator[ProviderDouble]:
    """A replay for a Direct Agent: plain-text answers, one of them with alternatives."""
    path = tmp_path / "direct.json"
    script = {"capital": ["Paris"], "colour": [{"alternatives": ["Blue", {"answer": "blue"}]}]}
    path.write_text(json.dumps({"model": "direct-replay", "tasks": script}))
    instructions = {"capital": "What is the capital of France?", "colour": "What colour is the sky?"}
    with ProviderDouble([load_replay(path)], instructions) as d:
        yield d


def test_plain_string_replies(direct_double: ProviderDouble) -> None:
    def ask(question: str) -> str:
        resp = chat(direct_double, [{"role": "user", "content": question}], model="direct-replay")
        assert resp.status_code == 200, resp.text
        return str(resp.json()["choices"][0]["message"]["content"])

    assert ask("What is the capital of France?") == "Paris"  # as it is, not JSON-quoted
    assert [ask("What colour is the sky?") for _ in range(3)] == ["Blue", '{"answer": "blue"}', "Blue"]
    body = {"model": "direct-replay", "max_tokens": 50, "messages": [{"role": "user", "content": "What is the "
            "capital of France?"}]}
    assert post(direct_double, "/v1/messages", body, **ANTHROPIC).json()["content"][0]["text"] == "Paris"
    assert direct_double.requests_served("direct-replay") == 5


def test_load_replay_accepts_strings_and_rejects_bad_alternatives(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"model": "m", "tasks": {"t": ["an answer", {"alternatives": ["a", {"b": 1}]}]}}))
    assert load_replay(good).scripts == {"t": ["an answer", {"alternatives": ["a", {"b": 1}]}]}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": "m", "tasks": {"t": [{"alternatives": []}]}}))
    with pytest.raises(ValueError, match="non-empty list"):
        load_replay(bad)
    bad.write_text(json.dumps({"model": "m", "tasks": {"t": [3]}}))
    with pytest.raises(ValueError, match="list of objects or strings"):
        load_replay(bad)


# -- OpenAI Responses ----------------------------------------------------------------------------
def test_responses_shape_and_usage(double: ProviderDouble) -> None:
    body = {"model": "replay-strong", "instructions": "Be terse.", "input": prompt(HELLO_INSTR)}
    resp = post(double, "/v1/responses", body)
    assert resp.status_code == 200, resp.text
    r = resp.json()
    assert r["id"].startswith("resp_") and r["object"] == "response" and r["status"] == "completed"
    assert r["model"] == "replay-strong" and r["instructions"] == "Be terse." and r["error"] is None
    [item] = r["output"]
    assert item["type"] == "message" and item["role"] == "assistant" and item["status"] == "completed"
    assert item["id"].startswith("msg_")
    [part] = item["content"]
    assert part["type"] == "output_text" and part["annotations"] == []
    assert json.loads(part["text"]) == HELLO_SCRIPT[0]
    inp, out = tokens("Be terse.", prompt(HELLO_INSTR)), tokens(part["text"])
    assert r["usage"] == {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": inp + out,
    }
    # Input as a list of items; the turn counts assistant items, earlier ones count as cached.
    items: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "input_text", "text": prompt(FIX_INSTR)}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "reply 0"}]},
        {"role": "user", "content": "terminal output 0"},
    ]
    r = post(double, "/responses", {"model": "replay-strong", "input": items}).json()  # no /v1 too
    assert json.loads(r["output"][0]["content"][0]["text"]) == FIX_SCRIPT[1]
    assert r["usage"]["input_tokens"] == tokens(prompt(FIX_INSTR), "reply 0", "terminal output 0")
    assert r["usage"]["input_tokens_details"]["cached_tokens"] == tokens(prompt(FIX_INSTR), "reply 0")


RESPONSES_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def test_responses_streaming(double: ProviderDouble) -> None:
    body = {"model": "replay-strong", "input": prompt(FIX_INSTR)}
    events = events_of(double, "/v1/responses", body)
    names = [n for n, _ in events]
    assert all(names) and "[DONE]" not in [d for _, d in events]  # named events, no [DONE]
    deltas = names.count("response.output_text.delta")
    assert deltas >= 2  # the text comes in pieces
    assert [n for i, n in enumerate(names) if i == 0 or n != names[i - 1]] == RESPONSES_EVENTS
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    data = dict(events)  # the last event of each name
    created = data["response.created"]["response"]
    assert created["status"] == "in_progress" and created["output"] == [] and created["usage"] is None
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    assert json.loads(text) == FIX_SCRIPT[0]
    assert data["response.output_text.done"]["text"] == text
    completed = data["response.completed"]["response"]
    assert completed["id"] == created["id"] and completed["status"] == "completed"
    assert completed["output"][0]["content"][0]["text"] == text
    assert completed["usage"] == post(double, "/v1/responses", body).json()["usage"]


# -- Anthropic Messages ----------------------------------------------------------------------------
def test_messages_shape_and_usage(double: ProviderDouble) -> None:
    messages = anthropic_conversation(HELLO_INSTR, 0)
    resp = post(double, "/v1/messages", messages_body(messages, system="Be terse."), **ANTHROPIC)
    assert resp.status_code == 200, resp.text
    m = resp.json()
    assert m["id"].startswith("msg_") and m["type"] == "message" and m["role"] == "assistant"
    assert m["model"] == "replay-strong"
    assert m["stop_reason"] == "end_turn" and m["stop_sequence"] is None
    [block] = m["content"]
    assert block["type"] == "text" and json.loads(block["text"]) == HELLO_SCRIPT[0]
    assert m["usage"] == {
        "input_tokens": tokens("Be terse.", prompt(HELLO_INSTR)),
        "cache_creation_input_tokens": 0,  # nothing marked cache_control: nothing cached
        "cache_read_input_tokens": 0,
        "output_tokens": tokens(block["text"]),
    }
    # Content as blocks, system as blocks, later turns: still no cache without cache_control.
    blocks = [{"role": "user", "content": [{"type": "text", "text": prompt(FIX_INSTR)}]},
              {"role": "assistant", "content": "reply 0"}, {"role": "user", "content": "out 0"}]
    m = post(double, "/messages", messages_body(blocks, system=[{"type": "text", "text": "Be terse."}]),
             **ANTHROPIC).json()
    assert json.loads(m["content"][0]["text"]) == FIX_SCRIPT[1]
    assert m["usage"]["input_tokens"] == tokens("Be terse.", prompt(FIX_INSTR), "reply 0", "out 0")
    assert m["usage"]["cache_read_input_tokens"] == 0


def test_messages_cache_control(double: ProviderDouble) -> None:
    system = [{"type": "text", "text": "Be terse. " * 20, "cache_control": {"type": "ephemeral"}}]
    first = anthropic_conversation(FIX_INSTR, 0)
    u = post(double, "/v1/messages", messages_body(first, system=system), **ANTHROPIC).json()["usage"]
    # Turn 1: the system prompt up to the breakpoint is written to the cache; the rest is input.
    assert u["cache_creation_input_tokens"] == tokens(system[0]["text"])
    assert u["cache_read_input_tokens"] == 0
    assert u["input_tokens"] == tokens(system[0]["text"], prompt(FIX_INSTR)) - u["cache_creation_input_tokens"]
    # Turn 3 with automatic caching (top-level cache_control: the breakpoint is the last block): what
    # was seen is read, the new tail is written, no input is left after the breakpoint.
    later = anthropic_conversation(FIX_INSTR, 2)
    body = messages_body(later, system=system, cache_control={"type": "ephemeral"})
    u = post(double, "/v1/messages", body, **ANTHROPIC).json()["usage"]
    texts = [system[0]["text"]] + [m["content"] for m in later]
    assert u["cache_read_input_tokens"] == tokens(*texts[:-1]) > 0
    assert u["cache_creation_input_tokens"] == tokens(*texts) - tokens(*texts[:-1])
    assert u["input_tokens"] == 0


MESSAGES_EVENTS = [
    "message_start",
    "content_block_start",
    "ping",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
]


def test_messages_streaming(double: ProviderDouble) -> None:
    body = messages_body(anthropic_conversation(FIX_INSTR, 1), system="Be terse.")
    events = events_of(double, "/v1/messages", body, **ANTHROPIC)
    names = [n for n, _ in events]
    assert names.count("content_block_delta") >= 2
    assert [n for i, n in enumerate(names) if i == 0 or n != names[i - 1]] == MESSAGES_EVENTS
    data = dict(events)
    start = data["message_start"]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    whole = post(double, "/v1/messages", body, **ANTHROPIC).json()
    # message_start carries the input usage; message_delta the stop reason and cumulative usage.
    for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        assert start["usage"][key] == whole["usage"][key]
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert json.loads(text) == FIX_SCRIPT[1]
    assert {d["delta"]["type"] for n, d in events if n == "content_block_delta"} == {"text_delta"}
    delta = data["message_delta"]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"] == whole["usage"]
    assert data["message_stop"] == {"type": "message_stop"}


def test_messages_request_errors(double: ProviderDouble) -> None:
    def error(resp: httpx.Response, status: int) -> dict[str, Any]:
        assert resp.status_code == status, resp.text
        body = resp.json()
        assert body["type"] == "error" and body["request_id"].startswith("req_")
        return dict(body["error"])

    messages = anthropic_conversation(HELLO_INSTR, 0)
    no_max = {"model": "replay-strong", "messages": messages}
    e = error(post(double, "/v1/messages", no_max, **ANTHROPIC), 400)
    assert e == {"type": "invalid_request_error", "message": "max_tokens: Field required"}
    e = error(post(double, "/v1/messages", messages_body(messages)), 400)  # no anthropic-version
    assert e["type"] == "invalid_request_error" and "anthropic-version" in e["message"]
    with_system = [{"role": "system", "content": "Be terse."}, *messages]
    e = error(post(double, "/v1/messages", messages_body(with_system), **ANTHROPIC), 400)
    assert "top-level `system`" in e["message"]
    e = error(post(double, "/v1/messages", {**messages_body(messages), "model": "claude-x"}, **ANTHROPIC), 404)
    assert e["type"] == "not_found_error"
    assert double.requests_served("replay-strong") == 0


@pytest.mark.parametrize("route", ["chat", "responses", "messages"])
def test_output_limit_cuts_the_reply(double: ProviderDouble, route: str) -> None:
    full = json.dumps(HELLO_SCRIPT[0])
    if route == "chat":
        r = chat(double, conversation(HELLO_INSTR, 0), max_completion_tokens=5).json()
        assert r["choices"][0]["finish_reason"] == "length"
        assert r["choices"][0]["message"]["content"] == full[:20] and r["usage"]["completion_tokens"] == 5
    elif route == "responses":
        body = {"model": "replay-strong", "input": prompt(HELLO_INSTR), "max_output_tokens": 5}
        r = post(double, "/v1/responses", body).json()
        assert r["status"] == "incomplete" and r["incomplete_details"] == {"reason": "max_output_tokens"}
        assert r["output"][0]["content"][0]["text"] == full[:20] and r["usage"]["output_tokens"] == 5
        names = [n for n, _ in events_of(double, "/v1/responses", body)]
        assert names[-1] == "response.incomplete"
    else:
        body = {**messages_body(anthropic_conversation(HELLO_INSTR, 0)), "max_tokens": 5}
        r = post(double, "/v1/messages", body, **ANTHROPIC).json()
        assert r["stop_reason"] == "max_tokens" and r["content"][0]["text"] == full[:20]
        assert r["usage"]["output_tokens"] == 5


# -- OpenRouter ------------------------------------------------------------------------------------
def test_openrouter_provider_field(replay_path: Path) -> None:
    with ProviderDouble([load_replay(replay_path)], {"hello": HELLO_INSTR}, served_by="DeepInfra") as d:
        messages = conversation(HELLO_INSTR, 0)
        assert chat(d, messages).json()["provider"] == "DeepInfra"
        pinned = {"order": ["together"], "allow_fallbacks": False, "quantizations": ["fp8"]}
        url = d.openrouter_base_url + "/chat/completions"
        body = {"model": "replay-strong", "messages": messages, "provider": pinned}
        assert HTTP.post(url, json=body).json()["provider"] == "together"
        with HTTP.stream("POST", url, json={**body, "stream": True}) as r:
            chunks = [data for _, data in parse_sse(r.iter_lines()) if data != "[DONE]"]
        assert chunks and {c["provider"] for c in chunks} == {"together"}
        # The pin is not kept: the reply names the Provider that really served it.
        d.inject(Fault("other_provider", served_by="Lambda"))
        assert HTTP.post(url, json=body).json()["provider"] == "Lambda"
        assert HTTP.post(url, json=body).json()["provider"] == "together"
        # The routing object is checked as OpenRouter checks it; its errors take OpenRouter's shape.
        bad = {**body, "provider": {"order": ["together"], "quantizations": ["fp7"]}}
        resp = HTTP.post(url, json=bad)
        assert resp.status_code == 400 and resp.json()["error"]["code"] == 400
        assert "quantizations" in resp.json()["error"]["message"]
        # What arrived is on record, so a test can check how a proxy rewrote the request.
        sent = [r for r in d.received if r.path == "/api/v1/chat/completions"]
        assert sent[0].body["provider"] == pinned and sent[0].body["model"] == "replay-strong"


# -- Auth ------------------------------------------------------------------------------------------
def test_api_key_required(replay_path: Path) -> None:
    key = "sk-test-0123456789"
    with ProviderDouble([load_replay(replay_path)], {"hello": HELLO_INSTR}, api_key=key) as d:
        messages = conversation(HELLO_INSTR, 0)
        url, body = d.base_url + "/chat/completions", {"model": "replay-strong", "messages": messages}
        missing = HTTP.post(url, json=body)
        assert missing.status_code == 401
        assert missing.json()["error"]["type"] == "invalid_request_error"
        wrong = HTTP.post(url, json=body, headers={"Authorization": "Bearer sk-wrong-key-1234"})
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
        assert HTTP.post(url, json=body, headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert HTTP.get(d.base_url + "/models").status_code == 401
        openrouter = HTTP.post(d.openrouter_base_url + "/chat/completions", json=body)
        assert openrouter.status_code == 401 and openrouter.json()["error"]["code"] == 401
        # Anthropic: x-api-key, not a Bearer token; and the anthropic-version header.
        mbody = messages_body(anthropic_conversation(HELLO_INSTR, 0))
        bearer = post(d, "/v1/messages", mbody, authorization=f"Bearer {key}", **ANTHROPIC)
        assert bearer.status_code == 401
        assert bearer.json()["error"] == {"type": "authentication_error", "message": "x-api-key header is required"}
        assert post(d, "/v1/messages", mbody, **{"x-api-key": "nope"}, **ANTHROPIC).status_code == 401
        assert post(d, "/v1/messages", mbody, **{"x-api-key": key}, **ANTHROPIC).status_code == 200
        assert d.requests_served("replay-strong") == 2
        keys = [(r.headers.get("authorization"), r.headers.get("x-api-key")) for r in d.received]
        assert (f"Bearer {key}", None) in keys and (None, key) in keys


# -- Faults ----------------------------------------------------------------------------------------
def test_rate_limit_fault(double: ProviderDouble) -> None:
    messages = conversation(HELLO_INSTR, 0)
    double.inject(Fault("rate_limit", count=2, retry_after=7))
    for _ in range(2):
        resp = chat(double, messages)
        assert resp.status_code == 429 and resp.headers["retry-after"] == "7"
        error = resp.json()["error"]
        assert error["code"] == "rate_limit_exceeded" and error["type"] == "requests"
    assert chat(double, messages).status_code == 200  # count used up
    double.inject(Fault("rate_limit"))
    resp = post(double, "/v1/messages", messages_body(anthropic_conversation(HELLO_INSTR, 0)), **ANTHROPIC)
    assert resp.status_code == 429 and resp.headers["retry-after"] == "1"
    assert resp.json()["error"]["type"] == "rate_limit_error"
    assert double.requests_served("replay-strong") == 1  # a refused call is not served


def test_fault_model_filter_and_injection_from_another_thread(double: ProviderDouble, tmp_path: Path) -> None:
    messages = conversation(HELLO_INSTR, 0)
    injector = threading.Thread(target=double.inject, args=(Fault("server_error", model="other-model"),))
    injector.start()
    injector.join()
    assert chat(double, messages).status_code == 200  # not for this model: waits
    double.inject(Fault("server_error", model="replay-strong"))
    resp = chat(double, messages, model="openai/replay-strong")
    assert resp.status_code == 500 and resp.json()["error"]["type"] == "server_error"
    assert chat(double, messages).status_code == 200
    double.clear_faults()


@pytest.mark.parametrize("route", ["chat", "responses", "messages", "openrouter"])
def test_server_error_and_overloaded_faults(double: ProviderDouble, route: str) -> None:
    def call() -> httpx.Response:
        if route == "messages":
            return post(double, "/v1/messages", messages_body(anthropic_conversation(HELLO_INSTR, 0)), **ANTHROPIC)
        if route == "responses":
            return post(double, "/v1/responses", {"model": "replay-strong", "input": prompt(HELLO_INSTR)})
        path = "/api/v1/chat/completions" if route == "openrouter" else "/v1/chat/completions"
        return post(double, path, {"model": "replay-strong", "messages": conversation(HELLO_INSTR, 0)})

    double.inject(Fault("server_error"))
    double.inject(Fault("overloaded"))
    error, overloaded = call(), call()
    assert error.status_code == 500
    if route == "messages":
        assert overloaded.status_code == 529
        assert error.json()["error"]["type"] == "api_error"
        assert overloaded.json()["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    elif route == "openrouter":
        assert overloaded.status_code == 503
        assert error.json()["error"]["code"] == 500 and overloaded.json()["error"]["code"] == 503
    else:
        assert overloaded.status_code == 503
        assert error.json()["error"]["type"] == overloaded.json()["error"]["type"] == "server_error"
    assert call().status_code == 200


def test_slow_fault(double: ProviderDouble) -> None:
    double.inject(Fault("slow", delay_sec=0.5))
    with pytest.raises(httpx.ReadTimeout):  # nothing at all arrives before the delay
        HTTP.post(double.base_url + "/chat/completions", timeout=0.2,
                  json={"model": "replay-strong", "messages": conversation(HELLO_INSTR, 0)})
    double.inject(Fault("slow", delay_sec=0.3))
    started = time.monotonic()
    assert content_of(chat(double, conversation(HELLO_INSTR, 0))) == HELLO_SCRIPT[0]
    assert time.monotonic() - started >= 0.3


CUT_CASES = {
    "chat": ("/v1/chat/completions", {"messages": conversation(FIX_INSTR, 0),
                                      "stream_options": {"include_usage": True}}, {}, "[DONE]"),
    "responses": ("/v1/responses", {"input": prompt(FIX_INSTR)}, {}, "response.completed"),
    "messages": ("/v1/messages", {"max_tokens": 100, "messages": anthropic_conversation(FIX_INSTR, 0)},
                 ANTHROPIC, "message_stop"),
}


@pytest.mark.parametrize("route", list(CUT_CASES))
def test_cut_stream_fault(double: ProviderDouble, route: str) -> None:
    path, body, headers, final = CUT_CASES[route]
    double.inject(Fault("cut_stream", after_events=2))
    lines: list[str] = []
    url = double.anthropic_base_url + path
    with HTTP.stream("POST", url, json={"model": "replay-strong", "stream": True, **body}, headers=headers) as r:
        assert r.status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):  # the chunked body never ends properly
            for line in r.iter_lines():
                lines.append(line)
    events = parse_sse(iter(lines))
    assert len(events) == 2
    assert final not in [name or data for name, data in events]
    # The next stream is whole, and ends with the final event.
    whole = events_of(double, path, {"model": "replay-strong", **body}, **headers)
    assert final in [name or data for name, data in whole]


def test_cut_non_streamed_reply(double: ProviderDouble) -> None:
    double.inject(Fault("cut_stream"))
    with pytest.raises(httpx.RemoteProtocolError):
        chat(double, conversation(HELLO_INSTR, 0))
    assert content_of(chat(double, conversation(HELLO_INSTR, 0))) == HELLO_SCRIPT[0]


def test_fault_kind_is_checked() -> None:
    with pytest.raises(ValueError, match="Unknown fault kind"):
        Fault("meltdown")  # type: ignore[arg-type]


# -- The wire ----------------------------------------------------------------------------------------
def test_connections_are_kept_alive(double: ProviderDouble) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", int(double.anthropic_base_url.rsplit(":", 1)[1]), timeout=5)
    body = json.dumps({"model": "replay-strong", "messages": conversation(HELLO_INSTR, 0)})
    sockets = []
    for _ in range(3):
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.version == 11
        assert int(resp.headers["Content-Length"]) == len(resp.read())
        sockets.append(conn.sock)
    # A stream (chunked) leaves the connection usable too.
    conn.request("POST", "/v1/chat/completions", json.dumps({**json.loads(body), "stream": True}))
    resp = conn.getresponse()
    assert resp.read().endswith(b"data: [DONE]\n\n")
    sockets.append(conn.sock)
    conn.request("GET", "/v1/models")
    assert conn.getresponse().status == 200
    sockets.append(conn.sock)
    assert sockets[0] is not None and all(s is sockets[0] for s in sockets)
    conn.close()


def test_received_records_requests(double: ProviderDouble) -> None:
    chat(double, conversation(HELLO_INSTR, 0), temperature=0.2)
    HTTP.post(double.base_url + "/chat/completions", content=b"{not json", headers={"X-Trace": "t1"})
    first, second = double.received[-2:]
    assert first.path == "/v1/chat/completions"
    assert first.body["temperature"] == 0.2 and first.body["model"] == "replay-strong"
    assert first.headers["content-type"] == "application/json"
    assert second.body == {} and second.headers["x-trace"] == "t1"  # names lower-cased


def test_litellm_anthropic(double: ProviderDouble) -> None:
    import litellm

    messages = conversation(FIX_INSTR, 1)  # with a system message: litellm moves it to `system`
    response = litellm.completion(
        model="anthropic/replay-strong", api_base=double.anthropic_base_url, api_key="x", messages=messages
    )
    assert json.loads(response.choices[0].message.content) == FIX_SCRIPT[1]
    assert response.choices[0].finish_reason == "stop"
    arrived = double.received[-1]
    assert arrived.path == "/v1/messages" and arrived.body["system"]
    assert "anthropic-version" in arrived.headers and arrived.headers["x-api-key"] == "x"
    assert response.usage.prompt_tokens == tokens(*(m["content"] for m in messages))
    stream = litellm.completion(
        model="anthropic/replay-strong", api_base=double.anthropic_base_url, api_key="x",
        messages=conversation(HELLO_INSTR, 0), stream=True,
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert json.loads(text) == HELLO_SCRIPT[0]


# litellm re-serialises a streamed Response's usage through its chat Usage model and warns about it.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_litellm_responses(double: ProviderDouble) -> None:
    import litellm

    response = litellm.responses(
        model="openai/replay-strong", api_base=double.base_url, api_key="x",
        input=prompt(HELLO_INSTR), instructions="Be terse.",
    )
    assert json.loads(response.output[0].content[0].text) == HELLO_SCRIPT[0]
    assert response.usage.input_tokens == tokens("Be terse.", prompt(HELLO_INSTR))
    assert response.usage.input_tokens_details.cached_tokens == 0
    assert double.received[-1].path == "/v1/responses"
    stream = litellm.responses(
        model="openai/replay-strong", api_base=double.base_url, api_key="x", input=prompt(HELLO_INSTR), stream=True
    )
    assert [str(getattr(e.type, "value", e.type)) for e in stream][-1] == "response.completed"


# ---- tool-calling Agents: the same script as shell tool calls, in each wire's own shape ------------------------

def body_of(resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 200, resp.text
    return resp.json()


BASH_CHAT = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
SHELL_RESPONSES = [{"type": "function", "name": "shell", "parameters": {
    "type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}}}]
BASH_MESSAGES = [{"name": "Bash", "description": "Run a command", "input_schema": {
    "type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}}}}]


def test_chat_answers_a_script_step_with_a_call_of_the_offered_shell_tool(double: ProviderDouble) -> None:
    first = body_of(chat(double, [{"role": "user", "content": prompt(FIX_INSTR)}], tools=BASH_CHAT))
    choice = first["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"command": "ls"}
    # The tool's result comes back; the next step of the script is the next call.
    history = [{"role": "user", "content": prompt(FIX_INSTR)}, choice["message"],
               {"role": "tool", "tool_call_id": call["id"], "content": "calc.py test_calc.py"}]
    second = body_of(chat(double, history, tools=BASH_CHAT))["choices"][0]["message"]
    command = json.loads(second["tool_calls"][0]["function"]["arguments"])["command"]
    assert command == "sed -i 's/a - b/a + b/' calc.py"
    history += [second, {"role": "tool", "tool_call_id": second["tool_calls"][0]["id"], "content": ""}]
    done = body_of(chat(double, history, tools=BASH_CHAT))["choices"][0]
    assert done["finish_reason"] == "stop" and "tool_calls" not in done["message"]
    assert done["message"]["content"] == DONE_REPLY["analysis"]  # past the script: plain text ends the run


def test_a_streamed_chat_tool_call_reads_back_through_the_openai_client(double: ProviderDouble) -> None:
    import openai

    client = openai.OpenAI(base_url=double.base_url, api_key="unused", max_retries=0)
    stream = client.chat.completions.create(model="replay-strong", stream=True, tools=BASH_CHAT,
                                            messages=[{"role": "user", "content": prompt(HELLO_INSTR)}])
    name, arguments, finish = "", "", None
    for chunk in stream:
        for delta_call in chunk.choices[0].delta.tool_calls or []:
            name += delta_call.function.name or ""
            arguments += delta_call.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert (name, json.loads(arguments), finish) == ("bash", {"command": "echo hello > /app/hello.txt"}, "tool_calls")


def test_responses_answer_with_a_function_call_whose_argv_is_the_command(double: ProviderDouble) -> None:
    import openai

    body = {"model": "replay-strong", "input": prompt(FIX_INSTR), "tools": SHELL_RESPONSES}
    whole = HTTP.post(double.base_url + "/responses", json=body).json()
    (item,) = whole["output"]
    assert item["type"] == "function_call" and item["name"] == "shell" and item["call_id"]
    assert json.loads(item["arguments"]) == {"command": ["bash", "-lc", "ls"]}
    client = openai.OpenAI(base_url=double.base_url, api_key="unused", max_retries=0)
    with client.responses.stream(model="replay-strong", input=prompt(FIX_INSTR), tools=SHELL_RESPONSES) as stream:
        final = stream.get_final_response()
    (streamed,) = final.output
    assert streamed.type == "function_call" and json.loads(streamed.arguments) == {"command": ["bash", "-lc", "ls"]}
    # A function call in the input is the assistant's turn: the next step follows.
    second = HTTP.post(double.base_url + "/responses", json={**body, "input": [
        {"role": "user", "content": prompt(FIX_INSTR)}, item,
        {"type": "function_call_output", "call_id": item["call_id"], "output": "calc.py"}]}).json()
    assert json.loads(second["output"][0]["arguments"])["command"][2] == "sed -i 's/a - b/a + b/' calc.py"


def test_messages_answer_with_tool_use_streamed_or_not(double: ProviderDouble) -> None:
    headers = {"anthropic-version": "2023-06-01"}
    body = {"model": "replay-strong", "max_tokens": 1000, "tools": BASH_MESSAGES,
            "messages": [{"role": "user", "content": prompt(HELLO_INSTR)}]}
    whole = HTTP.post(double.base_url + "/messages", json=body, headers=headers).json()
    assert whole["stop_reason"] == "tool_use"
    (block,) = whole["content"]
    assert block["type"] == "tool_use" and block["name"] == "Bash" and block["id"].startswith("toolu_")
    assert block["input"] == {"command": "echo hello > /app/hello.txt"}
    streamed = HTTP.post(double.base_url + "/messages", json={**body, "stream": True}, headers=headers)
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
    start = next(e for e in events if e["type"] == "content_block_start")["content_block"]
    partial = "".join(e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta")
    stop = next(e for e in events if e["type"] == "message_delta")["delta"]["stop_reason"]
    assert (start["type"], start["name"], start["input"]) == ("tool_use", "Bash", {})
    assert json.loads(partial) == {"command": "echo hello > /app/hello.txt"} and stop == "tool_use"


def test_an_agent_told_to_finish_by_a_command_gets_that_command_at_the_end(double: ProviderDouble) -> None:
    system = "Finish your work by issuing the following command: `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`."
    messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt(FIX_INSTR_STRICT)}]
    message = body_of(chat(double, messages, tools=BASH_CHAT))["choices"][0]["message"]
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {
        "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}
