"""Private uploads end to end: checked, validated (oracle 1, nop 0), published, kept private, and expired.

The archive's own rules (links, paths, limits, bombs) are tests/test_upload_archive.py; each Task's checks are
tests/test_task_checks.py. Here: what a user sees of an upload through the commands and the catalog.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
import zipfile
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import dagster as dg
import pytest
from helpers import cli, funded, ok, refusal, request

from amber_pipeline.accounts import workspaces
from amber_pipeline.accounts.identity import local_user
from amber_pipeline.benchmarks import registry, uploads
from amber_pipeline.definitions import defs
from amber_pipeline.jobs import cell_run, lifecycle, quotes, records, validation
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money import wallet
from amber_pipeline.money.prices import PRICES, usd
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from assets.resources import WarehouseResource
from sensors.benchmark_versions import benchmark_version_sensor

pytestmark = pytest.mark.usefixtures("cli_mode")  # on the embedded default, then against `amber serve`

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
STATIC = PROJECT_ROOT / "examples" / "static-bench"


def tar_gz(folder: Path, out: Path) -> Path:
    with tarfile.open(out, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return out


def zipped(folder: Path, out: Path) -> Path:
    with zipfile.ZipFile(out, "w") as z:
        for path in sorted(folder.rglob("*")):
            z.write(path, path.relative_to(folder.parent).as_posix())
    return out


def static_bench(tmp_path: Path, names: tuple[str, ...] = ("capital-city", "invoice-total", "json-profile")) -> Path:
    root = tmp_path / "quiz"
    for name in names:
        shutil.copytree(STATIC / name, root / name)
    return root


def write_task(root: Path, name: str, solve: str, test: str, extra_toml: str = "") -> None:
    """A small Task on the local base image: its solution and Verifier as given."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "solution").mkdir()
    (task / "tests").mkdir()
    (task / "task.toml").write_text(f'version = "1.0"\n{extra_toml}\n[agent]\ntimeout_sec = 60\n\n'
                                    "[verifier]\ntimeout_sec = 60\n")
    (task / "instruction.md").write_text(f"Create /app/done.txt holding the word done ({name}).\n")
    (task / "environment" / "Dockerfile").write_text("FROM amber-base:bookworm\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}\n")
    (task / "tests" / "test.sh").write_text(f"#!/bin/bash\n{test}\n")


def balance(wh: Warehouse, workspace: str) -> Decimal:
    return wallet.read(wh, workspace)[0].balance


def run_validation(wh: Warehouse, job_id: str) -> None:
    for cell in records.cells_of(wh, job_id):
        cell_run.run_cell_of_job(wh, job_id, cell.cell_key)


# ---- static uploads: validated on the host, at no cost ----------------------------------------------------

def test_a_static_upload_validates_at_no_cost_and_publishes_as_name_at_1(tmp_path: Path, warehouse: Warehouse):
    ws = funded(warehouse)
    before = balance(warehouse, ws)
    made = uploads.create(warehouse, ws, local_user(), tar_gz(static_bench(tmp_path), tmp_path / "q.tar.gz"), "quiz")
    assert [(c.name, c.ok, c.static) for c in made.checks] == [
        ("capital-city", True, True), ("invoice-total", True, True), ("json-profile", True, True)]
    assert list(warehouse.paths.uploads.iterdir()) == []  # the unpacked archive is gone; the staged copy stays
    assert validation.start(warehouse, ws, local_user(), made.id) is None
    verdicts = validation.results(warehouse, uploads.get(warehouse, ws, made.id))
    assert [(r.name, r.passed, r.oracle, r.nop) for r in verdicts] == [
        ("capital-city", True, 1.0, 0.0), ("invoice-total", True, 1.0, 0.0), ("json-profile", True, 1.0, 0.0)]
    version, label, left_out = validation.publish(warehouse, ws, made.id)
    assert (label, len(version.tasks), left_out) == ("quiz@1", 3, [])
    assert balance(warehouse, ws) == before

    # The same Tasks again return the existing Version; fewer Tasks make the next one.
    again = uploads.create(warehouse, ws, local_user(), zipped(static_bench(tmp_path / "2"), tmp_path / "q.zip"),
                           "quiz")
    validation.start(warehouse, ws, local_user(), again.id)
    assert validation.publish(warehouse, ws, again.id)[1] == "quiz@1"
    third = uploads.create(warehouse, ws, local_user(), tar_gz(static_bench(tmp_path / "3"), tmp_path / "3.tgz"),
                           "quiz")
    validation.start(warehouse, ws, local_user(), third.id)
    version2, label2, left_out2 = validation.publish(warehouse, ws, third.id, exclude=["json-profile"])
    assert label2 == "quiz@2" and [t.name for t in version2.tasks] == ["capital-city", "invoice-total"]
    assert [(r.name, r.passed) for r in left_out2] == [("json-profile", True)]
    assert [v.label for v in registry.visible(warehouse, ws) if v.name == "quiz"] == ["quiz@1", "quiz@2"]


