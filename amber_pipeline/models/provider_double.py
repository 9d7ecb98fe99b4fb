"""Provider double: scripted model servers on loopback that speak the Providers' own wire formats.

Why it exists: Amber's tests and demo must run Agents (Harbor's Terminus-2, a
"Direct Agent") and the model proxy end to end without a real Provider, an API
key or network access. This module is a real HTTP server that answers from
*replay* files, scripted replies per Task. A Model Configuration pointing at it
is a "replay" configuration and must be labelled as such: its scores measure
the script, not a model.

What it speaks, each as the Provider's API reference describes it, so that code
that passes against the double passes against the real API:

- ``POST /v1/chat/completions`` (OpenAI, OpenRouter, OpenAI-compatible): usage
  with ``prompt_tokens_details.cached_tokens``; a stream carries usage only in
  an extra last chunk (empty ``choices``) when ``stream_options.include_usage``
  is set; every body and chunk names the upstream in a top-level ``provider``,
  as OpenRouter's do. Under ``/api/v1`` (OpenRouter's own prefix, see
  ``openrouter_base_url``) errors take OpenRouter's shape
  (``{"error": {"code": <status>, "message"}}``), elsewhere OpenAI's.
- ``POST /v1/responses`` (OpenAI Responses): ``input`` a string or a list of
  items, optional ``instructions``; streamed as named events
  ``response.created`` ... ``response.completed`` (no ``[DONE]``).
- ``POST /v1/messages`` (Anthropic Messages; its clients take the root,
  ``anthropic_base_url``): top-level ``system``, ``max_tokens`` and the
  ``anthropic-version`` header required, as Anthropic requires them; usage
  with ``input_tokens`` excluding cache reads and writes; streamed as
  ``message_start`` ... ``message_stop``. Errors in Anthropic's shape.
- ``GET /v1/models``.
Every route also answers without the ``/v1`` prefix, as clients differ on it.
With ``api_key`` set, calls without it get the Provider's 401.

The script. Task = the one whose stripped instruction occurs in the first user
message that contains one (the most specific if several do: Agents may send
context before it); turn = the number of assistant messages so far; past the
end of a script it answers ``DONE_REPLY``
(Terminus-2 needs ``task_complete`` twice to finish). A scripted reply that is
an object is sent as its JSON text (Terminus-2 parses it); a string is sent as
it is (a Direct Agent's answer). ``{"alternatives": [...]}`` answers the k-th
call of that turn with the k-th alternative (cycling): how a replay judge gives
several samples.

Tool-calling Agents (Claude Code, Codex CLI, pi, mini-swe-agent) get the same
scripts as tool calls: when a request offers a shell tool (``Bash``, ``bash``,
``shell``, ``exec_command``, found by name in ``tools``, its command argument
by the tool's own schema), a scripted reply with ``commands`` is answered with
one call of that tool running the commands' keystrokes, and a reply without
commands with its ``analysis`` as plain text, which ends such an Agent's run
(or, when the prompt names mini-swe-agent's ``echo
COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``, with a tool call of that, its way to
finish). Each tool call counts as a turn. So one replay script drives every
Agent through the same steps.

Tokens are ``ceil(chars / 4)``: deterministic, and close enough for cost
arithmetic. Cached input is modelled without state, so the same request always
gets the same usage: from the second turn on, every message but the last is a
prefix the Provider has seen, so it counts as cached (OpenAI, OpenRouter).
Anthropic caches only what the request marks with ``cache_control``: the prefix
up to the last breakpoint is written (``cache_creation_input_tokens``) except
the part already seen, which is read (``cache_read_input_tokens``);
``input_tokens`` is what follows the breakpoint. Output beyond the request's
limit (``max_tokens`` and the like) is cut and reported as such.

Failure on demand: ``inject(Fault(...))`` from any thread makes the next calls
fail the way Providers fail (429 with ``retry-after``, 500, overloaded, slow,
a stream cut mid-way, another upstream than the pinned one). ``received``
records every request as it arrived, so a test can check what a proxy sent.

Server choice: ``http.server.ThreadingHTTPServer`` from the standard library
rather than uvicorn. The socket is bound in the constructor, so the port is
known before the serving thread starts; start-up is immediate; ``stop()`` ends
the serving thread, closes open connections and frees the port synchronously;
and there is no event loop to share with callers (litellm, pytest, Dagster)
that run their own. HTTP/1.1 with exact ``Content-Length`` and Nagle off lets a
client reuse connections, which is what makes several hundred small calls a
second possible. Streams use chunked transfer and are written event by event,
so a slow or cut stream looks to a client exactly as it does from a Provider
(a cut leaves the chunked body unterminated).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import socket
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal, get_args

log = logging.getLogger(__name__)

DONE_REPLY: dict[str, Any] = {
    "analysis": "The task is done.",
    "plan": "Confirm completion.",
    "commands": [],
    "task_complete": True,
}

ScriptedReply = dict[str, Any] | str
FaultKind = Literal["rate_limit", "server_error", "overloaded", "slow", "cut_stream", "other_provider"]
RECEIVED_KEPT = 1000  # the most recent requests ``received`` keeps
_CHUNK = 64  # characters of text per streamed delta
_QUANTIZATIONS = {"int4", "int8", "fp4", "fp6", "fp8", "fp16", "bf16", "fp32", "unknown"}


@dataclass(frozen=True)
class Replay:
    """Scripted replies of one replay model: ``scripts[task_name][turn]``."""

    model: str
    description: str
    scripts: dict[str, list[ScriptedReply]]


@dataclass(frozen=True)
class Fault:
    """A failure the double plays on its next matching calls; give it to ``ProviderDouble.inject``.

    kind:
        ``rate_limit``: 429 with a ``retry-after: <retry_after>`` header and the Provider's
        rate-limit error body. ``server_error``: 500. ``overloaded``: 529 ``overloaded_error`` on
        the Anthropic route, 503 on the OpenAI and OpenRouter routes. These three send no reply:
        the call is not counted as served and does not use up a scripted alternative.
        ``slow``: the normal reply, but nothing is sent for ``delay_sec`` seconds first.
        ``cut_stream``: a stream sends its first ``after_events`` events, then the connection is
        closed without the final events (and without ending the chunked body); a non-streamed
        reply sends half its body, then closes.
        ``other_provider``: a chat reply says (top-level ``provider``) that ``served_by`` served it,
        not the pinned upstream: an OpenRouter fallback, or a pin not kept.
    count: how many of the following matching calls it hits (default 1).
    model: hit only calls for this model (as requested, or the replay model's name); None: any.

    Faults wait in the order injected; each call takes the first one that matches it.
    """

    kind: FaultKind
    count: int = 1
    model: str | None = None
    delay_sec: float = 1.0
    retry_after: int = 1
    after_events: int = 2
    served_by: str = "other-provider"

    def __post_init__(self) -> None:
        if self.kind not in get_args(FaultKind):
            raise ValueError(f"Unknown fault kind {self.kind!r}: one of {', '.join(get_args(FaultKind))}")
        if self.count < 1:
            raise ValueError("A fault's count must be at least 1")


@dataclass(frozen=True)
class Received:
    """One request as it arrived: its path, its headers (names lower-cased) and its JSON body."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def load_replay(path: Path) -> Replay:
    """Read and validate a replay JSON file."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("model"), str):
        raise ValueError(f"{path}: replay needs a string 'model'")
    tasks = data.get("tasks")
    if not isinstance(tasks, dict):
        raise ValueError(f"{path}: replay needs an object 'tasks'")
    for task, script in tasks.items():
        if not isinstance(script, list) or not all(isinstance(r, dict | str) for r in script):
            raise ValueError(f"{path}: script for task {task!r} must be a list of objects or strings")
        for reply in script:
            alternatives = reply["alternatives"] if isinstance(reply, dict) and "alternatives" in reply else [""]
            if not isinstance(alternatives, list) or not alternatives:
                raise ValueError(f"{path}: alternatives of task {task!r} must be a non-empty list")
            if not all(isinstance(a, dict | str) for a in alternatives):
                raise ValueError(f"{path}: alternatives of task {task!r} must be objects or strings")
    return Replay(data["model"], str(data.get("description", "")), tasks)


def _text(content: Any) -> str:
    """Text of a message content: a string, or a list of parts/blocks with text (or nested content)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_part_text(p) for p in content)
    return ""


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        return ""
    if isinstance(part.get("text"), str):
        return str(part["text"])
    return _text(part.get("content"))


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _has_cache_control(content: Any) -> bool:
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("cache_control") for b in content)


