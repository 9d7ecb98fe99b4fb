"""Results on object storage (AMBER_STORAGE_URL=s3://bucket/prefix): a moto S3 server on loopback holds Trial
rows, scores, Trial folders and Benchmark snapshots; `amber results` and `amber sql` read them back as they read
the same files on local disk, and `amber sql` stays confined to the acting Workspace's rows."""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import cli, ok, refusal, submit, trial_rows
from servers import s3
from servers.ports import free_port

from amber_pipeline.benchmarks import registry
from amber_pipeline.benchmarks.tasks import find_task_dirs
from amber_pipeline.benchmarks.versions import content_hash
from amber_pipeline.jobs import cell_run
from amber_pipeline.jobs.records import cells_of
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.storage import EXECUTABLES

DEMO = PROJECT_ROOT / "examples" / "demo-bench"
PREFIX = "results/team"


@dataclass(frozen=True)
class Bucket:
    server: s3.S3Server
    name: str

    def keys(self, below: str = "") -> list[str]:
        return self.server.keys(self.name, f"{PREFIX}/{below}")

    def download(self, home: Path) -> int:
        """Every object of the store as the local default lays it out under ``home``; the number of files."""
        client, keys = self.server.client(), [k for k in self.keys() if not k.endswith(EXECUTABLES)]
        for key in keys:
            target = home / key.removeprefix(f"{PREFIX}/")
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(self.name, key, str(target))
        return len(keys)