def test_a_static_task_whose_reference_answer_fails_its_own_checks_fails_validation(tmp_path: Path,
                                                                                     warehouse: Warehouse):
    ws = funded(warehouse)
    root = static_bench(tmp_path, ("capital-city", "invoice-total"))
    (root / "capital-city" / "solution" / "answer.txt").write_text("Sydney\n")
    made = uploads.create(warehouse, ws, local_user(), tar_gz(root, tmp_path / "q.tgz"), "quiz")
    validation.start(warehouse, ws, local_user(), made.id)
    [bad, good] = validation.results(warehouse, uploads.get(warehouse, ws, made.id))
    assert (bad.name, bad.passed) == ("capital-city", False)
    assert bad.reason == ("Its reference answer (solution/answer.txt) fails its own checks: The answer does not "
                          'contain "Canberra".')
    assert good.passed
    version, label, left_out = validation.publish(warehouse, ws, made.id)
    assert [t.name for t in version.tasks] == ["invoice-total"] and [r.name for r in left_out] == ["capital-city"]


def test_publish_refusals_are_one_sentence(tmp_path: Path, warehouse: Warehouse):
    ws = funded(warehouse)
    made = uploads.create(warehouse, ws, local_user(), tar_gz(static_bench(tmp_path), tmp_path / "q.tgz"), "quiz")
    assert refusal(cli("benchmark", "publish", made.id)) == (
        f"Upload {made.id} is checked, not validated: validate it first with `amber benchmark validate {made.id}`.")
    ok(cli("benchmark", "validate", made.id))
    assert refusal(cli("benchmark", "publish", made.id, "--exclude", "nope")) == (
        f"Upload {made.id} has no Task named nope: --exclude takes names from `amber benchmark show {made.id}`.")
    assert refusal(cli("benchmark", "publish", made.id, "--exclude", "capital-city", "--exclude", "invoice-total",
                       "--exclude", "json-profile")) == (
        f"No Task of upload {made.id} passed validation and was not excluded: nothing to publish.")
    assert refusal(cli("benchmark", "upload", str(tmp_path / "q.tgz"), "--name", "bad name")) == (
        "'bad name' is not a Benchmark name: use up to 64 letters, digits, '.', '_' and '-', starting with a letter "
        "or digit.")
    assert refusal(cli("benchmark", "upload", str(tmp_path / "q.tgz"), "--name", "q", "--allow-host",
                       "https://pypi.org/simple")) == (
        "--allow-host 'https://pypi.org/simple' is not a host name, *.wildcard, IP address or CIDR range: give "
        "hosts only, without scheme, port or path.")


def test_a_rejected_archive_leaves_nothing_behind_and_records_nothing(tmp_path: Path, warehouse: Warehouse):
    ws = funded(warehouse)
    bad = tmp_path / "evil.zip"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("quiz/capital-city/task.toml", (STATIC / "capital-city" / "task.toml").read_text())
        z.writestr("../evil.sh", "#!/bin/sh\necho pwned\n")
    sentence = refusal(cli("benchmark", "upload", str(bad), "--name", "quiz"))
    assert "../evil.sh" in sentence and "\n" not in sentence
    assert not (tmp_path / "evil.sh").exists() and not (warehouse.paths.home / "evil.sh").exists()
    assert list(warehouse.paths.uploads.iterdir()) == []
    assert [p.name for p in warehouse.paths.benchmarks.iterdir()] == []
    assert uploads.of_workspace(warehouse, ws) == []