def _new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


class _Error(Exception):
    """A failed call; rendered in the shape of the route's Provider.

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


_OPENAI_ERROR_TYPE = {"rate_limit": "requests", "server": "server_error", "overloaded": "server_error"}
_ANTHROPIC_ERROR_TYPE = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "not_found": "not_found_error",
    "rate_limit": "rate_limit_error",
    "server": "api_error",
    "overloaded": "overloaded_error",
}
Flavour = Literal["openai", "openrouter", "anthropic"]  # whose error shape and auth a route has
Route = Literal["chat", "responses", "messages"]


def _error_body(flavour: Flavour, e: _Error) -> dict[str, Any]:
    if flavour == "anthropic":
        error = {"type": _ANTHROPIC_ERROR_TYPE[e.kind], "message": str(e)}
        return {"type": "error", "error": error, "request_id": _new_id("req_")}
    if flavour == "openrouter":
        body: dict[str, Any] = {"code": e.status, "message": str(e)}
        if e.upstream:
            body["metadata"] = {"provider_name": e.upstream, "raw": str(e)}
        return {"error": body}
    kind = _OPENAI_ERROR_TYPE.get(e.kind, "invalid_request_error")
    return {"error": {"message": str(e), "type": kind, "param": e.param, "code": e.code}}


@dataclass
class _Call:
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
    shell: _ShellTool | None = None  # the request's shell tool, when it offers one


@dataclass(frozen=True)
class _ShellTool:
    """A tool that runs a shell command, as the request declares it."""

    name: str
    argument: str  # the property that takes the command
    argv: bool  # the command is an argv array (``["bash", "-lc", ...]``), not a string

    def call(self, command: str) -> _ToolCall:
        value: Any = ["bash", "-lc", command] if self.argv else command
        return _ToolCall(self.name, json.dumps({self.argument: value}), _new_id("call_"))


@dataclass(frozen=True)
class _ToolCall:
    name: str
    arguments: str  # JSON text
    id: str


_SHELL_TOOLS = ("bash", "shell", "exec_command", "run_shell_command", "terminal")
_FINISH_COMMAND = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # how mini-swe-agent's prompt says to finish


def _shell_tool(tools: Any) -> _ShellTool | None:
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
                return _ShellTool(name, argument, (props[argument] or {}).get("type") == "array")
    return None


class _Server(ThreadingHTTPServer):
    """Keeps the open connections, so ``stop()`` can close kept-alive ones too."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            open_ = list(self.connections)
        for conn in open_:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class ProviderDouble:
    """Scripted server for the OpenAI, OpenRouter and Anthropic wire formats; a context manager.

    served_by: the upstream Provider the double says served a chat call (OpenRouter's
    ``provider``), unless the request routes it: then the first of ``provider.order`` (or
    ``provider.only``) serves it, as the first choice does at OpenRouter when it is up, whether
    ``allow_fallbacks`` is false (pinned) or not.
    api_key: when set, every call must carry it (``Authorization: Bearer`` or, on the
    Anthropic route, ``x-api-key``), else 401.
    """

    def __init__(
        self,
        replays: list[Replay],
        instructions: dict[str, str],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        served_by: str = "amber-double",
        api_key: str | None = None,
    ) -> None:
        self._host, self._replays = host, {r.model: r for r in replays}
        self._instructions = {t: i.strip() for t, i in instructions.items() if i.strip()}
        self._served_by, self._api_key = served_by, api_key
        self._served: Counter[str] = Counter()
        self._calls: Counter[tuple[str, str, int]] = Counter()
        self._faults: list[list[Any]] = []  # [fault, calls left]
        self._received: deque[Received] = deque(maxlen=RECEIVED_KEPT)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_GET(self) -> None:  # noqa: N802
                double._handle(self)

            do_POST = do_GET  # noqa: N815

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                log.debug("provider double: " + format, *args)

        self._server = _Server((host, port), Handler)

    # -- public API ---------------------------------------------------------
    @property
    def base_url(self) -> str:
        """OpenAI-style base URL (ends in ``/v1``)."""
        return f"http://{self._host}:{self._server.server_port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Anthropic-style base URL (the root: Anthropic's clients add ``/v1/messages``)."""
        return f"http://{self._host}:{self._server.server_port}"

    @property
    def openrouter_base_url(self) -> str:
        """OpenRouter-style base URL (``/api/v1``): chat calls here get OpenRouter's error shape."""
        return f"http://{self._host}:{self._server.server_port}/api/v1"

    def requests_served(self, model: str) -> int:
        with self._lock:
            return self._served[self._model_name(model) or model]

    def inject(self, fault: Fault) -> None:
        """Queue a fault for the next matching calls (thread-safe)."""
        with self._lock:
            self._faults.append([fault, fault.count])

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def received(self) -> list[Received]:
        """The requests that arrived, oldest first (the most recent ``RECEIVED_KEPT``)."""
        with self._lock:
            return list(self._received)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
        self._server.close_connections()

    def __enter__(self) -> ProviderDouble:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- request handling -------------------------------------------------
    def _model_name(self, requested: str) -> str | None:
        """The replay model a requested name means: itself, or its last path part (``openai/x``)."""
        for name in (requested, requested.rsplit("/", 1)[-1]):
            if name in self._replays:
                return name
        return None

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        path, method = h.path.split("?", 1)[0].rstrip("/"), h.command
        headers = {k.lower(): v for k, v in h.headers.items()}
        raw = _read_body(h) if method == "POST" else b""
        body: Any = None
        invalid: str | None = None
        if method == "POST":
            try:
                body = json.loads(raw or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                invalid = f"We could not parse the JSON body of your request: {exc}"
        with self._lock:
            self._received.append(Received(path, headers, body if isinstance(body, dict) else {}))
        route, flavour = _route(method, path, headers)
        try:
            self._check_auth(flavour, headers)
            if route == "models":
                return self._models(h, flavour)
            if route is None:
                raise _Error(404, f"Unknown endpoint {method} {path}", "not_found", "unknown_url")
            if invalid is not None or not isinstance(body, dict):
                raise _Error(400, invalid or "The request body must be a JSON object", code="invalid_json")
            self._serve(h, self._read_call(route, flavour, body))
            return
        except _Error as e:
            error = e
        except OSError as exc:  # the client went away mid-reply
            log.debug("provider double: connection lost: %s", exc)
            h.close_connection = True
            return
        except Exception as exc:  # a bug here: say so, as a Provider's 500 would
            log.exception("provider double: failed on %s %s", method, path)
            error = _Error(500, f"Provider double failed: {exc}", "server")
            h.close_connection = True
        ids = {"request-id" if flavour == "anthropic" else "x-request-id": _new_id("req_")}
        try:
            _send(h, error.status, _error_body(flavour, error), headers={**ids, **error.headers})
        except OSError:
            h.close_connection = True

    def _check_auth(self, flavour: Flavour, headers: dict[str, str]) -> None:
        key = self._api_key
        if flavour == "anthropic":
            if key is not None and headers.get("x-api-key") != key:
                message = "invalid x-api-key" if "x-api-key" in headers else "x-api-key header is required"
                raise _Error(401, message, "authentication")
            if "anthropic-version" not in headers:
                raise _Error(400, "anthropic-version: header is required")
            return
        if key is None or headers.get("authorization") == f"Bearer {key}":
            return
        if flavour == "openrouter":
            raise _Error(401, "No auth credentials found", "authentication")
        if "authorization" not in headers:
            message = (
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
            )
            raise _Error(401, message, "authentication")
        given = headers["authorization"].removeprefix("Bearer ")
        shown = given[:3] + "*" * max(0, len(given) - 7) + given[-4:] if len(given) > 7 else "****"
        raise _Error(401, f"Incorrect API key provided: {shown}.", "authentication", "invalid_api_key")

    def _models(self, h: BaseHTTPRequestHandler, flavour: Flavour) -> None:
        names = list(self._replays)
        if flavour == "anthropic":
            data = [
                {"type": "model", "id": m, "display_name": m, "created_at": "1970-01-01T00:00:00Z"}
                for m in names
            ]
            first, last = (names[0], names[-1]) if names else (None, None)
            _send(h, 200, {"data": data, "has_more": False, "first_id": first, "last_id": last})
            return
        owner = {"object": "model", "created": 0, "owned_by": "amber-replay"}
        _send(h, 200, {"object": "list", "data": [{"id": m, **owner} for m in names]})

    def _read_call(self, route: Route, flavour: Flavour, body: dict[str, Any]) -> _Call:
        requested = body.get("model")
        if not isinstance(requested, str) or not requested:
            raise _Error(400, "you must provide a model parameter", param="model")
        roles: list[str] = []
        segments: list[str] = []
        breakpoint_: int | None = None
        if route == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _Error(400, "'messages' must be a non-empty array", param="messages")
            _check_provider_field(body.get("provider"))
            for m in messages:
                if isinstance(m, dict):
                    roles.append(str(m.get("role")))
                    segments.append(_text(m.get("content")))
            limit = body.get("max_completion_tokens") or body.get("max_tokens")
        elif route == "responses":
            if body.get("previous_response_id"):
                message = f"Previous response with id '{body['previous_response_id']}' not found."
                raise _Error(400, message, param="previous_response_id")
            items = body.get("input")
            if isinstance(items, str):
                items = [{"role": "user", "content": items}]
            if not isinstance(items, list):
                raise _Error(400, "'input' must be a string or an array of input items", param="input")
            if isinstance(body.get("instructions"), str):
                roles.append("instructions")
                segments.append(body["instructions"])
            for item in items:
                if isinstance(item, dict):
                    kind = item.get("type")
                    calls_tool = kind in ("function_call", "custom_tool_call", "local_shell_call")
                    roles.append("assistant" if calls_tool else str(item.get("role") or kind))
                    text = _text(item.get("content")) or _part_text({"content": item.get("output")})
                    segments.append(text or str(item.get("arguments") or ""))
            limit = body.get("max_output_tokens")
        else:
            if not isinstance(body.get("max_tokens"), int):
                raise _Error(400, "max_tokens: Field required")
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _Error(400, "messages: Field required")
            system = body.get("system")
            if system is not None:
                roles.append("system")
                segments.append(_text(system))
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
                    raise _Error(400, message)
                roles.append(m["role"])
                segments.append(_text(m.get("content")))
                if _has_cache_control(m.get("content")):
                    breakpoint_ = len(segments) - 1
            if body.get("cache_control"):  # automatic caching: the breakpoint is the last block
                breakpoint_ = len(segments) - 1
            limit = body["max_tokens"]
        name = self._model_name(requested)
        if name is None:
            if route == "messages":
                raise _Error(404, f"model: {requested}", "not_found")
            message = f"The model `{requested}` does not exist or you do not have access to it."
            raise _Error(404, message, "not_found", "model_not_found")
        users = [s for r, s in zip(roles, segments, strict=True) if r == "user"]
        return _Call(
            route, flavour, body, requested, self._replays[name], users,
            roles.count("assistant"), segments, breakpoint_, bool(body.get("stream")),
            limit if isinstance(limit, int) and limit > 0 else None, _shell_tool(body.get("tools")),
        )

    def _take_fault(self, call: _Call) -> Fault | None:
        with self._lock:
            for entry in self._faults:
                fault: Fault = entry[0]
                if fault.model is None or fault.model in (call.requested, call.replay.model):
                    entry[1] -= 1
                    if entry[1] <= 0:
                        self._faults.remove(entry)
                    return fault
        return None

    def _reply(self, call: _Call) -> tuple[str, _ToolCall | None]:
        """The scripted reply to this call: its text, or a tool call (with empty text)."""
        replay, instrs = call.replay, self._instructions
        matches: list[str] = []
        for user in call.users:
            matches = [t for t, i in instrs.items() if t in replay.scripts and i in user]
            if matches:
                break
        if not matches:
            msg = f"No scripted Task of replay '{replay.model}' matches a user message"
            raise _Error(400, msg, code="no_scripted_task")
        task = max(matches, key=lambda t: len(instrs[t]))  # most specific
        script = replay.scripts[task]
        reply: ScriptedReply = script[call.turn] if call.turn < len(script) else DONE_REPLY
        if isinstance(reply, dict) and "alternatives" in reply:  # k-th call of this turn: k-th one
            with self._lock:
                k = self._calls[(replay.model, task, call.turn)]
                self._calls[(replay.model, task, call.turn)] += 1
            reply = reply["alternatives"][k % len(reply["alternatives"])]
        if call.shell is None:
            return (reply if isinstance(reply, str) else json.dumps(reply)), None
        commands = reply.get("commands") if isinstance(reply, dict) else None
        if commands:
            return "", call.shell.call("".join(str(c.get("keystrokes", "")) for c in commands).strip())
        if any(_FINISH_COMMAND in segment for segment in call.segments[:2]):
            return "", call.shell.call(_FINISH_COMMAND)
        return (reply if isinstance(reply, str) else str(reply.get("analysis") or "Done.")), None

    def _serve(self, h: BaseHTTPRequestHandler, call: _Call) -> None:
        fault = self._take_fault(call)
        if fault is not None and fault.kind in ("rate_limit", "server_error", "overloaded"):
            raise _fault_error(fault, call)
        text, tool = self._reply(call)
        with self._lock:
            self._served[call.replay.model] += 1
        out = _tokens(text or (tool.arguments if tool else ""))
        truncated = call.limit is not None and out > call.limit
        if truncated and call.limit is not None:
            text, out, tool = text[: call.limit * 4], call.limit, None
        prompt = _tokens("".join(call.segments))
        seen = _tokens("".join(call.segments[:-1])) if call.turn > 0 else 0
        if fault is not None and fault.kind == "slow" and self._stopping.wait(fault.delay_sec):
            h.close_connection = True  # stopped while waiting: no reply
            return
        cut = fault.after_events if fault is not None and fault.kind == "cut_stream" else None
        if call.route == "chat":
            served_by = self._upstream(call.body, fault)
            usage = _chat_usage(prompt, seen, out)
            if call.stream:
                events = _chat_events(call, text, truncated, usage, served_by, tool)
                return _stream(h, events, cut)
            return _send(h, 200, _chat_body(call, text, truncated, usage, served_by, tool), cut=cut is not None)
        if call.route == "responses":
            usage = _responses_usage(prompt, seen, out)
            if call.stream:
                return _stream(h, _responses_events(call, text, truncated, usage, tool), cut)
            response = _response_object(call, _new_id("resp_"), _new_id("msg_"), text, truncated, usage,
                                        tool=tool)
            return _send(h, 200, response, cut=cut is not None)
        usage = _messages_usage(call, prompt, seen, out)
        headers = {"request-id": _new_id("req_")}
        if call.stream:
            return _stream(h, _messages_events(call, text, truncated, usage, tool), cut, headers)
        return _send(h, 200, _message_object(call, text, truncated, usage, tool=tool), headers, cut=cut is not None)

    def _upstream(self, body: dict[str, Any], fault: Fault | None) -> str:
        """The Provider OpenRouter would name: a fault's, the first pinned one, or ``served_by``."""
        if fault is not None and fault.kind == "other_provider":
            return fault.served_by
        routing = body.get("provider")
        if isinstance(routing, dict):
            for key in ("order", "only"):
                names = routing.get(key)
                if isinstance(names, list) and names:
                    return str(names[0])
        return self._served_by


def _route(
    method: str, path: str, headers: dict[str, str]
) -> tuple[Literal["chat", "responses", "messages", "models"] | None, Flavour]:
    anthropic: Flavour = "anthropic" if "anthropic-version" in headers else "openai"
    if method == "GET" and path in ("/v1/models", "/models"):
        return "models", anthropic
    if method == "GET" and path == "/api/v1/models":
        return "models", "openrouter"
    if method != "POST":
        return None, anthropic
    if path == "/api/v1/chat/completions":
        return "chat", "openrouter"
    if path in ("/v1/chat/completions", "/chat/completions"):
        return "chat", "openai"
    if path in ("/v1/responses", "/responses"):
        return "responses", "openai"
    if path in ("/v1/messages", "/messages"):
        return "messages", "anthropic"
    return None, anthropic


def _check_provider_field(routing: Any) -> None:
    """OpenRouter's ``provider`` routing object, checked as OpenRouter checks it."""
    if routing is None:
        return
    if not isinstance(routing, dict):
        raise _Error(400, "provider: Expected object", param="provider")
    for key in ("order", "only", "ignore", "quantizations"):
        value = routing.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise _Error(400, f"provider.{key}: Expected array of strings", param="provider")
    for key in ("allow_fallbacks", "require_parameters"):
        if routing.get(key) is not None and not isinstance(routing[key], bool):
            raise _Error(400, f"provider.{key}: Expected boolean", param="provider")
    unknown = set(routing.get("quantizations") or []) - _QUANTIZATIONS
    if unknown:
        raise _Error(400, f"provider.quantizations: Invalid value {sorted(unknown)[0]!r}", param="provider")


def _fault_error(fault: Fault, call: _Call) -> _Error:
    anthropic = call.flavour == "anthropic"
    if fault.kind == "rate_limit":
        message = (
            "This request would exceed the rate limit for your organization. Please try again later."
            if anthropic
            else f"Rate limit reached for {call.requested}. Please try again in {fault.retry_after}s."
        )
        e = _Error(429, message, "rate_limit", None if anthropic else "rate_limit_exceeded",
                   headers={"retry-after": str(fault.retry_after)})
    elif fault.kind == "server_error":
        message = "Internal server error" if anthropic else (
            "The server had an error while processing your request. Sorry about that!"
        )
        e = _Error(500, message, "server")
    elif anthropic:
        e = _Error(529, "Overloaded", "overloaded")
    else:
        e = _Error(503, "That model is currently overloaded with other requests. Please retry.", "overloaded")
    if call.flavour == "openrouter":
        routing = call.body.get("provider")
        order = routing.get("order") if isinstance(routing, dict) else None
        e.upstream = str(order[0]) if isinstance(order, list) and order else None
    return e


# -- Chat Completions ----------------------------------------------------------
def _chat_usage(prompt: int, cached: int, out: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": out,
        "total_tokens": prompt + out,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_head(call: _Call, served_by: str) -> dict[str, Any]:
    return {
        "id": _new_id("chatcmpl-"),
        "created": int(time.time()),
        "model": call.requested,
        "provider": served_by,
        "system_fingerprint": "amber-replay",
        "service_tier": "default",
    }


def _chat_tool_call(tool: _ToolCall, arguments: str | None = None) -> dict[str, Any]:
    function = {"name": tool.name, "arguments": tool.arguments if arguments is None else arguments}
    return {"id": tool.id, "type": "function", "function": function}


def _chat_body(call: _Call, text: str, truncated: bool, usage: dict[str, Any], served_by: str,
               tool: _ToolCall | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
    finish = "length" if truncated else "stop"
    if tool is not None:
        message |= {"content": None, "tool_calls": [_chat_tool_call(tool)]}
        finish = "tool_calls"
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    return {**_chat_head(call, served_by), "object": "chat.completion", "choices": [choice], "usage": usage}


def _chat_events(
    call: _Call, text: str, truncated: bool, usage: dict[str, Any], served_by: str, tool: _ToolCall | None = None
) -> Iterator[bytes]:
    """A role chunk, text chunks, a chunk with finish_reason, (a usage chunk), ``[DONE]``."""
    include_usage = bool((call.body.get("stream_options") or {}).get("include_usage"))
    chunk = {**_chat_head(call, served_by), "object": "chat.completion.chunk"}
    if include_usage:
        chunk["usage"] = None  # every chunk but the last has a null usage

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _sse({**chunk, "choices": [choice]})

    yield event({"role": "assistant", "content": "" if tool is None else None, "refusal": None})
    if tool is not None:
        yield event({"tool_calls": [{"index": 0, **_chat_tool_call(tool, "")}]})
        for i in range(0, len(tool.arguments), _CHUNK):
            yield event({"tool_calls": [{"index": 0, "function": {"arguments": tool.arguments[i : i + _CHUNK]}}]})
        yield event({}, "tool_calls")
    else:
        for i in range(0, len(text), _CHUNK):
            yield event({"content": text[i : i + _CHUNK]})
        yield event({}, "length" if truncated else "stop")
    if include_usage:
        yield _sse({**chunk, "choices": [], "usage": usage})
    yield b"data: [DONE]\n\n"


# -- Responses -----------------------------------------------------------------
def _responses_usage(prompt: int, cached: int, out: int) -> dict[str, Any]:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + out,
    }


def _output_message(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def _function_call_item(item_id: str, tool: _ToolCall, status: str, arguments: str | None = None) -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "status": status, "call_id": tool.id, "name": tool.name,
            "arguments": tool.arguments if arguments is None else arguments}


def _response_object(
    call: _Call, resp_id: str, item_id: str, text: str | None, truncated: bool, usage: dict[str, Any] | None,
    created: int | None = None, tool: _ToolCall | None = None,
) -> dict[str, Any]:
    """The Response; ``text`` None: the in-progress one that opens a stream."""
    b = call.body
    status = "in_progress" if text is None else "incomplete" if truncated else "completed"
    output = [] if text is None else [
        _function_call_item(item_id, tool, status) if tool is not None else _output_message(item_id, text, status)]
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
        "usage": usage,
        "user": b.get("user"),
        "metadata": b.get("metadata") or {},
    }


def _responses_events(call: _Call, text: str, truncated: bool, usage: dict[str, Any],
                      tool: _ToolCall | None = None) -> Iterator[bytes]:
    """response.created, .in_progress, .output_item.added, .content_part.added, .output_text.delta
    (one or more), .output_text.done, .content_part.done, .output_item.done, then .completed
    (.incomplete when cut at the output limit); each with ``event:`` and ``sequence_number``. A tool call
    instead: .output_item.added, .function_call_arguments.delta (one or more), .function_call_arguments.done,
    .output_item.done."""
    resp_id, item_id, created = _new_id("resp_"), _new_id("fc_" if tool else "msg_"), int(time.time())
    seq = iter(range(1_000_000))
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}

    def event(kind: str, **fields: Any) -> bytes:
        return _sse({"type": kind, "sequence_number": next(seq), **fields}, kind)

    opening = _response_object(call, resp_id, item_id, None, truncated, None, created)
    yield event("response.created", response=opening)
    yield event("response.in_progress", response=opening)
    if tool is not None:
        yield event("response.output_item.added", output_index=0,
                    item=_function_call_item(item_id, tool, "in_progress", ""))
        for i in range(0, len(tool.arguments), _CHUNK):
            yield event("response.function_call_arguments.delta", item_id=item_id, output_index=0,
                        delta=tool.arguments[i : i + _CHUNK])
        yield event("response.function_call_arguments.done", item_id=item_id, output_index=0,
                    arguments=tool.arguments)
        final = _response_object(call, resp_id, item_id, "", False, usage, created, tool)
        yield event("response.output_item.done", output_index=0, item=final["output"][0])
        yield event("response.completed", response=final)
        return
    yield event("response.output_item.added", output_index=0, item=_output_message(item_id, None, "in_progress"))
    empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    yield event("response.content_part.added", **where, part=empty)
    for i in range(0, len(text), _CHUNK):
        yield event("response.output_text.delta", **where, delta=text[i : i + _CHUNK], logprobs=[])
    yield event("response.output_text.done", **where, text=text, logprobs=[])
    yield event("response.content_part.done", **where, part={**empty, "text": text})
    final = _response_object(call, resp_id, item_id, text, truncated, usage, created)
    yield event("response.output_item.done", output_index=0, item=final["output"][0])
    yield event("response.incomplete" if truncated else "response.completed", response=final)


