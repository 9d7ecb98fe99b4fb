"""`amber sql` is a boundary: a member of one Workspace reaches its rows of the documented views and nothing else.

Two Workspaces with Credits, a Quote each and Trial rows each; bob (Workspace b) tries every escape of
issue 12's first finding against alice's Workspace a and the instance itself, and each one fails with one
sentence and changes nothing. Commands run in this process through Typer's runner; the confined runner is
also called directly where a test needs a small limit or a second thread.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import cli, ok, refusal, sign_in, trial_rows

from amber_pipeline.accounts.identity import local_user
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import lifecycle
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse import confined, views
from amber_pipeline.warehouse.catalog import Warehouse

pytestmark = pytest.mark.usefixtures("cli_mode")  # on the embedded default, then against `amber serve`

STATIC_BENCH = PROJECT_ROOT / "examples" / "static-bench"
SECRET = "SECRET-INSTRUCTION-OF-ALICE-7731"
# Minutes of work at two threads, and no memory: only a time limit stops it.
LONG_QUERY = "select sum(a.range * b.range) from range(100000000) a cross join range(100000) b"


def amber(home: Path, user: str, *args: str):
    """`amber --user USER ARGS` with USER's own config file."""
    return cli("--user", user, *args, env={"AMBER_CONFIG": str(home.parent / f"{user}.toml")})


def bob(home: Path, query: str, *options: str):
    return amber(home, "bob", "--workspace", "b", "sql", query, *options)


@dataclass(frozen=True)
class Instance:
    """alice's Workspace a (a private Benchmark whose Instruction holds SECRET) and bob's b: Credits, a started
    Job each, and Trial rows each in a cell folder of its own."""

    home: Path
    wh: Warehouse
    jobs: dict[str, str]
    instruction: Path
    cell_a: Path


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    """One instance for the module: every test but one only reads it (that one puts back what it changed)."""
    root = tmp_path_factory.mktemp("confinement")
    home = root / "amber"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_HOME", str(home))
        wh = Warehouse(AmberPaths.from_env())
        bench = root / "secret-bench"
        shutil.copytree(STATIC_BENCH / "capital-city", bench / "capital-city")
        (bench / "capital-city" / "instruction.md").write_text(f"{SECRET}: what is the capital of France?\n")
        jobs = {}
        for user, ws, source in (("alice", "a", bench), ("bob", "b", STATIC_BENCH)):
            ok(amber(home, user, "workspace", "create", ws))
            ok(amber(home, local_user(), "--workspace", ws, "credit", "add", "--amount", "10", "--reason", "test"))
            out = ok(amber(home, user, "--workspace", ws, "job", "quote", str(source), "--agent", "direct",
                           "--model", "replay-strong"))
            quote = next(word for word in out.split() if word.startswith("quote-"))
            jobs[ws] = lifecycle.start(wh, ws, quote).id
            wh.write_parquet(trial_rows(ws, jobs[ws], 3 if ws == "a" else 2), wh.trials_file(f"cell-{ws}", jobs[ws]))
        [instruction] = [p for p in home.glob("benchmarks/*/capital-city/instruction.md") if SECRET in p.read_text()]
        yield Instance(home, wh, jobs, instruction, wh.trials_file("cell-a", jobs["a"]).parent)


def snapshot(home: Path) -> dict[str, str]:
    """Every file under the instance with the hash of its bytes."""
    return {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(home.rglob("*")) if p.is_file()}


# ---- reads --------------------------------------------------------------------------------------------------------

def test_the_catalog_is_not_attached(instance: Instance) -> None:
    for table in ("ledger", "jobs", "members", "benchmark_versions", "quotes", "workspaces"):
        for name in (f"catalog.{table}", f"catalog.main.{table}"):
            sentence = refusal(bob(instance.home, f"select * from {name}"))
            assert sentence.startswith("The query failed: ") and "does not exist" in sentence, name
            assert instance.jobs["a"] not in sentence, name
    assert ok(bob(instance.home, "select database_name from duckdb_databases() where not internal")).count("│") == 2
    assert "catalog" not in ok(bob(instance.home, "select database_name from duckdb_databases() where not internal"))


