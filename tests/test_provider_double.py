"""Tests of the provider double: a real server on loopback, real HTTP clients, no mocks."""

from __future__ import annotations

import json
import math
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from amber_pipeline.models.provider_double import (  # noqa: E402
    DONE_REPLY,
    ProviderDouble,
    Replay,
    load_replay,
)

# One client for the module: creating one per request costs ~50 ms. No proxies for loopback.
HTTP = httpx.Client(timeout=5, trust_env=False)

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
    assert body["usage"] == {
        "prompt_tokens": math.ceil(prompt_chars / 4),
        "completion_tokens": math.ceil(len(content) / 4),
        "total_tokens": math.ceil(prompt_chars / 4) + math.ceil(len(content) / 4),
    }
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
    messages = conversation(FIX_INSTR, 1)
    with HTTP.stream(
        "POST",
        double.base_url + "/chat/completions",
        timeout=5,
        json={"model": "replay-strong", "messages": messages, "stream": True},
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert len(chunks) >= 3
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert json.loads(text) == FIX_SCRIPT[1]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    final = chunks[-1]
    assert final["choices"][0]["finish_reason"] == "stop"
    assert final["usage"] == chat(double, messages).json()["usage"]


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
    double.stop()  # idempotent
