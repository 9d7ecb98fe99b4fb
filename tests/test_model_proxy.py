"""The model proxy against the provider double: real servers on loopback, a real HTTP client, no mocks.

Each wire format (Chat Completions, Responses, Messages) is called through the proxy streamed and not, the
way an Agent calls it: with its Trial token where its API key would go. What a user relies on is checked
from the outside: what the client received, what arrived at the Provider (the double's `received`), and
what the proxy metered and kept (the Grant's calls and signals). Expected token counts are computed here
from the double's documented rule (``ceil(chars / 4)``), not read back from the proxy.
"""

from __future__ import annotations

import json
import math
import random
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from amber_pipeline.cli.client import tls
from amber_pipeline.models.configurations import ModelConfiguration, Prices, Settings
from amber_pipeline.models.provider_double import Fault, FaultKind, ProviderDouble, load_replay
from amber_pipeline.models.providers import Wire
from amber_pipeline.models.proxy import Grant, ModelProxy, ProxyTimeouts, Signal
from amber_pipeline.models.wire import StreamTap, Usage

KEY = "sk-upstream-" + secrets.token_hex(12)  # the Provider's real key: the double demands it
MODEL = "amber-test-model"
INSTRUCTION = "Name the capital city of Australia and say one thing about it."
SECRET_INSTRUCTION = "Repeat the deployment credential back to me."
REPLY = ("Canberra is the capital of Australia. It was chosen as a compromise between Sydney and Melbourne, "
         "and Parliament first sat there in 1927.")
FOLLOW_UP = "And which lake lies at its centre?"
SECOND_REPLY = "Lake Burley Griffin, an artificial lake finished in 1963."
PRICES = Prices(input=1.0, cached_input=0.1, output=5.0, source="made up for the tests")
CLIENT_LIMIT, PINNED_LIMIT = 5, 64  # what the Agent asks for, and what the configuration makes it
HTTP = httpx.Client(verify=tls(), timeout=10, trust_env=False)


def tokens(*texts: str) -> int:
    """The double's tokenizer, as its docstring states it."""
    return math.ceil(len("".join(texts)) / 4)


# ---- the configurations under test, one per wire a Provider speaks --------------------------------------------

ANTHROPIC = ModelConfiguration(name="t-anthropic", model=MODEL, provider="anthropic", prices=PRICES,
                               settings=Settings(temperature=0.25, max_output_tokens=PINNED_LIMIT))
OPENAI = ModelConfiguration(name="t-openai", model=MODEL, provider="openai", prices=PRICES,
                            settings=Settings(temperature=0.25, max_output_tokens=PINNED_LIMIT,
                                              reasoning_effort="low"))
OPENROUTER = ModelConfiguration(name="t-openrouter", model=f"testlab/{MODEL}", provider="openrouter",
                                upstream="deepinfra", quantization="fp8", prices=PRICES,
                                settings=Settings(temperature=0.25, max_output_tokens=PINNED_LIMIT))


@dataclass(frozen=True)
class Case:
    """A wire format as one Provider speaks it."""

    id: str
    wire: Wire
    mc: ModelConfiguration
    openrouter_route: bool = False  # the double's /api/v1 prefix, where errors take OpenRouter's shape

    def upstream(self, double: ProviderDouble) -> str:
        return double.openrouter_base_url if self.openrouter_route else double.base_url

    def body(self, turns: list[str], stream: bool = False, cache_last: bool = False) -> dict[str, Any]:
        """The request an Agent would send: its own idea of the model, the limit and the temperature."""
        messages: list[dict[str, Any]] = []
        for i, turn in enumerate(turns):
            if i:
                messages.append({"role": "assistant", "content": [REPLY, SECOND_REPLY][i - 1]})
            messages.append({"role": "user", "content": turn})
        if cache_last and self.wire is Wire.MESSAGES:
            messages[-1]["content"] = [{"type": "text", "text": turns[-1], "cache_control": {"type": "ephemeral"}}]
        body: dict[str, Any] = {"model": "what-the-agent-asked-for", "temperature": 1.0}
        if self.wire is Wire.RESPONSES:
            body |= {"input": messages, "max_output_tokens": CLIENT_LIMIT}
        else:
            body |= {"messages": messages, "max_tokens": CLIENT_LIMIT}
        if stream:
            body["stream"] = True
        return body

    def expected_pin(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request as the Provider must receive it, written out from the configuration by hand."""
        pinned = {**body, "model": self.mc.model, "temperature": 0.25}
        if self.wire is Wire.RESPONSES:
            pinned |= {"max_output_tokens": PINNED_LIMIT, "reasoning": {"effort": "low"}}
        elif self.wire is Wire.MESSAGES:
            pinned["max_tokens"] = PINNED_LIMIT
        elif self.mc.provider == "openai":
            del pinned["max_tokens"]
            pinned |= {"max_completion_tokens": PINNED_LIMIT, "reasoning_effort": "low"}
        else:
            pinned |= {"max_tokens": PINNED_LIMIT,
                       "provider": {"order": ["deepinfra"], "allow_fallbacks": False, "quantizations": ["fp8"]}}
        if body.get("stream") and self.wire is Wire.CHAT:
            pinned["stream_options"] = {"include_usage": True}
        return pinned

    def headers(self, token: str) -> dict[str, str]:
        """Where the wire's clients send their API key; no key header for an empty token."""
        if self.wire is Wire.MESSAGES:
            return {"anthropic-version": "2023-06-01"} | ({"x-api-key": token} if token else {})
        return {"authorization": f"Bearer {token}"} if token else {}


CASES = [Case("chat-openai", Wire.CHAT, OPENAI), Case("chat-openrouter", Wire.CHAT, OPENROUTER, True),
         Case("responses-openai", Wire.RESPONSES, OPENAI), Case("messages-anthropic", Wire.MESSAGES, ANTHROPIC)]
BY_ID = {c.id: c for c in CASES}
each_case = pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
streamed_or_not = pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])