def test_an_upload_mixing_static_tasks_and_environments_fails_the_static_ones(tmp_path: Path, warehouse: Warehouse):
    ws = funded(warehouse)
    root = static_bench(tmp_path, ("capital-city",))
    shutil.copytree(DEMO / "ini-port-change", root / "ini-port-change")
    made = uploads.create(warehouse, ws, local_user(), tar_gz(root, tmp_path / "m.tgz"), "mixed")
    assert [(c.name, c.ok, c.reason) for c in made.checks] == [
        ("capital-city", False, uploads.MIXED), ("ini-port-change", True, None)]


# ---- privacy ---------------------------------------------------------------------------------------------

def test_a_private_benchmark_is_invisible_to_another_workspace(tmp_path: Path, warehouse: Warehouse):
    mine, theirs = funded(warehouse, "mine"), funded(warehouse, "theirs")
    made = uploads.create(warehouse, mine, local_user(), tar_gz(static_bench(tmp_path), tmp_path / "q.tgz"),
                          "secret-quiz")
    validation.start(warehouse, mine, local_user(), made.id)
    version, label, _ = validation.publish(warehouse, mine, made.id)
    assert "secret-quiz@1" in ok(cli("--workspace", mine, "benchmark", "list"))

    listing = ok(cli("--workspace", theirs, "benchmark", "list"))
    assert "secret-quiz" not in listing and version.id[:12] not in listing
    for ref, missing in ((label, "nothing-here@1"), (version.id[:12], "0123456789ab")):
        seen = refusal(cli("--workspace", theirs, "benchmark", "show", ref))
        assert seen == refusal(cli("--workspace", theirs, "benchmark", "show", missing)).replace(missing, ref)
        assert "mine" not in seen
    assert refusal(cli("--workspace", theirs, "benchmark", "show", made.id)) == (
        f"No upload {made.id} in Workspace theirs: list them with `amber benchmark list`.")
    submitted = refusal(cli("--workspace", theirs, "job", "quote", label, "--agent", "direct", "--model",
                            "replay-strong"))
    assert submitted == refusal(cli("--workspace", theirs, "job", "quote", "nothing-here@1", "--agent", "direct",
                                    "--model", "replay-strong")).replace("nothing-here@1", label)
    with pytest.raises(Exception, match=f"No upload {made.id} in Workspace theirs"):
        validation.publish(warehouse, theirs, made.id)
    # The owner can run it by its label.
    assert "Quote" in ok(cli("--workspace", mine, "job", "quote", label, "--agent", "direct", "--model",
                             "replay-strong"))


# ---- retention --------------------------------------------------------------------------------------------

def test_uploads_expire_7_days_unvalidated_and_30_days_unpublished(tmp_path: Path, warehouse: Warehouse):
    ws = funded(warehouse)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    checked = uploads.create(warehouse, ws, local_user(), tar_gz(static_bench(tmp_path / "a", ("capital-city",)),
                                                                 tmp_path / "a.tgz"), "a", now=t0)
    validated = uploads.create(warehouse, ws, local_user(), tar_gz(static_bench(tmp_path / "b", ("invoice-total",)),
                                                                   tmp_path / "b.tgz"), "b", now=t0)
    validation.start(warehouse, ws, local_user(), validated.id, now=t0 + timedelta(days=1))
    published = uploads.create(warehouse, ws, local_user(), tar_gz(static_bench(tmp_path / "c", ("json-profile",)),
                                                                   tmp_path / "c.tgz"), "c", now=t0)
    validation.start(warehouse, ws, local_user(), published.id, now=t0)
    validation.publish(warehouse, ws, published.id)
    staged = {u.id: warehouse.paths.benchmarks / str(u.benchmark_version_id) for u in (checked, validated)}

    assert uploads.expire(warehouse, t0 + timedelta(days=7) - timedelta(seconds=1)) == []
    assert [u.id for u in uploads.expire(warehouse, t0 + timedelta(days=7))] == [checked.id]
    assert uploads.get(warehouse, ws, checked.id).status == "expired" and not staged[checked.id].exists()
    assert staged[validated.id].is_dir()
    assert uploads.expire(warehouse, t0 + timedelta(days=31) - timedelta(seconds=1)) == []

    # The schedule runs the same rule at its tick's time.
    tick = t0 + timedelta(days=31)
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("upload_retention_job").execute_in_process(
            instance=instance, resources={"warehouse": WarehouseResource()},
            tags={".dagster/scheduled_execution_time": tick.isoformat()})
    assert result.success
    [event] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    assert event.event_specific_data.metadata["expired"].value == 1
    assert uploads.get(warehouse, ws, validated.id).status == "expired" and not staged[validated.id].exists()
    assert uploads.get(warehouse, ws, published.id).status == "published"
    assert registry.find(warehouse, "c@1", ws)[0].tasks[0].name == "json-profile"  # published Tasks stay
    assert refusal(cli("benchmark", "validate", checked.id)) == (
        f"Upload {checked.id} is expired: see it with `amber benchmark show {checked.id}`.")