# -- Anthropic Messages --------------------------------------------------------
def _messages_usage(call: _Call, prompt: int, seen: int, out: int) -> dict[str, Any]:
    read = written = 0
    if call.breakpoint is not None:
        upto = _tokens("".join(call.segments[: call.breakpoint + 1]))
        read = min(seen, upto)
        written = upto - read
    return {
        "input_tokens": prompt - read - written,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": out,
    }


def _message_object(
    call: _Call, text: str | None, truncated: bool, usage: dict[str, Any], msg_id: str | None = None,
    tool: _ToolCall | None = None,
) -> dict[str, Any]:
    """The Message; ``text`` None: the empty one ``message_start`` carries."""
    content: list[dict[str, Any]] = [] if text is None else [{"type": "text", "text": text}]
    stop = None if text is None else "max_tokens" if truncated else "end_turn"
    if tool is not None and text is not None:
        content, stop = [_tool_use(tool)], "tool_use"
    return {
        "id": msg_id or _new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": call.requested,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


def _tool_use(tool: _ToolCall, empty: bool = False) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool.id.replace("call_", "toolu_"), "name": tool.name,
            "input": {} if empty else json.loads(tool.arguments)}


def _messages_events(call: _Call, text: str, truncated: bool, usage: dict[str, Any],
                     tool: _ToolCall | None = None) -> Iterator[bytes]:
    """message_start (input usage), content_block_start, ping, content_block_delta (one or more; a tool call's
    as ``input_json_delta``), content_block_stop, message_delta (stop_reason, cumulative usage), message_stop."""

    def event(kind: str, **fields: Any) -> bytes:
        return _sse({"type": kind, **fields}, kind)

    yield event("message_start", message=_message_object(call, None, truncated, {**usage, "output_tokens": 1}))
    if tool is not None:
        yield event("content_block_start", index=0, content_block=_tool_use(tool, empty=True))
        yield event("ping")
        for i in range(0, len(tool.arguments), _CHUNK):
            yield event("content_block_delta", index=0,
                        delta={"type": "input_json_delta", "partial_json": tool.arguments[i : i + _CHUNK]})
    else:
        yield event("content_block_start", index=0, content_block={"type": "text", "text": ""})
        yield event("ping")
        for i in range(0, len(text), _CHUNK):
            yield event("content_block_delta", index=0, delta={"type": "text_delta", "text": text[i : i + _CHUNK]})
    yield event("content_block_stop", index=0)
    stop = "tool_use" if tool is not None else "max_tokens" if truncated else "end_turn"
    delta = {"stop_reason": stop, "stop_sequence": None}
    yield event("message_delta", delta=delta, usage=usage)
    yield event("message_stop")


