"""Workspaces: what one Workspace owns is invisible to the members of another, even in errors."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trials_table

DEMO = PROJECT_ROOT / "examples" / "demo-bench"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def amber(home: Path, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AMBER_HOME": str(home), "COLUMNS": "250",
           "AMBER_CONFIG": str(home.parent / f"{user}.toml")}
    return subprocess.run([sys.executable, "-m", "amber_pipeline.cli", "--user", user, *args],
                          capture_output=True, text=True, timeout=120, env=env)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    return " ".join(result.stderr.split())


def quote_id_of(output: str) -> str:
    return next(word for word in output.split() if word.startswith("quote-"))


@pytest.fixture
def two_workspaces(home: Path, tmp_path: Path) -> dict[str, str]:
    """alice's Workspace a with a quoted and started Job on her private Benchmark; bob's Workspace b."""
    bench = tmp_path / "secret-bench"
    shutil.copytree(DEMO / "ini-port-change", bench / "ini-port-change")
    ok(amber(home, "alice", "workspace", "create", "a"))
    ok(amber(home, "bob", "workspace", "create", "b"))
    local = getpass.getuser()
    for ws in ("a", "b"):
        ok(amber(home, local, "credit", "add", "--workspace", ws, "--amount", "10", "--reason", "test"))
    quote = quote_id_of(ok(amber(home, "alice", "--workspace", "a", "job", "quote", str(bench), "--agent", "nop")))
    started = ok(amber(home, "alice", "--workspace", "a", "job", "start", quote))
    job = next(word for word in started.split() if word.startswith("job-"))
    return {"job": job, "quote": quote}


def test_another_workspace_is_invisible_and_errors_do_not_hint(home: Path, two_workspaces: dict[str, str]) -> None:
    job = two_workspaces["job"]
    # A Job of another Workspace and a Job that does not exist get the same sentence.
    elsewhere = refusal(amber(home, "bob", "--workspace", "b", "job", "status", job))
    nowhere = refusal(amber(home, "bob", "--workspace", "b", "job", "status", "job-0000000000"))
    assert elsewhere.replace(job, "ID") == nowhere.replace("job-0000000000", "ID")
    assert refusal(amber(home, "bob", "--workspace", "b", "results", job)).replace(job, "ID") == \
        refusal(amber(home, "bob", "--workspace", "b", "results", "job-0000000000")).replace("job-0000000000", "ID")
    # Acting in a Workspace one is not a member of reads like one that does not exist.
    not_mine = refusal(amber(home, "bob", "--workspace", "a", "wallet"))
    missing = refusal(amber(home, "bob", "--workspace", "zz", "wallet"))
    assert not_mine.replace(" a ", " X ") == missing.replace(" zz ", " X ")
    # Quotes and Benchmark Versions of another Workspace are not found either.
    assert "No Quote" in refusal(amber(home, "bob", "--workspace", "b", "job", "start", two_workspaces["quote"]))
    label = refusal(amber(home, "bob", "--workspace", "b", "job", "quote", "secret-bench@1", "--agent", "nop"))
    assert label.replace("secret-bench@1", "L") == refusal(
        amber(home, "bob", "--workspace", "b", "job", "quote", "nothing@1", "--agent", "nop")).replace("nothing@1", "L")
    # Nothing of a's is listed to bob.
    assert job not in ok(amber(home, "bob", "--workspace", "b", "job", "status"))
    for view in ("jobs", "quotes", "ledger", "benchmark_versions", "job_cells", "job_spending"):
        assert job not in ok(amber(home, "bob", "--workspace", "b", "sql", f"select * from {view}")), view
    assert "secret-bench" not in ok(amber(home, "bob", "--workspace", "b", "sql", "select * from benchmark_versions"))
    wallet_b = json.loads(ok(amber(home, "bob", "--workspace", "b", "wallet", "--json")))
    assert wallet_b["balance"] == "10.000000" and wallet_b["reserved"] == "0.000000"
    assert all(e["job_id"] is None for e in wallet_b["ledger"])
    # alice sees her own.
    assert job in ok(amber(home, "alice", "--workspace", "a", "job", "status"))
    wallet_a = json.loads(ok(amber(home, "alice", "--workspace", "a", "wallet", "--json")))
    assert [e["kind"] for e in wallet_a["ledger"]] == ["credit", "reservation"]


def test_trial_rows_of_another_workspace_are_invisible_in_sql(home: Path, two_workspaces: dict[str, str]) -> None:
    job = two_workspaces["job"]
    at = datetime(2026, 12, 2, tzinfo=UTC)
    row = TrialRecord(workspace="a", job_id=job, cell_key="bv=x|agent=nop@1|mc=none", benchmark_version_id="x",
                      task_name="ini-port-change", attempt=1, trial_name="t__1", agent="nop", agent_version="v",
                      model_configuration="none", outcome="scored", reward=0.0, errored=False, retries=0,
                      error_type=None, error_message=None, input_tokens=0, output_tokens=0, cost_usd=0.001,
                      started_at=at, finished_at=at, duration_sec=1.0, image_id=None, trial_dir="/x")
    wh = Warehouse(AmberPaths(home))
    wh.write_parquet(trials_table([row]), wh.trials_file("cellx", job))
    assert "ini-port-change" in ok(amber(home, "alice", "--workspace", "a", "sql", "select task_name from trials"))
    assert "ini-port-change" not in ok(amber(home, "bob", "--workspace", "b", "sql", "select task_name from trials"))


def test_membership_and_staff(home: Path) -> None:
    ok(amber(home, "alice", "workspace", "create", "a"))
    assert "already exists" in refusal(amber(home, "bob", "workspace", "create", "a"))
    # Only members add members; bob is not one, and the refusal does not reveal that a exists.
    assert "No Workspace a among yours" in refusal(amber(home, "bob", "workspace", "add-member", "a", "bob"))
    ok(amber(home, "alice", "workspace", "add-member", "a", "bob"))
    assert "a" in ok(amber(home, "bob", "workspace", "list")).split()
    ok(amber(home, "bob", "workspace", "use", "a"))
    assert json.loads(ok(amber(home, "bob", "wallet", "--json")))["workspace"] == "a"
    # A new Workspace's Wallet starts empty, and only staff add Credits, with a reason.
    assert json.loads(ok(amber(home, "alice", "--workspace", "a", "wallet", "--json")))["balance"] == "0.000000"
    refused = refusal(amber(home, "alice", "credit", "add", "--workspace", "a", "--amount", "5", "--reason", "x"))
    assert "Only Amber staff can add a Credit" in refused
    local = getpass.getuser()
    assert "needs a reason" in refusal(amber(home, local, "credit", "add", "--workspace", "a", "--amount", "5"))
    assert "not an amount" in refusal(
        amber(home, local, "credit", "add", "--workspace", "a", "--amount", "lots", "--reason", "x"))
