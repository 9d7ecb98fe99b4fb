"""Many users at once on the PostgreSQL catalog: reads never wait for writes, writes of different Workspaces never
wait for each other, and the catalog's pooled connections (`postgres.Pool`) are handed back whole.

Against a real server on loopback (`servers/postgres.py`); the API ones through the app `amber serve` runs, in a
thread of this process (`servers/api.py`), so its pool is the one this process holds writes open on.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg2
import pytest
from helpers import funded
from servers.api import ApiServer

from amber_pipeline.accounts import workspaces
from amber_pipeline.accounts.identity import Actor, local_user
from amber_pipeline.cells import Cell
from amber_pipeline.cli.client import tls
from amber_pipeline.jobs import cell_names
from amber_pipeline.money import wallet
from amber_pipeline.operations.areas import OPERATIONS
from amber_pipeline.warehouse import postgres
from amber_pipeline.warehouse.catalog import Warehouse

ANSWER_S = 10.0  # a read that waited for a held write would wait until the test let it go: far longer



@contextlib.contextmanager
def held(wh: Warehouse, workspace: str | None) -> Iterator[None]:
    """A write transaction of ``workspace`` (None: one that names none, holding every writer out) open in another
    thread for the block, its locks taken before the block starts."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with wh.write(workspace):
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(ANSWER_S)
        yield
    finally:
        release.set()
        thread.join(30)


def backends(url: str) -> int:
    """Amber's connections to this database, as the server counts them."""
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute("select count(*) from pg_stat_activity where datname = current_database() and "
                    "application_name = 'amber'")
        return cur.fetchone()[0]


@pytest.fixture
def api(pg_wh: Warehouse) -> Iterator[tuple[ApiServer, dict[str, str]]]:
    """The API over the PostgreSQL catalog, and a token per Workspace's member: a and b, each funded."""
    server = ApiServer.start(pg_wh.paths)
    try:
        members = {}
        for ws in ("a", "b"):
            funded(pg_wh, ws, "5")
            user = f"user-{ws}"
            server.token(user)
            workspaces.add_member(pg_wh, Actor(local_user(), ws), ws, user)
            members[ws] = server.token(user)
        yield server, members
    finally:
        server.stop()


def wallet_of(server: ApiServer, token: str, ws: str) -> httpx.Response:
    return httpx.get(server.url + OPERATIONS["wallet_read"].path_for(ws, {}), timeout=ANSWER_S, trust_env=False,
                     verify=tls(), headers={"authorization": f"Bearer {token}"})


@pytest.mark.parametrize("holder", ["a", None], ids=["a Workspace's write", "a write of every Workspace"])
def test_a_read_answers_while_a_write_holds_its_locks(api: tuple[ApiServer, dict[str, str]], pg_wh: Warehouse,
                                                      holder: str | None) -> None:
    server, members = api
    with held(pg_wh, holder):
        for ws in ("a", "b"):  # the held Workspace's own Wallet too: a read takes no lock
            answer = wallet_of(server, members[ws], ws)
            assert answer.status_code == 200, answer.text
            assert answer.json()["state"]["workspace"] == ws


def test_a_read_answers_while_more_writes_than_the_pool_keeps_are_open(api: tuple[ApiServer, dict[str, str]],
                                                                       pg_wh: Warehouse) -> None:
    server, members = api
    extra = [f"w{i}" for i in range(postgres.IDLE_KEPT + 2)]
    for ws in extra:
        funded(pg_wh, ws, "1")
    with contextlib.ExitStack() as stack:
        for ws in extra:  # every one holds a write connection of this process's pool
            stack.enter_context(held(pg_wh, ws))
        answer = wallet_of(server, members["b"], "b")
        assert answer.status_code == 200, answer.text
    assert wallet.read(pg_wh, "b")[0].balance == 5


def test_the_pool_hands_a_connection_back_rolled_back_after_an_error(pg_wh: Warehouse) -> None:
    funded(pg_wh, "ws", "5")
    with pg_wh.read() as con:
        before = con.execute("select pg_backend_pid()").fetchone()[0]
    with pytest.raises(psycopg2.Error), pg_wh.write("ws") as con:
        con.execute("insert into ledger (created_at, workspace, kind, amount, entry_key) "
                    "values (now(), 'ws', 'credit', 1, 'half-done')")
        con.execute("select no_such_column from ledger")  # fails: the transaction is aborted
    with pytest.raises(RuntimeError), pg_wh.write("ws") as con:
        con.execute("insert into ledger (created_at, workspace, kind, amount, entry_key) "
                    "values (now(), 'ws', 'credit', 1, 'never')")
        raise RuntimeError("a bug after a statement")
    with pg_wh.write("ws") as con:  # the same connections, each in a transaction of its own
        assert con.execute("select count(*) from ledger where entry_key in ('half-done', 'never')").fetchone() == (0,)
    with pg_wh.read() as con:
        assert con.execute("select pg_backend_pid()").fetchone()[0] == before
    assert wallet.read(pg_wh, "ws")[0].balance == 5
    catalog = pg_wh._postgres
    assert catalog is not None
    for kind in ("read", "write"):
        for conn in catalog.pool(kind)._idle:
            assert conn.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_IDLE


