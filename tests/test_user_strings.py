"""Every string a user gives is data: amounts, reasons, names, user ids, and the numbers users are shown.

An amount is a plain decimal number or one sentence, never rounded or reinterpreted; Rich markup in anything a
user typed prints as itself; Workspace names are unique ignoring case; the numbers in a Wallet or a Job list
count within the Workspace, so their gaps reveal nothing of another's; an expiry sentence says the date. Every
command runs in this process through Typer's runner, as the user named by the global --user.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from helpers import cli, ok, refusal, request

from amber_pipeline.accounts.identity import local_user
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import lifecycle, records
from amber_pipeline.money import wallet
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import CATALOG_DDL, Warehouse

pytestmark = pytest.mark.usefixtures("cli_mode")  # on the embedded default, then against `amber serve`

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
STAFF = local_user()  # on the embedded default the login user is staff
AMOUNT_RULE = ("give a plain amount of dollars above zero with at most 6 decimals, like 100 or 12.50, "
               "up to $1,000,000.")


def amber(home: Path, user: str, *args: str):
    """`amber --user USER ARGS` with USER's own config file."""
    return cli("--user", user, *args, env={"AMBER_CONFIG": str(home.parent / f"{user}.toml")})


def ledger_size(wh: Warehouse) -> int:
    with wh.read() as con:
        row = con.execute("select count(*) from ledger").fetchone()
    assert row is not None
    return int(row[0])


def sql_column(home: Path, user: str, workspace: str, query: str) -> list[int]:
    """The one integer column of `amber sql QUERY`'s table, as the user reads it."""
    printed = ok(amber(home, user, "--workspace", workspace, "sql", query))
    return [int(n) for n in re.findall(r"^│\s*(\d+)\s*│$", printed, flags=re.MULTILINE)]


def table_column(printed: str, column: int = 0) -> list[str]:
    """One column of the rows of a table `out.table` printed."""
    return [cells[column].strip() for line in printed.splitlines()
            if line.startswith("│") and len(cells := line.strip("│").split("│")) > column]


@pytest.fixture
def home(amber_home: Path) -> Path:
    return amber_home


@pytest.fixture
def team(home: Path) -> str:
    """Workspace team of alice, with a $10 Credit."""
    ok(amber(home, "alice", "workspace", "create", "team"))
    ok(amber(home, STAFF, "--workspace", "team", "credit", "add", "--amount", "10", "--reason", "pilot"))
    return "team"


# ---- amounts -----------------------------------------------------------------------------------------------

BAD_AMOUNTS = ["NaN", "1e12", "1_000", "١٠", "0.0000005", "-5", "+5", " 5", "5 ", "Infinity", "0x10", "1,000",
               "", "0", "0.000000", "1000000.000001", "12.", ".5", "5\n"]


def test_an_amount_that_is_not_plain_is_one_sentence_and_credits_nothing(home: Path, warehouse: Warehouse,
                                                                          team: str) -> None:
    before = ledger_size(warehouse)
    for amount in BAD_AMOUNTS:
        sentence = refusal(amber(home, STAFF, "--workspace", team, "credit", "add", "--amount", amount,
                                 "--reason", "hostile"))
        assert sentence == f"{json.dumps(amount, ensure_ascii=False)} is not an amount for --amount: {AMOUNT_RULE}"
    assert ledger_size(warehouse) == before
    assert json.loads(ok(amber(home, "alice", "--workspace", team, "wallet", "--json")))["balance"] == "10.000000"


def test_a_plain_amount_is_credited_exactly(home: Path, team: str) -> None:
    for amount in ("100", "12.50", "0.000001", "1000000", "007"):
        shown = ok(amber(home, STAFF, "--workspace", team, "credit", "add", "--amount", amount, "--reason", "ok"))
        assert shown.startswith("Credited $"), shown
    ledger = json.loads(ok(amber(home, "alice", "--workspace", team, "wallet", "--json")))
    credited = [Decimal(e["amount"]) for e in ledger["ledger"]]
    assert credited == [Decimal(a) for a in ("10", "100", "12.50", "0.000001", "1000000", "7")]
    assert ledger["balance"] == "1000129.500001"


