"""The amber CLI as a user meets it: bad input gets one plain sentence, no traceback.

Commands run in this process through Typer's runner (`helpers.cli`); one test runs the installed `amber`
console script as a real process, to see that an error there is one line on stderr and exit status 1.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import typer
from helpers import cli, funded, ok, refusal, request, submit

from amber_pipeline.accounts.identity import local_user
from amber_pipeline.analysis.report import ReportCell
from amber_pipeline.cells import cell_file_id
from amber_pipeline.cli.app import app
from amber_pipeline.jobs import cell_run as pipeline
from amber_pipeline.jobs import lifecycle, records
from amber_pipeline.money import wallet
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse import storage
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.schemas import TrialRecord, trials_table

pytestmark = pytest.mark.usefixtures("cli_mode")  # on the embedded default, then against `amber serve`

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
# `job submit` pings the Docker engine before it reads its input, `job quote` does not: both must refuse alike.
QUOTE_OR_SUBMIT = pytest.mark.parametrize("command", ["quote", pytest.param("submit", marks=pytest.mark.docker)])


def one_task_benchmark(tmp_path: Path, task: str = "ini-port-change") -> Path:
    bench = tmp_path / "bench"
    shutil.copytree(DEMO / task, bench / task)
    return bench


def refused(result, *fragments: str) -> str:
    message = refusal(result)
    for fragment in fragments:
        assert fragment in message, message
    return message


# ---- the console entry point, as a real process -----------------------------------------------------------

def test_the_amber_command_prints_an_error_as_one_line_without_a_traceback(tmp_path: Path) -> None:
    amber = Path(sys.executable).parent / "amber"  # the console script pyproject.toml installs
    assert amber.is_file()
    r = subprocess.run([str(amber), "results", "job-nope"], capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "AMBER_HOME": str(tmp_path / "home"),
                            "AMBER_CONFIG": str(tmp_path / "config.toml"), "COLUMNS": "40"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("amber: No Job job-nope in Workspace default"), \
        r.stderr  # one line even on a 40-column terminal


# ---- bad input -----------------------------------------------------------------------------------------------

@QUOTE_OR_SUBMIT
def test_unknown_benchmark_path(tmp_path: Path, amber_home: Path, command: str) -> None:
    refused(cli("job", command, str(tmp_path / "nowhere"), "--agent", "nop"), "No Benchmark at",
            "give the path of a folder")


@QUOTE_OR_SUBMIT
def test_folder_without_task_toml(tmp_path: Path, amber_home: Path, command: str) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    refused(cli("job", command, str(tmp_path / "empty"), "--agent", "nop"), "No Task found in", "task.toml")


@QUOTE_OR_SUBMIT
def test_bad_task_toml(tmp_path: Path, amber_home: Path, command: str) -> None:
    bench = one_task_benchmark(tmp_path)
    (bench / "ini-port-change" / "task.toml").write_text("[agent]\ntimeout_sec = 'soon'\n")
    refused(cli("job", command, str(bench), "--agent", "nop"), "task.toml", "agent.timeout_sec", "fix the file")
    (bench / "ini-port-change" / "task.toml").write_text("[agent\n")
    refused(cli("job", command, str(bench), "--agent", "nop"), "is not valid TOML")


@QUOTE_OR_SUBMIT
@pytest.mark.parametrize("trials", ["0", "11"])
def test_trials_outside_one_to_ten(warehouse: Warehouse, command: str, trials: str) -> None:
    refused(cli("job", command, str(DEMO), "--agent", "nop", "--trials", trials),
            "Trials per Task must be from 1 to 10", trials)
    assert records.list_jobs(warehouse, "default") == []


@QUOTE_OR_SUBMIT
def test_unknown_model_configuration(warehouse: Warehouse, command: str) -> None:
    refused(cli("job", command, str(DEMO), "--model", "gpt-99"), "Unknown Model Configuration 'gpt-99'",
            "replay-strong")
    assert records.list_jobs(warehouse, "default") == []


def test_docker_engine_down(tmp_path: Path, warehouse: Warehouse) -> None:
    refused(cli("job", "submit", str(DEMO), "--agent", "nop", env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}),
            "Docker engine", "is not answering", "start it")
    assert records.list_jobs(warehouse, "default") == []


def test_unknown_job_and_bad_sql(amber_home: Path) -> None:
    refused(cli("results", "job-nope"), "No Job job-nope")
    refused(cli("sql", "select * from no_such_view"), "The query failed")


# ---- credits: odd amounts and reasons ----------------------------------------------------------------------

def test_odd_credit_amounts_are_refused_in_one_sentence_and_odd_reasons_print_as_typed(amber_home: Path) -> None:
    ok(cli("workspace", "create", "team"))
    refused(cli("--workspace", "team", "credit", "add", "--amount", "NaN", "--reason", "x"),
            '"NaN" is not an amount for --amount')
    refused(cli("--workspace", "team", "credit", "add", "--amount", "inf", "--reason", "x"),
            "is not an amount for --amount")
    refused(cli("--workspace", "team", "credit", "add", "--amount", "1e12", "--reason", "x"),
            "up to $1,000,000.")
    assert json.loads(ok(cli("--workspace", "team", "wallet", "--json")))["ledger"] == []  # nothing was written

    out = ok(cli("--workspace", "team", "credit", "add", "--amount", "1000000", "--reason", "[/]"))
    assert out == "Credited $1,000,000.00 to Workspace team.\n"
    out = ok(cli("--workspace", "team", "credit", "add", "--amount", "2.5", "--reason", "[bold]x[/bold] [/]"))
    assert out == "Credited $2.50 to Workspace team.\n"
    text = ok(cli("--workspace", "team", "wallet"))
    assert "balance $1,000,002.50" in text
    assert "[/]" in text and "[bold]x[/bold] [/]" in text  # printed as typed, not read as Rich markup
    money = json.loads(ok(cli("--workspace", "team", "wallet", "--json")))
    assert [(e["kind"], e["reason"], Decimal(e["amount"])) for e in money["ledger"]] == [
        ("credit", "[/]", Decimal(1_000_000)), ("credit", "[bold]x[/bold] [/]", Decimal("2.5"))]


# ---- --user and --workspace: global options, taken alike by every command -----------------------------------

def test_user_and_workspace_are_global_options_every_command_takes_alike(amber_home: Path) -> None:
    ok(cli("--user", "alice", "workspace", "create", "team"))
    # credit add credits the Workspace named by the global --workspace, as the user named by the global --user.
    assert ok(cli("--workspace", "team", "credit", "add", "--amount", "5", "--reason", "pilot")) == \
        "Credited $5.00 to Workspace team.\n"
    assert "Only Amber staff can add a Credit, and alice is not staff" in refusal(
        cli("--user", "alice", "--workspace", "team", "credit", "add", "--amount", "5", "--reason", "x"))

    acting = ["--user", "alice", "--workspace", "team"]
    money = json.loads(ok(cli(*acting, "wallet", "--json")))
    assert money["workspace"] == "team" and Decimal(money["balance"]) == 5
    assert "Jobs of Workspace team" in ok(cli(*acting, "job", "status"))
    assert re.search(r"team\s*│\s*credit\s*│\s*5\.0+\s*│\s*pilot", ok(cli(
        *acting, "sql", "select workspace, kind, amount, reason from ledger"))), "sql acted elsewhere"

    # bob is not a member of team: every command refuses him with the same sentence, so the options reached it.
    for command in (["wallet"], ["job", "status"], ["sql", "select 1"]):
        assert refusal(cli("--user", "bob", "--workspace", "team", *command)) == \
            "No Workspace team among yours: see yours with `amber workspace list`.", command
    # and without --workspace, alice acts in her default Workspace, not team.
    assert json.loads(ok(cli("--user", "alice", "wallet", "--json")))["workspace"] == "default"

    # The options belong before the command; after it, every command rejects them the same way.
    for command in (["wallet"], ["credit", "add", "--amount", "1", "--reason", "x"], ["job", "status"],
                    ["sql", "select 1"]):
        for option, value in (("--workspace", "team"), ("--user", "alice")):
            r = cli(*command, option, value)
            assert r.exit_code == 2 and f"No such option: {option}" in r.stderr, (command, option, r.stderr)
    assert Decimal(json.loads(ok(cli(*acting, "wallet", "--json")))["balance"]) == 5


# ---- help ----------------------------------------------------------------------------------------------------

def walk(command, path: list[str], ctx) -> list[tuple[list[str], object, object]]:
    """Every command of the tree with its path and a context, the root first."""
    found = [(path, command, ctx)]
    if hasattr(command, "list_commands"):  # a group (Typer brings its own copy of Click, so no isinstance)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            found += walk(sub, [*path, name], type(ctx)(sub, parent=ctx, info_name=name))
    return found


def test_every_command_option_and_argument_has_help_text() -> None:
    root = typer.main.get_command(app)
    commands = walk(root, [], typer.Context(root, info_name="amber"))
    names = {" ".join(path) for path, _, _ in commands}
    assert {"job quote", "job start", "job submit", "job cancel", "job status", "job wait", "results", "wallet",
            "credit add", "workspace create", "workspace add-member", "workspace list", "workspace use", "sql",
            "report", "import-harbor", "judge", "compare", "leaderboard", "plan", "ui", "demo", "daemon start",
            "daemon stop"} <= names, names
    missing = []
    for path, command, ctx in commands:
        where = " ".join(["amber", *path])
        if not (command.help or "").strip():
            missing.append(f"{where}: no help")
        help_option = command.get_help_option(ctx)
        for param in command.get_params(ctx):
            if param is help_option:  # Click's own --help
                continue
            if not (getattr(param, "help", None) or "").strip():
                missing.append(f"{where} {param.opts[0]}: no help")
    assert missing == [], missing
    assert {p.opts[0] for p in root.params} == {"--user", "--workspace"}
    # and --help shows it: every command's help text is printed by `amber ... --help`.
    for path, command, _ in commands:
        shown = " ".join(ok(cli(*path, "--help")).split())
        first = " ".join((command.help or "").split()).split(". ")[0][:40]
        assert first in shown, (path, first)


# ---- a Task that does not build ------------------------------------------------------------------------------

def bench_with_a_broken_task(tmp_path: Path) -> Path:
    bench = one_task_benchmark(tmp_path)
    broken = bench / "broken-env"
    shutil.copytree(DEMO / "count-log-errors", broken)
    (broken / "environment" / "Dockerfile").write_text("FROM amber-base:bookworm\nRUN false\n")
    return bench


@pytest.mark.docker
@pytest.mark.parametrize("public", [True, False], ids=["public", "private"])
def test_a_task_that_does_not_build_and_the_others_go_on(tmp_path: Path, warehouse: Warehouse,
                                                         public: bool) -> None:
    """Public Benchmark: Errored after two retries, not charged. Private: the Task's own failure, Reward 0."""
    wh = warehouse
    job = submit(wh, str(bench_with_a_broken_task(tmp_path)), "oracle", [], 1, public=public)
    assert job.private is (not public)
    [cell] = records.cells_of(wh, job.id)
    ran = {r.task_name: r for r in pipeline.run_cell_of_job(wh, job.id, cell.cell_key)}
    good, broken = ran["ini-port-change"], ran["broken-env"]
    assert good.reward == 1.0 and good.outcome == "scored"
    assert broken.error_type == "SandboxBuildFailedError"
    assert "\n" not in (broken.error_message or "")
    if public:
        assert broken.outcome == "errored" and broken.reward is None and broken.retries == 2
    else:
        assert broken.outcome == "scored" and broken.reward == 0.0 and broken.retries == 0
    assert records.get_job(wh, job.id, None).status == "completed"
    with wh.query() as con:
        assert con.execute("select count(*) from trials where job_id = ?", [job.id]).fetchone() == (2,)
    with wh.read() as con:
        charged_keys = {e.trial_key for e in wallet.entries(con, "default") if e.kind == "charge"}
        reserved, charged, refunded = wallet.quote_totals(con, job.quote_id)
    assert (broken.key in charged_keys) is (not public)
    assert good.key in charged_keys
    assert reserved == charged + refunded


