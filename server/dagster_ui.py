"""The Dagster UI of a hosted Amber, served under the API at /ui behind Amber's own sign-in.

The UI shows every Workspace's runs, so only staff may see it; it is read-only
unless the user is also an operator, who may launch, cancel and re-execute runs.
Dagster's own webserver has no users, so the gate here decides who gets in and
which of two Dagster apps answers: one made read-only, one writable. Both run in
this process on the embedded instance (DAGSTER_HOME in AMBER_HOME) and its
workspace file, share the instance and one code server, and are made on first use,
so importing this module and creating the API stay cheap.

Signing in: the browser posts a personal API token to /ui/signin once; the gate
then keeps a server-side session (a random id in an `amber_session` cookie, the
token id in memory, never the token) and checks the token and the user's roles
again at every request and websocket, so a revoked or expired token or a lost
staff role ends the session at once. Scripts may instead send
`Authorization: Bearer <token>` with each request, checked the same way.

Cross-site requests: the cookie is SameSite=Strict, so a page of another site
cannot make the browser send it (websockets included), and signing in needs the
token itself in the form, so no other CSRF token is needed. A websocket whose
Origin names another host is refused as well, for browsers that are lax about it.

Launches: every run an operator launches acts for them, never for the server's
login: the gate tags each with a launch id issued for the signed-in user, in place
of any identity the browser sent (`launches.py`), and Amber's ops act for the user
the id names (`assets/job_requests.py`).

The embedded default (`amber ui`, `python -m server --local`) has no gate: it serves on the host to the local
login, who is staff there, as Dagster's own webserver did. Every request and websocket reaches the writable app
without sign-in, and runs carry no launch id, so they act for the local login as on the CLI. Only a websocket
from a page of another site is still refused: it costs the UI nothing and keeps other sites from reading the runs.
"""

from __future__ import annotations

import contextlib
import html
import json
from urllib.parse import parse_qs, urlsplit

import anyio.to_thread
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.types import Message, Receive, Scope, Send

from amber_pipeline.accounts import launches as launch_ids
from amber_pipeline.accounts import tokens, users
from amber_pipeline.errors import AmberError, Forbidden, NotFound
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from launcher.webserver import DagsterApps
from server import launches
from web.sessions import COOKIE, Sessions

PREFIX = "/ui"  # where the API mounts this app; Dagster's pages load their scripts and GraphQL from under it
WS_REFUSED = 4401  # closing before accepting: the server answers the upgrade with 403, Dagster never sees it
WS_RECHECK_S = 10.0  # how often an open websocket's sign-in is checked again
MAX_FORM_BYTES = 8192
MAX_GRAPHQL_BYTES = 16 << 20  # an operator's GraphQL request is read whole, to tag the runs it launches
GRAPHQL_TOO_LARGE = f"That GraphQL request is larger than {MAX_GRAPHQL_BYTES >> 20} MB: send a smaller one."
NO_SESSION = "Sign in to the Dagster UI at /ui/signin with an API token of an Amber staff user."
STAFF_ONLY = "The Dagster UI is for Amber staff: ask Amber staff to give you the staff role."


def dagster_ui(paths: AmberPaths, wh: Warehouse, local: bool = False, sessions: Sessions | None = None) -> DagsterUI:
    """The Dagster UI of the instance in `paths` behind sign-in (`local`: the embedded default's, open to the
    local login without one), to mount at /ui; call its `close()` when the server stops (it also closes on an
    ASGI lifespan shutdown when it is the top-level app)."""
    return DagsterUI(paths, wh, local, sessions)