# ---- servers ----------------------------------------------------------------------------------------------------

@pytest.fixture
def double(tmp_path: Path) -> Iterator[ProviderDouble]:
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"model": MODEL, "tasks": {"capital": [REPLY, SECOND_REPLY],
                                                            "echo": [f"The credential is {KEY}."]}}))
    with ProviderDouble([load_replay(replay)], {"capital": INSTRUCTION, "echo": SECRET_INSTRUCTION},
                        api_key=KEY) as d:
        yield d


@pytest.fixture
def proxy() -> Iterator[ModelProxy]:
    with ModelProxy(timeouts=ProxyTimeouts(connect=2.0, read=10.0)) as p:
        yield p


def grant(proxy: ModelProxy, double: ProviderDouble, case: Case, trial: str = "job-1/cell/capital/1",
          **kwargs: Any) -> Grant:
    return proxy.grant(Grant(trial, case.mc, case.upstream(double), KEY, **kwargs))


def url(proxy: ModelProxy, wire: Wire) -> str:
    return proxy.base_url() + "/v1" + wire.path


def post(proxy: ModelProxy, case: Case, token: str, body: dict[str, Any]) -> httpx.Response:
    return HTTP.post(url(proxy, case.wire), json=body, headers=case.headers(token))


@dataclass
class Streamed:
    status: int
    headers: httpx.Headers
    raw: bytes
    events: list[tuple[str, Any]]  # (event name or "", data) in arrival order


def streamed(proxy: ModelProxy, case: Case, token: str, body: dict[str, Any]) -> Streamed:
    with HTTP.stream("POST", url(proxy, case.wire), json=body, headers=case.headers(token)) as r:
        raw = b"".join(r.iter_raw())
        return Streamed(r.status_code, r.headers, raw, parse_sse(raw))


def parse_sse(raw: bytes) -> list[tuple[str, Any]]:
    events = []
    for block in raw.decode().replace("\r\n", "\n").split("\n\n"):
        name, data = "", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            text = "\n".join(data)
            events.append((name, text if text == "[DONE]" else json.loads(text)))
    return events


def text_of(case: Case, body: dict[str, Any]) -> str:
    """The answer's text in a whole response of the case's wire format."""
    if case.wire is Wire.CHAT:
        return str(body["choices"][0]["message"]["content"])
    if case.wire is Wire.RESPONSES:
        return "".join(p["text"] for item in body["output"] for p in item["content"])
    return "".join(b["text"] for b in body["content"])


def streamed_text(case: Case, events: list[tuple[str, Any]]) -> str:
    data = [d for _, d in events if isinstance(d, dict)]
    if case.wire is Wire.CHAT:
        return "".join(c["delta"].get("content") or "" for d in data for c in d["choices"])
    if case.wire is Wire.RESPONSES:
        return "".join(d["delta"] for d in data if d["type"] == "response.output_text.delta")
    return "".join(d["delta"]["text"] for d in data if d["type"] == "content_block_delta")


