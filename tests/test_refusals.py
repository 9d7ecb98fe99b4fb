"""Refused means unchanged: every refusal of the CLI, each compared with the instance before and after it.

One instance is set up once the way users get it (Workspaces, a Credit, a quoted Job, a cancelled one, an
expired Quote, another user's Workspace with its Job) and copied for each case. Each case runs one refused
command through the CLI and checks what a user would: exit status 1, one sentence on stderr and no traceback,
and an instance exactly as it was: every catalog table's rows (and its sequences), every other file under
AMBER_HOME by path, size and hash, and the user's config file. The catalog file's bytes are not compared,
since DuckDB may checkpoint an unchanged database when a writer closes it; its rows are, in full.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from helpers import cli, ok, refusal, request, sign_in

from amber_pipeline.accounts.identity import local_user
from amber_pipeline.jobs import lifecycle
from amber_pipeline.money import wallet
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

pytestmark = pytest.mark.usefixtures("cli_mode")  # on the embedded default, then against `amber serve`

DEMO_TASK = PROJECT_ROOT / "examples" / "demo-bench" / "count-log-errors"
STATIC = PROJECT_ROOT / "examples" / "static-bench"
STATIC_TASK = STATIC / "capital-city"
IGNORED = {"catalog.duckdb", "catalog.duckdb.wal"}  # compared by their rows instead
# Working folders made when first needed and empty whenever no command runs: an upload unpacks into uploads/ and
# leaves nothing there, whether its archive is taken or refused.
WORK_FOLDERS = {"uploads/"}


@dataclass(frozen=True)
class Instance:
    home: Path
    config: Path
    tasks: Path  # Task folders outside the instance, one per case that needs one
    names: dict[str, str]  # placeholders of the cases: Job and Quote ids


def _task(folder: Path, source: Path, toml: str | None = None, append: str = "") -> None:
    shutil.copytree(source, folder)
    text = toml if toml is not None else (folder / "task.toml").read_text() + append
    (folder / "task.toml").write_text(text)


def _tasks(root: Path) -> None:
    """The Task folders the cases submit: a good one, one per broken rule, and a bad archive."""
    _task(root / "good", DEMO_TASK)
    (root / "empty").mkdir()
    _task(root / "not-toml", DEMO_TASK, toml="version = = 1\n")
    _task(root / "schema", DEMO_TASK, toml='version = "1.0"\n[agent]\ntimeout_sec = "soon"\n')
    demo = (DEMO_TASK / "task.toml").read_text()
    for name, old, new in (("cpus-1000", "cpus = 1", "cpus = 1000"), ("cpus-0", "cpus = 1", "cpus = 0"),
                           ("memory-neg", "memory_mb = 512", "memory_mb = -5"),
                           ("storage-big", "memory_mb = 512", "memory_mb = 512\nstorage_mb = 20480"),
                           ("gpus", "memory_mb = 512", "memory_mb = 512\ngpus = 1"),
                           ("agent-timeout-neg", "timeout_sec = 120.0", "timeout_sec = -1"),
                           ("verifier-timeout-inf", "timeout_sec = 60.0", "timeout_sec = 1e309"),
                           ("verifier-timeout-nan", "timeout_sec = 60.0", "timeout_sec = nan"),
                           ("build-timeout-0", "build_timeout_sec = 300.0", "build_timeout_sec = 0"),
                           ("healthcheck-neg", "memory_mb = 512",
                            'memory_mb = 512\n[environment.healthcheck]\ncommand = "true"\ntimeout_sec = -3')):
        assert old in demo, old
        _task(root / name, DEMO_TASK, toml=demo.replace(old, new, 1))
    static = (STATIC_TASK / "task.toml").read_text()
    _task(root / "static-timeout-neg", STATIC_TASK, toml=static.replace("timeout_sec = 60.0", "timeout_sec = -1"))
    with tarfile.open(root / "linked.tar.gz", "w:gz") as tar:
        link = tarfile.TarInfo("t/task.toml")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
        data = b"do it\n"
        info = tarfile.TarInfo("t/instruction.md")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (root / "not-an-archive.tar.gz").write_text("plain text\n")
    (root / "bad-model.toml").write_text('name = "mine"\nmodel = "x"\nprovider = "nowhere"\n')


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    """An instance as users leave it: Workspaces default (funded, with alice), broke (empty) and bob's other
    (funded, with a quoted Job); in default a quoted Job, a cancelled one, a completed one and an expired
    Quote."""
    base = tmp_path_factory.mktemp("refusals")
    home, config, tasks = base / "amber", base / "config.toml", base / "tasks"
    _tasks(tasks)
    me = local_user()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_HOME", str(home))
        mp.setenv("AMBER_CONFIG", str(config))
        ok(cli("workspace", "create", "default"))
        ok(cli("workspace", "create", "broke"))
        ok(cli("workspace", "add-member", "default", "alice"))
        ok(cli("--user", "bob", "workspace", "create", "other"))
        for ws in ("default", "other"):
            ok(cli("--workspace", ws, "credit", "add", "--amount", "50", "--reason", "test"))
        wh = Warehouse(AmberPaths.from_env())
        static = request(str(STATIC), "direct", ["replay-strong"])
        quoted = lifecycle.quote(wh, "default", me, static)
        cancelled = lifecycle.quote(wh, "default", me, static)
        lifecycle.cancel(wh, "default", cancelled.job_id)
        expired = lifecycle.quote(wh, "default", me, static, now=datetime.now(UTC) - timedelta(hours=2))
        lifecycle.expire_due(wh)
        others = lifecycle.quote(wh, "other", "bob", static)
        completed = lifecycle.quote(wh, "default", me, static)
        lifecycle.start(wh, "default", completed.id)
        with wh.write() as con:  # as its last cell would end it (`lifecycle._end_if_idle`)
            lifecycle.transition(con, completed.job_id, "completed")
            wallet.release(con, "default", completed.id, completed.job_id, "unspent when the Job ended completed")
    yield Instance(home, config, tasks, {"quoted": quoted.job_id, "cancelled": cancelled.job_id,
                                         "expired": expired.id, "others": others.job_id,
                                         "completed": completed.job_id})


@pytest.fixture
def instance(template: Instance, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Instance:
    """A copy of the template for one case, with no Provider key anywhere."""
    home, config = tmp_path / "amber", tmp_path / "config.toml"
    shutil.copytree(template.home, home)
    if template.config.exists():
        shutil.copy2(template.config, config)
    monkeypatch.setenv("AMBER_HOME", str(home))
    monkeypatch.setenv("AMBER_CONFIG", str(config))
    monkeypatch.setenv("AMBER_SECRETS_FILE", str(tmp_path / "no-secrets.env"))
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    return Instance(home, config, template.tasks, template.names)


_READER = duckdb.connect()  # one in-memory DuckDB that attaches each catalog read (a new instance per read cost more)


def state(instance: Instance) -> dict[str, object]:
    """Everything a command could change: every catalog table's rows and its sequences, every other file and
    folder under AMBER_HOME (lock files aside), and the user's config file."""
    files: dict[str, object] = {}
    for folder, dirs, names in os.walk(instance.home):
        for name in dirs:
            rel = os.path.relpath(os.path.join(folder, name), instance.home) + "/"
            if rel not in WORK_FOLDERS or os.listdir(os.path.join(folder, name)):
                files[rel] = "folder"
        for name in names:
            if name in IGNORED or name.endswith(".lock"):
                continue
            path = Path(folder) / name
            files[str(path.relative_to(instance.home))] = (path.stat().st_size,
                                                           hashlib.sha256(path.read_bytes()).hexdigest())
    catalog: dict[str, object] = {}
    con = _READER.cursor()
    con.execute(f"attach '{AmberPaths(instance.home).catalog}' as snapshot (read_only)")
    try:
        for (table,) in con.execute("select table_name from information_schema.tables where table_catalog = "
                                    "'snapshot' and table_schema = 'main' order by table_name").fetchall():
            catalog[table] = con.execute(f'select * from snapshot.main."{table}" order by all').fetchall()
        catalog["sequences"] = con.execute("select sequence_name, last_value from duckdb_sequences() "
                                           "where database_name = 'snapshot' order by sequence_name").fetchall()
    finally:
        con.execute("detach snapshot")
        con.close()
    config = instance.config.read_bytes() if instance.config.exists() else None
    return {"files": files, "catalog": catalog, "config": config}


