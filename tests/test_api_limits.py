"""Limits before work: what a hostile member of a hosted Amber can make it read, hold, or say back.

A real server (`servers/api.py`, the app `amber serve` runs, on uvicorn on loopback). The token is checked before
the body is read, so a request without one costs the server nothing; a body is bounded per route (small, but for
an upload's file); a refusal that quotes what a user sent quotes a bounded part of it; an amount is one rule, the
CLI's and the API's alike, documented as a string; a task.toml is bounded; and `/docs` works with no network.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import cli, free_port, refusal, stop_group
from servers.api import ApiServer

from amber_pipeline.accounts import tokens, users, workspaces
from amber_pipeline.accounts.identity import Actor, local_user
from amber_pipeline.benchmarks.intake.checks import check_tasks
from amber_pipeline.benchmarks.tasks import MAX_TASK_FILE_BYTES, load_task
from amber_pipeline.cli.client import tls
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import lifecycle
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money import wallet
from amber_pipeline.money.amounts import parse_amount
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.user_text import SHOWN_CHARACTERS, quoted
from amber_pipeline.warehouse.catalog import Warehouse
from server.routes import BODY_BYTES

STATIC = PROJECT_ROOT / "examples" / "static-bench"
MB = 1 << 20


@dataclass(frozen=True)
class Server:
    wh: Warehouse
    api: ApiServer
    bob: str  # his token
    staff: str  # a staff user's

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(verify=tls(), base_url=self.api.url, headers=headers, timeout=120)


@pytest.fixture
def server(warehouse: Warehouse) -> Iterator[Server]:
    """bob, in his Workspace "beta" with $100 and the static example Benchmark as his static-bench@1; carol is
    staff."""
    users.add(warehouse, "bob", "tests")
    users.add(warehouse, "carol", "tests", ("staff",))
    workspaces.create(warehouse, Actor("bob", None), "beta")
    wallet.add_credit(warehouse, Actor(local_user(), None), "beta", "100", "test credit")
    lifecycle.quote(warehouse, "beta", "bob", JobRequest(benchmark=str(STATIC), agent="direct",
                                                         model_configurations=["replay-strong"]))
    bob, carol = tokens.create(warehouse, "bob").secret, tokens.create(warehouse, "carol").secret
    api = ApiServer.start(warehouse.paths)
    try:
        yield Server(warehouse, api, bob, carol)
    finally:
        api.stop()


# ---- the token before the body ------------------------------------------------------------------------------

def test_without_a_token_a_big_body_is_refused_as_unsigned(server: Server) -> None:
    """Finding 3: 10 MB of anything, with no token or a bad one, is a 401, not a body the server parsed."""
    for token in (None, "amber_tok0_x", server.bob[:-4] + "AAAA"):
        with server.http(token) as http:
            answer = http.post("/v1/workspaces/beta/sql", content=b"{" * (10 * MB),
                               headers={"content-type": "application/json"})
        assert answer.status_code == 401 and answer.json() == {"detail": tokens.REFUSED}, answer.text[:200]


def peak_rss(pid: int) -> int:
    """The most memory process `pid` has held, in bytes (VmHWM)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)[1]) * 1024  # type: ignore[index]


SERVE = ("import sys, uvicorn\n"
         "from pathlib import Path\n"
         "from amber_pipeline.paths import AmberPaths\n"
         "from server.routes import create_app\n"
         "uvicorn.run(create_app(AmberPaths(Path(sys.argv[1]))), host='127.0.0.1', port=int(sys.argv[2]), "
         "log_level='warning')\n")


