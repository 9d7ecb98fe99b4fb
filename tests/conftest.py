"""Every test gets its own user config file, so no test reads or writes the developer's; and the shared
fixtures: an AMBER_HOME in a temporary folder (subprocesses inherit it) and its warehouse; a PostgreSQL
server, an S3 server and a second Docker engine on loopback; `cli_mode`, which runs a module's CLI tests on the
embedded default and again against the hosted API; and `both_catalogs`, which runs a test on the
DuckDB catalog and again on PostgreSQL."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import docker
import helpers
import pytest
from scheduling import pytest_collection_modifyitems  # noqa: F401 - the suite's order and xdist groups
from servers import api, dockerd, postgres, s3

from amber_pipeline.errors import AmberError
from amber_pipeline.paths import AmberPaths
from amber_pipeline.sandbox import docker_engine
from amber_pipeline.warehouse.catalog import Warehouse


def pytest_collection_finish() -> None:
    """What collecting imported (Dagster, Harbor, litellm, the tests' modules: about 600,000 objects) is kept
    out of the garbage collector's sight, as the warm worker keeps its imports: each full collection walked all of
    it again (3-6% of an in-process test's CPU, by perf; 74 quick CLI tests took 23.3 s instead of 25.0)."""
    gc.collect()
    gc.freeze()


def pytest_configure() -> None:
    """The CLI's tables are as wide as COLUMNS says, else 120 columns when piped: xdist's workers start with
    COLUMNS=80, so it is dropped, and every test sees the width of a piped run, as one that sets its own does."""
    os.environ.pop("COLUMNS", None)


@pytest.fixture(autouse=True)
def _own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMBER_CONFIG", str(tmp_path / "amber-config.toml"))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.PostgresServer]:
    """One PostgreSQL server for the session (Debian's, started as the postgres user); a test takes a database
    of its own with `create_database()`."""
    with postgres.running() as server:
        yield server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[s3.S3Server]:
    """One S3 server (moto) on loopback for the session; a test takes a bucket of its own."""
    with s3.running() as server:
        yield server


@pytest.fixture(scope="session")
def primary() -> docker.DockerClient:
    """The machine's own engine, only ever read by the tests of several engines."""
    try:
        client = docker_engine.connect(timeout=30)
        client.images.get(dockerd.BASE_IMAGE)
    except AmberError as e:
        pytest.skip(str(e))
    except docker.errors.ImageNotFound:
        pytest.skip(f"{dockerd.BASE_IMAGE} is not on the local engine: run `make setup`.")
    return client


@pytest.fixture(scope="session")
def engine2(primary: docker.DockerClient) -> Iterator[dockerd.Dockerd]:
    """A second dockerd (TLS on loopback) with the base image copied in, for the session; the primary engine's
    pid and bridge are the same after it as before."""
    if os.geteuid() != 0:
        pytest.skip("A second Docker engine needs root.")
    before = dockerd.primary_pid(), dockerd.PRIMARY_BRIDGE.exists()
    with dockerd.running() as engine:
        assert dockerd.PRIMARY_BRIDGE.exists() == before[1], "starting engine 2 took the primary's docker0 away"
        assert dockerd.go_settings(engine.pid()) == dockerd.go_settings(dockerd.primary_pid())
        loaded_in = engine.load_image(dockerd.BASE_IMAGE, primary)
        print(f"engine 2 answered in {engine.started_in:.2f} s; {dockerd.BASE_IMAGE} loaded in {loaded_in:.1f} s")
        yield engine
    assert (dockerd.primary_pid(), dockerd.PRIMARY_BRIDGE.exists()) == before and primary.ping()


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    """A folder of the three TLS files an engine over tcp:// names; read only when connecting."""
    folder = tmp_path / "certs"
    folder.mkdir()
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (folder / name).write_text("not read until connecting\n")
    return folder


@pytest.fixture(params=postgres.CATALOGS)
def both_catalogs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The catalog and ledger on DuckDB, then on a new PostgreSQL database (AMBER_CATALOG_URL, which
    subprocesses inherit). Used before `warehouse`, so the Warehouse is made on it."""
    postgres.use_catalog(request.param, request, monkeypatch)
    return request.param


@pytest.fixture(params=["local", "api"])
def cli_mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every `helpers.cli` command of the test on the embedded default, then again as the client of `amber
    serve`'s app on loopback (`servers/api.py`): a module of CLI tests uses it to show both modes print the same."""
    if request.param == "local":
        yield "local"
        return
    helpers.API_MODE = api.ApiMode()
    try:
        yield "api"
    finally:
        helpers.API_MODE.stop()
        helpers.API_MODE = None


@pytest.fixture
def amber_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "amber"
    monkeypatch.setenv("AMBER_HOME", str(home))
    return home


@pytest.fixture
def warehouse(amber_home: Path) -> Warehouse:
    return Warehouse(AmberPaths.from_env())


@pytest.fixture
def pg_url(postgres_server: postgres.PostgresServer, monkeypatch: pytest.MonkeyPatch, amber_home: Path) -> str:
    """AMBER_CATALOG_URL naming a database of its own on the session's PostgreSQL server."""
    url = postgres_server.create_database()
    monkeypatch.setenv("AMBER_CATALOG_URL", url)
    return url


@pytest.fixture
def pg_wh(pg_url: str) -> Warehouse:
    """The warehouse of an AMBER_HOME whose catalog is that PostgreSQL database."""
    return Warehouse(AmberPaths.from_env())