def test_no_file_can_be_read(instance: Instance) -> None:
    assert instance.instruction.exists() and Path("/etc/passwd").exists()
    for query in (f"select * from read_parquet('{instance.home}/warehouse/**/*.parquet')",
                  f"select * from '{instance.cell_a}/*.parquet'",
                  f"select * from read_text('{instance.instruction}')",
                  f"select * from read_text('{instance.home}/benchmarks/*/*/instruction.md')",
                  "select * from read_text('/etc/passwd')",
                  "select * from read_csv('/etc/passwd')",
                  "select * from read_blob('/etc/passwd')",
                  f"select * from glob('{instance.home}/**')",
                  "select * from glob('/etc/*')"):
        sentence = refusal(bob(instance.home, query))
        assert sentence.startswith("The query was refused: amber sql reads only your Workspace's views"), query
        assert SECRET not in sentence and "root:" not in sentence, query


def test_no_file_can_be_written_and_every_command_still_works(instance: Instance) -> None:
    sign_in("--user", "bob")
    before = snapshot(instance.home)
    catalog = instance.home / "warehouse" / "catalog.duckdb"
    forged = instance.cell_a / "forged.parquet"
    for query in (f"copy (select 1) to '{catalog}'",
                  f"copy (select * from trials) to '{forged}' (format parquet)",
                  f"copy (select 1 as x) to '{instance.home}/x.csv'",
                  f"export database '{instance.home}/exported'",
                  f"attach '{catalog}' as c2",
                  f"attach '{instance.home}/new.duckdb' as n"):
        refusal(bob(instance.home, query))
    assert snapshot(instance.home) == before
    assert not forged.exists()
    for user, ws, job in (("alice", "a", instance.jobs["a"]), ("bob", "b", instance.jobs["b"])):
        ok(amber(instance.home, user, "--workspace", ws, "wallet"))
        assert job in ok(amber(instance.home, user, "--workspace", ws, "job", "status"))
        trials = ok(amber(instance.home, user, "--workspace", ws, "sql", "select task_name from trials"))
        assert f"{ws}-task-0" in trials


LOCKED = ("install httpfs", "load httpfs", "install json", "force install parquet",
          "set enable_external_access = true", "reset enable_external_access", "set lock_configuration = false",
          "set autoload_known_extensions = true", "set allow_community_extensions = true",
          "pragma memory_limit = '100GB'", "set memory_limit = '100GB'", "pragma threads = 64", "set threads = 64",
          "set temp_directory = '/tmp'", "set disabled_filesystems = ''", "set python_enable_replacements = true")


def test_extensions_and_settings_are_locked(instance: Instance) -> None:
    for query in LOCKED:
        refusal(bob(instance.home, query))
        # Nor does a change earlier in the same text open anything for what follows.
        assert "root:" not in refusal(bob(instance.home, f"{query}; select * from read_text('/etc/passwd')")), query


def test_a_python_variable_named_in_the_query_is_not_read(instance: Instance) -> None:
    secret = pa.table({"x": [SECRET]})  # noqa: F841 (named by the query)
    with pytest.raises(AmberError) as raised:
        confined.run(instance.wh, "b", "select * from secret")
    assert str(raised.value).startswith("The query failed: Catalog Error") and SECRET not in str(raised.value)


# ---- the acting Workspace's rows, exactly -------------------------------------------------------------------------

def _sorted(rows: list[tuple]) -> list[tuple]:
    return sorted(rows, key=repr)


@pytest.mark.parametrize("workspace", ["a", "b"])
def test_each_view_shows_exactly_what_the_scoped_views_show(instance: Instance, workspace: str) -> None:
    for name in sorted(views.VIEW_NAMES):
        got = confined.run(instance.wh, workspace, f"select * from {name}")
        with instance.wh.query(workspace) as con:
            cursor = con.execute(f"select * from {name}")
            expected = ([d[0] for d in cursor.description or []], cursor.fetchall())
        assert (list(got.columns), _sorted(got.rows)) == (expected[0], _sorted(expected[1])), name


def test_ledger_jobs_and_trials_are_the_acting_workspaces_rows(instance: Instance) -> None:
    seen: dict[str, dict[str, list[tuple]]] = {}
    for ws in ("a", "b"):
        with instance.wh.read() as catalog:
            # What users see of the ledger and Jobs: numbered within their Workspace (catalog.py's DDL).
            direct = {t: catalog.execute(f"select * from {source} where workspace = ?", [ws]).fetchall()
                      for t, source in (("ledger", "workspace_ledger"), ("jobs", "workspace_jobs"),
                                        ("quotes", "quotes"))}
        rows = pa.concat_tables([pq.read_table(p) for p, _, _ in instance.wh.trial_files()])
        direct["trials"] = [tuple(r.values()) for r in rows.to_pylist() if r["workspace"] == ws]
        seen[ws] = {t: confined.run(instance.wh, ws, f"select * from {t}").rows for t in direct}
        for t in direct:
            assert direct[t], (ws, t)
            assert _sorted(seen[ws][t]) == _sorted(direct[t]), (ws, t)
    assert {r[1] for r in seen["a"]["jobs"]} == {instance.jobs["a"]}
    assert {r[1] for r in seen["b"]["jobs"]} == {instance.jobs["b"]}
    assert [r[0] for r in seen["b"]["ledger"]] == list(range(1, len(seen["b"]["ledger"]) + 1))  # no gaps
    assert [len(seen[ws]["trials"]) for ws in ("a", "b")] == [3, 2]