# ---- reading a finished Job --------------------------------------------------------------------------------

@pytest.mark.docker
def test_results_and_sql_over_a_finished_job(tmp_path: Path, warehouse: Warehouse) -> None:
    wh = warehouse
    job = submit(wh, str(one_task_benchmark(tmp_path)), "oracle", [], 2, bounds=True)
    for cell in records.cells_of(wh, job.id):
        pipeline.run_cell_of_job(wh, job.id, cell.cell_key)
    out = ok(cli("sql", f"select agent, count(*) as n, avg(reward) as mean from trials "
                        f"where job_id = '{job.id}' group by agent order by agent"))
    lines = [line for line in out.splitlines() if "oracle" in line or "nop" in line]
    assert any("nop" in line and " 2 " in line and "0.0" in line for line in lines), out
    assert any("oracle" in line and " 2 " in line and "1.0" in line for line in lines), out
    out = ok(cli("sql", "select agent, mean_reward, ci_low, ci_high from cell_results order by agent"))
    assert re.search(r"nop\s*│\s*0\.0\s*│\s*0\.0\s*│\s*0\.0", out), out
    assert re.search(r"oracle\s*│\s*1\.0\s*│\s*1\.0\s*│\s*1\.0", out), out
    out = ok(cli("sql", "select agent, cause, count(*) as n from failure_causes group by all order by agent"))
    assert "nop" in out and "early_stops" in out and "oracle" not in out

    # `amber results`: the cells of the Job's report, with their CIs, and the paired comparison's verdict.
    out = ok(cli("results", job.id))
    lines = out.splitlines()
    assert lines[0] == f"{job.id} on {job.benchmark_label}"
    assert "95% CI" in out and "mean Reward" in out
    cell_lines = {line.split()[0]: line for line in lines if line.startswith("  oracle ") or
                  line.startswith("  nop ")}
    assert set(cell_lines) == {"oracle", "nop"}, out
    # cell, Tasks, Trials, mean Reward, 95% CI
    assert cell_lines["oracle"].split()[:6] == ["oracle", "1", "2", "1.000", "[1.000,", "1.000]"], out
    assert cell_lines["nop"].split()[:6] == ["nop", "1", "2", "0.000", "[0.000,", "0.000]"], out
    assert not [line for line in lines if " vs " in line], out  # oracle and nop are bounds, never compared

    out = ok(cli("job", "status", job.id))
    assert out.startswith(f"{job.id} over {job.benchmark_label}: completed")
    found = json.loads(ok(cli("results", job.id, "--json")))
    assert found["job"] == job.id and found["benchmark"] == job.benchmark_label
    cells = {c["agent"]: c for c in found["cells"]}
    assert set(cells) == {"oracle", "nop"}
    assert cells["oracle"]["mean_reward"] == 1.0 and cells["oracle"]["ci95"] == [1.0, 1.0]
    assert cells["nop"]["mean_reward"] == 0.0 and cells["nop"]["n_trials"] == 2
    assert cells["oracle"]["errored"] == 0 and cells["oracle"]["cost_usd"] > 0
    assert cells["oracle"]["n_tasks"] == 1 and cells["oracle"]["pass_rate"]["percent"] == 100.0
    assert found["comparisons"] == []