# ---- the Dagster asset -----------------------------------------------------------------------------------

def test_each_published_version_materializes_its_partition_of_benchmark_versions(tmp_path: Path,
                                                                                  warehouse: Warehouse):
    ws = funded(warehouse)
    made = uploads.create(warehouse, ws, local_user(), tar_gz(static_bench(tmp_path), tmp_path / "q.tgz"), "quiz")
    validation.start(warehouse, ws, local_user(), made.id)
    version, label, _ = validation.publish(warehouse, ws, made.id)
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, definitions=defs,
                                          resources={"warehouse": WarehouseResource()})
        result = benchmark_version_sensor(context)
        assert isinstance(result, dg.SensorResult)
        [event] = result.asset_events
        assert (event.partition, event.metadata["hash"].value, event.metadata["tasks"].value) == (
            f"{ws}/quiz@1", version.id, 3)
        instance.add_dynamic_partitions("benchmark_versions", [f"{ws}/quiz@1"])
        assert isinstance(benchmark_version_sensor(context), dg.SkipReason)


# ---- Tasks with an Environment: a validation Job of oracle and nop Trials --------------------------------

def mixed_upload(tmp_path: Path) -> Path:
    root = tmp_path / "mixed"
    shutil.copytree(DEMO / "ini-port-change", root / "ini-port-change")
    # Its Verifier needs its test runner from the network: offline it fails for nop and oracle alike.
    write_task(root, "needs-network", "echo done > /app/done.txt",
               "if command -v uvx >/dev/null && uvx pytest /tests; then echo 1; else echo 0; fi "
               "> /logs/verifier/reward.txt")
    write_task(root, "already-passes", "echo done > /app/done.txt", "echo 1 > /logs/verifier/reward.txt")
    write_task(root, "wants-a-gpu", "true", "echo 1 > /logs/verifier/reward.txt",
               extra_toml="\n[environment]\ngpus = 1\n")
    return tar_gz(root, tmp_path / "mixed.tar.gz")


@pytest.mark.slow
@pytest.mark.docker
def test_a_mixed_upload_validates_leaves_out_its_failing_tasks_with_reasons_and_publishes(tmp_path: Path,
                                                                                          warehouse: Warehouse):
    ws = funded(warehouse)
    before = balance(warehouse, ws)
    shown = ok(cli("benchmark", "upload", str(mixed_upload(tmp_path)), "--name", "mixed"))
    assert "3 of 4 Tasks passed their checks" in shown and "wants-a-gpu" in shown
    assert "Accept the Quote and validate: amber benchmark validate upl-" in shown
    [made] = uploads.of_workspace(warehouse, ws)
    expected = validation.estimate(warehouse, ws, local_user(), made)
    assert expected is not None and expected.total > 0

    quoted, job = validation.start(warehouse, ws, local_user(), made.id) or (None, None)
    assert quoted is not None and job is not None and quoted.amount == expected.total
    assert sorted(c.agent for c in records.cells_of(warehouse, job.id)) == ["nop", "oracle"]
    run_validation(warehouse, job.id)

    verdicts = {r.name: r for r in validation.results(warehouse, uploads.get(warehouse, ws, made.id))}
    assert (verdicts["ini-port-change"].passed, verdicts["ini-port-change"].oracle,
            verdicts["ini-port-change"].nop) == (True, 1.0, 0.0)
    assert verdicts["needs-network"].passed is False and verdicts["needs-network"].reason.startswith(validation.BROKEN)
    assert verdicts["already-passes"].reason == ("The nop Agent got Reward 1, not 0: the start state already passes "
                                                 "the Verifier.")
    assert verdicts["wants-a-gpu"].passed is False and "gpu" in (verdicts["wants-a-gpu"].reason or "").lower()

    # Every validation Trial is charged, failing Tasks' too; the rest of the reservation is refunded.
    spent = before - balance(warehouse, ws)
    assert 0 < spent < expected.total
    with warehouse.query(ws) as con:
        charged = con.execute("select count(*) from trials where job_id = ? and cost_usd > 0", [job.id]).fetchone()
    assert charged == (6,)
    assert records.get_job(warehouse, job.id, ws).status == "completed"

    shown = ok(cli("benchmark", "show", made.id))
    assert "1 of 4 Tasks passed. Publish them: amber benchmark publish" in shown
    published = ok(cli("benchmark", "publish", made.id))
    assert "Published mixed@1" in published and "Nop and oracle both got Reward 0" in published
    version, owner, label = registry.find(warehouse, "mixed@1", ws)
    assert (owner, label, [t.name for t in version.tasks]) == (ws, "mixed@1", ["ini-port-change"])
    # Its validation Trials taught what the Task takes: a Quote of the published Version starts from them.
    for agent in ("oracle", "nop"):
        [cell] = lifecycle.quote(warehouse, ws, local_user(), request("mixed@1", agent)).cells
        assert cell.sources == {"task": {"Task history": 1}, "agent": {"cell history on the Task": 1}}, cell