def test_a_query_reads_only_the_views_it_names(instance: Instance) -> None:
    assert confined.views_named("select kind, sum(amount) from ledger group by kind") == {"ledger"}
    assert views.with_dependencies(confined.views_named("select * from job_spending")) == {
        "job_spending", "jobs", "ledger"}
    # A broken Trial file is left out of the Trials (warehouse/fitting.py), and touches no other view.
    broken = instance.wh.paths.trials / "cell-broken" / "job-x.parquet"
    broken.parent.mkdir()
    broken.write_bytes(b"not parquet")
    try:
        assert "│ 2 " in ok(bob(instance.home, "select count(*) from trials"))  # bob's own two Trials
        assert "│ 2 " in ok(bob(instance.home, "select count(*) from ledger"))  # its credit and its reservation
        assert "│ 1 " in ok(bob(instance.home, "select count(*) from job_spending"))
    finally:
        shutil.rmtree(broken.parent)
    # A view named inside a string is loaded too.
    assert "│ 2 " in ok(bob(instance.home, "select count(*) from query_table('ledger')"))


# ---- time, memory and the catalog lock ----------------------------------------------------------------------------

def test_a_long_query_is_stopped_and_keeps_no_writer_waiting(instance: Instance) -> None:
    outcome: list[BaseException | None] = []

    def long_query() -> None:
        try:
            confined.run(instance.wh, "b", f"select * from ledger, ({LONG_QUERY})", timeout_s=6)
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 (handed to the test thread)
            outcome.append(e)

    started = time.monotonic()
    query = threading.Thread(target=long_query)
    query.start()
    time.sleep(1.5)  # the rows are loaded by now, and the query is running
    assert query.is_alive()
    with instance.wh.write() as con:
        con.execute("select count(*) from ledger").fetchall()
    assert time.monotonic() - started < 3.5  # the writer did not wait for the query
    query.join(timeout=30)
    elapsed = time.monotonic() - started
    [error] = outcome
    assert isinstance(error, AmberError)
    assert str(error).startswith("The query ran longer than 6 s and was stopped") and "\n" not in str(error)
    assert 5.5 < elapsed < 10


def test_the_time_limit_is_an_option_of_the_command(instance: Instance) -> None:
    started = time.monotonic()
    sentence = refusal(bob(instance.home, LONG_QUERY, "--timeout", "1"))
    assert sentence.startswith("The query ran longer than 1 s and was stopped: ") and time.monotonic() - started < 8
    for bad in ("0", "-1", "nan", "inf", "100000"):
        assert "--timeout" in refusal(bob(instance.home, "select 1", "--timeout", bad)), bad


def test_a_query_past_its_memory_limit_fails_in_one_sentence(instance: Instance) -> None:
    with pytest.raises(AmberError) as raised:
        confined.run(instance.wh, "b", "select list(range) from range(100000000)", memory_limit="64MB")
    assert str(raised.value).startswith("The query needed more than 64MB of memory and was stopped: ")
    assert "\n" not in str(raised.value)
    assert confined.run(instance.wh, "b", "select count(*) from ledger").rows == [(2,)]  # and the process goes on


def test_a_result_too_long_to_hold_is_refused_in_one_sentence(instance: Instance) -> None:
    assert len(confined.run(instance.wh, "b", f"select * from range({confined.MAX_ROWS})").rows) == confined.MAX_ROWS
    sentence = refusal(bob(instance.home, "select * from range(1000000000)"))
    assert sentence == "The query returned more than 100,000 rows: aggregate them, filter them or add a limit."


def test_a_join_using_a_column_runs(instance: Instance) -> None:
    # DuckDB's get_table_names, which the command used to find the views named, fails to bind this.
    assert "│ 2 " in ok(bob(instance.home, "select count(*) from ledger join quotes using (workspace)"))