def test_results_show_each_cell_with_its_ci_and_each_comparison_with_its_verdict(warehouse: Warehouse) -> None:
    """Three Model Configurations of one Agent over the 8 demo Tasks, their Trial rows written by hand (no
    Docker): one solves all, one none, one a single Task."""
    wh = warehouse
    funded(wh)
    made = lifecycle.quote(wh, "default", local_user(),
                           request(str(DEMO), "terminus-2", ["replay-strong", "replay-weak", "judge-replay"]))
    job = records.get_job(wh, made.job_id, "default")
    tasks = sorted(p.name for p in DEMO.iterdir() if (p / "task.toml").is_file())
    assert len(tasks) == 8
    solved = {"replay-strong": set(tasks), "replay-weak": set(), "judge-replay": {tasks[0]}}
    at = datetime(2030, 1, 1, tzinfo=UTC)
    for cell in records.cells_of(wh, job.id):
        rows = [TrialRecord(workspace="default", job_id=job.id, cell_key=cell.cell_key,
                            benchmark_version_id=job.benchmark_version_id, task_name=t, attempt=1,
                            trial_name=f"{t}__1", agent="terminus-2", agent_version="v",
                            model_configuration=cell.model_configuration.split('@')[0], outcome="scored",
                            reward=float(t in solved[cell.model_configuration.split('@')[0]]), errored=False, retries=0,
                            error_type=None, error_message=None, input_tokens=10, output_tokens=5, cost_usd=0.25,
                            started_at=at, finished_at=at + timedelta(seconds=4), duration_sec=4.0, image_id=None,
                            trial_dir=str(wh.paths.runs / job.id / "none" / f"{t}__1")) for t in tasks]
        wh.write_parquet(trials_table(rows), wh.trials_file(cell_file_id(cell.cell_key), job.id))

    lines = ok(cli("results", job.id)).splitlines()
    assert lines[0] == f"{job.id} on {job.benchmark_label}"
    cells = {line.split()[0]: line.split() for line in lines
             if line.startswith("  terminus-2/") and " vs " not in line}
    assert len(cells) == 3, lines
    # cell, Tasks, Trials, mean Reward, 95% CI, pass rate, cost
    assert cells["terminus-2/replay-strong"][:8] == ["terminus-2/replay-strong", "8", "8", "1.000", "[1.000,",
                                                     "1.000]", "100.0%", "2.0000"]
    assert cells["terminus-2/replay-weak"][:8] == ["terminus-2/replay-weak", "8", "8", "0.000", "[0.000,",
                                                   "0.000]", "0.0%", "2.0000"]
    third = cells["terminus-2/judge-replay"]
    assert third[:4] == ["terminus-2/judge-replay", "8", "8", "0.125"] and third[6] == "12.5%"
    low, high = float(third[4].strip("[,")), float(third[5].strip("]"))
    assert 0 <= low < 0.125 < high < 1, third
    verdicts = {tuple(line.split(":")[0].split(" vs ")): line.strip() for line in lines if " vs " in line}
    assert set(verdicts) == {("  terminus-2/replay-strong", "terminus-2/judge-replay"),
                             ("  terminus-2/replay-strong", "terminus-2/replay-weak"),
                             ("  terminus-2/judge-replay", "terminus-2/replay-weak")}, verdicts
    assert verdicts[("  terminus-2/replay-strong", "terminus-2/replay-weak")] == (
        "terminus-2/replay-strong vs terminus-2/replay-weak: mean Reward difference 1.000, 95% CI [1.000, 1.000] "
        "over 8 shared Tasks: terminus-2/replay-strong is better")
    assert verdicts[("  terminus-2/replay-strong", "terminus-2/judge-replay")].endswith(
        "over 8 shared Tasks: terminus-2/replay-strong is better")
    assert verdicts[("  terminus-2/judge-replay", "terminus-2/replay-weak")].startswith(
        "terminus-2/judge-replay vs terminus-2/replay-weak: mean Reward difference 0.125, 95% CI [0.000, ")
    assert verdicts[("  terminus-2/judge-replay", "terminus-2/replay-weak")].endswith(
        "over 8 shared Tasks: too close to call")

    found = json.loads(ok(cli("results", job.id, "--json")))
    assert set(found) == {"job", "benchmark", "status", "message", "cells", "comparisons", "metering_disagreements"}
    assert found["metering_disagreements"] == []  # these Trials carry no count of the Agent's own
    by_route = {c["route"]: c for c in found["cells"]}
    assert all(set(c) == set(ReportCell.model_fields) - {"partial"} for c in found["cells"])  # stopped Jobs only
    assert [round(x, 3) for x in by_route["terminus-2/judge-replay"]["ci95"]] == [low, high]
    assert by_route["terminus-2/replay-strong"]["ci95"] == [1.0, 1.0]
    assert by_route["terminus-2/replay-weak"]["mean_reward"] == 0.0
    assert {(c["better"], c["worse"]): c["too_close_to_call"] for c in found["comparisons"]} == {
        ("terminus-2/replay-strong", "terminus-2/judge-replay"): False,
        ("terminus-2/replay-strong", "terminus-2/replay-weak"): False,
        ("terminus-2/judge-replay", "terminus-2/replay-weak"): True}


