"""The embedded default's server answers pages of this machine only.

`amber ui` (`python -m server --local`) signs no one in: every page and the Dagster UI are the local user's. It
listens on loopback, but a page of another site can still reach it through a name of its own that resolves to
127.0.0.1 (DNS rebinding), read a form and post it. A request is answered only when its Host names this machine.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
REFUSED = ("This Amber serves its own machine only: open it at http://127.0.0.1 (or localhost) on the port "
           "`amber ui` printed.")


class LoopbackHosts:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = Headers(scope=scope).get("host", "")
            try:
                name = urlsplit(f"//{host}").hostname
            except ValueError:
                name = None
            if name not in LOOPBACK:
                if scope["type"] == "websocket":  # closed before it is accepted: the upgrade is answered 403
                    if (await receive())["type"] == "websocket.connect":
                        await send({"type": "websocket.close", "code": 4403})
                    return
                await PlainTextResponse(REFUSED, status_code=421)(scope, receive, send)
                return
        await self.app(scope, receive, send)
