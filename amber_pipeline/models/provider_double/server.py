"""The provider double's server: routes each request on loopback to its wire format and replays the script.

Routes: ``POST /v1/chat/completions`` (``openai_chat``; under ``/api/v1``, OpenRouter's own prefix, with
OpenRouter's errors), ``POST /v1/responses`` (``openai_responses``), ``POST /v1/messages``
(``anthropic_messages``) and ``GET /v1/models``. Every route also answers without the ``/v1`` prefix, as clients
differ on it. ``received`` records every request as it arrived, so a test can check what a proxy sent.

Server choice: ``http.server.ThreadingHTTPServer`` from the standard library rather than uvicorn. The socket is
bound in the constructor, so the port is known before the serving thread starts; start-up is immediate;
``stop()`` ends the serving thread, closes open connections and frees the port synchronously; and there is no
event loop to share with callers (litellm, pytest, Dagster) that run their own. HTTP/1.1 with exact
``Content-Length`` and Nagle off lets a client reuse connections, which is what makes several hundred small calls
a second possible. Streams use chunked transfer and are written event by event, so a slow or cut stream looks to
a client exactly as it does from a Provider (a cut leaves the chunked body unterminated).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import amber_pipeline.models.provider_double.anthropic_messages as anthropic_messages
import amber_pipeline.models.provider_double.openai_chat as openai_chat
import amber_pipeline.models.provider_double.openai_responses as openai_responses
from amber_pipeline.models.provider_double.calls import (
    Call,
    Flavour,
    ProviderError,
    Route,
    WireFormat,
    answer,
    shell_tool,
)
from amber_pipeline.models.provider_double.faults import REFUSALS, Fault, Faults, refusal
from amber_pipeline.models.provider_double.flavours import (
    check_auth,
    error_body,
    model_list,
    request_id,
    unknown_model,
)
from amber_pipeline.models.provider_double.replay import Replay
from amber_pipeline.models.provider_double.scripts import Scripts

log = logging.getLogger(__name__)

RECEIVED_KEPT = 1000  # the most recent requests ``received`` keeps
_FORMATS: dict[Route, WireFormat] = {
    "chat": openai_chat,
    "responses": openai_responses,
    "messages": anthropic_messages,
}


@dataclass(frozen=True)
class Received:
    """One request as it arrived: its path, its headers (names lower-cased) and its JSON body."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


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
        self._host, self._scripts = host, Scripts(replays, instructions)
        self._served_by, self._api_key = served_by, api_key
        self._served: Counter[str] = Counter()
        self._faults = Faults()
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
            return self._served[self._scripts.model_name(model) or model]

    def inject(self, fault: Fault) -> None:
        """Queue a fault for the next matching calls (thread-safe)."""
        self._faults.inject(fault)

    def clear_faults(self) -> None:
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
            check_auth(flavour, headers, self._api_key)
            if route == "models":
                return _send(h, 200, model_list(flavour, list(self._scripts.replays)))
            if route is None:
                raise ProviderError(404, f"Unknown endpoint {method} {path}", "not_found", "unknown_url")
            if invalid is not None or not isinstance(body, dict):
                raise ProviderError(400, invalid or "The request body must be a JSON object", code="invalid_json")
            self._serve(h, self._read_call(route, flavour, body))
            return
        except ProviderError as e:
            error = e
        except OSError as exc:  # the client went away mid-reply
            log.debug("provider double: connection lost: %s", exc)
            h.close_connection = True
            return
        except Exception as exc:  # a bug here: say so, as a Provider's 500 would
            log.exception("provider double: failed on %s %s", method, path)
            error = ProviderError(500, f"Provider double failed: {exc}", "server")
            h.close_connection = True
        try:
            _send(h, error.status, error_body(flavour, error), headers={**request_id(flavour), **error.headers})
        except OSError:
            h.close_connection = True

    def _read_call(self, route: Route, flavour: Flavour, body: dict[str, Any]) -> Call:
        requested = body.get("model")
        if not isinstance(requested, str) or not requested:
            raise ProviderError(400, "you must provide a model parameter", param="model")
        prompt = _FORMATS[route].read(body)
        name = self._scripts.model_name(requested)
        if name is None:
            raise unknown_model(flavour, requested)
        users = [s for r, s in zip(prompt.roles, prompt.segments, strict=True) if r == "user"]
        limit = prompt.limit
        return Call(
            route, flavour, body, requested, self._scripts.replays[name], users,
            prompt.roles.count("assistant"), prompt.segments, prompt.breakpoint, bool(body.get("stream")),
            limit if isinstance(limit, int) and limit > 0 else None, shell_tool(body.get("tools")),
        )

    def _serve(self, h: BaseHTTPRequestHandler, call: Call) -> None:
        fault = self._faults.take(call)
        if fault is not None and fault.kind in REFUSALS:
            raise refusal(fault, call)
        text, tool = self._scripts.reply(call)
        with self._lock:
            self._served[call.replay.model] += 1
        reply = answer(call, text, tool, self._upstream(call, fault))
        if fault is not None and fault.kind == "slow" and self._stopping.wait(fault.delay_sec):
            h.close_connection = True  # stopped while waiting: no reply
            return
        cut = fault.after_events if fault is not None and fault.kind == "cut_stream" else None
        wire = _FORMATS[call.route]
        if call.stream:
            return _stream(h, wire.events(call, reply), cut, wire.headers())
        return _send(h, 200, wire.body(call, reply), wire.headers(), cut=cut is not None)

    def _upstream(self, call: Call, fault: Fault | None) -> str:
        """The Provider a chat reply names: a fault's, the first pinned one, or ``served_by``."""
        if fault is not None and fault.kind == "other_provider":
            return fault.served_by
        pinned = openai_chat.pinned_upstream(call.body)
        return self._served_by if pinned is None else pinned


def _route(
    method: str, path: str, headers: dict[str, str]
) -> tuple[Route | Literal["models"] | None, Flavour]:
    """Which format serves a request (None: none does), and whose flavour its errors and auth take."""
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
