"""Workspaces: what one Workspace owns is invisible to the members of another, even in errors.

Every command runs in this process through Typer's runner, as the user named by the global --user, each user
with a config file of their own (as on their own machine).
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers import cli, ok, refusal

from amber_pipeline.accounts.identity import local_user
from amber_pipeline.jobs import lifecycle, records
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trials_table

# the money suite runs on DuckDB and on PostgreSQL; its commands on the embedded default and against `amber serve`
pytestmark = pytest.mark.usefixtures("both_catalogs", "cli_mode")

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
VIEWS = ("jobs", "quotes", "ledger", "benchmark_versions", "job_cells", "job_spending")


@pytest.fixture
def home(amber_home: Path) -> Path:
    return amber_home


def amber(home: Path, user: str, *args: str):
    """`amber --user USER ARGS` with USER's own config file."""
    return cli("--user", user, *args, env={"AMBER_CONFIG": str(home.parent / f"{user}.toml")})


def quote_id_of(output: str) -> str:
    return next(word for word in output.split() if word.startswith("quote-"))


def rows_naming(home: Path, user: str, workspace: str, view: str, text: str) -> int:
    """How many rows of a view, as `amber sql` shows it to the user, name `text` in any column."""
    out = ok(amber(home, user, "--workspace", workspace, "sql",
                   f"select count(*) as n from {view} t where cast(t as varchar) like '%{text}%'"))
    [n] = [int(m) for m in re.findall(r"│\s*(\d+)\s*│", out)]
    return n


@pytest.fixture
def two_workspaces(home: Path, tmp_path: Path, warehouse: Warehouse) -> dict[str, str]:
    """alice's Workspace a with a quoted and started Job on her private Benchmark; bob's Workspace b."""
    bench = tmp_path / "secret-bench"
    shutil.copytree(DEMO / "ini-port-change", bench / "ini-port-change")
    ok(amber(home, "alice", "workspace", "create", "a"))
    ok(amber(home, "bob", "workspace", "create", "b"))
    for ws in ("a", "b"):
        ok(amber(home, local_user(), "--workspace", ws, "credit", "add", "--amount", "10", "--reason", "test"))
    out = ok(amber(home, "alice", "--workspace", "a", "job", "quote", str(bench), "--agent", "nop"))
    quote = quote_id_of(out)
    # Started through the library: `amber job start` pings the Docker engine, which these tests do not need
    # (test_job_lifecycle.py starts a Quote through the CLI).
    job = lifecycle.start(warehouse, "a", quote)
    assert job.status == "running" and job.id in out
    return {"job": job.id, "quote": quote}


def test_another_workspace_is_invisible_and_errors_do_not_hint(home: Path, two_workspaces: dict[str, str]) -> None:
    job = two_workspaces["job"]
    # A Job of another Workspace and a Job that does not exist get the same sentence.
    elsewhere = refusal(amber(home, "bob", "--workspace", "b", "job", "status", job))
    nowhere = refusal(amber(home, "bob", "--workspace", "b", "job", "status", "job-0000000000"))
    assert elsewhere.replace(job, "ID") == nowhere.replace("job-0000000000", "ID")
    assert refusal(amber(home, "bob", "--workspace", "b", "results", job)).replace(job, "ID") == \
        refusal(amber(home, "bob", "--workspace", "b", "results", "job-0000000000")).replace("job-0000000000", "ID")
    assert refusal(amber(home, "bob", "--workspace", "b", "job", "cancel", job)).replace(job, "ID") == \
        refusal(amber(home, "bob", "--workspace", "b", "job", "cancel", "job-0000000000")).replace("job-0000000000",
                                                                                                   "ID")
    # Acting in a Workspace one is not a member of reads like one that does not exist.
    not_mine = refusal(amber(home, "bob", "--workspace", "a", "wallet"))
    missing = refusal(amber(home, "bob", "--workspace", "zz", "wallet"))
    assert not_mine.replace(" a ", " X ") == missing.replace(" zz ", " X ")
    # Benchmark Versions of another Workspace are not found either (Quotes: the test below).
    label = refusal(amber(home, "bob", "--workspace", "b", "job", "quote", "secret-bench@1", "--agent", "nop"))
    assert label.replace("secret-bench@1", "L") == refusal(
        amber(home, "bob", "--workspace", "b", "job", "quote", "nothing@1", "--agent", "nop")).replace("nothing@1", "L")
    # Nothing of a's is listed to bob.
    assert job not in ok(amber(home, "bob", "--workspace", "b", "job", "status"))
    for view in VIEWS:  # (a table wider than the console shortens values, so rows_naming is the real check)
        assert job not in ok(amber(home, "bob", "--workspace", "b", "sql", f"select * from {view}")), view
        assert rows_naming(home, "bob", "b", view, job) == 0, view
    assert "secret-bench" not in ok(amber(home, "bob", "--workspace", "b", "sql", "select * from benchmark_versions"))
    assert rows_naming(home, "bob", "b", "benchmark_versions", "secret-bench") == 0
    wallet_b = json.loads(ok(amber(home, "bob", "--workspace", "b", "wallet", "--json")))
    assert wallet_b["balance"] == "10.000000" and wallet_b["reserved"] == "0.000000"
    assert all(e["job_id"] is None for e in wallet_b["ledger"])
    # alice sees her own, through the very same commands.
    assert job in ok(amber(home, "alice", "--workspace", "a", "job", "status"))
    assert ok(amber(home, "alice", "--workspace", "a", "job", "status", job)).startswith(f"{job} over secret-bench@1")
    for view in VIEWS:
        if view != "benchmark_versions":  # a Benchmark Version names no Job: it is checked by its name below
            assert rows_naming(home, "alice", "a", view, job) >= 1, view
    assert rows_naming(home, "alice", "a", "benchmark_versions", "secret-bench") == 1
    wallet_a = json.loads(ok(amber(home, "alice", "--workspace", "a", "wallet", "--json")))
    assert [e["kind"] for e in wallet_a["ledger"]] == ["credit", "reservation"]
    assert wallet_a["ledger"][1]["job_id"] == job


