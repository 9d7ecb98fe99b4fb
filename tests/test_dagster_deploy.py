"""Amber's Dagster instance beyond one machine: the deploy/ variants, on a real PostgreSQL, a real code server
and real run containers.

Every file in deploy/ is checked against Dagster's own schemas (the instance's, and each configured class's,
without constructing any: the Kubernetes launcher would read a kubeconfig). Then real servers on loopback,
started here: one PostgreSQL (Debian's, `servers.postgres`) holds the Dagster instances; a gRPC code server
serves Amber's code location to an embedded daemon on deploy/dagster.postgres.yaml, beside an embedded daemon
on the default SQLite instance; Jobs run real Trials in Docker sandboxes. A run worker is killed mid-cell and
its run resumed; and a cell runs in a container of Dagster's DockerRunLauncher. Nothing is mocked.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import docker
import httpx
import pytest
import yaml
from helpers import children, costs_and_charges, funded, request, stop_group, submit, trial_sandboxes
from servers import dockerd, postgres, s3
from servers.ports import free_port

from amber_pipeline import embedded, settings, worker_socket
from amber_pipeline.accounts.identity import local_user
from amber_pipeline.cli.client import tls
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import lifecycle, records
from amber_pipeline.operations.jobs import launch
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.sandbox import docker_engine, engines
from amber_pipeline.warehouse.catalog import Warehouse
from assets.cell_job import JOB_TAG
from launcher import deploy_files

DEPLOY = PROJECT_ROOT / "deploy"
INSTANCE_FILES = sorted(DEPLOY.glob("dagster.*.yaml"))
DEMO_BENCH = PROJECT_ROOT / "examples" / "demo-bench"
BUCKET_PREFIX = "amber"
# What a run worker reads to find Amber's state: a worker without one of them would use another catalog or
# store than the daemon's, silently.
WORKER_SETTINGS = ("AMBER_HOME", "AMBER_CATALOG_URL", "AMBER_STORAGE_URL", "AMBER_SANDBOX_HOSTS")
# Stand-ins for the settings the deploy files read, so their {env: ...} resolve while they are checked.
DEPLOY_ENV = {"AMBER_DAGSTER_PG_URL": "postgresql+psycopg2://amber@127.0.0.1:1/dagster",
              "AMBER_RUN_IMAGE": "amber-run:test", "AMBER_K8S_NAMESPACE": "amber",
              "AMBER_CODE_SERVER_HOST": "127.0.0.1", "AMBER_CODE_SERVER_PORT": "4000"}


# ---- 1. the files, against Dagster's schemas ----------------------------------------------------------------

def test_every_deploy_file_loads_against_dagsters_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in DEPLOY_ENV.items():
        monkeypatch.setenv(name, value)
    assert {p.name for p in INSTANCE_FILES} == {"dagster.postgres.yaml", "dagster.docker.yaml", "dagster.k8s.yaml"}
    launchers = {}
    for path in [PROJECT_ROOT / "dagster.yaml", *INSTANCE_FILES]:
        config = deploy_files.instance_config(path)
        launchers[path.name] = config["run_launcher"]["class"]
        # every file: a run whose worker died resumed twice at most, never run again as a new run
        assert config["run_monitoring"]["enabled"] and config["run_monitoring"]["max_resume_run_attempts"] == 2
        assert "run_retries" not in config, path
        if path.parent == DEPLOY:  # every variant: Postgres
            assert config["storage"] == {"postgres": {"postgres_url": {"env": "AMBER_DAGSTER_PG_URL"}}}, path
    assert launchers == {"dagster.yaml": "WarmRunLauncher", "dagster.postgres.yaml": "WarmRunLauncher",
                         "dagster.docker.yaml": "DockerRunLauncher", "dagster.k8s.yaml": "K8sRunLauncher"}

    workspace = DEPLOY / "workspace.grpc.yaml"
    [entry] = deploy_files.code_locations(workspace)
    assert entry == {"grpc_server": {"host": "127.0.0.1", "port": 4000, "location_name": "amber"}}


def test_the_docker_variant_passes_what_a_run_worker_reads(tmp_path: Path) -> None:
    config = yaml.safe_load((DEPLOY / "dagster.docker.yaml").read_text())
    passed = {v.split("=", 1)[0] for v in config["run_launcher"]["config"]["env_vars"]}
    # The instance file's own settings: the worker reads the instance (its storage, and its launcher, whose
    # config run monitoring reads) as the daemon does.
    own = {"AMBER_DAGSTER_PG_URL", "AMBER_RUN_IMAGE"}
    assert {*own, *WORKER_SETTINGS} <= passed
    # A name alone is copied from the daemon's environment, where it must be set: the instance file's own ones
    # are (the daemon would not start without them), and `amber daemon start` sets Amber's (an unset setting
    # as empty, which Amber reads as its default).
    env = embedded.environment(AmberPaths(tmp_path / "amber"))
    assert passed - own <= set(env), passed - set(env)


BROKEN = {
    "a misspelled instance key": ("dagster.postgres.yaml", ["run_monitoring"], "poll_interval_secs", 5),
    "a launcher key Docker's launcher does not have": ("dagster.docker.yaml", ["run_launcher", "config"],
                                                        "envvars", ["AMBER_HOME"]),
    "a Kubernetes launcher without its instance ConfigMap": ("dagster.k8s.yaml", ["run_launcher", "config"],
                                                             "instance_config_map", None),
    "a queue interval that is not a number": ("dagster.postgres.yaml", ["run_coordinator", "config"],
                                              "dequeue_interval_seconds", "fast"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_variant_is_caught(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in DEPLOY_ENV.items():
        monkeypatch.setenv(name, value)
    name, where, key, value = BROKEN[case]
    config = yaml.safe_load((DEPLOY / name).read_text())
    section = config
    for part in where:
        section = section[part]
    if value is None:
        del section[key]
    else:
        section[key] = value
    (tmp_path / name).write_text(yaml.safe_dump(config))
    with pytest.raises(dg.DagsterInvalidConfigError):
        deploy_files.instance_config(tmp_path / name)


def test_a_daemon_that_cannot_load_its_instance_stops_with_one_sentence_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMBER_DAGSTER_CONFIG", str(DEPLOY / "dagster.postgres.yaml"))
    monkeypatch.delenv("AMBER_DAGSTER_PG_URL", raising=False)  # the database it names is not set
    paths = AmberPaths(tmp_path / "amber")
    with pytest.raises(AmberError) as refused:
        embedded.start_daemon(paths)
    assert str(refused.value) == f"The Dagster daemon stopped at once: see {paths.dagster_home / 'daemon.log'}."
    assert "AMBER_DAGSTER_PG_URL" in (paths.dagster_home / "daemon.log").read_text()
    assert embedded.daemon_pid(paths) is None
    assert worker_socket.ask(paths.dagster_home, {"op": "ping"}) is None  # its warm worker went with it
    assert not (paths.dagster_home / "warm-worker.pid").exists()


def test_a_daemon_whose_warm_worker_cannot_start_starts_as_a_process_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm worker forks the daemon and its code server; one that dies at its imports (here litellm's, broken on
    purpose) leaves both to start as new interpreters, which run until stopped."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "litellm.py").write_text("raise ImportError('litellm is broken on purpose')\n")
    monkeypatch.setenv("PYTHONPATH", str(broken))
    paths = AmberPaths(tmp_path / "amber")
    try:
        daemon = embedded.start_daemon(paths)
        assert embedded.daemon_pid(paths) == daemon
        assert b"launcher.daemon" in Path(f"/proc/{daemon}/cmdline").read_bytes()  # a new interpreter, not a fork
        assert worker_socket.ask(paths.dagster_home, {"op": "ping"}) is None
        assert "litellm is broken on purpose" in (paths.dagster_home / "daemon.log").read_text()
        wait_for("the daemon's code server", lambda: [cmd for _, cmd in children(daemon).values()
                                                      if b"-m dagster api grpc" in cmd], 60)
    finally:
        assert embedded.stop_daemon(paths)
    assert embedded.daemon_pid(paths) is None


# ---- servers: PostgreSQL, a code server, two embedded daemons ----------------------------------------------

@pytest.fixture(scope="module")
def pg(postgres_server: postgres.PostgresServer) -> postgres.PostgresServer:
    return postgres_server  # the session's server; each instance and catalog takes a database of its own


def dagster_url(server: postgres.PostgresServer) -> str:
    """A database of its own for one Dagster instance. SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3;
    Dagster's Postgres storage comes with psycopg2, so the URL names it."""
    return server.create_database().replace("postgresql://", "postgresql+psycopg2://", 1)