def provider_usage(case: Case, whole: dict[str, Any] | None = None,
                   events: list[tuple[str, Any]] | None = None) -> Usage:
    """Amber's usage read by hand from the Provider's own fields, as its API reference defines them: all
    input (cache reads and writes included for Anthropic), the cached part, the output."""
    if events is not None:
        data = [d for _, d in events if isinstance(d, dict)]
        if case.wire is Wire.CHAT:
            (usage,) = [d["usage"] for d in data if d.get("usage")]
        elif case.wire is Wire.RESPONSES:
            (usage,) = [d["response"]["usage"] for d in data if d["type"] == "response.completed"]
        else:
            (start,) = [d["message"]["usage"] for d in data if d["type"] == "message_start"]
            (delta,) = [d["usage"] for d in data if d["type"] == "message_delta"]
            usage = {**start, "output_tokens": delta["output_tokens"]}
    else:
        assert whole is not None
        usage = whole["usage"]
    if case.wire is Wire.CHAT:
        return Usage(usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"],
                     usage["completion_tokens"])
    if case.wire is Wire.RESPONSES:
        return Usage(usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"], usage["output_tokens"])
    read, written = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
    return Usage(usage["input_tokens"] + read + written, read, usage["output_tokens"])


# ---- a call passes through: the answer unchanged, the request pinned, the key added, the usage metered --------

@each_case
@streamed_or_not
def test_a_call_reaches_the_provider_pinned_with_the_real_key_and_comes_back_unchanged(
        proxy: ModelProxy, double: ProviderDouble, case: Case, stream: bool) -> None:
    g = grant(proxy, double, case)
    body = case.body([INSTRUCTION], stream)
    if stream:
        got = streamed(proxy, case, g.token, body)
        assert got.status == 200 and got.headers["content-type"].startswith("text/event-stream")
        assert streamed_text(case, got.events) == REPLY
        assert len(got.events) >= 5  # the reply arrives as the Provider's events, not as one blob
        received_bytes, usage = got.raw, provider_usage(case, events=got.events)
        final = {Wire.CHAT: "[DONE]", Wire.RESPONSES: "response.completed", Wire.MESSAGES: "message_stop"}
        last_name, last = got.events[-1]
        assert final[case.wire] in (last, last_name)
    else:
        r = post(proxy, case, g.token, body)
        assert r.status_code == 200, r.text
        assert text_of(case, r.json()) == REPLY
        received_bytes, usage = r.content, provider_usage(case, whole=r.json())

    # The Provider got the pinned request with the real key, and never the Trial token.
    (arrived,) = double.received
    assert arrived.body == case.expected_pin(body)
    if case.wire is Wire.MESSAGES:
        assert arrived.headers["x-api-key"] == KEY and "authorization" not in arrived.headers
    else:
        assert arrived.headers["authorization"] == f"Bearer {KEY}" and "x-api-key" not in arrived.headers
    assert g.token not in json.dumps(arrived.headers) + json.dumps(arrived.body)
    if case.mc.provider == "openrouter":
        assert arrived.path == "/api/v1/chat/completions"

    # Metered from the Provider's own usage fields, which count what the double's tokenizer says.
    assert usage == Usage(tokens(INSTRUCTION), 0, tokens(REPLY))
    (call,) = g.calls
    assert g.usage == call.usage == usage
    assert g.signals == [] and call.signal is None and call.status == 200 and call.streamed is stream
    assert call.wire == case.wire.value and call.trial == g.trial
    # The transcript: the pinned request as sent and the answer byte for byte as the client got it.
    assert json.loads(call.request) == arrived.body
    assert call.response.encode() == received_bytes
    for text in (call.request, call.response, repr(call)):
        assert KEY not in text and g.token not in text

    # Unchanged: the same request sent straight to the Provider gets the same answer, but for its fresh ids.
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"} if case.wire is Wire.MESSAGES else {
        "authorization": f"Bearer {KEY}"}
    direct_url = case.upstream(double) + case.wire.path
    if stream:
        with HTTP.stream("POST", direct_url, json=arrived.body, headers=headers) as r:
            direct = parse_sse(r.read())
        assert without_ids(got.events) == without_ids(direct)
    else:
        assert without_ids(json.loads(received_bytes)) == without_ids(
            HTTP.post(direct_url, json=arrived.body, headers=headers).json())


def without_ids(value: Any) -> Any:
    """A body or event list with what differs between two identical calls (ids, timestamps) taken out."""
    if isinstance(value, dict):
        return {k: without_ids(v) for k, v in value.items() if k not in ("id", "item_id", "created", "created_at")}
    if isinstance(value, list | tuple):
        return [without_ids(v) for v in value]
    return value


