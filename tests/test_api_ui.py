"""The Dagster UI under the hosted API: staff only, behind the API's sign-in, read-only unless operator.

One real API server (uvicorn, with websockets) on loopback for the module, on a temporary AMBER_HOME, with the
Dagster UI mounted at /ui as `amber serve` mounts it; users and tokens are made as staff make them. After the
server stops, no process it started (Dagster's code server) is left.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from servers.api import ApiServer
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin, Subprotocol

from amber_pipeline import embedded
from amber_pipeline.accounts import tokens, users
from amber_pipeline.cli.client import tls
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from server import dagster_ui as dagster_ui_module
from server.dagster_ui import COOKIE, STAFF_ONLY, WS_REFUSED, dagster_ui

pytestmark = [pytest.mark.dagster_ui]

PERMISSIONS = "{ permissions { permission value } }"
LOCATIONS = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
LAUNCH = """
mutation {
  launchRun(executionParams: {selector: {repositoryLocationName: "amber", repositoryName: "__repository__",
                                         jobName: "submit_job"}}) { __typename }
}"""
GRAPHQL_WS = [Subprotocol("graphql-ws")]  # the one Dagster speaks
STAFF, OPERATOR, OUTSIDER = "stella", "otto", "nora"


@dataclass
class Server:
    url: str
    wh: Warehouse

    def client(self, secret: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        return httpx.Client(verify=tls(), base_url=self.url, headers=headers, timeout=60, trust_env=False)

    def token(self, user: str) -> tokens.Minted:
        return tokens.create(self.wh, user, name=f"{user} in a test")

    @contextlib.contextmanager
    def signed_in(self, user: str) -> Iterator[tuple[httpx.Client, tokens.Minted]]:
        """A browser-like client with a session cookie, as signing in on the page gives one."""
        minted = self.token(user)
        with self.client() as client:
            response = client.post("/ui/signin", data={"token": minted.secret})
            assert response.status_code == 303 and response.headers["location"] == "/ui/", response.text
            yield client, minted


def graphql(client: httpx.Client, query: str) -> dict[str, Any]:
    response = client.post("/ui/graphql", json={"query": query})
    assert response.status_code == 200, response.text
    body = response.json()
    assert "errors" not in body, body["errors"]
    return body["data"]



def descendants() -> set[int]:
    """The processes this one started (their children too), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("api-ui") / "amber"
    before = descendants()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_HOME", str(home))
        mp.setenv("AMBER_CONFIG", str(home.parent / "amber-config.toml"))
        paths = AmberPaths.from_env()
        # The UI gives this process the embedded instance's environment (its code server inherits it): set the
        # same here first, so the module leaves the environment as it found it.
        for name, value in embedded.environment(paths).items():
            mp.setenv(name, value)
        wh = Warehouse(paths)
        users.add(wh, STAFF, "test", roles=("staff",))
        users.add(wh, OPERATOR, "test", roles=("staff", "operator"))
        users.add(wh, OUTSIDER, "test")
        ui = dagster_ui(paths, wh)
        api = ApiServer.start(paths, ui=ui)
        try:
            yield Server(api.url, wh)
        finally:
            api.stop()
            ui.close()
    left = descendants() - before
    assert not left, f"the Dagster UI left processes behind: {left}"


def test_without_sign_in_pages_go_to_the_sign_in_form_and_requests_are_refused(server: Server) -> None:
    with server.client() as client:
        page = client.get("/ui/", headers={"Accept": "text/html"})
        assert page.status_code == 303 and page.headers["location"] == "/ui/signin"
        form = client.get("/ui/signin")
        assert form.status_code == 200 and 'name="token"' in form.text
        refused = client.post("/ui/graphql", json={"query": "{ version }"})
        assert refused.status_code == 401 and refused.json()["detail"].startswith("Sign in")
        assert client.get("/ui/server_info").status_code == 401
    with server.client("amber_tok000000000000_not-a-token") as client:
        assert client.post("/ui/graphql", json={"query": "{ version }"}).status_code == 401