# ---- markup and odd user ids --------------------------------------------------------------------------------

MARKUP = ["[/]", "[red]red[/red]", "[bold", "[link=file:///etc/passwd]x[/link]", "\\[x]"]


def test_markup_in_a_reason_prints_as_itself(home: Path, team: str) -> None:
    for reason in MARKUP:
        ok(amber(home, STAFF, "--workspace", team, "credit", "add", "--amount", "1", "--reason", reason))
    printed = ok(amber(home, "alice", "--workspace", team, "wallet"))
    assert table_column(printed, 4)[1:] == MARKUP
    ledger = json.loads(ok(amber(home, "alice", "--workspace", team, "wallet", "--json")))["ledger"]
    assert [e["reason"] for e in ledger] == ["pilot", *MARKUP]


def test_a_user_id_with_markup_works_in_every_command(home: Path, tmp_path: Path) -> None:
    user = "[/]"
    ok(amber(home, user, "workspace", "create", "brackets"))
    ok(amber(home, STAFF, "--workspace", "brackets", "credit", "add", "--amount", "5", "--reason", "[red]x"))
    listed = ok(amber(home, user, "workspace", "list"))
    assert "Workspaces of [/]" in listed and table_column(listed) == ["brackets"]
    printed = ok(amber(home, user, "--workspace", "brackets", "wallet"))
    assert "Wallet of brackets" in printed and "[red]x" in printed
    assert json.loads(ok(amber(home, user, "--workspace", "brackets", "wallet", "--json")))["ledger"][0]["reason"] \
        == "[red]x"
    bench = tmp_path / "b"
    shutil.copytree(DEMO / "ini-port-change", bench / "ini-port-change")
    quoted = ok(amber(home, user, "--workspace", "brackets", "job", "quote", str(bench), "--agent", "nop"))
    job_id = next(w for w in quoted.split() if w.startswith("job-"))
    status = ok(amber(home, user, "--workspace", "brackets", "job", "status"))
    assert table_column(status) == [job_id]
    assert ok(amber(home, user, "--workspace", "brackets", "job", "status", job_id)).startswith(f"{job_id} over ")
    ok(amber(home, user, "workspace", "add-member", "brackets", "[bold]bob"))
    assert "Workspaces of [bold]bob" in ok(amber(home, "[bold]bob", "workspace", "list"))


def test_a_refusal_prints_the_names_in_it_as_they_were_typed(home: Path, team: str) -> None:
    # An error's sentence goes to stderr as text: markup from a name in it is not interpreted.
    assert refusal(amber(home, "alice", "--workspace", "[red]x[/]", "wallet")) == \
        "No Workspace [red]x[/] among yours: see yours with `amber workspace list`."
    assert refusal(amber(home, "alice", "workspace", "create", "[red]x[/]")).startswith(
        '"[red]x[/]" is not a valid Workspace name:')
    assert refusal(amber(home, "alice", "--workspace", team, "job", "status", "[/]")).startswith("No Job [/] ")
    bench = home.parent / "[red]bench"
    shutil.copytree(DEMO / "ini-port-change", bench / "ini-port-change")
    # A folder's name becomes its Benchmark's name (unchecked today): whatever it is, it prints as itself.
    quoted = ok(amber(home, "alice", "--workspace", team, "job", "quote", str(bench), "--agent", "nop"))
    assert " on [red]bench@1" in quoted
    assert table_column(ok(amber(home, "alice", "--workspace", team, "job", "status")), 1) == ["[red]bench@1"]
    # Typer's own usage errors print what was typed as text too.
    usage = cli("wallet", "[red]x[/]")
    assert usage.exit_code == 2 and "unexpected extra argument(s) ([red]x[/])" in usage.stderr, usage.stderr
    # A name that ends in a newline is not a name ("$" in a pattern matches before a final newline).
    assert refusal(amber(home, "alice", "workspace", "create", "ws\n")).startswith('"ws\\n" is not a valid')


