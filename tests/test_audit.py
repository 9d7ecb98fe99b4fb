"""The audit log: each action that moves a Workspace's money or lets someone in names who took it, and when
(issue 27: "Every action is taken by a user, in a Workspace that user belongs to").

A Workspace's members read its rows (`amber audit`, and the `audit` view of `amber sql`), and nobody else's; a
user reads the actions on their own tokens; staff read every row (`amber audit --all`). Each row is written in
the transaction of its action, so neither is ever there without the other. Commands run in this process
through Typer's runner, on the embedded default and as the client of `amber serve`'s app, on DuckDB and on
PostgreSQL; each user has a config file of their own.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import cli, funded, ok, refusal

from amber_pipeline.accounts.identity import Actor, local_user
from amber_pipeline.errors import AmberError
from amber_pipeline.money import wallet
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse

STATIC = PROJECT_ROOT / "examples" / "static-bench"
IN_BOTH_MODES = pytest.mark.usefixtures("both_catalogs", "cli_mode")


@pytest.fixture
def home(amber_home: Path) -> Path:
    return amber_home


def amber(home: Path, user: str, *args: str):
    """`amber --user USER ARGS` with USER's own config file."""
    return cli("--user", user, *args, env={"AMBER_CONFIG": str(home.parent / f"{user}.toml")})


def audit_of(home: Path, user: str, workspace: str, *options: str) -> list[dict[str, Any]]:
    """`amber --workspace WORKSPACE audit --json OPTIONS` as `user`, newest first."""
    return json.loads(ok(amber(home, user, "--workspace", workspace, "audit", "--json", *options)))


def one_task_bench(tmp_path: Path) -> Path:
    bench = tmp_path / "one-static-bench"
    shutil.copytree(STATIC / "capital-city", bench / "capital-city")
    return bench


@IN_BOTH_MODES
def test_every_action_on_a_workspaces_money_names_who_took_it(home: Path, tmp_path: Path) -> None:
    ok(amber(home, "alice", "workspace", "create", "team"))
    ok(amber(home, "alice", "workspace", "add-member", "team", "bob"))
    ok(amber(home, "carol", "workspace", "create", "other"))
    ok(amber(home, local_user(), "--workspace", "team", "credit", "add", "--amount", "10", "--reason", "pilot"))
    quoted = ok(amber(home, "alice", "--workspace", "team", "job", "quote", str(one_task_bench(tmp_path)),
                      "--agent", "direct", "--model", "replay-strong"))
    quote = next(w for w in quoted.split() if w.startswith("quote-"))
    job = next(w for w in quoted.split() if w.startswith("job-")).rstrip(".:,")
    ok(amber(home, "bob", "--workspace", "team", "job", "start", quote))
    ok(amber(home, "alice", "--workspace", "team", "job", "cancel", job))
    continued = ok(amber(home, "bob", "--workspace", "team", "job", "continue", job))
    [going_on] = set(re.findall(r"quote-[0-9a-f]{10}", continued)) - {quote}

    done = [(local_user(), "credit", None, None), ("alice", "quote", job, quote), ("bob", "start", job, quote),
            ("alice", "cancel", job, None), ("bob", "continue", job, going_on)]
    for member in ("alice", "bob"):
        rows = [e for e in audit_of(home, member, "team") if e["workspace"] is not None]
        assert [(e["user"], e["action"], e["job_id"], e["quote_id"]) for e in reversed(rows)] == done, member
    [credit] = [e for e in audit_of(home, "alice", "team") if e["action"] == "credit"]
    assert (credit["amount"], credit["detail"]) == ("10.000000", "pilot")

    shown = ok(amber(home, "alice", "--workspace", "team", "sql",
                     "select seq, user_name, action from audit order by seq"))
    found = re.findall(r"│\s*(\d+)\s*│\s*(\S+)\s*│\s*(\S+)\s*│", shown)
    assert found == [(str(i), u, a) for i, (u, a, _, _) in enumerate(done, start=1)], shown  # numbered in team
    # Another Workspace's members see none of it, in the view or in the command.
    counted = ok(amber(home, "carol", "--workspace", "other", "sql", "select count(*) as n from audit"))
    assert re.findall(r"│\s*(\d+)\s*│", counted) == ["0"]
    assert not [e for e in audit_of(home, "carol", "other") if e["workspace"] is not None]
    table = ok(amber(home, "bob", "--workspace", "team", "audit", "--limit", "2"))
    assert "continue" in table and "cancel" in table and "quote " not in table and "pilot" not in table


@IN_BOTH_MODES
def test_token_actions_name_who_made_and_revoked_them_and_only_staff_read_everything(home: Path) -> None:
    ok(amber(home, local_user(), "user", "add", "dave"))
    ok(amber(home, "dave", "workspace", "create", "dave-ws"))
    ok(amber(home, "erin", "workspace", "create", "erin-ws"))
    ok(amber(home, local_user(), "workspace", "create", "ops"))
    made = ok(amber(home, local_user(), "token", "create", "--for", "dave", "--name", "laptop"))
    token = re.search(r"Token (tok[0-9a-f]{12})", made).group(1)  # type: ignore[union-attr]
    ok(amber(home, "dave", "token", "revoke", token))

    def on_token(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return [(e["user"], e["action"], e["token_user"]) for e in reversed(rows) if e["token_id"] == token]

    expected = [(local_user(), "token_create", "dave"), ("dave", "token_revoke", "dave")]
    assert on_token(audit_of(home, "dave", "dave-ws")) == expected  # his own token
    assert on_token(audit_of(home, "erin", "erin-ws")) == []  # not hers
    assert on_token(audit_of(home, local_user(), "ops", "--all")) == expected  # staff: all
    everything = audit_of(home, local_user(), "ops", "--all")
    assert {e["workspace"] for e in everything} >= {None}  # the token rows belong to no Workspace
    assert refusal(amber(home, "erin", "--workspace", "erin-ws", "audit", "--all")) == (
        "Only Amber staff can read every Workspace's audit log, and erin is not staff: drop --all to read this "
        "Workspace's.")
    assert refusal(amber(home, "erin", "--workspace", "erin-ws", "audit", "--limit", "0")) == (
        "--limit 0 is not from 1 to 1000: give one in that range.")


def test_an_action_and_its_row_are_written_together_or_not_at_all(warehouse: Warehouse,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    me = Actor(local_user(), funded(warehouse, amount="5"))

    def lost(*_: object, **__: object) -> None:
        raise OSError("the catalog went away mid-transaction")

    monkeypatch.setattr("amber_pipeline.accounts.audit.record", lost)
    with pytest.raises(OSError):
        wallet.add_credit(warehouse, me, "default", "7", "second")
    with warehouse.read() as con:
        assert con.execute("select reason from ledger where kind = 'credit'").fetchall() == [("test credit",)]
        assert con.execute("select detail from audit").fetchall() == [("test credit",)]
    monkeypatch.undo()
    with pytest.raises(AmberError):  # refused (not staff): neither the Credit nor a row of it
        wallet.add_credit(warehouse, Actor("mallory", "default"), "default", "7", "refused")
    with warehouse.read() as con:
        assert con.execute("select count(*) from audit").fetchall() == [(1,)]
