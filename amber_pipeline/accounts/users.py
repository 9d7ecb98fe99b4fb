"""Users of a hosted Amber and their roles.

A user is a name that staff (or the server host's command line, for the first
staff user) added; the name is what Workspaces list as a member and the ledger
shows as who submitted a Job. Roles are rows, not names: `staff` adds Credits,
makes public Benchmarks and sees the Dagster UI; `operator` may also act in
that UI (launch, cancel, re-execute runs), which otherwise is read-only.
"""

from __future__ import annotations

from dataclasses import dataclass

from amber_pipeline.accounts.identity import check_user
from amber_pipeline.errors import AmberError, NotFound
from amber_pipeline.user_text import quoted
from amber_pipeline.warehouse.catalog import Connection, Warehouse

ROLES = ("staff", "operator")
_TABLES = {"staff": "staff", "operator": "operators"}


@dataclass(frozen=True)
class User:
    name: str
    staff: bool
    operator: bool


def add(wh: Warehouse, name: str, created_by: str, roles: tuple[str, ...] = ()) -> User:
    """Add a user (or give an existing one more roles)."""
    check_user(name)
    for role in roles:
        _check_role(role)
    with wh.write() as con:
        con.execute("insert into users (user_name, created_by) values (?, ?) on conflict do nothing",
                    [name, created_by])
        for role in roles:
            con.execute(f"insert into {_TABLES[role]} (user_name) values (?) on conflict do nothing", [name])
        return _read(con, name)


def revoke_role(wh: Warehouse, name: str, role: str) -> User:
    _check_role(role)
    with wh.write() as con:
        found = _read(con, name)
        con.execute(f"delete from {_TABLES[role]} where user_name = ?", [name])
        return User(found.name, found.staff and role != "staff", found.operator and role != "operator")


def get(wh: Warehouse, name: str) -> User:
    with wh.read() as con:
        return _read(con, name)


def list_all(wh: Warehouse) -> list[User]:
    with wh.read() as con:
        names = [r[0] for r in con.execute("select user_name from users order by user_name").fetchall()]
        return [_read(con, n) for n in names]


def _read(con: Connection, name: str) -> User:
    if con.execute("select 1 from users where user_name = ?", [name]).fetchone() is None:
        raise NotFound(f"No user {quoted(name)}: add them with `amber user add NAME` on the server's host.")
    return User(name, holds(con, name, "staff"), holds(con, name, "operator"))


def holds(con: Connection, name: str, role: str) -> bool:
    """Whether `name` holds `role`: a row of its table."""
    return con.execute(f"select 1 from {_TABLES[role]} where user_name = ?", [name]).fetchone() is not None


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise AmberError(f"{quoted(role)} is not a role: give one of {', '.join(ROLES)}.")