def database_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


@dataclass(frozen=True)
class Deployment:
    """The embedded Amber on deploy/dagster.postgres.yaml with its code served over gRPC, and the embedded
    default (SQLite) beside it for reference."""
    wh: Warehouse
    url: str
    workspace: Path
    reference: Warehouse
    s3: s3.S3Server

    def instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.wh.paths.dagster_home))


@pytest.fixture(scope="module")
def deployment(pg: postgres.PostgresServer, engine2: dockerd.Dockerd, s3_server: s3.S3Server,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Everything beyond one machine at once: Dagster and the catalog on PostgreSQL, the code over gRPC,
    sandboxes on the machine's engine and a second one over TLS, results in an S3 bucket; the embedded default
    beside it."""
    root = tmp_path_factory.mktemp("deploy")
    paths, reference = AmberPaths(root / "pg"), AmberPaths(root / "sqlite")
    url, port = dagster_url(pg), free_port()
    workspace = DEPLOY / "workspace.grpc.yaml"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_DAGSTER_PG_URL", url)
        mp.setenv("AMBER_CODE_SERVER_HOST", "127.0.0.1")
        mp.setenv("AMBER_CODE_SERVER_PORT", str(port))
        mp.delenv("AMBER_DAGSTER_CONFIG", raising=False)
        # The reference daemon, as a user starts it, while this one starts: they share two cores.
        sqlite = subprocess.Popen([str(Path(sys.executable).parent / "amber"), "daemon", "start"],
                                  env={**os.environ, "AMBER_HOME": str(reference.home)}, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        embedded_default = Warehouse(reference)  # made before the settings below, which it must not read
        mp.setenv("AMBER_DAGSTER_CONFIG", str(DEPLOY / "dagster.postgres.yaml"))
        mp.setenv("AMBER_CATALOG_URL", pg.create_database())
        (root / "engines.toml").write_text(dockerd.engines_toml(engine2, local_slots=2, slots=2))
        mp.setenv("AMBER_SANDBOX_HOSTS", str(root / "engines.toml"))
        for name, value in s3.CREDENTIALS.items():
            mp.setenv(name, value)
        mp.setenv("AMBER_STORAGE_URL", f"s3://{s3_server.create_bucket('amber-deploy')}/{BUCKET_PREFIX}")
        mp.setenv("AMBER_S3_ENDPOINT", s3_server.endpoint)
        env = embedded.environment(paths)
        with open(root / "code-server.log", "wb") as log:
            code_server = subprocess.Popen(
                [str(Path(sys.executable).parent / "dagster"), "code-server", "start", "-m",
                 "amber_pipeline.definitions", "-h", "127.0.0.1", "-p", str(port)],
                cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            embedded.start_daemon(paths, workspace)
            assert sqlite.wait(timeout=120) == 0, sqlite.communicate()[0]
            yield Deployment(Warehouse(paths), url, workspace, embedded_default, s3_server)
        finally:
            embedded.stop_daemon(paths)
            embedded.stop_daemon(reference)
            stop_group(code_server)


def wait_for(what: str, check: Callable[[], Any], budget: float, state: Callable[[], str] = str) -> Any:
    """``check``'s first true value within ``budget`` seconds; else fail, saying ``state()`` (what was seen)."""
    deadline = time.monotonic() + budget
    while (value := check()) in (None, False, [], {}):
        assert time.monotonic() < deadline, f"no {what} within {budget} s {state()}".rstrip()
        time.sleep(0.3)
    return value


def job_state(deployment: Deployment, job_id: str) -> str:
    """What a waiting test saw of a Job: its status, its cells, its runs and their last events, and the daemon
    log's last lines, so a wait that fails on another machine says where the Job stood."""
    wh = deployment.wh
    job = records.get_job(wh, job_id, None)
    cells = [(c.cell_key, c.status, c.engine_pool) for c in records.cells_of(wh, job_id)]
    lines = [f"Job {job_id}: {job.status}; cells {cells}"]
    with deployment.instance() as instance:
        for run in runs_of(instance, job_id):
            events = [f"{e.dagster_event_type}: {(e.message or '')[:300]}" for e in instance.all_logs(run.run_id)]
            events += [e.dagster_event.step_failure_data.error.to_string()[-3000:]
                       for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)]
            lines += [f"run {run.run_id} {run.status} {dict(run.tags)}", *events[-15:]]
    log = wh.paths.dagster_home / "daemon.log"
    lines += log.read_text(errors="replace").splitlines()[-30:] if log.exists() else []
    return "\n".join(["(seen:", *lines, ")"])