# -- the wire ------------------------------------------------------------------
def _sse(data: dict[str, Any], name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _read_body(h: BaseHTTPRequestHandler) -> bytes:
    if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
        parts = []
        while size := int(h.rfile.readline().split(b";")[0].strip() or b"0", 16):
            parts.append(h.rfile.read(size))
            h.rfile.readline()
        while h.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
            pass
        return b"".join(parts)
    return h.rfile.read(int(h.headers.get("Content-Length") or 0))


def _send(
    h: BaseHTTPRequestHandler,
    status: int,
    body: Any,
    headers: dict[str, str] | None = None,
    *,
    cut: bool = False,
) -> None:
    """A whole JSON reply with its length, so the connection can be kept; ``cut``: half, then close."""
    data = json.dumps(body).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        h.send_header(name, value)
    h.end_headers()
    if cut:
        h.wfile.write(data[: len(data) // 2])
        h.close_connection = True
        return
    h.wfile.write(data)


def _stream(
    h: BaseHTTPRequestHandler,
    events: Iterator[bytes],
    cut: int | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    """Server-sent events, one chunk each, flushed as produced; ``cut``: stop after that many and close."""
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream; charset=utf-8")
    h.send_header("Cache-Control", "no-cache")
    h.send_header("Transfer-Encoding", "chunked")
    for name, value in (headers or {}).items():
        h.send_header(name, value)
    h.end_headers()
    for sent, data in enumerate(events):
        if cut is not None and sent >= cut:
            h.close_connection = True  # no last chunk: the client sees the body end unfinished
            return
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        h.wfile.flush()
    h.wfile.write(b"0\r\n\r\n")
    h.wfile.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Serve replay files as OpenAI, OpenRouter and Anthropic APIs on loopback."
    )
    parser.add_argument("--replay", type=Path, nargs="+", required=True, help="replay JSON files")
    parser.add_argument("--tasks", type=Path, required=True, help="dir of <task>/instruction.md")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--served-by", default="amber-double", help="upstream name in chat replies")
    parser.add_argument("--api-key", default=None, help="require this key on every call")
    args = parser.parse_args(argv)
    instructions = {
        d.name: (d / "instruction.md").read_text(encoding="utf-8")
        for d in sorted(args.tasks.iterdir())
        if (d / "instruction.md").is_file()
    }
    replays = [load_replay(p) for p in args.replay]
    double = ProviderDouble(
        replays, instructions, args.host, args.port, served_by=args.served_by, api_key=args.api_key
    )
    with double:
        models = ", ".join(r.model for r in replays)
        print(f"replay provider double: {models} at {double.base_url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
