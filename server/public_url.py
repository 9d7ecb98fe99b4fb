"""Redirects name the server's public URL, never the Host header a request sent.

Starlette builds the absolute URL of the redirects it makes itself (`/ui` to `/ui/`, a path with or without
its trailing slash) from the request's Host header, which the client chooses: a request sent with
`Host: elsewhere.example` would be sent on to elsewhere.example, and a shared cache in front of the server could
keep that answer for everyone. So every redirect the server answers is rewritten here to the public URL
`amber serve` was given (`--public-url`), or, with none given, to its path alone, which a browser resolves
against the URL it asked for. No page of Amber's redirects to another site.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from amber_pipeline.errors import AmberError


def checked(url: str) -> str:
    """The public URL as given (an http(s) URL of a host, no query or fragment), without a trailing slash."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise AmberError(f"--public-url {url!r} is not the http(s) URL of a host, like https://amber.example.com: "
                         "give the URL people open the server at.")
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


class PublicRedirects:
    """The ASGI middleware that rewrites each redirect's Location to `public_url` (or to its path alone)."""

    def __init__(self, app: ASGIApp, public_url: str | None) -> None:
        self.app, self.public_url = app, public_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and 300 <= message["status"] < 400:
                message = {**message, "headers": [(k, self.location(v) if k.lower() == b"location" else v)
                                                  for k, v in message.get("headers", [])]}
            await send(message)

        await self.app(scope, receive, sending)

    def location(self, value: bytes) -> bytes:
        """A Location under the public URL: an absolute one, or a path from the root, made so; a relative path
        (`signin`) is left as it is."""
        parts = urlsplit(value.decode("latin-1"))
        if not parts.netloc and not parts.path.startswith(("/", "\\")):
            return value
        # One leading slash: a browser reads "//host" and "/\host" as another host.
        path = urlunsplit(("", "", "/" + parts.path.lstrip("/\\"), parts.query, parts.fragment))
        return ((self.public_url or "") + path).encode("latin-1")