def runs_of(instance: dg.DagsterInstance, job_id: str) -> list[dg.DagsterRun]:
    return [r.dagster_run for r in instance.get_run_records(dg.RunsFilter(tags={JOB_TAG: job_id}))]


def finished_runs(instance: dg.DagsterInstance, job_id: str, count: int) -> list[dg.DagsterRun]:
    """The Job's runs once there are ``count`` and each has stored its last event (a moment after its cell
    ended), else none."""
    runs = runs_of(instance, job_id)
    return runs if len(runs) == count and all(r.is_finished for r in runs) else []


def bench(tmp_path: Path, tasks: dict[str, float]) -> Path:
    """Demo Tasks whose solutions first sleep the seconds given, so a test can act while a Trial runs."""
    folder = tmp_path / "bench"
    for name, seconds in tasks.items():
        shutil.copytree(DEMO_BENCH / name, folder / name)
        if seconds:
            solve = folder / name / "solution" / "solve.sh"
            lines = solve.read_text().splitlines()
            solve.write_text("\n".join([lines[0], f"sleep {seconds}", *lines[1:]]) + "\n")
    return folder


def rewards(wh: Warehouse, job_id: str) -> dict[tuple[str, str, str], float | None]:
    with wh.query() as con:
        return {(a, m, t): r for a, m, t, r in con.execute(
            "select agent, model_configuration, task_name, reward from trials where job_id = ?", [job_id]).fetchall()}


