"""The web app: its routes, who each request is shown to, and how a page's refusal reads.

Hosted (`amber serve`), a browser signs in once at /signin with an API token and gets a session (`sessions.py`);
on the embedded default (`amber ui`, `local`) every page is the local user's, as the CLI's commands are. Every form
carries its session's form token, checked before a page acts on it, so no other site's page can make a browser
start a Job. Pages run their operations in a worker thread, as the API's routes do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hmac
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import anyio.to_thread
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from amber_pipeline.accounts import identity, tokens, users
from amber_pipeline.errors import AmberError, Forbidden, NotFound
from amber_pipeline.warehouse.catalog import Warehouse
from web.render import Handler, Page, render
from web.sessions import COOKIE, Sessions
from web.viewer import Viewer

STATIC = Path(__file__).parent / "static"
MAX_FORM_BYTES = 1 << 20


def create_web(wh: Warehouse, *, local: bool, sessions: Sessions | None = None) -> Starlette:
    """The web app over `wh`: signed in (hosted; `sessions`: those it shares with the Dagster UI) or the local
    user's (`local`)."""
    from web.pages import ROUTES  # the pages import this module's `ws_url`

    web = Web(wh, local, sessions or Sessions())
    made: list[BaseRoute] = [
        Route("/", web.home, methods=["GET"]),
        Route("/signin", web.sign_in, methods=["GET", "POST"]),
        Route("/signout", web.sign_out, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        *[Route(path, web.endpoint(handler), methods=methods) for path, handler, methods in ROUTES],
    ]
    return Starlette(routes=made)


class Web:
    def __init__(self, wh: Warehouse, local: bool, sessions: Sessions) -> None:
        self.wh, self.local, self.sessions = wh, local, sessions
        self._local_session = os.urandom(16).hex()  # the embedded default's one "session": this server's start

    # ------------------------------------------------------------------ who is looking

    def viewer(self, request: Request) -> Viewer:
        """The viewer of a request; `SignInRefused` when a hosted request has no live session."""
        if self.local:
            local = identity.resolve(None, None).user  # the CLI's user here: the config's, else the login
            return Viewer(self.wh, local, True, True, self.sessions.form_token(self._local_session))
        session = request.cookies.get(COOKIE, "")
        token = self.sessions.token(self.wh, session)
        try:
            user = users.get(self.wh, token.user)
        except NotFound:  # removed since the token was made: as good as no token
            self.sessions.close(session)
            raise tokens.SignInRefused(tokens.REFUSED) from None
        return Viewer(self.wh, user.name, False, user.staff, self.sessions.form_token(session))

    # ------------------------------------------------------------------ pages

    def endpoint(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            form = None
            if request.method == "POST":
                if int(request.headers.get("content-length") or 0) > MAX_FORM_BYTES:
                    return self._refusal(request, None, 413, "That form is larger than 1 MB: send less.")
                form = await request.form(max_files=0)
            return await anyio.to_thread.run_sync(functools.partial(self._serve, handler, request, form))

        return serve

    def _serve(self, handler: Handler, request: Request, form: FormData | None) -> Response:
        # A GET only reads (who is looking, and the operations it runs), so its reads share one catalog connection.
        with self.wh.reading() if form is None else contextlib.nullcontext():
            try:
                viewer = dataclasses.replace(self.viewer(request), reads=form is None)
            except tokens.SignInRefused:
                return RedirectResponse(f"/signin?next={quote(_local_url(request), safe='')}", status_code=303)
            if form is not None and not _same_site(form, viewer):
                return self._refusal(request, viewer, 403, "That form did not come from this Amber's own page: "
                                                           "reload the page and send it again.")
            try:
                made = handler(request, viewer, form)
            except NotFound as e:
                return self._refusal(request, viewer, 404, str(e), "Not found")
            except Forbidden as e:
                return self._refusal(request, viewer, 403, str(e), "Not allowed")
            except AmberError as e:
                return self._refusal(request, viewer, 400, str(e), "Refused")
            if isinstance(made, Response):
                return made
            return self.html(request, viewer, made)

    def html(self, request: Request, viewer: Viewer | None, page: Page) -> HTMLResponse:
        workspace = request.path_params.get("workspace")
        common: dict[str, Any] = {
            "viewer": viewer, "workspace": workspace, "csrf": "" if viewer is None else viewer.csrf,
            "workspaces": [] if viewer is None else viewer.workspaces(), "local": self.local,
            "path": request.url.path, "w": (lambda *parts: ws_url(workspace or "", *parts)),
        }
        return HTMLResponse(render(page, common), status_code=page.status,
                            headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
                                     "Content-Security-Policy": CSP, "Referrer-Policy": "same-origin"})

    def _refusal(self, request: Request, viewer: Viewer | None, status: int, sentence: str,
                 title: str = "Refused") -> HTMLResponse:
        return self.html(request, viewer, Page("refusal.html", {"sentence": sentence}, status, title))

    # ------------------------------------------------------------------ home, sign-in and out

    async def home(self, request: Request) -> Response:
        def first() -> Response:
            try:
                viewer = self.viewer(request)
            except tokens.SignInRefused:
                return RedirectResponse("/signin", status_code=303)
            names = viewer.workspaces()
            if not names:
                return self._refusal(request, viewer, 404, "You are not a member of any Workspace: ask a member or "
                                                           "Amber staff to add you to one.", "No Workspace")
            return RedirectResponse(ws_url(names[0], "jobs"), status_code=303)

        return await anyio.to_thread.run_sync(first)

    async def sign_in(self, request: Request) -> Response:
        if self.local:
            return RedirectResponse("/", status_code=303)
        target = _next(request.query_params.get("next", "/"))
        if request.method == "GET":
            return self.html(request, None, Page("signin.html", {"problem": "", "next": target}, title="Sign in"))
        if int(request.headers.get("content-length") or 0) > MAX_FORM_BYTES:
            return self._refusal(request, None, 413, "That form is larger than 1 MB: paste just the token.")
        form = await request.form(max_files=0)
        secret = str(form.get("token") or "").strip()
        try:
            token = await anyio.to_thread.run_sync(tokens.verify, self.wh, secret)
        except tokens.SignInRefused as refused:
            return self.html(request, None, Page("signin.html", {"problem": str(refused), "next": target}, 401,
                                                 "Sign in"))
        response = RedirectResponse(_next(str(form.get("next") or "/")), status_code=303)
        response.set_cookie(COOKIE, self.sessions.open(token), path="/", httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
        return response

    async def sign_out(self, request: Request) -> Response:
        self.sessions.close(request.cookies.get(COOKIE))
        response = RedirectResponse("/signin" if not self.local else "/", status_code=303)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict",
                               secure=request.url.scheme == "https")
        return response


# Scripts and styles only from this server (no inline script: the pages' data travels as JSON in
# <script type="application/json">, which is never run), no frames, forms only to this server.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


def ws_url(workspace: str, *parts: str) -> str:
    """A page's URL in a Workspace: every part one path segment, whatever text it holds."""
    return "/" + "/".join(quote(p, safe="") for p in ("w", workspace, *parts))


def _local_url(request: Request) -> str:
    return request.url.path + (f"?{request.url.query}" if request.url.query else "")


def _next(target: str) -> str:
    """Where to go after signing in: a path of this server only, never another site."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _same_site(form: FormData, viewer: Viewer) -> bool:
    """A form posted from this server's own page: its form token matches the viewer's session."""
    return hmac.compare_digest(str(form.get("csrf") or ""), viewer.csrf)
