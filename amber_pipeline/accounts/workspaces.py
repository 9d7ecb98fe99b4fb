"""Workspaces: the boundary that owns a Wallet, private Benchmarks and Jobs.

Only members see what a Workspace owns. Everything that looks something up
for a user goes through `acting_workspace`, and an object of another
Workspace is reported with exactly the sentence used for one that does not
exist, so an error never hints that it exists elsewhere.

Names are unique ignoring case (`ws1` and `WS1` would be two Workspaces
people cannot tell apart; the catalog's index holds it too), and a name is
matched exactly as it was created: `--workspace WS1` does not find `ws1`,
so a name reads the same in every command, file and view.
"""

from __future__ import annotations

import json
import re

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, SIGNED_IN, Actor, check_user, local_user
from amber_pipeline.benchmarks import registry
from amber_pipeline.errors import AmberError, NotFound
from amber_pipeline.user_text import quoted
from amber_pipeline.warehouse.catalog import Connection, Warehouse

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# The owner of public Benchmark Versions: a Workspace of that name would publish Versions every Workspace sees.
RESERVED = frozenset({registry.PUBLIC})


def is_staff(con: Connection, user: str) -> bool:
    """Staff is a role. On the embedded default the local login user holds it too, since whoever runs the commands
    owns the machine anyway; a user signed in to the API (`identity.SIGNED_IN`) holds it only as a role."""
    if user == local_user() and SIGNED_IN.get() is None:
        return True
    return con.execute("select 1 from staff where user_name = ?", [user]).fetchone() is not None


def create(wh: Warehouse, actor: Actor, name: str) -> None:
    """Make a Workspace with the actor as its first member. A name that is taken, in any case and by anyone, or
    reserved is refused with one sentence that names it as typed, so a refusal never tells whose it is, how it is
    written, or that it is reserved rather than taken."""
    if not NAME.fullmatch(name):
        raise AmberError(f"{quoted(name)} is not a valid Workspace name: use up to 63 letters, digits, '.', '_' "
                         "and '-', starting with a letter or digit.")
    with wh.write() as con:
        if name.lower() in RESERVED or _same_name(con, name) is not None:
            raise AmberError(f"The Workspace name {name} is not available: choose another name.")
        con.execute("insert into workspaces (name, created_by) values (?, ?)", [name, actor.user])
        con.execute("insert into members values (?, ?)", [name, actor.user])


def _same_name(con: Connection, name: str) -> str | None:
    """The Workspace named `name` ignoring case, if there is one (the exact name first)."""
    row = con.execute("select name from workspaces where lower(name) = lower(?) order by name = ? desc limit 1",
                      [name, name]).fetchone()
    return row[0] if row else None


def add_member(wh: Warehouse, actor: Actor, name: str, user: str) -> None:
    check_user(user)
    with wh.write() as con:
        _require_member(con, actor.user, name)
        con.execute("insert into members values (?, ?) on conflict do nothing", [name, user])


def list_for(wh: Warehouse, user: str) -> list[tuple[str, int]]:
    """The Workspaces a user belongs to, with their member counts."""
    with wh.read() as con:
        return con.execute("""select m.workspace, (select count(*) from members n where n.workspace = m.workspace)
                              from members m where m.user_name = ? order by m.workspace""", [user]).fetchall()


def acting_workspace(wh: Warehouse, actor: Actor, *, make_default: bool = True) -> str:
    """The Workspace the actor acts in, checked for membership.

    With none chosen, a user who belongs to none gets "default" on first use (with `make_default`; a read is
    shown the "default" it would get, empty, and makes nothing).
    """
    if actor.workspace is not None:
        with wh.read() as con:
            _require_member(con, actor.user, actor.workspace)
        return actor.workspace
    with wh.read() as con:  # the usual case, under a shared lock: no writer waits for it
        if _is_member(con, actor.user, DEFAULT_WORKSPACE):
            return DEFAULT_WORKSPACE
        if not make_default:
            if _same_name(con, DEFAULT_WORKSPACE) is None:
                return DEFAULT_WORKSPACE
            raise no_workspace_chosen()
    with wh.write() as con:
        if _is_member(con, actor.user, DEFAULT_WORKSPACE):
            return DEFAULT_WORKSPACE
        if _same_name(con, DEFAULT_WORKSPACE) is None:  # a "Default" of someone else's blocks it too
            con.execute("insert into workspaces (name, created_by) values (?, ?)", [DEFAULT_WORKSPACE, actor.user])
            con.execute("insert into members values (?, ?)", [DEFAULT_WORKSPACE, actor.user])
            return DEFAULT_WORKSPACE
    raise no_workspace_chosen()


def no_workspace_chosen() -> AmberError:
    return AmberError("Choose a Workspace with --workspace NAME or `amber workspace use NAME` "
                      "(see yours with `amber workspace list`).")


def _is_member(con: Connection, user: str, workspace: str) -> bool:
    return con.execute("select 1 from members where workspace = ? and user_name = ?",
                       [workspace, user]).fetchone() is not None


def _require_member(con: Connection, user: str, workspace: str) -> None:
    if not _is_member(con, user, workspace):
        raise NotFound(f"No Workspace {workspace} among yours: see yours with `amber workspace list`.")


def set_provider_policy(wh: Warehouse, actor: Actor, workspace: str, providers: list[str] | None) -> None:
    """The Providers the Workspace's private Benchmarks may be sent to (None: any)."""
    chosen = sorted({p.strip() for p in providers if p.strip()}) if providers is not None else None
    with wh.write() as con:
        _require_member(con, actor.user, workspace)
        con.execute("update workspaces set provider_policy = ? where name = ?",
                    [json.dumps(chosen) if chosen is not None else None, workspace])


def provider_policy(wh: Warehouse, workspace: str) -> frozenset[str] | None:
    """The Providers the Workspace's private Benchmarks may be sent to; None when it set no policy."""
    with wh.read() as con:
        row = con.execute("select provider_policy from workspaces where name = ?", [workspace]).fetchone()
    return frozenset(json.loads(row[0])) if row is not None and row[0] is not None else None