class DagsterUI:
    """The gate (an ASGI app): sign-in pages, sessions, and every HTTP request and websocket checked before it
    reaches the Dagster app the user's roles allow; with `local`, every one reaches the writable app as is."""

    def __init__(self, paths: AmberPaths, wh: Warehouse, local: bool = False, sessions: Sessions | None = None) -> None:
        self.wh = wh
        self.local = local
        self.dagster = DagsterApps(paths, PREFIX)
        self.sessions = sessions or Sessions()  # the web app's: one sign-in for both

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    def close(self) -> None:
        """Stop the Dagster apps (their code server included); safe to call twice."""
        self.dagster.close()

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.local:
            await self._forward(True, scope, receive, send)
            return
        conn = HTTPConnection(scope)
        path, method = _local_path(scope), scope["method"]
        root = _root(scope)
        if path == "/signin" and method == "GET":
            response: Response = _page("Sign in", _form(root))
        elif path == "/signin" and method == "POST":
            response = await self._sign_in(scope, receive, root)
        elif path == "/signout" and method == "POST":
            self.sessions.close(conn.cookies.get(COOKIE))
            response = RedirectResponse(f"{root}/signin", status_code=303)
            response.delete_cookie(COOKIE, path="/", secure=scope.get("scheme") == "https", httponly=True,
                                   samesite="strict")
        else:
            try:
                user = await anyio.to_thread.run_sync(self._signed_in, conn.headers, conn.cookies.get(COOKIE))
            except tokens.SignInRefused as refused:
                response = (RedirectResponse(f"{root}/signin", status_code=303) if _wants_page(conn.headers, method)
                            else JSONResponse({"detail": str(refused)}, status_code=401))
            except Forbidden as forbidden:
                response = (_page("Staff only", f"<p>{html.escape(str(forbidden))}</p>", 403)
                            if _wants_page(conn.headers, method)
                            else JSONResponse({"detail": str(forbidden)}, status_code=403))
            else:
                seen = await self._launching(user, scope, receive) if user.operator else (scope, receive)
                if not isinstance(seen, Response):
                    await self._forward(user.operator, *seen, send)
                    return
                response = seen
        await response(scope, receive, send)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        conn = HTTPConnection(scope)
        if self.local:
            if _same_origin(conn.headers):
                await self._forward(True, scope, receive, send)
            elif (await receive())["type"] == "websocket.connect":
                await send({"type": "websocket.close", "code": WS_REFUSED})
            return
        session = conn.cookies.get(COOKIE)
        try:
            user = (await anyio.to_thread.run_sync(self._signed_in, conn.headers, session)
                    if _same_origin(conn.headers) else None)
        except (tokens.SignInRefused, Forbidden):
            user = None
        if user is None:
            if (await receive())["type"] == "websocket.connect":
                await send({"type": "websocket.close", "code": WS_REFUSED})
            return
        ended = False

        async def recheck() -> None:
            """A websocket lives as long as the page: it ends, like a request would fail, once its sign-in does."""
            nonlocal ended
            while True:
                await anyio.sleep(WS_RECHECK_S)
                try:
                    await anyio.to_thread.run_sync(self._signed_in, conn.headers, session)
                except (tokens.SignInRefused, Forbidden):
                    ended = True
                    tasks.cancel_scope.cancel()
                    return

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(recheck)
            await self._forward(user.operator, scope, receive, send)
            tasks.cancel_scope.cancel()
        if ended:
            with contextlib.suppress(OSError, RuntimeError):  # the client may have gone meanwhile
                await send({"type": "websocket.close", "code": WS_REFUSED})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await anyio.to_thread.run_sync(self.close)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _forward(self, writable: bool, scope: Scope, receive: Receive, send: Send) -> None:
        app = self.dagster.made(writable)
        if app is None:
            app = await anyio.to_thread.run_sync(self.dagster.app, writable)
        # Dagster routes under its own prefix: it must see the path as if it were the server's root.
        await app({**scope, "root_path": scope.get("root_path", "").removesuffix(PREFIX)}, receive, send)

    async def _launching(self, user: users.User, scope: Scope, receive: Receive) -> tuple[Scope, Receive] | Response:
        """An operator's request as Dagster is to see it: a GraphQL request with every run it launches tagged for
        `user` (`launches.py`), read the way Dagster's endpoint reads it; or its refusal."""
        if _local_path(scope) != "/graphql":
            return scope, receive
        asked = HTTPConnection(scope).query_params.getlist("query")  # as Dagster reads a GET's query
        if scope["method"] != "POST":
            return _refused_launch() if any(launches.launches_in(q) for q in asked) else (scope, receive)
        body = await _body(receive, MAX_GRAPHQL_BYTES)
        if body is None:
            return JSONResponse({"errors": [{"message": GRAPHQL_TOO_LARGE}]}, status_code=413)
        content_type = Headers(scope=scope).get("content-type", "")
        if "application/json" in content_type:
            try:
                data = json.loads(body)
            except ValueError:
                data = None  # Dagster answers it as invalid JSON
            if isinstance(data, dict):
                try:
                    stamped = await anyio.to_thread.run_sync(
                        launches.stamp, data, user.name, lambda: launch_ids.issue(self.wh, user.name))
                except AmberError as refused:
                    return _refused_launch(str(refused))
                if stamped is not data:
                    body = json.dumps(stamped).encode()
        else:
            texts = [body.decode(errors="replace")] if "application/graphql" in content_type else asked
            if any(launches.launches_in(q) for q in texts):
                return _refused_launch()
        return _with_body(scope, body), _replaying(body, receive)

    async def _sign_in(self, scope: Scope, receive: Receive, root: str) -> Response:
        body = await _body(receive, MAX_FORM_BYTES)
        if body is None:
            return _page("Sign in", _form(root, "That form is too large: paste just the token."), 413)
        secret = (parse_qs(body.decode(errors="replace")).get("token") or [""])[0].strip()
        try:
            token = await anyio.to_thread.run_sync(self._staff_token, secret)
        except tokens.SignInRefused as refused:
            return _page("Sign in", _form(root, str(refused)), 401)
        except Forbidden as forbidden:
            return _page("Staff only", f"<p>{html.escape(str(forbidden))}</p>", 403)
        response = RedirectResponse(f"{root}/", status_code=303)
        response.set_cookie(COOKIE, self.sessions.open(token), path="/", httponly=True, samesite="strict",
                            secure=scope.get("scheme") == "https")
        return response

    def _staff_token(self, secret: str) -> tokens.Token:
        token = tokens.verify(self.wh, secret)
        self._staff(token)
        return token

    def _staff(self, token: tokens.Token) -> users.User:
        try:
            user = users.get(self.wh, token.user)
        except NotFound:  # a user removed since the token was made: as good as no token
            raise tokens.SignInRefused(tokens.REFUSED) from None
        if not user.staff:
            raise Forbidden(STAFF_ONLY)
        return user

    def _signed_in(self, headers: Headers, session: str | None) -> users.User:
        """The staff user a request comes from (its bearer token, else its session), checked now; else
        `SignInRefused` (no valid token or session) or `Forbidden` (not staff). A session whose token or staff role
        is gone ends here."""
        scheme, _, secret = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            return self._staff(tokens.verify(self.wh, secret.strip()))
        # A session whose token is gone ends here; one of a user who is not staff stays theirs for the web app.
        return self._staff(self.sessions.token(self.wh, session, unknown=NO_SESSION))


