"""Which image tags the Docker engine holds, asked the cheap way: every Quote asks, since images come and go
outside Amber.

The engine is the one a client with no engine named reaches (`engines.local_url`). On a Unix socket, the usual
case, the Engine API is asked over the standard library's HTTP client: importing Docker's SDK (and with it
paramiko and requests) takes longer than the rest of a demo Quote. Any other engine (tcp://, ssh://) is asked
through the SDK (`docker_engine.connect`).

Up to `INSPECT_AT_MOST` tags are asked about one by one (``GET /images/{name}/json``, a millisecond each); more,
with one list of every image (``GET /images/json``), which takes as long as ~100 of those on an engine holding a
few hundred images. Either way only the tag itself, as the engine lists it among an image's ``RepoTags``, counts:
asked by name, the engine would also resolve ``python`` as ``python:latest`` and a prefix of an id as its image.
A name the engine refuses (not found, or not a valid reference) is not held. None when the engine cannot be
asked at all.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from amber_pipeline.errors import AmberError
from amber_pipeline.sandbox import engines

INSPECT_AT_MOST = 64
UNIX = "unix://"


def held(tags: set[str], timeout: float) -> set[str] | None:
    """Which of ``tags`` the engine holds, or None when it cannot be asked."""
    url = engines.local_url()
    if not url.startswith(UNIX):
        return _held_through_sdk(tags, timeout)
    con = _UnixConnection(url[len(UNIX):], timeout)
    try:
        if len(tags) > INSPECT_AT_MOST:
            return _tags(_get(con, "/images/json")) & tags
        found = set()
        for tag in tags:
            image = _get(con, f"/images/{quote(tag, safe='/:@')}/json", refused_ok=True)
            if image is not None and tag in _tags([image]):
                found.add(tag)
        return found
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        con.close()


def _tags(images: Iterable[dict[str, Any]]) -> set[str]:
    return {tag for image in images for tag in image.get("RepoTags") or ()}


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over the engine's Unix socket, one connection kept alive for every request."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _get(con: _UnixConnection, path: str, *, refused_ok: bool = False) -> Any:
    """The JSON the engine answers to ``GET path``; None for a name it refuses (4xx) when ``refused_ok``."""
    con.request("GET", path)
    response = con.getresponse()
    body = response.read()
    if response.status == 200:
        return json.loads(body)
    if refused_ok and 400 <= response.status < 500:
        return None
    raise http.client.HTTPException(f"GET {path}: the engine answered {response.status}")


def _held_through_sdk(tags: set[str], timeout: float) -> set[str] | None:
    import requests
    from docker.errors import APIError, DockerException

    from amber_pipeline.sandbox import docker_engine

    try:
        client = docker_engine.connect(timeout=int(timeout))
        if len(tags) > INSPECT_AT_MOST:
            # The low-level list is one request; `client.images.list()` inspects every image again, one each.
            return _tags(client.api.images()) & tags
        found = set()
        for tag in tags:
            try:
                if tag in _tags([client.api.inspect_image(tag)]):
                    found.add(tag)
            except APIError:  # not found, or a name the engine refuses: not held
                pass
        return found
    except (AmberError, DockerException, requests.RequestException, OSError):
        return None