@pytest.mark.slow
@pytest.mark.docker
def test_a_validation_trial_is_stopped_at_one_and_a_half_times_its_quoted_sandbox_time(
        tmp_path: Path, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch):
    ws = funded(warehouse)
    root = tmp_path / "slow"
    write_task(root, "slow", "sleep 30; echo done > /app/done.txt",
               "test -f /app/done.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt")
    made = uploads.create(warehouse, ws, local_user(), tar_gz(root, tmp_path / "slow.tgz"), "slow")
    # 1.5 times (60 s agent + 60 s Verifier) is 180 s; a smaller factor makes the same rule bite in seconds.
    monkeypatch.setattr(quotes, "VALIDATION_STOP", 0.05)
    _, job = validation.start(warehouse, ws, local_user(), made.id) or (None, None)
    assert job is not None
    run_validation(warehouse, job.id)
    [verdict] = validation.results(warehouse, uploads.get(warehouse, ws, made.id))
    assert verdict.passed is False
    assert re.fullmatch(r"Its (oracle|nop) Trial was stopped after \d+ s, its time limit, 0\.05 times the sandbox "
                        r"time its Quote expected\.", verdict.reason or ""), verdict.reason
    with warehouse.query(ws) as con:
        [(cost,)] = con.execute("select cost_usd from trials where job_id = ? and agent = 'oracle'",
                                [job.id]).fetchall()
    assert Decimal(str(cost)) > 0  # charged, although the Task failed


# ---- Harbor's registry: public Versions -----------------------------------------------------------------

def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def local_registry(tmp_path: Path) -> Path:
    """A git repository of one demo Task, pinned by a registry file; the Task changes after the pin."""
    repo = tmp_path / "tasks-repo"
    shutil.copytree(DEMO / "ini-port-change", repo / "tasks" / "ini-port-change")
    git("init", "-q", cwd=repo)
    git("add", ".", cwd=repo)
    git("commit", "-q", "-m", "one Task", cwd=repo)
    pinned = git("rev-parse", "HEAD", cwd=repo)
    (repo / "tasks" / "ini-port-change" / "instruction.md").write_text("changed after the pin\n")
    git("commit", "-q", "-am", "later", cwd=repo)
    registry_file = tmp_path / "registry.json"
    registry_file.write_text(json.dumps([{"name": "tiny-bench", "version": "2.0", "description": "one Task",
                                          "tasks": [{"name": "ini-port-change", "git_url": f"file://{repo}",
                                                     "git_commit_id": pinned, "path": "tasks/ini-port-change"}]}]))
    return registry_file