def test_a_failed_parquet_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = tmp_path / "w" / "x.parquet"

    def explode(table: pa.Table, where: Path) -> None:
        Path(where).write_bytes(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", explode)
    with pytest.raises(OSError):
        storage.write_local_parquet(pa.table({"a": [1]}), target)
    assert list(target.parent.iterdir()) == []


def test_results_show_where_an_agents_own_token_count_disagrees_with_the_proxy(warehouse: Warehouse) -> None:
    """The Wallet is charged what the proxy metered; an Agent that counts otherwise is shown beside it."""
    wh = warehouse
    funded(wh)
    made = lifecycle.quote(wh, "default", local_user(), request(str(DEMO), "terminus-2", ["replay-strong",
                                                                                          "replay-weak"]))
    job = records.get_job(wh, made.job_id, "default")
    at = datetime(2030, 1, 1, tzinfo=UTC)
    for cell in records.cells_of(wh, job.id):
        name = cell.model_configuration.split("@")[0]
        counted = 1_150 if name == "replay-strong" else 1_005  # strong's Agent says 15% more input; weak's 0.5%
        rows = [TrialRecord(workspace="default", job_id=job.id, cell_key=cell.cell_key,
                            benchmark_version_id=job.benchmark_version_id, task_name=t, attempt=1,
                            trial_name=f"{t}__1", agent="terminus-2", agent_version="v", model_configuration=name,
                            outcome="scored", reward=1.0, errored=False, retries=0, error_type=None,
                            error_message=None, input_tokens=1_000, output_tokens=100, cost_usd=0.01, started_at=at,
                            finished_at=at + timedelta(seconds=4), duration_sec=4.0, image_id=None,
                            trial_dir=str(wh.paths.runs / job.id / "none" / f"{t}__1"), agent_input_tokens=counted,
                            agent_output_tokens=100) for t in ("fix-off-by-one", "ini-port-change")]
        wh.write_parquet(trials_table(rows), wh.trials_file(cell_file_id(cell.cell_key), job.id))

    text = ok(cli("results", job.id))
    assert ("  terminus-2/replay-strong: input 2,000 metered, 2,300 by the Agent; output 200 metered, 200 by the "
            "Agent") in text.splitlines()
    assert "replay-weak: input" not in text  # within 1%: no disagreement worth showing
    found = json.loads(ok(cli("results", job.id, "--json")))
    assert found["metering_disagreements"] == [{"route": "terminus-2/replay-strong", "metered_input": 2000,
                                                "agent_input": 2300, "metered_output": 200, "agent_output": 200}]