def sandboxes_of(wh: Warehouse, job_id: str) -> list:
    """The Job's sandboxes on every engine its cells may have been placed on."""
    listed = [None] if settings.sandbox_hosts_file() is None else engines.engines()
    return [c for engine in listed for c in trial_sandboxes(docker_engine.connect(engine), wh.paths.runs / job_id)]


def assert_settled(wh: Warehouse, job_id: str) -> None:
    """The Job ended with its money settled, each Trial charged once and shown at its charge, and no sandbox
    of it left (the sensor sweeps what a dead run left within a tick or two)."""
    with wh.query() as con:
        reserved, charged, refunded, settled = con.execute(
            "select reserved, charged, refunded, settled from job_spending where job_id = ?", [job_id]).fetchone()
        twice = con.execute("select trial_key from ledger where kind = 'charge' and job_id = ? group by trial_key "
                            "having count(*) > 1", [job_id]).fetchall()
    assert settled and reserved == charged + refunded, (reserved, charged, refunded)
    assert twice == []
    costs, charges = costs_and_charges(wh, job_id)
    assert costs == charges and charges
    wait_for("the sandboxes to go", lambda: not sandboxes_of(wh, job_id), 30)


# ---- 2. a Job on PostgreSQL, its cells launched by the code server's sensor --------------------------------