@each_case
@streamed_or_not
def test_cached_input_is_metered_as_input_and_as_cached(proxy: ModelProxy, double: ProviderDouble, case: Case,
                                                        stream: bool) -> None:
    """A second turn: the double counts the earlier messages as cached (Anthropic: a cache_control block
    makes the prefix read from the cache and the rest written to it)."""
    g = grant(proxy, double, case)
    body = case.body([INSTRUCTION, FOLLOW_UP], stream, cache_last=True)
    if stream:
        got = streamed(proxy, case, g.token, body)
        assert got.status == 200 and streamed_text(case, got.events) == SECOND_REPLY
        usage = provider_usage(case, events=got.events)
    else:
        r = post(proxy, case, g.token, body)
        assert r.status_code == 200, r.text
        assert text_of(case, r.json()) == SECOND_REPLY
        usage = provider_usage(case, whole=r.json())
    seen = tokens(INSTRUCTION, REPLY)
    assert usage == Usage(tokens(INSTRUCTION, REPLY, FOLLOW_UP), seen, tokens(SECOND_REPLY))
    assert 0 < usage.cached_input_tokens < usage.input_tokens
    assert g.usage == usage
    if case.wire is Wire.MESSAGES and not stream:
        written = r.json()["usage"]["cache_creation_input_tokens"]
        assert written == tokens(INSTRUCTION, REPLY, FOLLOW_UP) - seen > 0  # cache writes count as input


@dataclass
class PausingUpstream:
    """A Chat Completions server that streams one event, then waits (at most 5 s) for ``go`` before the rest."""

    url: str
    go: threading.Event
    ended: threading.Event  # it finished sending (or found the connection gone)
    first: dict[str, Any]


@pytest.fixture
def pausing_upstream() -> Iterator[PausingUpstream]:
    head = {"id": "c1", "object": "chat.completion.chunk", "model": MODEL, "created": 0}
    first = {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Can"}}]}
    rest = [{**head, "choices": [{"index": 0, "delta": {"content": "berra"}, "finish_reason": "stop"}]},
            {**head, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}]
    go, ended = threading.Event(), threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                self.chunk(f"data: {json.dumps(first)}\n\n".encode())
                waited = go.wait(5)
                for event in rest:
                    self.chunk(f"data: {json.dumps(event)}\n\n".encode())
                self.chunk(b"data: [DONE]\n\n" if waited else b'data: {"late": true}\n\n')
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                self.close_connection = True
            finally:
                ended.set()

        def chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield PausingUpstream(f"http://127.0.0.1:{server.server_port}/v1", go, ended, first)
    finally:
        go.set()
        server.shutdown()
        server.server_close()


STREAMED_CHAT = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def test_events_are_passed_on_as_they_arrive_not_when_the_stream_ends(proxy: ModelProxy,
                                                                      pausing_upstream: PausingUpstream) -> None:
    """The upstream sends the rest only once the client has the first event: a proxy that held the stream back
    would leave both waiting (here: until the upstream's 5 s patience ends the stream without [DONE])."""
    up = pausing_upstream
    g = proxy.grant(Grant("t", OPENAI, up.url, KEY))
    headers = BY_ID["chat-openai"].headers(g.token)
    with HTTP.stream("POST", url(proxy, Wire.CHAT), json=STREAMED_CHAT, headers=headers) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data:")) == f"data: {json.dumps(up.first)}"
        up.go.set()
        rest = [line for line in lines if line.startswith("data:")]
    assert rest[-1] == "data: [DONE]"
    assert g.usage == Usage(9, 0, 2) and g.signals == []


def test_an_agent_hanging_up_mid_stream_is_no_provider_signal(proxy: ModelProxy,
                                                             pausing_upstream: PausingUpstream) -> None:
    """An Agent that stops reading (it timed out, or its Trial was cancelled) is the Agent's doing: a signal
    would make its Trial Errored instead of giving it its Reward."""
    up = pausing_upstream
    g = proxy.grant(Grant("t", OPENAI, up.url, KEY))
    client = httpx.Client(verify=tls(), timeout=10, trust_env=False)
    with client.stream("POST", url(proxy, Wire.CHAT), json=STREAMED_CHAT,
                       headers=BY_ID["chat-openai"].headers(g.token)) as r:
        assert next(line for line in r.iter_lines() if line.startswith("data:"))
    client.close()  # hang up with the stream half read
    for _ in range(500):
        if g.calls:
            break
        threading.Event().wait(0.01)
    (call,) = g.calls
    assert call.streamed and call.signal is None and g.signals == []
    assert json.dumps(up.first) in call.response


def test_models_lists_the_configurations_model_only(proxy: ModelProxy, double: ProviderDouble) -> None:
    g = grant(proxy, double, BY_ID["chat-openrouter"])
    r = HTTP.get(proxy.base_url() + "/v1/models", headers={"authorization": f"Bearer {g.token}"})
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == [OPENROUTER.model]
    assert HTTP.get(proxy.base_url() + "/v1/models").status_code == 401


@pytest.mark.parametrize("connection", ["none", "idle keep-alive", "closed by the client"])
def test_a_stopped_proxy_is_gone_whatever_connections_it_had(double: ProviderDouble, connection: str) -> None:
    """`stop` ends the server with no connection left at once (the end of every cell run) and one that still has
    a connection as uvicorn does; either way its thread has ended, and its port takes no call."""
    proxy = ModelProxy().start()
    url = proxy.base_url() + "/v1/models"
    client = httpx.Client(verify=tls(), timeout=10, trust_env=False)
    if connection != "none":
        g = grant(proxy, double, BY_ID["chat-openrouter"])
        assert client.get(url,
                          headers={"authorization": f"Bearer {g.token}"}).status_code == 200
    if connection == "closed by the client":
        client.close()
    proxy.stop()
    assert proxy._thread is not None and not proxy._thread.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=5, trust_env=False)
    client.close()