@pytest.mark.parametrize("user", [" alice", "alice ", "a\nb", "a\tb", "a\x1b[31mb", "x" * 129])
def test_a_user_id_that_cannot_show_on_one_line_as_typed_is_refused(home: Path, user: str, cli_mode: str) -> None:
    sentence = (f"{json.dumps(user, ensure_ascii=False)} is not a user id: give up to 128 printable characters "
                "with no space at either end.")
    if cli_mode == "local":  # the embedded default takes --user
        assert refusal(cli("--user", user, "workspace", "list")) == sentence
    else:  # a server's users are only those staff add, by the same rule
        assert refusal(cli("user", "add", user)) == sentence
    ok(amber(home, "alice", "workspace", "create", "w1"))
    assert refusal(amber(home, "alice", "workspace", "add-member", "w1", user)) == sentence


# ---- Workspace names ------------------------------------------------------------------------------------------

def test_workspace_names_are_unique_ignoring_case_and_matched_exactly(home: Path, warehouse: Warehouse) -> None:
    ok(amber(home, "alice", "workspace", "create", "ws1"))
    # Taken, in another case: the same sentence for a member and for a stranger, naming only what they typed.
    assert refusal(amber(home, "bob", "workspace", "create", "WS1")) == \
        "The Workspace name WS1 is not available: choose another name."
    assert refusal(amber(home, "alice", "workspace", "create", "Ws1")) == \
        "The Workspace name Ws1 is not available: choose another name."
    assert table_column(ok(amber(home, "alice", "workspace", "list"))) == ["ws1"]
    assert refusal(amber(home, "alice", "--workspace", "WS1", "wallet")) == \
        "No Workspace WS1 among yours: see yours with `amber workspace list`."
    # The catalog holds the rule too, whoever writes.
    with pytest.raises(duckdb.ConstraintException), warehouse.write() as con:
        con.execute("insert into workspaces (name, created_by) values ('wS1', 'mallory')")
    # "default", made on first use, is not made beside a "Default".
    ok(amber(home, "carol", "workspace", "create", "Default"))
    assert refusal(amber(home, "dave", "wallet")).startswith("Choose a Workspace with --workspace NAME")


def test_a_catalog_holding_names_equal_but_for_case_still_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """A catalog from before the rule may hold ws1 and WS1: both stay usable, and no third one can be made."""
    home = tmp_path / "old"
    monkeypatch.setenv("AMBER_HOME", str(home))
    paths = AmberPaths.from_env().ensure()
    before_rule = CATALOG_DDL[:CATALOG_DDL.index("create or replace view workspace_ledger")]
    with duckdb.connect(str(paths.catalog)) as con:
        con.execute(before_rule)
        con.execute("insert into workspaces (name, created_by) values ('ws1', 'alice'), ('WS1', 'bob')")
        con.execute("insert into members values ('ws1', 'alice'), ('WS1', 'bob')")
        con.execute("""insert into ledger (created_at, workspace, kind, amount, reason, entry_key) values
                       (now(), 'ws1', 'credit', 1, 'a', 'k1'), (now(), 'WS1', 'credit', 2, 'b', 'k2'),
                       (now(), 'ws1', 'credit', 3, 'c', 'k3')""")
    assert refusal(amber(home, "carol", "workspace", "create", "wS1")) == \
        "The Workspace name wS1 is not available: choose another name."
    for user, name, amounts in (("alice", "ws1", ["1.000000", "3.000000"]), ("bob", "WS1", ["2.000000"])):
        ledger = json.loads(ok(amber(home, user, "--workspace", name, "wallet", "--json")))["ledger"]
        assert [e["amount"] for e in ledger] == amounts
        assert [e["seq"] for e in ledger] == list(range(1, len(amounts) + 1))


# ---- per-Workspace numbers ----------------------------------------------------------------------------------