def _local_path(scope: Scope) -> str:
    """The path within the mount ("/signin"), whether or not the server put the mount's root_path in `path`."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


def _root(scope: Scope) -> str:
    return scope.get("root_path", "") or PREFIX


def _wants_page(headers: Headers, method: str) -> bool:
    """A browser opening a page (sent to sign in), rather than a script or the UI's own requests (told 401)."""
    return method == "GET" and "text/html" in headers.get("accept", "")


def _same_origin(headers: Headers) -> bool:
    """Whether a websocket comes from a page of this server (or from no page: a script), as its Origin says;
    behind a proxy the public host may be in X-Forwarded-Host."""
    origin = headers.get("origin")
    if origin is None:
        return True
    hosts = {headers.get("host", ""), *headers.get("x-forwarded-host", "").replace(" ", "").split(",")}
    return urlsplit(origin).netloc in hosts - {""}


def _refused_launch(sentence: str = launches.AS_VARIABLES) -> Response:
    return JSONResponse({"errors": [{"message": sentence}]}, status_code=400)


def _with_body(scope: Scope, body: bytes) -> Scope:
    """The request's scope with the length of the body it now carries."""
    kept = [(k, v) for k, v in scope["headers"] if k.lower() not in (b"content-length", b"transfer-encoding")]
    return {**scope, "headers": [*kept, (b"content-length", str(len(body)).encode())]}


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that gives `body` whole, then what the client sends next (its disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _body(receive: Receive, limit: int) -> bytes | None:
    """The request body, or None past `limit` bytes."""
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return body
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body", False):
            return body


def _form(root: str, problem: str = "") -> str:
    shown = f'<p role="alert">{html.escape(problem)}</p>' if problem else ""
    return (f"{shown}<form method=\"post\" action=\"{html.escape(root)}/signin\">"
            "<label>Your API token (from <code>amber token create</code>)<br>"
            '<input type="password" name="token" autocomplete="off" required autofocus size="60"></label> '
            "<button type=\"submit\">Sign in</button></form>"
            "<p>The Dagster UI is for Amber staff; operators may also launch and cancel runs in it.</p>")


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Amber: {title}"
                        f"</title></head><body><h1>Amber: {title}</h1>{body}</body></html>", status_code=status,
                        headers={"Cache-Control": "no-store"})
