"""The catalog's schema is made once per version of Amber, not once per process.

A process runs the catalog's DDL only when the catalog was last made by another DDL (it keeps the DDL's hash,
`catalog.SCHEMA_HASH`): a read command on a current catalog opens one read-only connection and runs no DDL, and
the first read of a catalog made by an older Amber gives it the new views and columns before it reads.
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