def test_numbers_count_within_the_workspace(home: Path, tmp_path: Path, warehouse: Warehouse) -> None:
    bench = tmp_path / "bench"
    shutil.copytree(DEMO / "ini-port-change", bench / "ini-port-change")
    ok(amber(home, "alice", "workspace", "create", "a"))
    ok(amber(home, "bob", "workspace", "create", "b"))
    users = {"a": "alice", "b": "bob"}

    def credit(ws: str) -> None:
        ok(amber(home, STAFF, "--workspace", ws, "credit", "add", "--amount", "5", "--reason", "r"))

    def quote(ws: str) -> None:
        ok(amber(home, users[ws], "--workspace", ws, "job", "quote", str(bench), "--agent", "nop"))

    for step in (credit, quote):  # a, b, a: each Workspace's entries and Jobs interleaved with the other's
        for ws in ("a", "b", "a"):
            step(ws)
    with warehouse.read() as con:
        global_seqs = [r[0] for r in con.execute("select seq from ledger where workspace = 'b' order by seq")
                       .fetchall()]
    assert global_seqs != list(range(1, len(global_seqs) + 1))  # the catalog's own order has gaps for b
    for ws, user in users.items():
        ledger = json.loads(ok(amber(home, user, "--workspace", ws, "wallet", "--json")))["ledger"]
        n = {"a": 4, "b": 2}[ws]  # a Credit and a reservation per step
        numbers = list(range(1, n + 1))
        assert [e["seq"] for e in ledger] == numbers
        assert [int(x) for x in table_column(ok(amber(home, user, "--workspace", ws, "wallet")))] == numbers
        assert sql_column(home, user, ws, "select seq from ledger order by seq") == numbers
        jobs = records.list_jobs(warehouse, ws)
        assert [j.seq for j in jobs] == list(range(1, len(jobs) + 1)) and len(jobs) == n // 2
        assert sql_column(home, user, ws, "select seq from jobs order by seq") == [j.seq for j in jobs]
        assert all(records.get_job(warehouse, j.id, ws).seq == j.seq for j in jobs)
        # No other global number is shown either.
        assert sql_column(home, user, ws, "select count(*) from information_schema.columns "
                                           "where table_name = 'jobs' and column_name = 'start_seq'") == [0]


# ---- times ----------------------------------------------------------------------------------------------------

def test_an_expiry_sentence_gives_the_date(tmp_path: Path, home: Path, team: str, warehouse: Warehouse) -> None:
    bench = tmp_path / "bench"
    shutil.copytree(DEMO / "ini-port-change", bench / "ini-port-change")
    made = lifecycle.quote(warehouse, team, "alice", request(str(bench), "nop"),
                           now=datetime.now(UTC) - timedelta(days=3))
    with pytest.raises(AmberError) as refused:
        lifecycle.start(warehouse, team, made.id)
    expired = made.expires_at.astimezone(UTC)
    assert str(refused.value) == (f"Quote {made.id} expired at {expired:%Y-%m-%d %H:%M:%S} UTC: make a new one with "
                                  "`amber job quote`.")
    assert expired.date() != datetime.now(UTC).date()
    with warehouse.read() as con:
        assert wallet.quote_totals(con, made.id) == (made.amount, 0, made.amount)  # released, as before


@pytest.mark.docker  # `amber job start` pings the Docker engine before it reads the Quote
def test_amber_job_start_of_an_expired_quote_says_the_date(tmp_path: Path, home: Path, team: str,
                                                           warehouse: Warehouse) -> None:
    bench = tmp_path / "bench"
    shutil.copytree(DEMO / "ini-port-change", bench / "ini-port-change")
    made = lifecycle.quote(warehouse, team, "alice", request(str(bench), "nop"),
                           now=datetime.now(UTC) - timedelta(days=3))
    sentence = refusal(amber(home, "alice", "--workspace", team, "job", "start", made.id))
    assert f"expired at {made.expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC:" in sentence