def test_staff_sign_in_sets_a_strict_cookie_and_serves_dagster(server: Server) -> None:
    minted = server.token(STAFF)
    with server.client() as client:
        response = client.post("/ui/signin", data={"token": minted.secret})
        assert response.status_code == 303 and response.headers["location"] == "/ui/"
        cookie = response.headers["set-cookie"]
        attributes = {part.strip().lower() for part in cookie.split(";")}
        assert cookie.startswith(f"{COOKIE}=") and minted.secret not in cookie
        # one sign-in for the whole server: the web app's session too
        assert {"httponly", "samesite=strict", "path=/"} <= attributes and "secure" not in attributes
        page = client.get("/ui/", headers={"Accept": "text/html"})
        assert page.status_code == 200 and ">Dagster</title>" in page.text, page.text[:500]
        assert '"assetPrefix":"/ui"' in page.text  # its scripts and GraphQL load from under /ui
        assert graphql(client, "{ version }")["version"]
        entries = graphql(client, LOCATIONS)["workspaceOrError"]["locationEntries"]
        assert [(e["name"], e["loadStatus"]) for e in entries] == [("amber", "LOADED")]
        # Signing out ends the session: the same cookie opens nothing.
        stale = dict(client.cookies)
        assert client.post("/ui/signout").status_code == 303
        with server.client() as other:
            other.cookies.update(stale)
            assert other.post("/ui/graphql", json={"query": "{ version }"}).status_code == 401


def test_a_bad_token_at_sign_in_shows_the_form_again(server: Server) -> None:
    with server.client() as client:
        response = client.post("/ui/signin", data={"token": "amber_tok000000000000_guess"})
        assert response.status_code == 401 and 'name="token"' in response.text
        assert COOKIE not in response.headers.get("set-cookie", "")


def test_websocket_needs_a_session(server: Server) -> None:
    url = server.url.replace("http://", "ws://") + "/ui/graphql"
    with pytest.raises(InvalidStatus) as refused:
        connect(url, subprotocols=GRAPHQL_WS, open_timeout=30).close()
    assert refused.value.response.status_code == 403
    with pytest.raises(InvalidStatus):
        connect(url, subprotocols=GRAPHQL_WS, open_timeout=30,
                additional_headers={"Cookie": f"{COOKIE}=made-up"}).close()
    with server.signed_in(STAFF) as (client, _):
        cookie = {"Cookie": f"{COOKIE}={client.cookies[COOKIE]}"}
        with connect(url, subprotocols=GRAPHQL_WS, open_timeout=30, additional_headers=cookie) as ws:
            assert ws.subprotocol == "graphql-ws"
            ws.send(json.dumps({"type": "connection_init", "payload": {}}))
            assert json.loads(ws.recv(timeout=30))["type"] == "connection_ack"
        # A page of another site cannot use the session, even where a browser would send the cookie.
        with pytest.raises(InvalidStatus):
            connect(url, subprotocols=GRAPHQL_WS, open_timeout=30, origin=Origin("http://elsewhere.example"),
                    additional_headers=cookie).close()
    with connect(url, subprotocols=GRAPHQL_WS, open_timeout=30,
                 additional_headers={"Authorization": f"Bearer {server.token(STAFF).secret}"}) as ws:
        ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(ws.recv(timeout=30))["type"] == "connection_ack"


def test_an_open_websocket_ends_when_its_token_is_revoked(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dagster_ui_module, "WS_RECHECK_S", 0.2)
    url = server.url.replace("http://", "ws://") + "/ui/graphql"
    with server.signed_in(STAFF) as (client, minted), connect(
            url, subprotocols=GRAPHQL_WS, open_timeout=30,
            additional_headers={"Cookie": f"{COOKIE}={client.cookies[COOKIE]}"}) as ws:
        ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(ws.recv(timeout=30))["type"] == "connection_ack"
        tokens.revoke(server.wh, STAFF, minted.token.id)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == WS_REFUSED


