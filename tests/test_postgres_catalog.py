"""The catalog and the Wallet on PostgreSQL: what the database itself refuses, how writers wait for each other,
and the sentences a user gets for a catalog that is not there. The money suite (`test_wallet_concurrency`,
`test_job_lifecycle`, `test_workspaces`) runs on both catalogs through the `both_catalogs` fixture; this file
holds what only PostgreSQL has. Everything runs against a real server on loopback (`servers/postgres.py`)."""

from __future__ import annotations

import threading
from decimal import Decimal
from pathlib import Path

import psycopg2
import pytest
from helpers import cli, funded, refusal
from servers.ports import free_port

from amber_pipeline.money import wallet
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from amber_pipeline.warehouse.postgres import PostgresCatalog


def test_the_database_refuses_to_change_or_remove_a_ledger_or_audit_log_entry(pg_wh: Warehouse, pg_url: str) -> None:
    funded(pg_wh, "ws", "5")  # a Credit: a ledger entry, and the audit log's row of who added it
    audited = audit_rows(pg_wh)
    assert [(action, workspace) for _, action, workspace in audited] == [("credit", "ws")]
    for table, name, column in (("ledger", "ledger", "amount = 0"), ("audit", "audit log", "user_name = 'nobody'")):
        for statement in (f"update {table} set {column}", f"delete from {table}", f"truncate {table}"):
            with (psycopg2.connect(pg_url) as conn, conn.cursor() as cur,  # the same role Amber connects as
                  pytest.raises(psycopg2.Error, match=f"the {name} is append-only")):
                cur.execute(statement)
            with pytest.raises(psycopg2.Error, match="append-only"), pg_wh.write("ws") as con:
                con.execute(statement)
    assert wallet.read(pg_wh, "ws")[0].balance == Decimal("5")
    assert audit_rows(pg_wh) == audited
    assert not (AmberPaths.from_env().catalog).exists()  # nothing went to a DuckDB file on the side


def audit_rows(wh: Warehouse) -> list[tuple]:
    with wh.read() as con:
        return con.execute("select user_name, action, workspace from audit order by seq").fetchall()


def test_a_wallet_write_waits_only_for_writes_of_its_own_workspace(pg_wh: Warehouse) -> None:
    for ws in ("a", "b"):
        funded(pg_wh, ws, "1")
    holding, release = threading.Event(), threading.Event()
    done: dict[str, bool] = {}

    def hold_a() -> None:
        with pg_wh.write("a") as con:
            wallet.credit(con, "a", Decimal("1"), "held", "credit:held")
            holding.set()
            release.wait(30)

    def write(ws: str) -> None:
        with pg_wh.write(ws) as con:
            wallet.credit(con, ws, Decimal("1"), "second", f"credit:second-{ws}")
        done[ws] = True

    holder = threading.Thread(target=hold_a)
    holder.start()
    assert holding.wait(30)
    other, same = (threading.Thread(target=write, args=(ws,)) for ws in ("b", "a"))
    other.start()
    other.join(30)
    assert done.get("b"), "a write of Workspace b waited for a write of Workspace a"
    same.start()
    same.join(1.0)
    assert same.is_alive() and "a" not in done, "a second write of Workspace a did not wait for the first"
    release.set()
    holder.join(30)
    same.join(30)
    assert done.get("a")
    assert [wallet.read(pg_wh, ws)[0].balance for ws in ("a", "b")] == [Decimal("3"), Decimal("2")]


def test_a_write_that_names_no_workspace_waits_for_every_writer(pg_wh: Warehouse) -> None:
    funded(pg_wh, "a", "1")
    holding, release, finished = threading.Event(), threading.Event(), threading.Event()

    def hold_a() -> None:
        with pg_wh.write("a"):
            holding.set()
            release.wait(30)

    def write_all() -> None:
        with pg_wh.write() as con:
            con.execute("insert into staff (user_name) values (?)", ["someone"])
        finished.set()

    holder, writer = threading.Thread(target=hold_a), threading.Thread(target=write_all)
    holder.start()
    assert holding.wait(30)
    writer.start()
    assert not finished.wait(1.0)
    release.set()
    assert finished.wait(30)
    holder.join(30)
    writer.join(30)


def test_a_new_process_does_not_lock_the_catalog_to_make_a_schema_it_has(pg_wh: Warehouse, pg_url: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    funded(pg_wh, "ws", "5")
    # Another process reads the ledger, in a transaction still open (a report, a cell run's charge).
    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:
        cur.execute("select count(*) from ledger")
        monkeypatch.setattr(PostgresCatalog, "_ready", set())  # as in a process that starts now
        read: list[Decimal] = []
        first = threading.Thread(target=lambda: read.append(wallet.read(pg_wh, "ws")[0].balance), daemon=True)
        first.start()
        first.join(20)
        # Its first read went ahead: it did not wait for that transaction to remake the ledger's triggers
        # (which once deadlocked a cell run's first read with another process).
        alive = first.is_alive()
        conn.rollback()
    first.join(20)
    assert not alive and read == [Decimal("5")]

def test_a_catalog_that_does_not_answer_is_one_sentence(amber_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMBER_CATALOG_URL", f"postgresql://amber:secret@127.0.0.1:{free_port()}/amber")
    message = refusal(cli("wallet"))
    assert message.startswith("The catalog at postgresql://amber:***@127.0.0.1:")
    assert "is not answering" in message and "AMBER_CATALOG_URL" in message
    assert "secret" not in message and "Traceback" not in message


def test_a_catalog_url_of_another_kind_is_one_sentence(amber_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMBER_CATALOG_URL", "mysql://amber@127.0.0.1/amber")
    message = refusal(cli("wallet"))
    assert message == ("AMBER_CATALOG_URL 'mysql://amber@127.0.0.1/amber' is neither a DuckDB file nor "
                       "postgresql://...: set it to one of those, or unset it for the catalog under AMBER_HOME.")
