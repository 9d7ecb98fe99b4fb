"""The catalog's schema is made once per version of Amber, not once per process, and its file is in DuckDB's v1.2
storage format.

A process runs the catalog's DDL only when the catalog was last made by another DDL (it keeps the DDL's hash,
`catalog.SCHEMA_HASH`): a read command on a current catalog opens one read-only connection and runs no DDL, and
the first read of a catalog made by an older Amber gives it the new views and columns before it reads. A catalog
an older Amber made in DuckDB's default format (`instances.STORAGE_VERSION`) is rewritten at its first write.
"""

from __future__ import annotations

import pytest
from helpers import funded

from amber_pipeline.jobs import records
from amber_pipeline.warehouse import catalog, instances
from amber_pipeline.warehouse.catalog import Warehouse


def test_a_current_catalog_runs_no_ddl_in_a_new_process(warehouse: Warehouse,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    funded(warehouse)
    monkeypatch.setattr(catalog, "_schema_ready", set())  # as a new process finds it
    monkeypatch.setattr(catalog, "CATALOG_DDL", "select error('the DDL ran')")  # the hash kept is still current
    opened: list[dict] = []
    attached = instances.attached
    monkeypatch.setattr(instances, "attached", lambda *a, **k: opened.append(k) or attached(*a, **k))
    assert records.list_jobs(warehouse, "default") == []
    assert opened == [{"read_only": True}]  # the file opened once, read-only: no write to make the schema first
    with warehouse.write() as con:
        assert con.execute("select count(*) from workspaces").fetchone() == (1,)


def test_the_first_read_of_a_catalog_made_by_an_older_amber_makes_its_schema(warehouse: Warehouse,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    funded(warehouse)
    with warehouse.write() as con:  # an older Amber's catalog: a view this one added is missing, another hash kept
        con.execute("drop view workspace_jobs")
        con.execute("create or replace table catalog_schema as select 'older' as hash")
    monkeypatch.setattr(catalog, "_schema_ready", set())
    assert records.list_jobs(warehouse, "default") == []  # reads the view the read made first
    with warehouse.read() as con:
        assert con.execute("select hash from catalog_schema").fetchone() == (catalog.SCHEMA_HASH,)


def _storage_version(wh: Warehouse) -> str:
    with wh.read() as con:
        [(version,)] = con.execute("select tags['storage_version'] from duckdb_databases() "
                                   "where database_name = current_database()").fetchall()
    return version


def test_a_catalog_in_duckdbs_default_format_is_rewritten_in_the_newer_one_at_its_first_write(
        warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    """Made as an older Amber made it (DuckDB's default format, v1.0's), the catalog is read as it is; its first
    write rewrites it in v1.2's format with everything in it: the Wallet's ledger, and the sequence that numbers
    its entries goes on."""
    with monkeypatch.context() as older:
        older.setattr(instances, "STORAGE_VERSION", "v0.10.2")  # what DuckDB writes when not told
        funded(warehouse, amount="100")
    assert _storage_version(warehouse) == "v1.0.0+"
    with warehouse.read() as con:
        assert con.execute("select count(*), sum(amount) from ledger").fetchone() == (1, 100)
    assert _storage_version(warehouse) == "v1.0.0+"  # a read leaves the file as it is

    funded(warehouse, amount="50")
    assert _storage_version(warehouse) == "v1.2.0+"
    with warehouse.read() as con:
        assert con.execute("select list(seq order by seq), list(amount::int order by seq) from ledger").fetchone() \
            == ([1, 2], [100, 50])


def test_a_new_catalog_is_made_in_the_newer_format(warehouse: Warehouse) -> None:
    funded(warehouse)
    assert _storage_version(warehouse) == "v1.2.0+"