def test_a_read_block_that_runs_no_statement_opens_no_transaction(pg_wh: Warehouse) -> None:
    with pg_wh.read():
        pass
    catalog = pg_wh._postgres
    assert catalog is not None
    assert all(c.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_IDLE
               for c in catalog.pool("read")._idle)


def test_no_connection_leaks_after_many_requests(api: tuple[ApiServer, dict[str, str]], pg_wh: Warehouse,
                                                 pg_url: str) -> None:
    server, members = api

    def ask(i: int) -> int:
        ws = "ab"[i % 2]
        return wallet_of(server, members[ws], ws).status_code

    with ThreadPoolExecutor(16) as pool:
        assert set(pool.map(ask, range(300))) == {200}
    catalog = pg_wh._postgres
    assert catalog is not None
    assert catalog.pool("read").idle <= postgres.IDLE_KEPT
    assert backends(pg_url) <= 2 * postgres.IDLE_KEPT  # what the two pools keep, nothing more
    opened = catalog.pool("read").opened
    for ws in ("a", "b") * 50:  # one at a time: one connection, handed back and taken again
        assert wallet_of(server, members[ws], ws).status_code == 200
    assert catalog.pool("read").opened == opened


def test_a_connection_the_server_ended_is_not_handed_out(pg_wh: Warehouse, pg_url: str) -> None:
    funded(pg_wh, "ws", "5")
    with psycopg2.connect(pg_url) as conn, conn.cursor() as cur:  # a restart, as the pool's idle connections see it
        # With a timeout the server returns only once each backend has ended (it is a signal otherwise, and
        # the backend's last word may not have reached the pool's socket when the test reads).
        cur.execute("select bool_and(pg_terminate_backend(pid, 10000)) from pg_stat_activity "
                    "where datname = current_database() and application_name = 'amber'")
        assert cur.fetchone() == (True,)
    assert wallet.read(pg_wh, "ws")[0].balance == 5
    with pg_wh.write("ws") as con:
        assert con.execute("select 1").fetchone() == (1,)


def test_a_forked_child_never_uses_its_parents_connections(pg_wh: Warehouse) -> None:
    with pg_wh.read() as con:
        parent = con.execute("select pg_backend_pid()").fetchone()[0]
    pid = os.fork()
    if pid == 0:  # the child: its own connection, and the parent's left alone
        code = 1
        try:
            with pg_wh.read() as con:
                code = 0 if con.execute("select pg_backend_pid()").fetchone()[0] != parent else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with pg_wh.read() as con:  # the parent's connection still answers, on its own session
        assert con.execute("select pg_backend_pid()").fetchone()[0] == parent


def test_two_workspaces_naming_one_new_cell_at_once_both_quote(pg_wh: Warehouse) -> None:
    """Writes of different Workspaces run at once, so two may both find a cell unnamed: the name space is locked
    (`locks.lock_names`), the second waits, sees the first's name and takes none of its own."""
    for ws in ("a", "b"):
        funded(pg_wh, ws, "1")
    cell = Cell("f" * 64, "direct", "0123456789ab", "replay-strong@0123456789ab")
    named, release = threading.Event(), threading.Event()

    def first() -> None:
        with pg_wh.write("a") as con:
            cell_names.assign(con, [cell], "bench@1")
            named.set()
            release.wait(30)

    thread = threading.Thread(target=first)
    thread.start()
    assert named.wait(ANSWER_S)
    failed: list[BaseException] = []
    second = threading.Thread(target=lambda: second_assign(pg_wh, cell, failed))
    second.start()
    second.join(0.5)
    assert second.is_alive()  # it waits for the first to commit
    release.set()
    thread.join(30)
    second.join(30)
    assert failed == []  # and then names nothing: without the lock, its insert broke the unique name and failed
    with pg_wh.read() as con:
        names = con.execute("select cell_key, name from cell_names").fetchall()
    assert names == [(cell.key, "bench@1/direct/replay-strong")]


def second_assign(wh: Warehouse, cell: Cell, failed: list[BaseException]) -> None:
    try:
        with wh.write("b") as con:
            cell_names.assign(con, [cell], "bench@1")
    except BaseException as e:  # noqa: BLE001 - said by the test, in its own thread
        failed.append(e)


def test_a_writes_inserts_go_with_its_next_statement_and_fail_it_as_their_own(pg_wh: Warehouse) -> None:
    funded(pg_wh, "ws", "5")
    insert = ("insert into ledger (created_at, workspace, kind, amount, entry_key) "
              "values (now(), 'ws', 'credit', ?, ?)")
    with pg_wh.write("ws") as con:  # inserts alone: sent with the COMMIT, and kept
        con.execute(insert, [1, "one"]).executemany(insert, [[1, "two"], [1, "three"]])
    with pytest.raises(psycopg2.errors.UniqueViolation), pg_wh.write("ws") as con:
        con.execute(insert, [1, "four"])
        con.execute(insert, [1, "one"])  # taken: the next statement says so
        con.execute("select 1").fetchone()
    assert wallet.read(pg_wh, "ws")[0].balance == 8  # the first three kept, none of the failed transaction's
