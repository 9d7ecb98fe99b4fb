"""Provider double: a scripted, OpenAI-compatible model server on loopback.

Why it exists: Amber's tests and demo must run an agent (Harbor's Terminus-2,
which calls models through litellm) end to end without a real Provider, an API
key or network access. This module is a real HTTP server speaking the OpenAI
chat-completions wire format that answers from *replay* files, scripted replies
per Task. A Model Configuration pointing at it is a "replay" configuration and
must be labelled as such: its scores measure the script, not a model.

Task = the one whose stripped instruction occurs in the first user message; turn =
the number of assistant messages so far; past the end of a script it answers "done"
(Terminus-2 needs ``task_complete`` twice to finish). A scripted reply of the form
``{"alternatives": [...]}`` answers the k-th call of that turn with the k-th
alternative (cycling), which is how a replay judge gives several samples.

Server choice: ``http.server.ThreadingHTTPServer`` from the standard library
rather than uvicorn. The socket is bound in the constructor, so the port is
known before the serving thread starts; start-up is immediate; ``shutdown()``
plus ``server_close()`` stops it synchronously and frees the port; and there is
no event loop to share with callers (litellm, pytest, Dagster) that run their own.
Throughput is irrelevant for a test double.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DONE_REPLY: dict[str, Any] = {
    "analysis": "The task is done.",
    "plan": "Confirm completion.",
    "commands": [],
    "task_complete": True,
}


@dataclass(frozen=True)
class Replay:
    """Scripted replies of one replay model: ``scripts[task_name][turn]``."""

    model: str
    description: str
    scripts: dict[str, list[dict[str, Any]]]


def load_replay(path: Path) -> Replay:
    """Read and validate a replay JSON file."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("model"), str):
        raise ValueError(f"{path}: replay needs a string 'model'")
    tasks = data.get("tasks")
    if not isinstance(tasks, dict):
        raise ValueError(f"{path}: replay needs an object 'tasks'")
    for task, script in tasks.items():
        if not isinstance(script, list) or not all(isinstance(r, dict) for r in script):
            raise ValueError(f"{path}: script for task {task!r} must be a list of objects")
    return Replay(data["model"], str(data.get("description", "")), tasks)


def _text(content: Any) -> str:
    """Text of an OpenAI message content: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


class _Error(Exception):
    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


class ProviderDouble:
    """Scripted OpenAI-compatible server in a background thread; a context manager."""

    def __init__(
        self,
        replays: list[Replay],
        instructions: dict[str, str],
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._host, self._replays = host, {r.model: r for r in replays}
        self._instructions = {t: i.strip() for t, i in instructions.items() if i.strip()}
        self._served: Counter[str] = Counter()
        self._calls: Counter[tuple[str, str, int]] = Counter()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                double._handle(self)

            do_POST = do_GET  # noqa: N815

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                log.debug("provider double: " + format, *args)

        self._server = ThreadingHTTPServer((host, port), Handler)

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self._server.server_port}/v1"

    def requests_served(self, model: str) -> int:
        with self._lock:
            return self._served[model.removeprefix("openai/")]

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> ProviderDouble:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- request handling -------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        path, method = h.path.split("?", 1)[0].rstrip("/"), h.command
        try:
            if method == "GET" and path in ("/v1/models", "/models"):
                owner = {"object": "model", "created": 0, "owned_by": "amber-replay"}
                data = [{"id": m, **owner} for m in self._replays]
                _send(h, 200, {"object": "list", "data": data})
            elif method == "POST" and path in ("/v1/chat/completions", "/chat/completions"):
                raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw or b"null")
                except json.JSONDecodeError as exc:
                    raise _Error(400, f"Request body is not JSON: {exc}", "invalid_json") from exc
                if not isinstance(body, dict):
                    raise _Error(400, "Request body must be a JSON object", "invalid_json")
                self._complete(h, body)
            else:
                raise _Error(404, f"Unknown endpoint {method} {path}", "unknown_url")
        except _Error as e:
            error = {"message": str(e), "type": "invalid_request_error", "code": e.code}
            _send(h, e.status, {"error": error})

    def _complete(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        requested = str(body.get("model", ""))
        replay = self._replays.get(requested.removeprefix("openai/"))
        if replay is None:
            raise _Error(404, f"The model '{requested}' does not exist", "model_not_found")
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
        first, instrs = (users[0] if users else ""), self._instructions
        matches = [t for t, i in instrs.items() if t in replay.scripts and i in first]
        if not matches:
            msg = f"No scripted Task of replay '{replay.model}' matches the first user message"
            raise _Error(400, msg, "no_scripted_task")
        task = max(matches, key=lambda t: len(instrs[t]))  # most specific
        script = replay.scripts[task]
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        reply = script[turn] if turn < len(script) else DONE_REPLY
        if "alternatives" in reply:  # the k-th call of this turn gets the k-th alternative, cycling
            with self._lock:
                k = self._calls[(replay.model, task, turn)]
                self._calls[(replay.model, task, turn)] += 1
            reply = reply["alternatives"][k % len(reply["alternatives"])]
        content = json.dumps(reply)
        prompt = _tokens("".join(_text(m.get("content")) for m in messages))
        completion = _tokens(content)
        usage = dict(prompt_tokens=prompt, completion_tokens=completion)
        usage["total_tokens"] = prompt + completion
        with self._lock:
            self._served[replay.model] += 1
        head = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time())}
        head |= {"model": requested, "system_fingerprint": "amber-replay"}
        if not body.get("stream"):
            message = {"role": "assistant", "content": content}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            reply = {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
            return _send(h, 200, reply)
        # OpenAI streaming: a role chunk, content chunks, a final chunk with finish_reason and
        # usage, then [DONE]. Sent as one SSE body: a replay has nothing to wait for.
        chunk = {**head, "object": "chat.completion.chunk"}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": content[i : i + 64]} for i in range(0, len(content), 64)]
        events = [
            {**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
        ]
        last = {"index": 0, "delta": {}, "finish_reason": "stop"}
        events.append({**chunk, "choices": [last], "usage": usage})
        sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        _send(h, 200, sse.encode(), "text/event-stream")


def _send(
    h: BaseHTTPRequestHandler, status: int, body: Any, ctype: str = "application/json"
) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve replay files as an OpenAI-compatible API.")
    parser.add_argument("--replay", type=Path, nargs="+", required=True, help="replay JSON files")
    parser.add_argument("--tasks", type=Path, required=True, help="dir of <task>/instruction.md")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    instructions = {
        d.name: (d / "instruction.md").read_text(encoding="utf-8")
        for d in sorted(args.tasks.iterdir())
        if (d / "instruction.md").is_file()
    }
    replays = [load_replay(p) for p in args.replay]
    with ProviderDouble(replays, instructions, args.host, args.port) as double:
        models = ", ".join(r.model for r in replays)
        print(f"replay provider double: {models} at {double.base_url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