@pytest.fixture
def bucket(s3_server: s3.S3Server, amber_home: Path, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    """A new bucket, and the environment that points Amber at it (credentials as the AWS SDKs read them)."""
    for name, value in s3.CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    name = s3_server.create_bucket(f"amber-{uuid.uuid4().hex[:10]}")
    monkeypatch.setenv("AMBER_STORAGE_URL", f"s3://{name}/{PREFIX}")
    monkeypatch.setenv("AMBER_S3_ENDPOINT", s3_server.endpoint)
    return Bucket(s3_server, name)


def local_parquet(home: Path) -> list[Path]:
    return sorted((home / "warehouse").rglob("*.parquet"))


# ---- a Job's results -------------------------------------------------------------------------------------------

@pytest.mark.docker
def test_a_jobs_results_live_in_the_bucket_and_read_back_as_from_local_disk(
        tmp_path: Path, bucket: Bucket, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "two"
    for task in ("ini-port-change", "fix-off-by-one"):
        shutil.copytree(DEMO / task, source / task)
    job = submit(warehouse, str(source), "oracle", [], 1)
    for cell in cells_of(warehouse, job.id):
        cell_run.run_cell_of_job(warehouse, job.id, cell.cell_key)

    keys = bucket.keys()
    for folder in ("warehouse/trials/", "warehouse/rewards/", "warehouse/aggregates/", "warehouse/comparisons/",
                   f"runs/{job.id}/", f"benchmarks/{job.benchmark_version_id}/"):
        assert any(k.startswith(f"{PREFIX}/{folder}") for k in keys), folder
    assert any(k.endswith("/result.json") for k in bucket.keys(f"runs/{job.id}/"))
    assert local_parquet(warehouse.paths.home) == []  # no result file on this machine's disk

    # A machine that did not run the Job: its Trial folders fetched back when a report reads them.
    shutil.rmtree(warehouse.paths.runs / job.id)
    results = ok(cli("results", job.id, "--json"))
    trials = ok(cli("sql", "select task_name, outcome, reward, errored from trials order by task_name"))
    causes = ok(cli("sql", "select task_name, outcome from failure_causes order by task_name"))
    assert len(list((warehouse.paths.runs / job.id).glob("*/*/result.json"))) == 2
    assert [c["mean_reward"] for c in json.loads(results)["cells"]] == [1.0]
    assert "ini-port-change" in trials and "fix-off-by-one" in trials
    assert local_parquet(warehouse.paths.home) == []

    # The same files on the local default give the same report and rows.
    assert bucket.download(warehouse.paths.home) > 0
    monkeypatch.delenv("AMBER_STORAGE_URL")
    assert ok(cli("results", job.id, "--json")) == results
    assert ok(cli("sql", "select task_name, outcome, reward, errored from trials order by task_name")) == trials
    assert ok(cli("sql", "select task_name, outcome from failure_causes order by task_name")) == causes


def test_a_benchmark_snapshot_is_fetched_back_whole_into_an_empty_cache(bucket: Bucket, warehouse: Warehouse) -> None:
    version, _ = registry.register(warehouse, DEMO, registry.PUBLIC)
    assert any(k.endswith("/solution/solve.sh") for k in bucket.keys(f"benchmarks/{version.id}/"))
    shutil.rmtree(warehouse.paths.benchmarks / version.id)

    again = registry.version(warehouse, version.id, registry.PUBLIC)
    root = warehouse.paths.benchmarks / version.id
    assert again.root == root and [t.name for t in again.tasks] == [t.name for t in version.tasks]
    # Same bytes and the same executable bits (S3 keeps none of its own): the same content hash.
    assert not (root / EXECUTABLES).exists()
    assert content_hash(find_task_dirs(root), root) == version.id


# ---- amber sql over S3 ----------------------------------------------------------------------------------------

def as_user(home: Path, user: str, *args: str):  # type: ignore[no-untyped-def]
    return cli("--user", user, *args, env={"AMBER_CONFIG": str(home.parent / f"{user}.toml")})


def rows(table: str) -> list[list[str]]:
    """The body rows of a table `amber sql` printed."""
    return [[c.strip() for c in line.strip("│").split("│")] for line in table.splitlines() if line.startswith("│")]


def test_amber_sql_reads_only_its_workspaces_rows_from_the_bucket(bucket: Bucket, warehouse: Warehouse) -> None:
    home = warehouse.paths.home
    for user, ws, n in (("alice", "a", 3), ("bob", "b", 2)):
        ok(as_user(home, user, "workspace", "create", ws))
        warehouse.write_parquet(trial_rows(ws, f"job-{ws}", n), warehouse.trials_file(f"cell-{ws}", f"job-{ws}"))
    assert len(bucket.keys("warehouse/trials/")) == 2 and local_parquet(home) == []

    def bob(query: str):  # type: ignore[no-untyped-def]
        return as_user(home, "bob", "--workspace", "b", "sql", query)

    assert rows(ok(bob("select workspace, count(*) as n from trials group by all"))) == [["b", "2"]]
    assert "a-task" not in ok(bob("select * from trials"))
    # The registered scan of every Workspace's files is gone once the rows are copied.
    for name in ("_trials_files", "_trials_empty"):
        sentence = refusal(bob(f"select * from {name}"))
        assert "does not exist" in sentence and "a-task" not in sentence, name
    a_key = next(k for k in bucket.keys("warehouse/trials/") if "/cell-a/" in k)
    for escape in (f"select * from read_parquet('s3://{bucket.name}/{a_key}')",
                   f"select * from read_parquet('{warehouse.trials_file('cell-b', 'job-b')}')",
                   f"select * from read_text('{home / 'warehouse' / 'catalog.duckdb'}')"):
        sentence = refusal(bob(escape))
        assert "a-task" not in sentence and "\n" not in sentence, escape
    assert rows(ok(as_user(home, "alice", "--workspace", "a", "sql",
                           "select workspace, count(*) as n from trials group by all"))) == [["a", "3"]]


# ---- a store that is not there ---------------------------------------------------------------------------------

def test_a_store_that_does_not_answer_is_one_sentence(bucket: Bucket, warehouse: Warehouse,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    ok(cli("workspace", "list"))
    monkeypatch.setenv("AMBER_S3_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    sentence = refusal(cli("sql", "select count(*) from trials"))
    assert "AMBER_STORAGE_URL" in sentence and "did not answer" in sentence, sentence

    monkeypatch.setenv("AMBER_S3_ENDPOINT", bucket.server.endpoint)
    monkeypatch.setenv("AMBER_STORAGE_URL", "s3://no-such-bucket-here/x")
    assert "does not exist" in refusal(cli("sql", "select count(*) from trials"))
    monkeypatch.setenv("AMBER_STORAGE_URL", "ftp://host/x")
    assert "neither a folder nor s3://" in refusal(cli("sql", "select count(*) from trials"))


# ---- an object rewritten while it is read --------------------------------------------------------------------

def test_a_parquet_object_rewritten_while_it_is_read_reads_whole(bucket: Bucket, warehouse: Warehouse) -> None:
    """A cell rewrites its Trial rows batch by batch while `amber results` or a view reads them. Arrow takes an
    object's size, then reads its footer from that size: a rewrite to another size in between used to read torn
    (a third of these reads failed, a sentence saying the store did not answer). Each read now sees one
    version whole."""
    store = warehouse.store
    path = warehouse.paths.trials / "cell" / "job.parquet"
    versions = {10: pa.table({"a": range(10)}),
                20_000: pa.table({"a": range(20_000), "b": [f"row {i}" for i in range(20_000)]})}
    store.write_table(versions[10], path)
    stop = threading.Event()

    def rewrite() -> None:
        while not stop.wait(0.02):
            for table in versions.values():
                store.write_table(table, path)

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        counts = [store.row_count(path) for _ in range(100)]
        schemas = {str(store.schema_of(path)) for _ in range(100)}
    finally:
        stop.set()
        writer.join()
    assert set(counts) == set(versions) and schemas == {str(t.schema) for t in versions.values()}