@pytest.mark.docker
def test_a_local_registry_import_yields_a_runnable_public_version(tmp_path: Path, warehouse: Warehouse,
                                                                  cli_mode: str):
    registry_file = local_registry(tmp_path)
    if cli_mode == "api":  # a registry file (and its git repositories here) is the server host's to read
        assert refusal(cli("benchmark", "import", str(registry_file), "tiny-bench@2.0")) == (
            f"{str(registry_file)!r} is not an http(s) URL: through the API a registry is read from one (a registry "
            "file is read on the server's host only).")
        return
    shown = ok(cli("benchmark", "import", str(registry_file), "tiny-bench@2.0"))
    assert shown.startswith("Public tiny-bench@2.0 (") and "1 Tasks" in shown
    assert ok(cli("benchmark", "import", str(registry_file), "tiny-bench")) == shown  # the same Version again
    version, owner, label = registry.find(warehouse, "tiny-bench@2.0", funded(warehouse, "another"))
    assert (owner, label) == (registry.PUBLIC, "tiny-bench@2.0")
    assert (version.root / "ini-port-change" / "instruction.md").read_bytes() == (
        DEMO / "ini-port-change" / "instruction.md").read_bytes()  # as pinned, not as changed later
    assert "tiny-bench@2.0" in ok(cli("--workspace", "another", "benchmark", "list"))

    ws = funded(warehouse)
    _, job = lifecycle.submit(warehouse, ws, local_user(), JobRequest(benchmark="tiny-bench@2.0", agent="oracle"))
    run_validation(warehouse, job.id)
    with warehouse.query(ws) as con:
        assert con.execute("select task_name, reward from trials where job_id = ?", [job.id]).fetchall() == [
            ("ini-port-change", 1.0)]


def test_only_staff_import_public_versions(tmp_path: Path, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch):
    funded(warehouse)
    monkeypatch.setattr(workspaces, "is_staff", lambda con, user: False)
    assert refusal(cli("benchmark", "import", str(tmp_path / "registry.json"), "x@1")) == (
        "Only Amber staff can make a public Benchmark Version: make a private one with `amber benchmark upload`.")


@pytest.mark.docker
def test_an_allowlisted_upload_reaches_the_egress_proxy_which_refuses_other_hosts(tmp_path: Path,
                                                                                 warehouse: Warehouse):
    """The Environment of a Version with a network allowlist gets the egress proxy; a host off the list is refused
    by the proxy itself (403) before any name is looked up, so nothing leaves this machine."""
    ws = funded(warehouse)
    root = tmp_path / "net"
    ask = ("python3 - > /tmp/asked.txt <<'PY'\n"
           "import os, urllib.request as u\n"
           "try:\n    u.urlopen('http://not-listed.invalid/', timeout=10)\n"
           "except u.HTTPError as e:\n    print(e.code, os.environ['HTTP_PROXY'])\n"
           "PY\n")
    write_task(root, "proxied", "echo done > /app/done.txt",
               ask + "if [ -f /app/done.txt ] && grep -q '^403 http://' /tmp/asked.txt; then echo 1; else echo 0; fi "
                     "> /logs/verifier/reward.txt")
    made = uploads.create(warehouse, ws, local_user(), tar_gz(root, tmp_path / "net.tgz"), "net",
                          ["Example.com.", "*.pypi.org"])
    assert made.allowed_hosts == ("*.pypi.org", "example.com")
    _, job = validation.start(warehouse, ws, local_user(), made.id) or (None, None)
    assert job is not None
    run_validation(warehouse, job.id)
    [verdict] = validation.results(warehouse, uploads.get(warehouse, ws, made.id))
    assert (verdict.passed, verdict.oracle, verdict.nop) == (True, 1.0, 0.0), verdict
    version, label, _ = validation.publish(warehouse, ws, made.id)
    assert registry.lookup(warehouse, label, ws).allowed_hosts == ("*.pypi.org", "example.com")
    assert "network allowlist: *.pypi.org, example.com" in ok(cli("benchmark", "show", label))


# ---- static adapters through the command line ----------------------------------------------------------

ADAPTER_FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "adapters"


def test_adapt_makes_a_private_version_and_a_sharded_pair_with_the_same_task_names(warehouse: Warehouse):
    ws = funded(warehouse)
    shown = ok(cli("benchmark", "adapt", "gsm8k", str(ADAPTER_FIXTURES / "gsm8k.jsonl"), "--name", "math"))
    assert shown.startswith("Private math@1 (") and "Run it with: amber job submit math@1 --agent direct" in shown
    pair = ok(cli("benchmark", "adapt", "gsm8k", str(ADAPTER_FIXTURES / "gsm8k.jsonl"), "--name", "math",
                  "--shards", str(ADAPTER_FIXTURES / "gsm8k-shards.jsonl")))
    assert "Private math-sharded@1" in pair and "Private math-concat@1" in pair
    sharded, concat = (registry.find(warehouse, label, ws)[0] for label in ("math-sharded@1", "math-concat@1"))
    assert [t.name for t in sharded.tasks] == [t.name for t in concat.tasks]
    assert all(len(t.instruction.split("<!-- amber:next-turn -->")) > 1 for t in sharded.tasks)
    assert "built-in Verifier (static adapter)" in ok(cli("benchmark", "list"))
    assert ok(cli("benchmark", "adapt", "gsm8k", str(ADAPTER_FIXTURES / "gsm8k.jsonl"), "--name", "math",
                  "--public")).startswith("Public math@1 (")
    assert refusal(cli("benchmark", "adapt", "squad", str(ADAPTER_FIXTURES / "gsm8k.jsonl"), "--name", "x")) == (
        "There is no adapter for squad: choose one of gsm8k, humaneval, sharded, longmemeval, mrcr.")