@pytest.mark.docker  # `amber job start` pings the Docker engine before it looks for the Quote
def test_a_quote_of_another_workspace_is_not_found(home: Path, warehouse: Warehouse,
                                                   two_workspaces: dict[str, str]) -> None:
    quote, job = two_workspaces["quote"], two_workspaces["job"]
    elsewhere = refusal(amber(home, "bob", "--workspace", "b", "job", "start", quote))
    assert elsewhere.startswith(f"No Quote {quote} in Workspace b")
    assert elsewhere.replace(quote, "ID") == refusal(
        amber(home, "bob", "--workspace", "b", "job", "start", "quote-0000000000")).replace("quote-0000000000", "ID")
    assert refusal(amber(home, "bob", "--workspace", "b", "job", "start", job)).replace(job, "ID") == \
        elsewhere.replace(quote, "ID")
    assert records.get_job(warehouse, job, "a").status == "running"


def test_trial_rows_of_another_workspace_are_invisible_in_sql(home: Path, warehouse: Warehouse,
                                                              two_workspaces: dict[str, str]) -> None:
    job = two_workspaces["job"]
    at = datetime(2026, 12, 2, tzinfo=UTC)
    row = TrialRecord(workspace="a", job_id=job, cell_key="bv=x|agent=nop@1|mc=none", benchmark_version_id="x",
                      task_name="ini-port-change", attempt=1, trial_name="t__1", agent="nop", agent_version="v",
                      model_configuration="none", outcome="scored", reward=0.0, errored=False, retries=0,
                      error_type=None, error_message=None, input_tokens=0, output_tokens=0, cost_usd=0.001,
                      started_at=at, finished_at=at, duration_sec=1.0, image_id=None, trial_dir="/x")
    wh = warehouse
    wh.write_parquet(trials_table([row]), wh.trials_file("cellx", job))
    assert "ini-port-change" in ok(amber(home, "alice", "--workspace", "a", "sql", "select task_name from trials"))
    assert "ini-port-change" not in ok(amber(home, "bob", "--workspace", "b", "sql", "select task_name from trials"))


NOT_AVAILABLE = "The Workspace name {} is not available: choose another name."


def test_a_name_that_is_taken_reads_the_same_whoever_has_it_and_however_it_is_written(home: Path) -> None:
    """Taken by a Workspace of one's own, by another's in any case, or reserved ("public", which owns the public
    Benchmark Versions): the same sentence, naming the name as typed, so bob never learns whose it is or how its
    owner wrote it."""
    ok(amber(home, "alice", "workspace", "create", "Team"))
    for user, name in (("alice", "Team"), ("alice", "team"), ("bob", "team"), ("bob", "TEAM"), ("bob", "public"),
                       ("bob", "Public")):
        assert refusal(amber(home, user, "workspace", "create", name)) == NOT_AVAILABLE.format(name), (user, name)
    assert ok(amber(home, "bob", "workspace", "list")).count("│") == 0  # and nothing was made


def test_membership_and_staff(home: Path, warehouse: Warehouse) -> None:
    ok(amber(home, "alice", "workspace", "create", "a"))
    assert refusal(amber(home, "bob", "workspace", "create", "a")) == NOT_AVAILABLE.format("a")
    # Only members add members; bob is not one, and the refusal does not reveal that a exists.
    assert "No Workspace a among yours" in refusal(amber(home, "bob", "workspace", "add-member", "a", "bob"))
    ok(amber(home, "alice", "workspace", "add-member", "a", "bob"))
    assert "a" in ok(amber(home, "bob", "workspace", "list")).split()
    ok(amber(home, "bob", "workspace", "use", "a"))
    assert json.loads(ok(amber(home, "bob", "wallet", "--json")))["workspace"] == "a"
    # `workspace use` wrote bob's config only: alice, without --workspace, does not act in a.
    assert json.loads(ok(amber(home, "alice", "wallet", "--json")))["workspace"] == "default"
    # A new Workspace's Wallet starts empty, and only staff add Credits, with a reason.
    assert json.loads(ok(amber(home, "alice", "--workspace", "a", "wallet", "--json")))["balance"] == "0.000000"
    refused = refusal(amber(home, "alice", "--workspace", "a", "credit", "add", "--amount", "5", "--reason", "x"))
    assert "Only Amber staff can add a Credit" in refused
    local = local_user()
    assert "needs a reason" in refusal(amber(home, local, "--workspace", "a", "credit", "add", "--amount", "5"))
    assert "not an amount" in refusal(
        amber(home, local, "--workspace", "a", "credit", "add", "--amount", "lots", "--reason", "x"))
    # bob, acting in a through his config, sees the Credit staff added to a.
    ok(amber(home, local, "--workspace", "a", "credit", "add", "--amount", "5", "--reason", "x"))
    assert json.loads(ok(amber(home, "bob", "wallet", "--json")))["balance"] == "5.000000"
    assert records.list_jobs(warehouse, "a") == []