@pytest.mark.slow
@pytest.mark.docker
def test_a_job_on_postgres_scores_as_on_the_embedded_sqlite_instance(tmp_path: Path, pg: postgres.PostgresServer,
                                                                     deployment: Deployment) -> None:
    folder = bench(tmp_path, {"fix-off-by-one": 0})
    models = ["replay-strong", "replay-weak"]
    reference = submit(deployment.reference, str(folder), "terminus-2", models, 1, bounds=True)
    launch(deployment.reference, reference.id)  # as `amber job submit` does: the warm worker queues the cells
    job = submit(deployment.wh, str(folder), "terminus-2", models, 1, bounds=True)  # the sensor finds these
    for wh, j in ((deployment.wh, job), (deployment.reference, reference)):
        wait_for(f"Job {j.id} to end", lambda wh=wh, j=j: records.get_job(wh, j.id, None).ended, 240)
        assert records.get_job(wh, j.id, None).status == "completed"
    embedded.stop_daemon(deployment.reference.paths)  # done with it: the two cores go to the tests below

    got, expected = rewards(deployment.wh, job.id), rewards(deployment.reference, reference.id)
    assert got == expected, (got, expected)
    # The strong replay fixes the off-by-one, the weak one breaks the slice instead; oracle and nop bound them.
    assert {(agent, model.split("@")[0]): reward for (agent, model, _), reward in got.items()} == {
        ("terminus-2", "replay-strong"): 1.0, ("terminus-2", "replay-weak"): 0.0, ("oracle", "none"): 1.0,
        ("nop", "none"): 0.0}
    assert_settled(deployment.wh, job.id)

    with deployment.instance() as instance:
        runs = wait_for("the runs' last events", lambda: finished_runs(instance, job.id, 4), 30)
        assert {r.status for r in runs} == {dg.DagsterRunStatus.SUCCESS}
        # Launched by the sensor, which ran in the code server: the runs come from its gRPC location.
        # The four cells spread over the machine's engine and engine 2 (over TLS), two slots each: none of
        # these Agents runs inside its sandbox, so any engine takes them.
        assert Counter(r.tags[engines.POOL_TAG] for r in runs) == {"local": 2, "engine2": 2}
        for run in runs:
            assert run.tags["dagster/sensor_name"] == "job_request_sensor"
            origin = run.remote_job_origin.repository_origin.code_location_origin
            assert type(origin).__name__ == "GrpcServerCodeLocationOrigin" and origin.location_name == "amber"
    # The cell runs are rows of the Dagster database, not of a file under AMBER_HOME.
    counted = pg.psql(database_of(deployment.url), "select count(*) from runs r join run_tags t on "
                      f"t.run_id = r.run_id where t.key = '{JOB_TAG}' and t.value = '{job.id}' "
                      "and r.status = 'SUCCESS'")
    assert counted.stdout.strip() == "4", counted
    assert not (deployment.wh.paths.dagster_home / "history").exists()
    # The results are objects of the bucket, which the reads above came from: each cell's Trial rows and Trial
    # folders, none of them a file under AMBER_HOME.
    home = deployment.wh.paths.home
    keys = deployment.s3.keys("amber-deploy", BUCKET_PREFIX)
    for cell in records.cells_of(deployment.wh, job.id):
        rows = deployment.wh.trials_file(records.cell_file_id(cell.cell_key), job.id).relative_to(home)
        assert f"{BUCKET_PREFIX}/{rows.as_posix()}" in keys
        folder = records.run_dir(deployment.wh, job.id, cell.cell_key).relative_to(home).as_posix()
        assert any(k.startswith(f"{BUCKET_PREFIX}/{folder}/") and k.endswith("/result.json") for k in keys), folder
    assert not list(deployment.wh.paths.trials.rglob("*.parquet"))