# ---- lint through the command line ----------------------------------------------------------------------

LINT_FIXTURES = PROJECT_ROOT / "tests" / "fixtures" / "lint"


def test_lint_exits_1_on_an_unfair_task_and_0_on_fair_ones(amber_home: Path):
    unfair = cli("benchmark", "lint", str(LINT_FIXTURES / "unfair"))
    assert unfair.exit_code == 1
    for rule in ("solution-in-image", "tests-in-image", "verifier-ignores-exit-code", "start-state-passes",
                 "test-reads-unnamed-file"):
        assert rule in unfair.stdout
    assert ok(cli("benchmark", "lint", str(LINT_FIXTURES / "fair"))) == "No rule found an unfair Task.\n"
    warned = cli("benchmark", "lint", str(DEMO), "--strict")
    assert warned.exit_code == 1 and "instruction-quotes-expected-output" in warned.stdout
    assert ok(cli("benchmark", "lint", str(DEMO), "--json")).count('"severity": "warning"') == 2


def test_lint_with_a_model_review_prints_each_verdict_and_what_the_proxy_metered(tmp_path: Path,
                                                                                  warehouse: Warehouse):
    funded(warehouse)
    config = tmp_path / "review-replay.toml"
    config.write_text('name = "review-replay"\nmodel = "review-replay"\nprovider = "replay"\n'
                      f'replay = "{LINT_FIXTURES / "review-replay.json"}"\n'
                      '[prices]\ninput = 2.0\ncached_input = 0.2\noutput = 10.0\nsource = "made up for a test"\n')
    ok(cli("model", "add", str(config)))
    shown = cli("benchmark", "lint", str(LINT_FIXTURES / "unfair"), "--review-model", "review-replay")
    assert shown.exit_code == 1, shown.stdout  # the rules' errors still decide the exit status
    assert "Review by review-replay" in shown.stdout
    assert re.search(r"8 Tasks reviewed: [\d,]+ input and [\d,]+ output tokens, \$\d", shown.stdout), shown.stdout
    assert "not charged to the Wallet" in shown.stdout


def test_a_validation_quote_prices_each_trial_at_its_tasks_time_limits(tmp_path: Path, warehouse: Warehouse):
    """Nothing ran these Tasks yet: each Trial is expected to use its agent and Verifier timeouts (60 s + 60 s
    here) and the Environment's 10 s start-up allowance, plus one image build at its build timeout (Harbor's
    default, 600 s) when the image is not built, in the first cell (the cells share it); a Trial is stopped at
    1.5 times that, its build included."""
    ws = funded(warehouse)
    root = tmp_path / "limits"
    write_task(root, "limited", "true", "echo 0 > /logs/verifier/reward.txt")
    made = uploads.create(warehouse, ws, local_user(), tar_gz(root, tmp_path / "l.tgz"), "limits")
    priced = validation.estimate(warehouse, ws, local_user(), made)
    assert priced is not None
    [facts] = quotes.task_facts(registry.version(warehouse, str(made.benchmark_version_id), ws))
    build = Decimal(0) if facts.image_built else usd(PRICES.sandbox_cost(600))
    assert [(c.label, Decimal(c.total)) for c in priced.quoted] == [
        ("oracle", usd(PRICES.sandbox_cost(130)) + build), ("nop", usd(PRICES.sandbox_cost(130)))]
    assert all(c.basis.startswith("Environment and Verifier: declared limits (1 Task); Agent: declared limits "
                                  "(1 Task)") for c in priced.quoted)
    assert quotes.validation_stop_seconds(facts) == 1.5 * (130 + (0 if facts.image_built else 600))
