"""Cells placed on several Docker engines: the run queue's limit per engine pool, a Job's cells spread over the
machine's own engine and a second one over TLS, and a cell whose engine dies mid-Job moved to the other engine,
with each Trial charged once and no container left on either.

Real parts throughout: a second dockerd on loopback with mutual TLS (`servers.dockerd`, killed by its own
pidfile), Harbor Trials in AmberSandbox, the catalog and ledger. The cell runs are driven in this process, as the
warm worker's forks drive them; the Dagster side (the tag each run carries, the instance's limit per tag) is
checked on the rendered instance config and the launcher's tags.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

import docker
import pytest
from helpers import submit, trial_sandboxes
from servers import dockerd

from amber_pipeline import embedded
from amber_pipeline.benchmarks import registry
from amber_pipeline.jobs import cell_run, placement, records, recovery, trial_runner
from amber_pipeline.jobs.records import cells_of, get_job
from amber_pipeline.money import wallet
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.sandbox import engines
from amber_pipeline.sandbox.container import TRIAL_DIR_LABEL
from amber_pipeline.warehouse.catalog import Warehouse

DEMO_BENCH = PROJECT_ROOT / "examples" / "demo-bench"
TASKS = ["active-user-emails", "count-log-errors", "fix-off-by-one"]


@pytest.fixture
def two_engines(engine2: dockerd.Dockerd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dockerd.Dockerd:
    path = tmp_path / "engines.toml"
    path.write_text(dockerd.engines_toml(engine2, local_slots=1, slots=2))
    monkeypatch.setenv("AMBER_SANDBOX_HOSTS", str(path))
    return engine2


def bench(tmp_path: Path, slow_sec: int = 0) -> Path:
    """Three demo Tasks under fresh names (so their sandboxes are this test's alone); all but the first with a
    verifier that sleeps ``slow_sec`` first."""
    folder = tmp_path / "bench"
    for i, task in enumerate(TASKS):
        target = folder / f"{task}-{tmp_path.name[-6:]}"
        shutil.copytree(DEMO_BENCH / task, target)
        if slow_sec and i:
            verifier = target / "tests" / "test.sh"
            shebang, rest = verifier.read_text().split("\n", 1)
            verifier.write_text(f"{shebang}\nsleep {slow_sec}\n{rest}")
    return folder


def settled(wh: Warehouse, job_id: str) -> tuple[Decimal, Decimal, Decimal, list[str]]:
    """(reserved, charged, refunded, charged Trial keys) of a Job's Quote."""
    job = get_job(wh, job_id, None)
    assert job.quote_id is not None
    with wh.read() as con:
        reserved, charged, refunded = wallet.quote_totals(con, job.quote_id)
        keys = [k for (k,) in con.execute("select trial_key from ledger where job_id = ? and kind = 'charge'",
                                          [job_id]).fetchall()]
    return reserved, charged, refunded, keys


def test_the_instance_holds_each_engine_pool_to_its_slots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          certs: Path) -> None:
    path = tmp_path / "engines.toml"
    path.write_text(f"""
[[engine]]
name = "local"
url = "unix:///var/run/docker.sock"
slots = 1

[[engine]]
name = "box2"
url = "tcp://127.0.0.1:2376"
slots = 3
tls_ca = "{certs / 'ca.pem'}"
tls_cert = "{certs / 'cert.pem'}"
tls_key = "{certs / 'key.pem'}"
""")
    monkeypatch.setenv("AMBER_SANDBOX_HOSTS", str(path))
    made = tmp_path / "dagster.yaml"
    embedded.write_instance_config(made)
    import yaml

    runs = yaml.safe_load(made.read_text())["concurrency"]["runs"]
    assert {"key": engines.POOL_TAG, "value": "local", "limit": 1} in runs["tag_concurrency_limits"]
    assert {"key": engines.POOL_TAG, "value": "box2", "limit": 3} in runs["tag_concurrency_limits"]
    assert {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in \
        runs["tag_concurrency_limits"]  # the repository's own limits stay
    assert runs["max_concurrent_runs"] == 4
    from launcher import deploy_files

    deploy_files.instance_config(made)  # Dagster's own schemas take it

    monkeypatch.delenv("AMBER_SANDBOX_HOSTS")
    embedded.write_instance_config(made)
    assert made.read_text() == (PROJECT_ROOT / "dagster.yaml").read_text()  # the embedded default, unchanged


@pytest.mark.slow
@pytest.mark.docker
def test_a_jobs_cells_spread_over_the_engines_and_leave_nothing(two_engines: dockerd.Dockerd, warehouse: Warehouse,
                                                                primary: docker.DockerClient,
                                                                tmp_path: Path) -> None:
    job = submit(warehouse, str(bench(tmp_path)), "nop", [], 1, bounds=True)  # an oracle cell and a nop cell
    launches = records.claim_cells(warehouse, job.id)
    assert sorted(c.pool for c in launches) == ["engine2", "local"]  # one each: engine2 has more free slots first
    from launcher.cell_runs import tags

    assert {tags(c)[engines.POOL_TAG] for c in launches} == {"engine2", "local"}
    remote = docker.DockerClient(base_url=two_engines.unix_url)
    with (dockerd.watching(primary, type="container", event="create") as on_local,
          dockerd.watching(remote, type="container", event="create") as on_engine2):
        for launch in launches:
            cell_run.run_cell_of_job(warehouse, job.id, launch.cell_key)
    seen = {name: sum(e["Actor"]["Attributes"].get(TRIAL_DIR_LABEL, "").startswith(str(warehouse.paths.runs))
                      for e in events) for name, events in (("local", on_local), ("engine2", on_engine2))}
    assert seen == {"local": 3, "engine2": 3}, seen  # each cell's three Trials on its own engine
    assert get_job(warehouse, job.id, None).status == "completed"
    reserved, charged, refunded, keys = settled(warehouse, job.id)
    assert reserved == charged + refunded and len(keys) == len(set(keys))
    run_root = warehouse.paths.runs / job.id
    assert trial_sandboxes(primary, run_root) == [] and trial_sandboxes(remote, run_root) == []


@pytest.mark.slow
@pytest.mark.docker
def test_a_cell_whose_engine_dies_moves_to_the_other_engine_and_is_charged_once(
        two_engines: dockerd.Dockerd, warehouse: Warehouse, primary: docker.DockerClient, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trial_runner, "REMOTE_ENGINE_WAIT_SEC", 2.0)
    job = submit(warehouse, str(bench(tmp_path, slow_sec=20)), "oracle", [], 1)
    [launch] = records.claim_cells(warehouse, job.id)
    assert launch.pool == "engine2" and launch.moves == 0
    remote = docker.DockerClient(base_url=two_engines.unix_url)
    run_root = warehouse.paths.runs / job.id
    failure: list[BaseException] = []

    def first_run() -> None:
        try:
            cell_run.run_cell_of_job(warehouse, job.id, launch.cell_key)
        except BaseException as e:  # noqa: BLE001 - kept for the assertion below
            failure.append(e)

    runner = threading.Thread(target=first_run)
    runner.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the quick Task scored and charged, the slow ones in their verifiers
        if settled(warehouse, job.id)[3] and len(trial_sandboxes(remote, run_root)) >= 2:
            break
        time.sleep(0.5)
    charged_before = settled(warehouse, job.id)[3]
    assert len(charged_before) == 1, "the first Trial did not finish on engine 2 in time"
    try:
        two_engines.kill()
        runner.join(120)
        assert not runner.is_alive()
        assert len(failure) == 1 and isinstance(failure[0], placement.EngineLost), failure
        [cell] = cells_of(warehouse, job.id)
        assert cell.status == "pending" and cell.engine_pool is None and "engine2" in (cell.message or "")
        assert get_job(warehouse, job.id, None).status == "running"

        [again] = records.claim_cells(warehouse, job.id)  # engine 2 does not answer: the cell goes to local
        assert again.pool == "local" and again.moves == 1 and again.run_key != launch.run_key
        cell_run.run_cell_of_job(warehouse, job.id, again.cell_key)
    finally:
        two_engines.start()  # back for the next test
    job_now = get_job(warehouse, job.id, None)
    assert job_now.status == "completed", job_now.message
    reserved, charged, refunded, keys = settled(warehouse, job.id)
    assert reserved == charged + refunded
    assert Counter(keys) == Counter(set(keys)) and len(keys) == len(TASKS)  # every Trial charged, once
    assert set(charged_before) <= set(keys)
    with warehouse.query(None, ["trials"]) as con:
        rows = con.execute("select outcome, count(*) from trials where job_id = ? group by 1", [job.id]).fetchall()
    assert dict(rows) == {"scored": len(TASKS)}
    recovery.sweep_sandboxes(warehouse)  # engine 2 is back: what it left there is swept (checked below)
    assert trial_sandboxes(primary, run_root) == [] and trial_sandboxes(remote, run_root) == []


def test_cells_whose_tasks_reach_allowlisted_hosts_stay_on_this_machines_engine(
        two_engines: dockerd.Dockerd, warehouse: Warehouse, tmp_path: Path) -> None:
    # The same Tasks spread over both engines without an allowlist (above); with one, their sandboxes need the
    # egress proxy, which a sandbox network on this machine's engine gives more cheaply than engine 2's relays,
    # so both cells wait for the local engine's one slot.
    registry.register(warehouse, bench(tmp_path), "default", label="reaching@1", allowed_hosts=["pypi.org"])
    job = submit(warehouse, "reaching@1", "nop", [], 1, bounds=True)
    assert sorted(c.pool for c in records.claim_cells(warehouse, job.id)) == ["local", "local"]