def test_non_staff_users_are_refused(server: Server) -> None:
    minted = server.token(OUTSIDER)
    with server.client() as client:
        response = client.post("/ui/signin", data={"token": minted.secret})
        assert response.status_code == 403 and "The Dagster UI is for Amber staff" in response.text
        assert "set-cookie" not in response.headers
    with server.client(minted.secret) as client:
        response = client.post("/ui/graphql", json={"query": "{ version }"})
        assert response.status_code == 403 and response.json() == {"detail": STAFF_ONLY}


def test_revoking_the_token_ends_the_session_at_once(server: Server) -> None:
    with server.signed_in(STAFF) as (client, minted):
        assert graphql(client, "{ version }")["version"]
        tokens.revoke(server.wh, STAFF, minted.token.id)
        assert client.post("/ui/graphql", json={"query": "{ version }"}).status_code == 401
        page = client.get("/ui/runs", headers={"Accept": "text/html"})
        assert page.status_code == 303 and page.headers["location"] == "/ui/signin"


def test_losing_the_staff_role_closes_the_dagster_ui_at_once(server: Server) -> None:
    """The role is checked at every request: the session is the user's sign-in (the web app's too, which needs no
    role), so it stays, and the Dagster UI opens again only once the role is given back."""
    users.add(server.wh, "sam", "test", roles=("staff",))
    with server.signed_in("sam") as (client, _):
        assert graphql(client, "{ version }")["version"]
        users.revoke_role(server.wh, "sam", "staff")
        assert client.post("/ui/graphql", json={"query": "{ version }"}).status_code == 403
        assert client.get("/ui/runs", headers={"Accept": "text/html"}).status_code == 403
        users.add(server.wh, "sam", "test", roles=("staff",))
        assert graphql(client, "{ version }")["version"]


def test_an_expired_token_is_refused(server: Server) -> None:
    minted = server.token(STAFF)
    with server.wh.write() as con:
        con.execute("update api_tokens set expires_at = ? where id = ?",
                    [datetime.now(UTC) - timedelta(minutes=1), minted.token.id])
    with server.client() as client:
        assert client.post("/ui/signin", data={"token": minted.secret}).status_code == 401
    with server.client(minted.secret) as client:
        assert client.post("/ui/graphql", json={"query": "{ version }"}).status_code == 401


def test_an_expiring_session_ends_with_its_token(server: Server) -> None:
    with server.signed_in(STAFF) as (client, minted):
        assert graphql(client, "{ version }")["version"]
        with server.wh.write() as con:
            con.execute("update api_tokens set expires_at = ? where id = ?",
                        [datetime.now(UTC) - timedelta(minutes=1), minted.token.id])
        assert client.post("/ui/graphql", json={"query": "{ version }"}).status_code == 401


def test_staff_read_only_operators_may_launch(server: Server) -> None:
    with server.client(server.token(STAFF).secret) as staff:
        allowed = {p["permission"]: p["value"] for p in graphql(staff, PERMISSIONS)["permissions"]}
        assert allowed["launch_pipeline_execution"] is False and allowed["terminate_pipeline_execution"] is False
        assert graphql(staff, LAUNCH)["launchRun"]["__typename"] == "UnauthorizedError"
    with server.client(server.token(OPERATOR).secret) as operator:
        allowed = {p["permission"]: p["value"] for p in graphql(operator, PERMISSIONS)["permissions"]}
        assert allowed["launch_pipeline_execution"] is True and allowed["terminate_pipeline_execution"] is True


def test_the_code_server_runs_as_a_child_while_serving(server: Server) -> None:
    """What the module's teardown checks is gone: Dagster's code server, started by the UI in this process."""
    with server.client(server.token(STAFF).secret) as staff:
        graphql(staff, "{ version }")
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ") for pid in descendants()]
    assert any(b"dagster" in c and b"grpc" in c for c in commands), commands