def test_without_a_token_a_big_body_is_never_held(warehouse: Warehouse) -> None:
    """Finding 3: 50 MB sent with no token leaves the server's peak memory where it was (it grew 100 MB before)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", SERVE, str(warehouse.paths.home), str(port)],
                               cwd=PROJECT_ROOT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/openapi.json", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
        httpx.post(f"{url}/v1/workspaces/beta/sql", json={"query": "select 1"})  # the route warmed up
        before = peak_rss(process.pid)
        chunk = b"x" * MB

        def body() -> Iterator[bytes]:
            for _ in range(50):
                yield chunk

        answer = httpx.post(f"{url}/v1/workspaces/beta/sql", content=body(), timeout=120,
                            headers={"content-type": "application/json", "content-length": str(50 * MB)})
        assert answer.status_code == 401, answer.text[:200]
        grown = peak_rss(process.pid) - before
        assert grown < 8 * MB, f"the server's peak memory grew {grown / MB:.0f} MB"
    finally:
        stop_group(process)


# ---- a body limit per route -----------------------------------------------------------------------------------

def test_a_request_past_the_body_limit_is_refused_unread(server: Server) -> None:
    """Every route but an upload's takes a small body: past it, 413 and one sentence, declared or streamed."""
    query = "select 1 -- " + "x" * (BODY_BYTES + 1)
    with server.http(server.bob) as http:
        declared = http.post("/v1/workspaces/beta/sql", json={"query": query})
        streamed = http.post("/v1/workspaces/beta/sql", content=iter([json.dumps({"query": query}).encode()]),
                             headers={"content-type": "application/json"})
        within = http.post("/v1/workspaces/beta/sql", json={"query": "select 1 -- " + "x" * (BODY_BYTES // 2)})
    for answer in (declared, streamed):
        assert answer.status_code == 413, answer.text[:200]
        assert answer.json()["detail"] == (f"The request is larger than {BODY_BYTES // MB} MB: send a smaller "
                                           "one (only an upload's archive or file may be larger).")
    assert within.status_code == 200, within.text[:200]


def test_an_upload_keeps_its_own_limit(warehouse: Warehouse, tmp_path: Path) -> None:
    """An upload's file may be larger than other bodies; past the upload limit it is 413 too, also when it
    arrives without a Content-Length (it was a 400 "error parsing the body")."""
    users.add(warehouse, "bob", "tests")
    secret = tokens.create(warehouse, "bob").secret
    api = ApiServer.start(warehouse.paths, max_request_bytes=4 * MB)
    try:
        def upload(size: int, declared: bool) -> httpx.Response:
            request = httpx.Request("POST", f"{api.url}/v1/workspaces/~/uploads",
                                    files={"archive": ("big.tar.gz", b"\0" * size)},
                                    data={"params": json.dumps({"name": "big"})},
                                    headers={"authorization": f"Bearer {secret}"})
            body = request.read()
            headers = {k: v for k, v in request.headers.items() if declared or k != "content-length"}
            with httpx.Client(verify=tls(), timeout=120) as http:
                return http.post(request.url, content=body if declared else iter([body]), headers=headers)

        for declared in (True, False):
            past = upload(5 * MB, declared)
            assert past.status_code == 413, past.text[:200]
            assert past.json()["detail"] == ("The request is larger than 4 MB: send a smaller archive or file (an "
                                             "upload may be 100 MB).")
        within = upload(2 * MB, True)  # past the small limit, within the upload's: the upload's own checks answer
        assert within.status_code == 400 and "archive" in within.json()["detail"], within.text[:200]
    finally:
        api.stop()


# ---- refusals quote a bounded part of what was sent ------------------------------------------------------------

def test_quoted_text_is_bounded() -> None:
    assert quoted('a "b"\n') == '"a \\"b\\"\\n"'  # short text: whole, escaped, on one line
    long = "é" * 10_000 + "\n"
    shown = quoted(long)
    assert shown == json.dumps("é" * SHOWN_CHARACTERS + "…", ensure_ascii=False) + " (10,001 characters)"
    assert quoted("x" * SHOWN_CHARACTERS) == json.dumps("x" * SHOWN_CHARACTERS)  # at the bound: whole


def test_a_refusal_quotes_a_bounded_part_of_a_long_name(server: Server) -> None:
    """Finding 4: a Workspace named by 500,000 characters is refused in a sentence of a few hundred."""
    with server.http(server.bob) as http:
        answer = http.post("/v1/workspaces", json={"name": "n" * 500_000})
    assert answer.status_code == 400 and len(answer.text) < 1_000, len(answer.text)
    assert "(500,000 characters) is not a valid Workspace name" in answer.json()["detail"]


def test_a_malformed_request_quotes_a_bounded_part_of_it(server: Server) -> None:
    """A field the params model refuses is named bounded too (here a name of 500,000 characters)."""
    with server.http(server.bob) as http:
        extra = http.post("/v1/workspaces/beta/quotes", files={"folder": ("x.tar.gz", b"")},
                          data={"params": json.dumps({"benchmark": "static-bench@1", "k" * 500_000: 1})})
    assert extra.status_code == 400 and len(extra.text) < 1_000, (extra.status_code, len(extra.text))
    assert extra.json()["detail"].endswith("(500,000 characters): Extra inputs are not permitted; fix the request.")


# ---- one amount rule for the CLI and the API -------------------------------------------------------------------

RULE = "give a plain amount of dollars above zero with at most 6 decimals, like 100 or 12.50, up to $1,000,000."
BAD_TEXTS = ["1e1", "1_0", " 10", "10 ", "NaN", "inf", "Infinity", "-5", "+5", "1.0000001", "0", "", "0x10", "١٠"]
BAD_NUMBERS = ["1e1", "10", "10.0", "12.5", "-5", "true", "[\"10\"]"]  # JSON, as the request's text has it


def refused_amount(shown: str, option: str) -> str:
    return f"{shown} is not an amount for {option}: {RULE}"


def quote_params(ceiling: str) -> str:
    """A Quote's params as JSON text, `ceiling` the JSON text of its ceiling_usd."""
    return ('{"benchmark": "static-bench@1", "agent": "direct", "model_configurations": ["replay-strong"], '
            f'"ceiling_usd": {ceiling}}}')


def test_the_api_refuses_an_amount_the_cli_refuses(server: Server) -> None:
    """Finding 5: `"1e1"`, the JSON number `1e1` and `"1_0"` each reserved $10; now each is the CLI's sentence."""
    _, before = wallet.read(server.wh, "beta")
    cases = [(json.dumps(text), quoted(text)) for text in BAD_TEXTS]
    cases += [(number, f"{json.dumps(json.loads(number))} (not a string)") for number in BAD_NUMBERS]
    with server.http(server.bob) as http:
        for sent, shown in cases:
            quote = http.post("/v1/workspaces/beta/quotes", data={"params": quote_params(sent)})
            assert (quote.status_code, quote.json()["detail"]) == (400, refused_amount(shown, "--ceiling")), sent
            body = f'{{"job_id": "job-0123456789", "amount": {sent}}}'
            going_on = http.post("/v1/workspaces/beta/jobs/job-0123456789/continue", content=body,
                                 headers={"content-type": "application/json"})
            assert going_on.json()["detail"] == refused_amount(shown, "--amount"), sent
    with server.http(server.staff) as http:
        for sent, shown in cases:
            credit = http.post("/v1/workspaces/beta/credits", content=f'{{"amount": {sent}, "reason": "r"}}',
                               headers={"content-type": "application/json"})
            assert credit.json()["detail"] == refused_amount(shown, "--amount"), sent
    _, after = wallet.read(server.wh, "beta")
    assert after == before  # nothing reserved, nothing credited
    with server.http(server.bob) as http:
        plain = http.post("/v1/workspaces/beta/quotes", data={"params": quote_params('"10"')})
    assert plain.status_code == 200 and Decimal(plain.json()["amount"]) == 10, plain.text


def test_the_cli_refuses_with_the_same_sentence(amber_home: Path) -> None:
    for text in BAD_TEXTS:
        assert refusal(cli("job", "quote", str(STATIC), "--agent", "direct", "--model", "replay-strong",
                           "--ceiling", text)) == refused_amount(quoted(text), "--ceiling")
        with pytest.raises(AmberError) as refused:
            parse_amount(text, "--ceiling")
        assert str(refused.value) == refused_amount(quoted(text), "--ceiling")


def test_the_openapi_document_gives_amounts_as_strings(server: Server) -> None:
    document = httpx.get(f"{server.api.url}/openapi.json").json()

    def resolved(schema: dict[str, Any]) -> dict[str, Any]:
        ref = schema.get("$ref", "")
        return document["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else schema

    def request_field(route: str, name: str) -> dict[str, Any]:
        """The schema of a request's field `name` (an upload's: inside the JSON of its params form field)."""
        content = document["paths"][route]["post"]["requestBody"]["content"]
        fields = resolved(next(iter(content.values()))["schema"])["properties"]
        fields = fields["params"]["contentSchema"]["properties"] if "params" in fields else fields
        shown = fields[name]
        return next((s for s in shown.get("anyOf", [shown]) if s.get("type") != "null"), shown)

    for route, name in (("/v1/workspaces/{workspace}/quotes", "ceiling_usd"),
                        ("/v1/workspaces/{workspace}/jobs", "ceiling_usd"),
                        ("/v1/workspaces/{workspace}/credits", "amount"),
                        ("/v1/workspaces/{workspace}/jobs/{job_id}/continue", "amount")):
        shown = request_field(route, name)
        assert shown["type"] == "string" and re.fullmatch(shown["pattern"], "12.50"), (route, shown)
        assert not re.fullmatch(shown["pattern"], "1e1"), (route, shown)


# ---- a bounded task.toml ----------------------------------------------------------------------------------------

def test_a_task_toml_past_its_limit_is_refused_in_one_sentence(tmp_path: Path) -> None:
    """A valid task.toml of more than MAX_TASK_FILE_BYTES is refused unread, at upload and in a local folder."""
    bench = tmp_path / "bench"
    shutil.copytree(STATIC / "capital-city", bench / "capital-city")
    shutil.copytree(STATIC / "invoice-total", bench / "invoice-total")
    task_file = bench / "capital-city" / "task.toml"
    task_file.write_text(task_file.read_text() + "# padding\n" * (MAX_TASK_FILE_BYTES // 10 + 1))
    sentence = (f"{task_file} is larger than {MAX_TASK_FILE_BYTES // MB} MB: a task.toml holds a Task's settings, "
                "so keep data in the Task's other files.")
    checked = {c.name: c for c in check_tasks(bench)}
    assert checked["invoice-total"].ok and not checked["capital-city"].ok  # the others go on
    assert checked["capital-city"].reason == sentence.replace(f"{bench}/", "")
    with pytest.raises(AmberError) as refused:
        load_task(bench / "capital-city", bench)
    assert str(refused.value) == sentence


# ---- /docs without a network ----------------------------------------------------------------------------------

def test_the_docs_load_nothing_from_elsewhere(server: Server) -> None:
    for page in ("/docs", "/redoc"):
        html = httpx.get(server.api.url + page).text
        urls = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"]([^'"]+)['"]""", html)
        assert urls and all(u.startswith("/") and not u.startswith("//") for u in urls), (page, urls)
        scripts = [u for u in urls if u.endswith(".js")]
        assert scripts, (page, urls)
        for url in urls:
            served = httpx.get(server.api.url + url)
            assert served.status_code == 200, url
        assert all(len(httpx.get(server.api.url + u).text) > 100_000 for u in scripts), scripts
