"""Browser sessions, one per signed-in browser for the web app and the Dagster UI alike: a random id in an
HttpOnly, SameSite=Strict cookie for the whole server, mapped in memory to the API token it was opened with, never
the token itself. A session is only as good as its token, checked again at every request
(`tokens.still_active`), so revoking the token ends it; a restart signs everyone out."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading

from amber_pipeline.accounts import tokens
from amber_pipeline.warehouse.catalog import Warehouse

COOKIE = "amber_web"


class Sessions:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, str] = {}  # session id -> token id
        self._key = secrets.token_bytes(32)  # signs each session's form token; new at every start

    def open(self, token: tokens.Token) -> str:
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[session] = token.id
        return session

    def close(self, session: str | None) -> None:
        with self._lock:
            self._tokens.pop(session or "", None)

    def token(self, wh: Warehouse, session: str | None, unknown: str = tokens.REFUSED) -> tokens.Token:
        """The session's token, still active; else `SignInRefused` (and the session is gone), saying `unknown` for a
        session this server never opened."""
        with self._lock:
            token_id = self._tokens.get(session or "")
        if token_id is None:
            raise tokens.SignInRefused(unknown)
        try:
            return tokens.still_active(wh, token_id)
        except tokens.SignInRefused:
            self.close(session)
            raise

    def form_token(self, session: str) -> str:
        """What every form of a session's pages carries back: a page of another site cannot know it, so it cannot
        make the browser post a form (on the embedded default, which has no cookie to be SameSite, the session is
        the server's start)."""
        return hmac.new(self._key, session.encode(), hashlib.sha256).hexdigest()