# (case id, the command's arguments, a phrase its sentence holds). {tasks} is the folder of Task folders;
# {quoted}, {cancelled}, {completed}, {others} are Jobs, {expired} a Quote (see `template`).
CASES: list[tuple[str, list[str], str]] = [
    # job quote: the Benchmark
    ("quote-missing-path", ["job", "quote", "{tasks}/nowhere", "--model", "replay-strong"], "No Benchmark at"),
    ("quote-no-task-toml", ["job", "quote", "{tasks}/empty", "--model", "replay-strong"], "No Task found"),
    ("quote-bad-toml", ["job", "quote", "{tasks}/not-toml", "--model", "replay-strong"], "is not valid TOML"),
    ("quote-bad-schema", ["job", "quote", "{tasks}/schema", "--model", "replay-strong"], "task.toml schema"),
    ("quote-unknown-label", ["job", "quote", "nothing-here@3", "--model", "replay-strong"],
     "No Benchmark Version nothing-here@3"),
    ("quote-static-with-terminus", ["job", "quote", str(STATIC), "--model", "replay-strong"],
     "only the Direct Agent runs"),
    ("quote-direct-on-docker-task", ["job", "quote", "{tasks}/good", "--agent", "direct", "--model",
                                     "replay-strong"], "runs only static Tasks"),
    ("quote-public-not-staff", ["--user", "alice", "--workspace", "default", "job", "quote", "{tasks}/good",
                                "--model", "replay-strong", "--public"], "Only Amber staff"),
    # job quote: limits (finding 5)
    ("limit-cpus-1000", ["job", "quote", "{tasks}/cpus-1000", "--model", "replay-strong"],
     "Task cpus-1000 asks for 1000 cpus ([environment].cpus = 1000), more than a sandbox has: ask for at most 4 "
     "cpus."),
    ("limit-cpus-0", ["job", "quote", "{tasks}/cpus-0", "--model", "replay-strong"],
     "Task cpus-0 gives [environment].cpus = 0, which is not positive"),
    ("limit-memory-negative", ["job", "quote", "{tasks}/memory-neg", "--model", "replay-strong"],
     "Task memory-neg gives [environment].memory_mb = -5, which is not positive"),
    ("limit-storage", ["job", "quote", "{tasks}/storage-big", "--model", "replay-strong"],
     "asks for 20480 MB of storage ([environment].storage_mb = 20480), more than a sandbox has: ask for at most "
     "10240 MB of storage."),
    ("limit-gpus", ["job", "quote", "{tasks}/gpus", "--model", "replay-strong"], "asks for GPUs"),
    ("limit-agent-timeout", ["job", "quote", "{tasks}/agent-timeout-neg", "--model", "replay-strong"],
     "Task agent-timeout-neg gives [agent].timeout_sec = -1, which is not a positive, finite number of seconds"),
    ("limit-verifier-timeout-inf", ["job", "quote", "{tasks}/verifier-timeout-inf", "--model", "replay-strong"],
     "[verifier].timeout_sec = inf, which is not a positive, finite number of seconds"),
    ("limit-verifier-timeout-nan", ["job", "quote", "{tasks}/verifier-timeout-nan", "--model", "replay-strong"],
     "[verifier].timeout_sec = nan, which is not a positive, finite number of seconds"),
    ("limit-build-timeout", ["job", "quote", "{tasks}/build-timeout-0", "--model", "replay-strong"],
     "[environment].build_timeout_sec = 0"),
    ("limit-healthcheck-timeout", ["job", "quote", "{tasks}/healthcheck-neg", "--model", "replay-strong"],
     "[environment.healthcheck].timeout_sec = -3"),
    ("limit-on-submit", ["job", "submit", "{tasks}/static-timeout-neg", "--agent", "direct", "--model",
                         "replay-strong"], "[agent].timeout_sec = -1"),
    # job quote and submit: the request, the Models, the money (finding 6)
    ("quote-unknown-model", ["job", "quote", "{tasks}/good", "--model", "no-such-model"], "no-such-model"),
    ("submit-unknown-model", ["job", "submit", "{tasks}/good", "--model", "no-such-model"], "no-such-model"),
    ("quote-zero-trials", ["job", "quote", "{tasks}/good", "--model", "replay-strong", "--trials", "0"],
     "Trials per Task must be from 1 to 10"),
    ("quote-eleven-trials", ["job", "quote", "{tasks}/good", "--model", "replay-strong", "--trials", "11"],
     "Trials per Task must be from 1 to 10"),
    ("quote-unknown-agent", ["job", "quote", "{tasks}/good", "--agent", "nobody", "--model", "replay-strong"],
     "nobody"),
    ("quote-no-model", ["job", "quote", "{tasks}/good"], "needs a Model Configuration"),
    ("quote-short-wallet", ["--workspace", "broke", "job", "quote", "{tasks}/good", "--model", "replay-strong"],
     "broke"),
    ("quote-no-provider-key", ["job", "quote", "{tasks}/good", "--model", "claude-haiku-4.5"],
     "ANTHROPIC_API_KEY"),
    ("quote-claude-code-with-openai", ["job", "quote", "{tasks}/good", "--agent", "claude-code", "--model",
                                       "gpt-5"], "runs only with anthropic"),
    ("quote-ceiling-below-estimate", ["job", "quote", "{tasks}/good", "--model", "replay-strong", "--ceiling",
                                      "0.000001"], "below this Job's estimate"),
    ("quote-ceiling-nan", ["job", "quote", "{tasks}/good", "--model", "replay-strong", "--ceiling", "nan"],
     "is not an amount for --ceiling"),
    ("quote-ceiling-above-wallet", ["job", "quote", "{tasks}/good", "--model", "replay-strong", "--ceiling",
                                    "1000"], "lower --ceiling"),
    # Jobs and Quotes
    ("start-unknown-quote", ["job", "start", "quote-0000000000"], "No Quote quote-0000000000"),
    ("start-expired-quote", ["job", "start", "{expired}"], "expired"),
    ("start-others-job", ["job", "start", "{others}"], "No Quote {others}"),
    ("cancel-unknown-job", ["job", "cancel", "job-0000000000"], "job-0000000000"),
    ("cancel-others-job", ["job", "cancel", "{others}"], "{others}"),
    ("cancel-finished-job", ["job", "cancel", "{cancelled}"], "cancelled"),
    ("status-others-job", ["job", "status", "{others}"], "{others}"),
    ("wait-unknown-job", ["job", "wait", "job-0000000000"], "job-0000000000"),
    ("results-others-job", ["results", "{others}"], "{others}"),
    # going on past a ceiling (`job continue`)
    ("continue-completed-job", ["job", "continue", "{completed}"], "is completed"),
    ("continue-quoted-job", ["job", "continue", "{quoted}"], "is quoted"),
    ("continue-others-job", ["job", "continue", "{others}"], "No Job {others} in Workspace default"),
    ("continue-unknown-job", ["job", "continue", "job-0000000000"], "No Job job-0000000000"),
    ("continue-amount-exponent", ["job", "continue", "{cancelled}", "--amount", "1e1"],
     "is not an amount for --amount"),
    ("continue-amount-underscore", ["job", "continue", "{cancelled}", "--amount", "1_0"],
     "is not an amount for --amount"),
    ("continue-amount-negative", ["job", "continue", "{cancelled}", "--amount", "-5"],
     "is not an amount for --amount"),
    ("continue-amount-zero", ["job", "continue", "{cancelled}", "--amount", "0"], "is not an amount for --amount"),
    ("continue-short-wallet", ["job", "continue", "{cancelled}", "--amount", "1000"], "is missing"),
    # Workspaces and money
    ("credit-not-staff", ["--user", "alice", "--workspace", "default", "credit", "add", "--amount", "5",
                          "--reason", "please"], "staff"),
    ("credit-no-reason", ["--workspace", "default", "credit", "add", "--amount", "5"], "reason"),
    ("credit-negative", ["--workspace", "default", "credit", "add", "--amount", "-5", "--reason", "x"], "-5"),
    ("credit-not-a-number", ["--workspace", "default", "credit", "add", "--amount", "abc", "--reason", "x"],
     "abc"),
    ("credit-nan", ["--workspace", "default", "credit", "add", "--amount", "NaN", "--reason", "x"], "NaN"),
    ("credit-too-much", ["--workspace", "default", "credit", "add", "--amount", "1e12", "--reason", "x"], "1e12"),
    ("credit-unknown-workspace", ["--workspace", "nowhere", "credit", "add", "--amount", "5", "--reason", "x"],
     "nowhere"),
    ("workspace-bad-name", ["workspace", "create", "bad name!"], "bad name!"),
    ("workspace-duplicate", ["workspace", "create", "default"], "default"),
    ("workspace-duplicate-other-case", ["workspace", "create", "DEFAULT"], "DEFAULT is not available"),
    ("workspace-add-member-not-yours", ["--user", "alice", "workspace", "add-member", "other", "carol"],
     "other"),
    ("workspace-use-not-yours", ["workspace", "use", "other"], "other"),
    ("act-in-others-workspace", ["--workspace", "other", "wallet"], "No Workspace other among yours"),
    # Benchmarks and Models
    ("upload-missing-file", ["benchmark", "upload", "{tasks}/nowhere.tar.gz", "--name", "b"], "nowhere.tar.gz"),
    ("upload-link-in-archive", ["benchmark", "upload", "{tasks}/linked.tar.gz", "--name", "b"], "link"),
    ("upload-not-an-archive", ["benchmark", "upload", "{tasks}/not-an-archive.tar.gz", "--name", "b"],
     "not-an-archive"),
    ("upload-bad-name", ["benchmark", "upload", "{tasks}/linked.tar.gz", "--name", "no/slashes"], "no/slashes"),
    ("publish-unknown-upload", ["benchmark", "publish", "upl-0000000000"], "upl-0000000000"),
    ("validate-unknown-upload", ["benchmark", "validate", "upl-0000000000"], "upl-0000000000"),
    ("show-unknown-version", ["benchmark", "show", "nothing-here@1"], "nothing-here@1"),
    ("model-show-unknown", ["model", "show", "no-such-model"], "no-such-model"),
    ("model-add-missing-file", ["model", "add", "{tasks}/nowhere.toml"], "nowhere.toml"),
    ("model-add-bad-file", ["model", "add", "{tasks}/bad-model.toml"], "bad-model.toml"),
    ("report-unknown-source", ["report", "job-0000000000"], "job-0000000000"),
]


