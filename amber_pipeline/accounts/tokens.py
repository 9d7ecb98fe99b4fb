"""Personal API tokens: shown once, stored only as hashes, revocable, and expiring.

A token reads `amber_<id>_<secret>`: the id names it in lists and revocations
(it is not a secret), the secret is 32 random bytes. The catalog keeps the id
and the SHA-256 of the whole token, never the token: a secret of 256 random
bits needs no slow hash, since nobody can guess it, and a fast one lets every
request be checked without a cost. A token that is unknown, revoked or past
its expiry is refused with the same sentence, so a refusal tells an attacker
nothing about which tokens exist.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from amber_pipeline.accounts import audit, users
from amber_pipeline.errors import AmberError, NotFound, SignInRefused
from amber_pipeline.user_text import quoted
from amber_pipeline.warehouse.catalog import Warehouse

PREFIX = "amber_"
DEFAULT_DAYS = 90
MAX_DAYS = 366
_SHAPE = re.compile(r"amber_(tok[0-9a-f]{12})_[A-Za-z0-9_-]{43}")


_COLUMNS = "id, user_name, name, created_at, expires_at, revoked_at"


REFUSED = ("Sign in with a valid API token: this one is missing, unknown, revoked or expired (make one with "
           "`amber token create`, or ask Amber staff for one).")


@dataclass(frozen=True)
class Token:
    id: str
    user: str
    name: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.expires_at <= datetime.now(UTC) else "active"


@dataclass(frozen=True)
class Minted:
    token: Token
    secret: str  # the whole token: shown once, at creation, and never again


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create(wh: Warehouse, user: str, name: str = "", days: int = DEFAULT_DAYS) -> Minted:
    """A new token for `user` (who must exist), valid for `days` days; the audit log names who made it (the user
    the running operation acts for, `audit.actor`)."""
    if not 0 < days <= MAX_DAYS:
        raise AmberError(f"A token lives 1 to {MAX_DAYS} days, not {days}: give --days in that range.")
    users.get(wh, user)
    token_id = f"tok{secrets.token_hex(6)}"
    secret = f"{PREFIX}{token_id}_{secrets.token_urlsafe(32)}"
    now = datetime.now(UTC)
    token = Token(token_id, user, name or token_id, now, now + timedelta(days=days), None)
    with wh.write() as con:
        con.execute("insert into api_tokens values (?, ?, ?, ?, ?, ?, null)",
                    [token.id, user, _digest(secret), token.name, token.created_at, token.expires_at])
        audit.record(con, "token_create", audit.actor(), token_id=token.id, token_user=user)
    return Minted(token, secret)


def verify(wh: Warehouse, secret: str | None) -> Token:
    """The token `secret` is, if it is active; else `SignInRefused`."""
    shape = _SHAPE.fullmatch(secret or "")
    if shape is None:
        raise SignInRefused(REFUSED)
    with wh.read() as con:
        row = con.execute(f"select {_COLUMNS}, hash from api_tokens where id = ?", [shape.group(1)]).fetchone()
    if row is None or not hmac.compare_digest(row[6], _digest(secret or "")):
        raise SignInRefused(REFUSED)
    return _active(Token(*row[:6]))


def still_active(wh: Warehouse, token_id: str) -> Token:
    """The token of a session signed in with it earlier, if it is still active (not revoked, not expired); else
    `SignInRefused`. A session is only as good as its token, at every request."""
    with wh.read() as con:
        row = con.execute(f"select {_COLUMNS} from api_tokens where id = ?", [token_id]).fetchone()
    if row is None:
        raise SignInRefused(REFUSED)
    return _active(Token(*row))


def _active(token: Token) -> Token:
    if token.state != "active":
        raise SignInRefused(REFUSED)
    return token


def list_for(wh: Warehouse, user: str) -> list[Token]:
    with wh.read() as con:
        rows = con.execute(f"select {_COLUMNS} from api_tokens where user_name = ? order by created_at",
                           [user]).fetchall()
    return [Token(*r) for r in rows]


def revoke(wh: Warehouse, user: str, token_id: str, *, staff: bool = False) -> Token:
    """Revoke one of `user`'s tokens (staff: anyone's), as `user`. Another user's token reads as a missing one."""
    with wh.write() as con:
        row = con.execute(f"select {_COLUMNS} from api_tokens where id = ? and (user_name = ? or ?)",
                          [token_id, user, staff]).fetchone()
        if row is None:
            raise NotFound(f"No token {quoted(token_id)} of yours: list them with `amber token list`.")
        token = Token(*row)
        if token.revoked_at is None:
            token = dataclasses.replace(token, revoked_at=datetime.now(UTC))
            con.execute("update api_tokens set revoked_at = ? where id = ?", [token.revoked_at, token_id])
            audit.record(con, "token_revoke", user, token_id=token_id, token_user=token.user)
    return token
