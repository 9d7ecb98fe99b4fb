"""A Quote shown on a page, carried to its Confirm by the browser without the server trusting the browser.

A preview (`operations.jobs.job_preview`) reserves and records nothing, so what it showed travels with the page: a
token of the Quote as priced (`lifecycle.ShownQuote`: the Job's id, the Benchmark Version, each cell's price, when),
bound to the Workspace, the user and the request it was shown for, and signed with this Amber's own key (HMAC-SHA256).
Confirming it reserves those prices as shown, with no second pricing (`lifecycle.quote`, given ``shown``). A token
that was altered or made elsewhere, or that is confirmed by another user, in another Workspace or for another
request, is refused in one sentence; one older than a Quote's hour is refused by `lifecycle.as_shown`, which holds
every rule of confirming a Quote shown.

The key is 32 random bytes in AMBER_HOME (``quote-signing.key``, readable by its owner only), made by the first
process that needs it, so every process of an instance (the server, the CLI, a run) signs and checks alike.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import uuid
import zlib
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from amber_pipeline.errors import AmberError
from amber_pipeline.jobs.lifecycle import ShownQuote
from amber_pipeline.jobs.quotes import CellQuote
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.files import private_text

KEY_FILE = "quote-signing.key"
VERSION = 1
MAX_CHARS = 256 * 1024  # a token of 1,000 cells is well under this
FORGED = ("This Quote was not shown by this Amber, or was changed since: see the Quote again and confirm that "
          "one.")
ELSEWHERE = ("This Quote was shown for another request, user or Workspace: see the Quote of this one and confirm "
             "that.")
_keys: dict[Path, bytes] = {}


def seal(paths: AmberPaths, workspace: str, user: str, request: JobRequest, shown: ShownQuote) -> str:
    """The token of the Quote ``shown`` to ``user`` in ``workspace`` for ``request``, as a page carries it."""
    payload = {"v": VERSION, "workspace": workspace, "user": user, "request": _digest(request),
               "job_id": shown.job_id, "version": shown.benchmark_version_id, "shown_at": shown.shown_at.isoformat(),
               "cells": [asdict(c) for c in shown.cells]}
    body = base64.urlsafe_b64encode(zlib.compress(json.dumps(payload, separators=(",", ":")).encode())).decode()
    return f"{body}.{_sign(paths, body)}"


def unseal(paths: AmberPaths, token: str, workspace: str, user: str, request: JobRequest) -> ShownQuote:
    """The Quote ``token`` carries, if this Amber signed it for ``user`` in ``workspace`` and this ``request``;
    else refused in one sentence (`FORGED`, `ELSEWHERE`). Its age is `lifecycle.as_shown`'s to judge."""
    if len(token) > MAX_CHARS or not token.isascii():
        raise AmberError(FORGED)
    body, _, signature = token.partition(".")
    if not hmac.compare_digest(signature.encode(), _sign(paths, body).encode()):
        raise AmberError(FORGED)
    try:
        payload = json.loads(zlib.decompress(base64.urlsafe_b64decode(body.encode())))
        if payload["v"] != VERSION:
            raise AmberError(FORGED)
        if (payload["workspace"], payload["user"], payload["request"]) != (workspace, user, _digest(request)):
            raise AmberError(ELSEWHERE)
        return ShownQuote(payload["job_id"], payload["version"], [CellQuote(**c) for c in payload["cells"]],
                          datetime.fromisoformat(payload["shown_at"]))
    except (binascii.Error, zlib.error, ValueError, KeyError, TypeError) as e:  # signed, yet not ours to read
        raise AmberError(FORGED) from e


def _digest(request: JobRequest) -> str:
    return hashlib.sha256(request.model_dump_json().encode()).hexdigest()


def _sign(paths: AmberPaths, body: str) -> str:
    return hmac.new(_key(paths), body.encode(), hashlib.sha256).hexdigest()


def _key(paths: AmberPaths) -> bytes:
    """This instance's signing key, made once (atomically: a whole key under its name, or none) by the first
    process that needs it."""
    path = paths.home / KEY_FILE
    if path in _keys:
        return _keys[path]
    text = private_text(path)
    if text is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{KEY_FILE}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
            try:
                os.link(tmp, path)  # fails if another process made it first: then theirs is the key
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
        text = private_text(path)
    try:
        key = bytes.fromhex((text or "").strip())
    except ValueError:
        key = b""
    if len(key) != 32:
        raise AmberError(f"{path} does not hold a signing key: delete it, and Amber makes a new one.")
    _keys[path] = key
    return key