# ---- who may call ---------------------------------------------------------------------------------------------

@each_case
def test_without_a_live_trial_token_the_call_is_refused_with_401(proxy: ModelProxy, double: ProviderDouble,
                                                                 case: Case) -> None:
    g = grant(proxy, double, case)
    body = case.body([INSTRUCTION])
    for token in ("", "amber-trial-guessed", KEY):  # none, unknown, and the Provider's own key
        r = post(proxy, case, token, body)
        assert r.status_code == 401, r.text
        if case.wire is Wire.MESSAGES:
            assert r.json()["type"] == "error" and r.json()["error"]["type"] == "authentication_error"
        else:
            assert r.json()["error"]["code"] == "invalid_api_key"
    assert post(proxy, case, g.token, body).status_code == 200
    assert proxy.revoke(g.token) is g
    r = post(proxy, case, g.token, body)
    assert r.status_code == 401 and "Unknown or expired Trial token" in r.text
    assert len(double.received) == 1 and len(g.calls) == 1  # only the call with a live token went out


def test_the_token_may_come_as_bearer_or_as_x_api_key(proxy: ModelProxy, double: ProviderDouble) -> None:
    case = BY_ID["chat-openai"]
    g = grant(proxy, double, case)
    r = HTTP.post(url(proxy, Wire.CHAT), json=case.body([INSTRUCTION]), headers={"x-api-key": g.token})
    assert r.status_code == 200, r.text
    assert len(g.calls) == 1


def test_a_call_counts_for_the_trial_whose_token_it_carries(proxy: ModelProxy, double: ProviderDouble) -> None:
    case = BY_ID["messages-anthropic"]
    a = grant(proxy, double, case, trial="job-1/cell/capital/1")
    b = grant(proxy, double, case, trial="job-1/cell/capital/2")
    assert a.token != b.token
    for _ in range(2):
        assert post(proxy, case, b.token, case.body([INSTRUCTION])).status_code == 200
    assert a.calls == [] and a.usage == Usage()
    assert [c.trial for c in b.calls] == ["job-1/cell/capital/2"] * 2 and [c.seq for c in b.calls] == [0, 1]
    assert b.usage == Usage(2 * tokens(INSTRUCTION), 0, 2 * tokens(REPLY))
    proxy.revoke(b.token)
    assert post(proxy, case, a.token, case.body([INSTRUCTION])).status_code == 200  # a's token still works
    assert len(a.calls) == 1 and len(b.calls) == 2


@pytest.mark.parametrize(("case_id", "other"), [("messages-anthropic", Wire.CHAT),
                                                ("messages-anthropic", Wire.RESPONSES),
                                                ("chat-openrouter", Wire.RESPONSES),
                                                ("chat-openrouter", Wire.MESSAGES),
                                                ("chat-openai", Wire.MESSAGES)])
def test_a_wire_format_the_provider_does_not_speak_is_refused_with_400(
        proxy: ModelProxy, double: ProviderDouble, case_id: str, other: Wire) -> None:
    case = BY_ID[case_id]
    g = grant(proxy, double, case)
    body = Case("other", other, case.mc).body([INSTRUCTION])
    r = HTTP.post(url(proxy, other), json=body, headers=case.headers(g.token) | {"anthropic-version": "2023-06-01"})
    assert r.status_code == 400
    assert f"{case.mc.provider} does not speak the {other.value} wire format" in r.text
    assert double.received == [] and g.calls == [] and g.signals == []


