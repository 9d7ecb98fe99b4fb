"""Users, their roles and their personal API tokens.

On the server's host, with no server in between, the local login is staff
(as everywhere on the embedded default), which is how the first staff user is
made: `amber user add NAME --staff`, then `amber token create --user NAME`.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from amber_pipeline.accounts import tokens, users, workspaces
from amber_pipeline.errors import Forbidden
from amber_pipeline.operations.operation import Acting, operation


class Me(BaseModel):
    user: str
    staff: bool
    operator: bool


class UserRequest(BaseModel):
    name: str = Field(description="The user's name, as Workspaces list their members.")
    staff: bool = Field(False, description="Give the staff role: Credits, public Benchmarks, the Dagster UI.")
    operator: bool = Field(False, description="Give the operator role: act in the Dagster UI, not only read it.")


class TokenRequest(BaseModel):
    user: str | None = Field(None, description="Whose token (staff only; absent: your own).")
    name: str = Field("", description="A name to tell it apart in `amber token list`.")
    days: int = Field(tokens.DEFAULT_DAYS, description=f"Days until it expires, 1 to {tokens.MAX_DAYS}.")


class TokenShown(BaseModel):
    id: str
    user: str
    name: str
    created_at: datetime
    expires_at: datetime
    state: str  # active, revoked or expired


class Minted(BaseModel):
    token: TokenShown
    secret: str = Field(description="The token itself: shown this once, stored only as its hash.")


class TokenRef(BaseModel):
    token_id: str = Field(description="A token's id (tok...), from `amber token list`.")


def _shown(t: tokens.Token) -> TokenShown:
    return TokenShown(id=t.id, user=t.user, name=t.name, created_at=t.created_at, expires_at=t.expires_at,
                      state=t.state)


def _staff(acting: Acting) -> bool:
    with acting.wh.read() as con:
        return workspaces.is_staff(con, acting.actor.user)


def _require_staff(acting: Acting, what: str) -> None:
    if not _staff(acting):
        raise Forbidden(f"Only Amber staff can {what}, and {acting.actor.user} is not staff: ask Amber staff.")


@operation("GET", "/me", where="user")
def whoami(acting: Acting) -> Me:
    """Who you are signed in as, and your roles."""
    with acting.wh.read() as con:
        operator = users.holds(con, acting.actor.user, "operator")
    return Me(user=acting.actor.user, staff=_staff(acting), operator=operator)


@operation("GET", "/users", where="user")
def user_list(acting: Acting) -> list[users.User]:
    """Every user and their roles (staff only)."""
    _require_staff(acting, "list users")
    return users.list_all(acting.wh)


@operation("POST", "/users", where="user")
def user_add(acting: Acting, params: UserRequest) -> users.User:
    """Add a user, or give one more roles (staff only)."""
    _require_staff(acting, "add users")
    roles = tuple(r for r, given in (("staff", params.staff), ("operator", params.operator)) if given)
    return users.add(acting.wh, params.name, acting.actor.user, roles)


@operation("POST", "/tokens", where="user")
def token_create(acting: Acting, params: TokenRequest) -> Minted:
    """A new personal API token, shown this once (staff may make one for another user)."""
    user = params.user or acting.actor.user
    if user != acting.actor.user:
        _require_staff(acting, "make a token for another user")
    made = tokens.create(acting.wh, user, params.name, params.days)
    return Minted(token=_shown(made.token), secret=made.secret)


@operation("GET", "/tokens", where="user")
def token_list(acting: Acting) -> list[TokenShown]:
    """Your tokens: their ids, names, expiry and state (never the tokens themselves)."""
    return [_shown(t) for t in tokens.list_for(acting.wh, acting.actor.user)]


@operation("POST", "/tokens/{token_id}/revoke", where="user")
def token_revoke(acting: Acting, params: TokenRef) -> TokenShown:
    """Revoke one of your tokens (staff: anyone's); a request with it is refused from now on."""
    return _shown(tokens.revoke(acting.wh, acting.actor.user, params.token_id, staff=_staff(acting)))