# ---- 3. the webserver on the gRPC code location -------------------------------------------------------------

WORKSPACE_QUERY = ("{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus locationOrLoadError "
                   "{ __typename ... on RepositoryLocation { repositories { name jobs { name } } } } } } } }")


@pytest.mark.slow
@pytest.mark.dagster_ui
def test_the_webserver_reports_the_code_servers_location_loaded(tmp_path: Path, deployment: Deployment) -> None:
    port = free_port()
    code = ("import sys; from pathlib import Path; from amber_pipeline import embedded; "
            "from amber_pipeline.paths import AmberPaths; home, port, workspace = sys.argv[1:]; "
            "sys.exit(embedded.run_ui(AmberPaths(Path(home)), '127.0.0.1', int(port), Path(workspace)))")
    with open(tmp_path / "ui.log", "wb") as log:
        ui = subprocess.Popen([sys.executable, "-c", code, str(deployment.wh.paths.home), str(port),
                               str(deployment.workspace)], cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    daemon = embedded.daemon_pid(deployment.wh.paths)
    try:
        with httpx.Client(verify=tls(), base_url=f"http://127.0.0.1:{port}/ui", timeout=5, trust_env=False) as client:
            def answer() -> dict | None:
                with contextlib.suppress(httpx.TransportError):
                    return client.post("/graphql", json={"query": WORKSPACE_QUERY}).json()
                return None
            [entry] = wait_for("the webserver", answer, 90)["data"]["workspaceOrError"]["locationEntries"]
    finally:
        stop_group(ui)
    assert entry["name"] == "amber" and entry["loadStatus"] == "LOADED", entry
    location = entry["locationOrLoadError"]
    assert location["__typename"] == "RepositoryLocation", location
    [repository] = location["repositories"]
    assert {"cell_job", "submit_job"} <= {j["name"] for j in repository["jobs"]}
    assert embedded.daemon_pid(deployment.wh.paths) == daemon  # it used the running daemon and left it


# ---- 4. a run worker killed mid-cell ----------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.docker
def test_a_run_worker_killed_mid_cell_is_resumed_and_its_job_completes(tmp_path: Path,
                                                                       deployment: Deployment) -> None:
    wh = deployment.wh
    funded(wh)
    slow = bench(tmp_path, {"fix-off-by-one": 0, "ini-port-change": 0, "json-settings-update": 8})
    _, job = lifecycle.submit(wh, "default", local_user(),  # room for the slow solution's time: never reached
                              request(str(slow), "oracle").model_copy(update={"ceiling_usd": 1.0}))
    launch(wh, job.id)

    def charged() -> int:
        with wh.query() as con:
            return con.execute("select count(*) from ledger where kind = 'charge' and job_id = ?",
                               [job.id]).fetchone()[0]

    with deployment.instance() as instance:
        wait_for("two Trials charged", lambda: charged() >= 2 or records.get_job(wh, job.id, None).ended, 240,
                 lambda: job_state(deployment, job.id))
        assert charged() >= 2, job_state(deployment, job.id)
        [first] = runs_of(instance, job.id)
        pid = int(first.tags["amber/worker_pid"])
        os.kill(pid, signal.SIGKILL)  # the third Trial is still running
        assert charged() == 2

        wait_for(f"Job {job.id} to end", lambda: records.get_job(wh, job.id, None).ended, 180,
                 lambda: job_state(deployment, job.id))
        [run] = wait_for("the run's last events", lambda: finished_runs(instance, job.id, 1), 30)
        assert run.run_id == first.run_id and run.status == dg.DagsterRunStatus.SUCCESS  # the same run, resumed
        assert instance.count_resume_run_attempts(first.run_id) == 1
        assert int(run.tags["amber/worker_pid"]) != pid  # by a new worker
        resumed = [e.message for e in instance.all_logs(first.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)
                   if "Resuming run" in (e.message or "")]
        assert resumed and "Detected run worker status" in resumed[0] and f"pid {pid} is gone" in resumed[0]

    # The resumed run kept the two Trials stored and ran the third: every Trial scored, each charged once.
    assert records.get_job(wh, job.id, None).status == "completed"
    assert [c.status for c in records.cells_of(wh, job.id)] == ["done"]
    assert set(rewards(wh, job.id).values()) == {1.0} and len(rewards(wh, job.id)) == 3
    assert charged() == 3
    assert_settled(wh, job.id)


# ---- 5. a cell run in a container of Dagster's DockerRunLauncher ---------------------------------------------

def docker_instance_file(folder: Path, amber_home: Path) -> Path:
    """deploy/dagster.docker.yaml made to run on this machine's amber-base image, which has Debian's Python
    3.11 and no Amber: the checkout (and its venv) and the venv's Python are bound read-only at their own
    paths, and so is AMBER_HOME (read-write), whose DuckDB catalog the worker shares with this process."""
    base = Path(sys.base_prefix)
    if base.is_relative_to("/usr"):
        pytest.skip(f"the venv's Python lives in {base}, which would hide the container's own /usr")
    config = yaml.safe_load((DEPLOY / "dagster.docker.yaml").read_text())
    launcher = config["run_launcher"]["config"]
    launcher["env_vars"].append(f"PATH={Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin")
    kwargs = launcher["container_kwargs"]
    kwargs["volumes"].update({str(PROJECT_ROOT): {"bind": str(PROJECT_ROOT), "mode": "ro"},
                              str(base): {"bind": str(base), "mode": "ro"},
                              str(amber_home): {"bind": str(amber_home), "mode": "rw"}})
    kwargs["working_dir"] = str(PROJECT_ROOT)
    path = folder / "dagster.docker.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
@pytest.mark.docker
def test_a_cell_runs_in_a_container_of_the_docker_run_launcher(tmp_path: Path, pg: postgres.PostgresServer,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*WORKER_SETTINGS[1:], "AMBER_S3_ENDPOINT"):  # the DuckDB catalog and local store, whatever ran before
        monkeypatch.delenv(name, raising=False)
    paths = AmberPaths(tmp_path / "amber")
    paths.ensure()
    monkeypatch.setenv("AMBER_DAGSTER_CONFIG", str(docker_instance_file(tmp_path, paths.home)))
    monkeypatch.setenv("AMBER_DAGSTER_PG_URL", dagster_url(pg))
    monkeypatch.setenv("AMBER_RUN_IMAGE", "amber-base:bookworm")
    wh = Warehouse(paths)
    client = docker.from_env()
    embedded.start_daemon(paths)
    try:
        job = submit(wh, str(bench(tmp_path, {"fix-off-by-one": 0})), "oracle", [], 1)
        launch(wh, job.id)
        wait_for(f"Job {job.id} to end", lambda: records.get_job(wh, job.id, None).ended, 180)
        with dg.DagsterInstance.from_config(str(paths.dagster_home)) as instance:
            [run] = wait_for("the run's last events", lambda: finished_runs(instance, job.id, 1), 30)
            assert run.status == dg.DagsterRunStatus.SUCCESS, [
                e.dagster_event.step_failure_data.error.to_string()
                for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)]
            container = run.tags["docker/container_id"]
            assert run.tags["dagster/image"] == "amber-base:bookworm"
            assert any(container in (e.message or "") for e in instance.all_logs(
                run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT))
    finally:
        embedded.stop_daemon(paths)
    assert records.get_job(wh, job.id, None).status == "completed"
    assert rewards(wh, job.id) == {("oracle", "none", "fix-off-by-one"): 1.0}
    assert_settled(wh, job.id)
    # The worker's container is gone with its run.
    wait_for("the worker's container to go", lambda: not client.containers.list(
        all=True, filters={"label": f"dagster/run_id={run.run_id}"}), 30)