def test_a_provider_the_workspace_policy_excludes_is_refused_with_403(proxy: ModelProxy,
                                                                     double: ProviderDouble) -> None:
    case = BY_ID["chat-openrouter"]
    g = grant(proxy, double, case, allowed_providers=frozenset({"anthropic", "openai"}))
    r = post(proxy, case, g.token, case.body([INSTRUCTION]))
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "provider_policy" and "deepinfra" in r.json()["error"]["message"]
    assert double.received == [] and g.calls == []
    allowed = grant(proxy, double, case, trial="t2", allowed_providers=frozenset({"deepinfra"}))
    assert post(proxy, case, allowed.token, case.body([INSTRUCTION])).status_code == 200


@dataclass
class Allowance:
    """A budget of a number of calls (the proxy's `Spending`): what it was asked and told, kept."""

    calls: int
    asked: list[Usage] = field(default_factory=list)
    spent: list[Usage] = field(default_factory=list)

    def hold(self, upfront: Usage) -> object | None:
        self.asked.append(upfront)
        return len(self.asked) if len(self.asked) <= self.calls else None

    def settle(self, hold: object, used: Usage) -> None:
        assert hold == len(self.spent) + 1  # each call settles its own hold, once
        self.spent.append(used)


@each_case
def test_a_call_past_the_ceiling_is_refused_with_402_and_stops_the_job(proxy: ModelProxy, double: ProviderDouble,
                                                                       case: Case) -> None:
    budget = Allowance(calls=1)
    g = grant(proxy, double, case, spending=budget)
    body = case.body([INSTRUCTION])
    assert post(proxy, case, g.token, body).status_code == 200
    assert not proxy.ceiling_reached.is_set()
    r = post(proxy, case, g.token, body)
    assert r.status_code == 402
    if case.wire is Wire.MESSAGES:
        assert r.json()["error"]["type"] == "billing_error"
    else:
        assert r.json()["error"]["code"] == "ceiling_reached"
    assert g.signals == [Signal.CEILING] and proxy.ceiling_reached.is_set()
    assert len(double.received) == 1 and len(g.calls) == 1  # the refused call never left
    # Asked with the call's input before it was made; told what the made call used.
    assert all(u.input_tokens > 0 and u.output_tokens == 0 for u in budget.asked)
    assert budget.spent == [Usage(tokens(INSTRUCTION), 0, tokens(REPLY))]


# ---- Provider trouble becomes a signal on the Trial ------------------------------------------------------------

def _status_of(kind: FaultKind, case: Case) -> int:
    return {"rate_limit": 429, "server_error": 500,
            "overloaded": 529 if case.wire is Wire.MESSAGES else 503}[kind]


@each_case
@streamed_or_not
@pytest.mark.parametrize("kind", ["rate_limit", "server_error", "overloaded"])
def test_provider_errors_are_passed_on_and_signalled(proxy: ModelProxy, double: ProviderDouble, case: Case,
                                                     stream: bool, kind: FaultKind) -> None:
    g = grant(proxy, double, case)
    double.inject(Fault(kind, retry_after=7))
    r = post(proxy, case, g.token, case.body([INSTRUCTION], stream))
    status = _status_of(kind, case)
    assert r.status_code == status, r.text
    expected = Signal.UPSTREAM_RATE_LIMIT if kind == "rate_limit" else Signal.UPSTREAM_SERVER_ERROR
    assert g.signals == [expected]
    assert (r.headers.get("retry-after") == "7") is (kind == "rate_limit")
    error = r.json()["error"]  # the Provider's own error body, in its own shape
    if case.wire is Wire.MESSAGES:
        assert error["type"] == {"rate_limit": "rate_limit_error", "server_error": "api_error",
                                 "overloaded": "overloaded_error"}[kind]
    elif case.openrouter_route:
        assert error["code"] == status and error["metadata"]["provider_name"] == "deepinfra"
    (call,) = g.calls
    assert call.status == status and call.signal == expected.value and call.usage == Usage()
    assert call.response == r.text and KEY not in call.response
    assert post(proxy, case, g.token, case.body([INSTRUCTION], stream)).status_code == 200  # the fault has passed
    assert g.signals == [expected]


@each_case
@streamed_or_not
def test_a_provider_slower_than_the_read_timeout_is_a_timeout(double: ProviderDouble, case: Case,
                                                              stream: bool) -> None:
    with ModelProxy(timeouts=ProxyTimeouts(connect=2.0, read=0.3)) as proxy:
        g = grant(proxy, double, case)
        double.inject(Fault("slow", delay_sec=3.0))
        r = post(proxy, case, g.token, case.body([INSTRUCTION], stream))
        assert r.status_code == 504, r.text
        assert g.signals == [Signal.UPSTREAM_TIMEOUT] and g.calls[0].signal == "upstream_timeout"
        assert g.usage == Usage()


