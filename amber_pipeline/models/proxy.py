"""The model proxy: every model call of every Trial passes through here.

Why a proxy: the number a user pays and compares must not depend on what an
Agent says about itself. The proxy is a real HTTP server (Starlette on
uvicorn) that

- admits a call only with a live Trial token (each Trial attempt gets its own,
  revoked when the attempt ends), sent where the Agent would send its API key
  (``Authorization: Bearer`` or ``x-api-key``); the Provider's real key is
  added here and exists nowhere else;
- pins the call to the Trial's Model Configuration (model id, settings,
  OpenRouter upstream and quantization with fallbacks off, see `wire.pin`),
  refusing wire formats the Provider does not speak and Providers the
  Workspace's policy does not allow;
- asks the Trial's budget before each call to hold its expected cost (the
  Job's ceiling), refuses it when that no longer fits, and settles the hold
  with what the call used;
- passes responses on as they arrive (server-sent events included), metering
  tokens from the Provider's own usage fields;
- keeps each call's transcript: the pinned request and the response, never a
  header, with the key scrubbed from the text should a Provider echo it;
- turns upstream trouble into Provider signals on the Trial (429, 5xx,
  timeouts, dropped streams, a Provider other than the pinned one), which
  make the Trial Errored, never Reward 0.

Speed matters because the proxy sits on every call (the static fast path
makes hundreds a second). Upstream calls use aiohttp, not httpx, whose
connection pool cost more CPU than all the rest with 16 calls in flight
(254 calls/s through the proxy, 865 after the switch), and requests reach
`_handle` with no router or middleware in between.

The server runs in a background thread with its own event loop (uvloop), so
Harbor's and Dagster's loops never share it, and listens on any number of addresses
(loopback for host-side Agents, a sandbox network's gateway for Agents inside
containers). It imports nothing of Amber above `models`: budgets and
outcomes are decided by callers through `Grant`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import aiohttp
import uvicorn
import uvloop
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from amber_pipeline.models.configurations import ModelConfiguration
from amber_pipeline.models.providers import Wire
from amber_pipeline.models.signals import ProviderSignal as Signal
from amber_pipeline.models.wire import Reading, StreamTap, Usage, pin, read_body, upfront

ANTHROPIC_VERSION = "2023-06-01"
TOKEN_PREFIX = "amber-trial-"
START_TIMEOUT_SEC = 30.0


@dataclass(frozen=True)
class Call:
    """One model call as the transcript keeps it."""

    trial: str
    seq: int
    wire: str
    started_at: datetime
    duration_ms: float
    status: int
    streamed: bool
    request: str
    response: str
    usage: Usage
    served_by: str | None
    signal: str | None


class Spending(Protocol):
    """A budget the proxy weighs each call against: before the call it holds the call's expected cost (None:
    it does not fit), and after it settles the hold with what the call used."""

    def hold(self, upfront: Usage) -> object | None: ...

    def settle(self, hold: object, used: Usage) -> None: ...


@dataclass
class Grant:
    """What one Trial attempt may call: its Model Configuration, where it answers, and its budget."""

    trial: str
    mc: ModelConfiguration
    upstream: str  # base URL ending in /v1
    key: str | None
    spending: Spending | None = None  # None: no budget (the ceiling is the ledger's alone)
    allowed_providers: frozenset[str] | None = None  # the Workspace's policy for a private Benchmark
    token: str = field(default_factory=lambda: TOKEN_PREFIX + secrets.token_urlsafe(24))
    calls: list[Call] = field(default_factory=list)
    signals: list[Signal] = field(default_factory=list)

    @property
    def usage(self) -> Usage:
        return sum((c.usage for c in self.calls), Usage())


class Refusal(Exception):
    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


@dataclass
class ProxyTimeouts:
    connect: float = 10.0
    read: float = 600.0  # a long reasoning call may think for minutes before its first byte


class _PromptServer(uvicorn.Server):
    """uvicorn's server, stopped as soon as it is told: uvicorn looks for ``should_exit`` every tenth of a second,
    then gives the connections it closes another tenth to go, 0.2 s at the end of every cell run (a static cell
    of 1,000 Trials takes a second). Here :meth:`exit_now` wakes the loop, and a server with no connection left
    closes at once; one with connections still open shuts down as uvicorn does."""

    _exit: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._exit, self._loop = asyncio.Event(), asyncio.get_running_loop()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), 0.1)

    def exit_now(self) -> None:
        """Tell the server to stop, from any thread."""
        self.should_exit = True
        if self._loop is not None and self._exit is not None:
            with contextlib.suppress(RuntimeError):  # its loop has ended already
                self._loop.call_soon_threadsafe(self._exit.set)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.server_state.connections or self.server_state.tasks:
            await super().shutdown(sockets)
            return
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for server in self.servers:
            await server.wait_closed()


class ModelProxy:
    """The proxy server; a context manager. `grant` a Trial, hand its token to the Agent, `revoke` at the end."""

    def __init__(self, hosts: Sequence[str] = ("127.0.0.1",), timeouts: ProxyTimeouts | None = None) -> None:
        self._grants: dict[str, Grant] = {}
        self._lock = threading.Lock()
        self._timeouts = timeouts or ProxyTimeouts()
        self._sockets = [_listen(h) for h in hosts]
        self._client: aiohttp.ClientSession | None = None
        self._thread: threading.Thread | None = None
        self._server: _PromptServer | None = None
        self.ceiling_reached = threading.Event()

    def base_url(self, host: str | None = None) -> str:
        """The proxy's address on ``host`` (the first listening address by default), without a trailing /v1."""
        return f"http://{self._address(host)[0]}:{self._address(host)[1]}"

    def port(self, host: str | None = None) -> int:
        """The port the proxy listens on at ``host``."""
        return self._address(host)[1]

    def _address(self, host: str | None) -> tuple[str, int]:
        for sock in self._sockets:
            addr, port = sock.getsockname()[:2]
            if host is None or addr == host:
                return addr, port
        raise ValueError(f"the proxy does not listen on {host}")

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> ModelProxy:
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off",
                                timeout_keep_alive=30, http="httptools",
                                interface="asgi3")  # a bound method: uvicorn's guess would be ASGI 2
        self._server = _PromptServer(config)
        self._thread = threading.Thread(target=self._serve, name="amber-model-proxy", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_SEC
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the model proxy failed to start")
            time.sleep(0.005)
        return self

    def _serve(self) -> None:
        async def serve() -> None:
            assert self._server is not None
            try:
                await self._server.serve(sockets=self._sockets)
            finally:
                if self._client is not None:
                    await self._client.close()
        asyncio.run(serve(), loop_factory=uvloop.new_event_loop)

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app: every request is a model call (no router or middleware between it and `_handle`)."""
        if scope["type"] != "http":
            return
        response = await self._handle(Request(scope, receive))
        await response(scope, receive, send)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.exit_now()
            self._thread.join(timeout=10)
        for sock in self._sockets:
            sock.close()

    def __enter__(self) -> ModelProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- grants ------------------------------------------------------------
    def grant(self, grant: Grant) -> Grant:
        with self._lock:
            self._grants[grant.token] = grant
        return grant

    def revoke(self, token: str) -> Grant | None:
        with self._lock:
            return self._grants.pop(token, None)

    # -- calls -------------------------------------------------------------
    async def _handle(self, request: Request) -> Response:
        path = request.url.path
        wire = next((w for w in Wire if path.endswith(w.path)), None)
        try:
            grant = self._grant_of(request)
            if request.method == "GET" and path.rstrip("/").endswith("/models"):
                return JSONResponse({"object": "list", "data": [{"id": grant.mc.model, "object": "model"}]})
            if wire is None or request.method != "POST":
                raise Refusal(404, f"The model proxy has no endpoint {request.method} {path}.", "unknown_url")
            if wire not in grant.mc.provider_spec.wires:
                raise Refusal(400, f"{grant.mc.provider} does not speak the {wire.value} wire format.",
                              "unsupported_wire")
            if grant.allowed_providers is not None and grant.mc.served_by not in grant.allowed_providers:
                raise Refusal(403, f"This Workspace does not send its private Benchmarks to {grant.mc.served_by}.",
                              "provider_policy")
            raw = await request.body()
            try:
                body = json.loads(raw)
            except ValueError:
                raise Refusal(400, "The request body is not JSON.", "invalid_json") from None
            if not isinstance(body, dict):
                raise Refusal(400, "The request body must be a JSON object.", "invalid_json")
            pinned = pin(wire, body, grant.mc)
            hold = grant.spending.hold(upfront(len(raw))) if grant.spending is not None else None
            if grant.spending is not None and hold is None:
                grant.signals.append(Signal.CEILING)
                self.ceiling_reached.set()
                raise Refusal(402, "The Job's Quote would be exceeded by this call: the Job stopped at its ceiling.",
                              "ceiling_reached")
        except Refusal as r:
            return _error(wire, r.status, str(r), r.code)
        return await self._forward(grant, wire, request, pinned, hold)

    def _grant_of(self, request: Request) -> Grant:
        auth = request.headers.get("authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else request.headers.get(
            "x-api-key", "")
        with self._lock:
            grant = self._grants.get(token)
        if grant is None:
            raise Refusal(401, "Unknown or expired Trial token: the model proxy admits only a running Trial's calls.",
                          "invalid_api_key")
        return grant

    def _upstream_headers(self, grant: Grant, wire: Wire, request: Request) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        if wire is Wire.MESSAGES:
            headers["anthropic-version"] = request.headers.get("anthropic-version", ANTHROPIC_VERSION)
            if "anthropic-beta" in request.headers:
                headers["anthropic-beta"] = request.headers["anthropic-beta"]
            if grant.key:
                headers["x-api-key"] = grant.key
        elif grant.key:
            headers["authorization"] = f"Bearer {grant.key}"
        if grant.mc.provider == "openrouter":
            headers["x-title"] = "Amber"
        return headers

    def _http(self) -> aiohttp.ClientSession:
        if self._client is None:  # made on the proxy's own loop, on first use
            t = self._timeouts
            self._client = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256, ttl_dns_cache=300),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=t.connect, sock_read=t.read),
                auto_decompress=False)
        return self._client

    async def _forward(self, grant: Grant, wire: Wire, request: Request, pinned: dict[str, Any],
                       hold: object) -> Response:
        started, clock = datetime.now(UTC), time.perf_counter()
        content = json.dumps(pinned).encode()
        streamed = bool(pinned.get("stream"))

        def record(status: int, text: str, reading: Reading, signal: Signal | None) -> None:
            if signal is not None:
                grant.signals.append(signal)
            if grant.spending is not None:
                grant.spending.settle(hold, reading.usage)
            call = Call(grant.trial, len(grant.calls), wire.value, started, (time.perf_counter() - clock) * 1000,
                        status, streamed, _scrub(content.decode(), grant.key), _scrub(text, grant.key),
                        reading.usage, reading.served_by, signal.value if signal else None)
            grant.calls.append(call)

        try:
            response = await self._http().post(grant.upstream + wire.path, data=content,
                                               headers=self._upstream_headers(grant, wire, request))
        except TimeoutError:
            record(504, "", Reading(), Signal.UPSTREAM_TIMEOUT)
            return _error(wire, 504, "The Provider did not answer in time.", "upstream_timeout")
        except aiohttp.ClientError as exc:
            record(502, "", Reading(), Signal.UPSTREAM_DROPPED)
            return _error(wire, 502, f"The Provider's connection failed ({type(exc).__name__}).", "upstream_dropped")
        if response.status != 200 or not streamed:
            try:
                data = await response.read()
            except TimeoutError:
                record(504, "", Reading(), Signal.UPSTREAM_TIMEOUT)
                return _error(wire, 504, "The Provider stopped answering mid-answer.", "upstream_timeout")
            except aiohttp.ClientError:
                record(502, "", Reading(), Signal.UPSTREAM_DROPPED)
                return _error(wire, 502, "The Provider's connection dropped mid-answer.", "upstream_dropped")
            finally:
                response.release()
            return self._whole(grant, wire, response, data, record)
        return StreamingResponse(self._relay(grant, wire, response, record), status_code=200,
                                 media_type=response.headers.get("content-type", "text/event-stream"))

    def _whole(self, grant: Grant, wire: Wire, response: aiohttp.ClientResponse, data: bytes,
               record: Callable[[int, str, Reading, Signal | None], None]) -> Response:
        status, text = response.status, data.decode(errors="replace")
        if status != 200:
            signal = (Signal.UPSTREAM_RATE_LIMIT if status == 429
                      else Signal.UPSTREAM_SERVER_ERROR if status >= 500 else None)
            record(status, text, Reading(), signal)
            headers = {k: v for k, v in response.headers.items() if k.lower() == "retry-after"}
            return Response(data, status, headers=headers, media_type="application/json")
        try:
            reading = read_body(wire, json.loads(data))
        except ValueError:
            record(502, text, Reading(), Signal.UPSTREAM_DROPPED)
            return _error(wire, 502, "The Provider's answer was not JSON.", "upstream_dropped")
        other = reading.mismatch(grant.mc)
        if other is not None:
            record(status, text, reading, Signal.PROVIDER_MISMATCH)
            return _error(wire, 502, f"The call was served by {other}, not the pinned {grant.mc.served_by}.",
                          "provider_mismatch")
        record(status, text, reading, None)
        return Response(data, 200, media_type="application/json")

    async def _relay(self, grant: Grant, wire: Wire, response: aiohttp.ClientResponse,
                     record: Callable[[int, str, Reading, Signal | None], None]) -> AsyncIterator[bytes]:
        tap, seen = StreamTap(wire), bytearray()
        signal: Signal | None = None
        client_left = False
        try:
            async for chunk in response.content.iter_any():
                tap.feed(chunk)
                seen += chunk
                if tap.reading.mismatch(grant.mc) is not None:
                    signal = Signal.PROVIDER_MISMATCH
                    break
                yield chunk
        except TimeoutError:
            signal = Signal.UPSTREAM_TIMEOUT
        except aiohttp.ClientError:
            signal = Signal.UPSTREAM_DROPPED
        except (asyncio.CancelledError, GeneratorExit):
            # The Agent hung up (it stopped, timed out, or its Trial was cancelled): not the Provider's doing, so
            # no signal, or an Agent's timeout would become an Errored Trial instead of its Reward 0.
            client_left = True
            raise
        finally:
            response.release()
            if signal is None and not tap.reading.complete and not client_left:
                signal = Signal.UPSTREAM_DROPPED
            record(200, seen.decode(errors="replace"), tap.reading, signal)


def _listen(host: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it: no 40 ms Nagle waits
    sock.bind((host, 0))
    sock.listen(512)
    sock.setblocking(False)
    return sock


def _scrub(text: str, key: str | None) -> str:
    return text.replace(key, "[key removed]") if key else text


def _error(wire: Wire | None, status: int, message: str, code: str) -> JSONResponse:
    """An error in the body shape the caller's wire format uses, so its client reports it as such."""
    if wire is Wire.MESSAGES:
        kind = {401: "authentication_error", 402: "billing_error", 403: "permission_error", 404: "not_found_error",
                429: "rate_limit_error"}.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status)
    return JSONResponse({"error": {"message": message, "type": "amber_proxy_error", "code": code}}, status)