@pytest.mark.parametrize(("args", "phrase"), [pytest.param(args, phrase, id=case) for case, args, phrase in CASES])
def test_a_refused_command_changes_nothing(instance: Instance, args: list[str], phrase: str) -> None:
    fill = {"tasks": str(instance.tasks), **instance.names}
    argv = [a.format(**fill) for a in args]
    sign_in(*argv)
    before = state(instance)
    sentence = refusal(cli(*argv))
    assert phrase.format(**fill) in sentence
    after = state(instance)
    for part in ("catalog", "files", "config"):
        assert after[part] == before[part], part


def test_a_refused_quote_of_a_folder_stores_no_benchmark(instance: Instance) -> None:
    """The Version row and the snapshot of a folder appear with the Quote that needs them, and only then."""
    folder = str(instance.tasks / "good")
    refusal(cli("--workspace", "broke", "job", "quote", folder, "--model", "replay-strong"))
    stored = AmberPaths(instance.home).benchmarks
    before = sorted(p.name for p in stored.iterdir())
    ok(cli("job", "quote", folder, "--model", "replay-strong"))
    added = sorted(set(p.name for p in stored.iterdir()) - set(before))
    assert len(added) == 1 and not added[0].startswith(".")
    assert (stored / added[0] / "good" / "task.toml").is_file()
    assert "good@1" in ok(cli("benchmark", "list"))