@each_case
@streamed_or_not
def test_a_cut_connection_is_a_dropped_call(proxy: ModelProxy, double: ProviderDouble, case: Case,
                                            stream: bool) -> None:
    g = grant(proxy, double, case)
    double.inject(Fault("cut_stream", after_events=2))
    body = case.body([INSTRUCTION], stream)
    if stream:
        got = streamed(proxy, case, g.token, body)
        assert got.status == 200
        assert len(got.events) == 2  # what the Provider sent before the cut got through, and nothing more
        assert not any(d == "[DONE]" or name in ("response.completed", "message_stop") for name, d in got.events)
    else:
        r = post(proxy, case, g.token, body)
        assert r.status_code == 502
        error = r.json()["error"]
        assert error["type" if case.wire is Wire.MESSAGES else "code"] == (
            "api_error" if case.wire is Wire.MESSAGES else "upstream_dropped")
        assert REPLY not in r.text
    assert g.signals == [Signal.UPSTREAM_DROPPED]
    assert g.calls[0].signal == "upstream_dropped"


@streamed_or_not
def test_another_upstream_than_the_pinned_one_is_a_mismatch_and_its_answer_is_withheld(
        proxy: ModelProxy, double: ProviderDouble, stream: bool) -> None:
    case = BY_ID["chat-openrouter"]
    g = grant(proxy, double, case)
    double.inject(Fault("other_provider", served_by="SomeOtherHost"))
    body = case.body([INSTRUCTION], stream)
    if stream:
        got = streamed(proxy, case, g.token, body)
        assert got.events == [] and REPLY[:20].encode() not in got.raw
    else:
        r = post(proxy, case, g.token, body)
        assert r.status_code == 502
        assert r.json()["error"]["code"] == "provider_mismatch"
        assert "SomeOtherHost" in r.json()["error"]["message"] and REPLY[:20] not in r.text
    assert g.signals == [Signal.PROVIDER_MISMATCH]
    (call,) = g.calls
    assert call.served_by == "SomeOtherHost" and call.signal == "provider_mismatch"
    assert "SomeOtherHost" in call.response  # the transcript keeps what the other Provider said
    # The pinned upstream, named as OpenRouter names it in answers ("DeepInfra" for the slug "deepinfra"), is fine.
    double.inject(Fault("other_provider", served_by="DeepInfra"))
    assert post(proxy, case, g.token, case.body([INSTRUCTION])).status_code == 200
    assert g.signals == [Signal.PROVIDER_MISMATCH]


def test_only_openrouter_configurations_are_checked_for_the_serving_provider(proxy: ModelProxy,
                                                                            double: ProviderDouble) -> None:
    case = BY_ID["chat-openai"]  # OpenAI serves its own models: a "provider" field in its answer means nothing
    g = grant(proxy, double, case)
    double.inject(Fault("other_provider"))
    assert post(proxy, case, g.token, case.body([INSTRUCTION])).status_code == 200
    assert g.signals == []


# ---- transcripts keep no secret ------------------------------------------------------------------------------

@each_case
@streamed_or_not
def test_a_key_the_provider_echoes_is_removed_from_the_transcript(proxy: ModelProxy, double: ProviderDouble,
                                                                  case: Case, stream: bool) -> None:
    g = grant(proxy, double, case)
    body = case.body([SECRET_INSTRUCTION], stream)
    if stream:
        assert streamed(proxy, case, g.token, body).status == 200
    else:
        assert post(proxy, case, g.token, body).status_code == 200
    (call,) = g.calls
    assert KEY not in call.request + call.response and g.token not in call.request + call.response
    assert "[key removed]" in call.response


def test_an_upstream_refusing_the_key_leaks_neither_key_nor_token(proxy: ModelProxy,
                                                                  double: ProviderDouble) -> None:
    case = BY_ID["chat-openai"]
    g = proxy.grant(Grant("t", case.mc, double.base_url, "sk-wrong-" + secrets.token_hex(12)))
    r = post(proxy, case, g.token, case.body([INSTRUCTION]))
    assert r.status_code == 401 and g.signals == []  # the Provider's refusal, passed on: not a signal
    assert g.key is not None and g.key not in r.text and g.token not in r.text
    assert g.key not in g.calls[0].response


# ---- StreamTap: the stream reader, fed the Providers' events in every split -------------------------------------

