"""The DuckDB instances a process reuses (`warehouse/instances.py`): the catalog is opened for every short
transaction, and making a DuckDB instance each time was most of what a catalog read cost.

What must hold: an instance is made once and lent again; between blocks it holds no file, so another process
writes the catalog at once; a block's tables, registered objects and temporaries never reach the next block;
blocks nested or in other threads get instances of their own; a forked child never uses its parent's."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from amber_pipeline.warehouse import instances
from amber_pipeline.warehouse.catalog import Warehouse


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every DuckDB instance made from here on."""
    monkeypatch.setattr(instances, "_idle", {instances.FILE: [], instances.SCRATCH: []})
    made: list[object] = []
    connect = duckdb.connect

    def counted(*args: object, **kwargs: object) -> duckdb.DuckDBPyConnection:
        made.append(kwargs)
        return connect(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(duckdb, "connect", counted)
    return made


def test_reads_and_writes_reuse_one_instance(warehouse: Warehouse, made: list[object]) -> None:
    for i in range(10):
        with warehouse.write() as con:
            con.execute("insert into users (user_name, created_by) values (?, 'tests')", [f"user-{i}"])
        with warehouse.read() as con:
            assert con.execute("select count(*) from users").fetchone() == (i + 1,)
    assert len(made) == 1


def test_an_instance_is_closed_after_so_many_blocks_and_a_new_one_made(warehouse: Warehouse, made: list[object],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An instance keeps a little memory of each database it attached, given back only when it closes."""
    with warehouse.write():  # the catalog made first
        pass
    made.clear()
    instances._idle[instances.FILE].clear()
    monkeypatch.setattr(instances, "LENDS", 3)
    for _ in range(7):
        with warehouse.read() as con:
            con.execute("select count(*) from users").fetchone()
    assert len(made) == 3  # blocks 1-3 on the first, 4-6 on the second, 7 on the third
    assert [lends for _, lends in instances._idle[instances.FILE]] == [1]


def test_a_catalog_block_runs_on_one_thread_and_a_scratch_block_on_every_core(warehouse: Warehouse) -> None:
    """A catalog block's few small statements gain nothing from a second thread, which only woke for each of them;
    a scratch block's scans of Parquet files do."""
    with warehouse.read() as con:
        assert con.execute("select current_setting('threads')").fetchone() == (1,)
    with instances.scratch() as con, duckdb.connect() as default:
        assert con.execute("select current_setting('threads')").fetchone() == default.execute(
            "select current_setting('threads')").fetchone()


def test_between_blocks_no_file_is_held_and_another_process_writes_at_once(warehouse: Warehouse) -> None:
    with warehouse.read() as con:
        con.execute("select count(*) from users").fetchone()
    assert instances._idle[instances.FILE], "the instance was not kept"
    kept = instances._idle[instances.FILE][-1][0]
    [attached] = kept.execute("select count(*) from duckdb_databases() where not internal "
                              "and database_name <> 'memory'").fetchone() or (None,)
    assert attached == 0
    # Not through Amber's lock: DuckDB itself would refuse a read-write open while any process had the file.
    script = ("import duckdb, sys; con = duckdb.connect(sys.argv[1]); "
              "con.execute(\"insert into users (user_name, created_by) values ('other', 'x')\"); con.close()")
    done = subprocess.run([sys.executable, "-c", script, str(warehouse.paths.warehouse / "catalog.duckdb")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with warehouse.read() as con:  # and the next block sees what it wrote
        assert con.execute("select created_by from users where user_name = 'other'").fetchone() == ("x",)


def test_a_scratch_blocks_tables_registrations_and_temporaries_never_reach_the_next(made: list[object]) -> None:
    with instances.scratch() as con:
        con.execute("create table kept as select 1 as a")
        con.execute("create temp table _rows as select 2 as b")
        con.execute("drop table _rows")
        con.register("evidence_rows", pa.table({"c": [3]}))
        assert con.execute("select * from kept, evidence_rows").fetchall() == [(1, 3)]
    with instances.scratch() as con:
        for name in ("kept", "evidence_rows"):
            with pytest.raises(duckdb.CatalogException):
                con.execute(f"select * from {name}")
    assert len(made) == 1
    with instances.scratch() as con:  # a temporary left behind: that instance is closed, not lent again
        con.execute("create temp table left_behind as select 1")
    with instances.scratch() as con, pytest.raises(duckdb.CatalogException):
        con.execute("select * from left_behind")
    assert len(made) == 2


def test_nested_and_concurrent_blocks_get_instances_of_their_own(warehouse: Warehouse, made: list[object],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # Room to keep every instance given back: otherwise a burst of six closes two, and the next makes two again.
    monkeypatch.setattr(instances, "_IDLE_KEPT", 8)
    with warehouse.write() as con:
        con.execute("insert into users (user_name, created_by) values ('ann', 'tests')")
    with warehouse.read() as outer, warehouse.read() as inner:
        assert outer.execute("select count(*) from users").fetchone() == inner.execute(
            "select count(*) from users").fetchone() == (1,)
    seen: list[tuple] = []

    def reads() -> None:
        for _ in range(20):
            with warehouse.read() as con:
                seen.append(con.execute("select user_name from users").fetchone())

    threads = [threading.Thread(target=reads) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [("ann",)] * 120
    assert len(made) <= 7  # at most one per block at once; the rest lent again


def test_a_forked_child_makes_its_own_instance(warehouse: Warehouse, tmp_path: Path) -> None:
    with warehouse.write() as con:
        con.execute("insert into users (user_name, created_by) values ('ann', 'tests')")
    parents = [con for idle in instances._idle.values() for con, _ in idle]
    assert parents
    out = tmp_path / "child"
    pid = os.fork()
    if pid == 0:  # the child: its parent's instances are set aside, and a read makes one of its own
        try:
            with warehouse.read() as con:
                found = con.execute("select user_name from users").fetchone()
            made = instances._idle[instances.FILE][-1][0]
            out.write_text(f"{found} {made not in parents} {len(instances._forked_away)}")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert out.read_text() == f"('ann',) True {len(parents)}"