Events = list[tuple[str | None, Any]]


def sse(events: Events, newline: str = "\n") -> bytes:
    out = ""
    for name, data in events:
        if name:
            out += f"event: {name}{newline}"
        out += f"data: {data if isinstance(data, str) else json.dumps(data)}{newline}{newline}"
    return out.encode()


# As the Providers' API references show them (values made up).
CHAT_STREAM: Events = [(None, {"id": "c", "provider": "DeepInfra", "choices": [{"delta": {"role": "assistant"}}],
                       "usage": None}),
               (None, ": OPENROUTER PROCESSING"),
               (None, {"id": "c", "provider": "DeepInfra", "choices": [{"delta": {"content": "Hi"}}], "usage": None}),
               (None, {"id": "c", "provider": "DeepInfra", "choices": [],
                       "usage": {"prompt_tokens": 1200, "completion_tokens": 37, "total_tokens": 1237,
                                 "prompt_tokens_details": {"cached_tokens": 1024}}}),
               (None, "[DONE]")]
RESPONSES_STREAM: Events = [("response.created", {"type": "response.created", "response": {"usage": None}}),
                    ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Hi"}),
                    ("response.completed", {"type": "response.completed", "response": {
                        "usage": {"input_tokens": 500, "input_tokens_details": {"cached_tokens": 128},
                                  "output_tokens": 90, "output_tokens_details": {"reasoning_tokens": 64}}}})]
MESSAGES_STREAM: Events = [("message_start", {"type": "message_start", "message": {"usage": {
                        "input_tokens": 25, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 2000,
                        "output_tokens": 1}}}),
                   ("ping", {"type": "ping"}),
                   ("content_block_delta", {"type": "content_block_delta", "delta": {"text": "Hi"}}),
                   ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                      "usage": {"output_tokens": 512}}),
                   ("message_stop", {"type": "message_stop"})]
TAP_CASES: dict[Wire, tuple[Events, Usage, str | None]] = {Wire.CHAT: (CHAT_STREAM, Usage(1200, 1024, 37), "DeepInfra"),
             Wire.RESPONSES: (RESPONSES_STREAM, Usage(500, 128, 90), None),
             Wire.MESSAGES: (MESSAGES_STREAM, Usage(2325, 2000, 512), None)}


def splits(data: bytes, how: str, rng: random.Random) -> list[bytes]:
    if how == "whole":
        return [data]
    if how == "bytes":
        return [data[i:i + 1] for i in range(len(data))]
    cuts = sorted(rng.sample(range(1, len(data)), 12))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


@pytest.mark.parametrize("wire", list(TAP_CASES), ids=[w.value for w in TAP_CASES])
@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("how", ["whole", "bytes", "random"])
def test_stream_tap_reads_usage_and_end_however_the_bytes_are_split(wire: Wire, newline: str, how: str) -> None:
    events, usage, served_by = TAP_CASES[wire]
    data = sse(events, newline)
    for seed in range(5 if how == "random" else 1):
        tap = StreamTap(wire)
        for piece in splits(data, how, random.Random(seed)):
            tap.feed(piece)
        assert tap.reading.usage == usage
        assert tap.reading.served_by == served_by
        assert tap.reading.complete


@pytest.mark.parametrize("wire", list(TAP_CASES), ids=[w.value for w in TAP_CASES])
def test_stream_tap_sees_a_stream_without_its_end_as_incomplete(wire: Wire) -> None:
    events, _, _ = TAP_CASES[wire]
    tap = StreamTap(wire)
    data = sse(events[:-1])
    for i in range(len(data)):
        tap.feed(data[i:i + 1])
    assert not tap.reading.complete
    last = sse(events[-1:])
    tap.feed(last[:-1])  # the last event without its blank line has not ended yet
    assert not tap.reading.complete
    tap.feed(last[-1:])
    assert tap.reading.complete


def test_stream_tap_keeps_anthropics_input_when_the_delta_reports_output_only() -> None:
    tap = StreamTap(Wire.MESSAGES)
    tap.feed(sse(MESSAGES_STREAM[:1]))
    assert tap.reading.usage == Usage(2325, 2000, 1)  # message_start: input known, output counting
    tap.feed(sse(MESSAGES_STREAM[3:4]))
    assert tap.reading.usage == Usage(2325, 2000, 512)


def test_stream_tap_ignores_comments_and_what_is_not_json() -> None:
    tap = StreamTap(Wire.CHAT)
    tap.feed(b": keep-alive\n\nevent: x\ndata: not json\n\ndata: [1, 2]\n\n")
    assert tap.reading.usage == Usage() and not tap.reading.complete
