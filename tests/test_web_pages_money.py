"""The web app's Benchmarks, Wallet and New Job pages, as a user sees them: the Wallet's figures are the ledger's
and its filters filter; Benchmark pages list Versions, Tasks and an upload's verdicts; a Task's Instruction is
text, never markup; the New Job page prices a Job per cell exactly as the Quote it then reserves, moves no money
before Confirm, and Confirm starts the Job with the Quote shown (`test_priced_once.py`: priced once); a form
without its token and a Workspace not one's own are refused."""

from __future__ import annotations

import re
import shutil
import tarfile
from collections.abc import Iterator
from decimal import Decimal
from html import unescape
from pathlib import Path

import pytest
from helpers import funded
from starlette.testclient import TestClient

from amber_pipeline.accounts import tokens, users, workspaces
from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, Actor, local_user
from amber_pipeline.benchmarks import registry, uploads
from amber_pipeline.jobs import lifecycle, quotes, records, validation
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money import wallet
from amber_pipeline.paths import PROJECT_ROOT
from amber_pipeline.warehouse.catalog import Warehouse
from web.pages import wallet as wallet_page
from web.render import usd
from web.webapp import create_web

STATIC = PROJECT_ROOT / "examples" / "static-bench"
WS = DEFAULT_WORKSPACE
ASK = {"benchmark": "static-bench@1", "agent": "direct", "model_configurations": ["replay-strong", "replay-weak"],
       "trials_per_task": "2"}


@pytest.fixture
def client(warehouse: Warehouse) -> Iterator[TestClient]:
    with TestClient(create_web(warehouse, local=True)) as made:
        yield made


@pytest.fixture
def bench(warehouse: Warehouse) -> str:
    return registry.register(warehouse, STATIC, registry.PUBLIC)[1]


def csrf(client: TestClient, workspace: str = WS) -> str:
    page = client.get(f"/w/{workspace}/new")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


def text_of(html: str) -> str:
    """The page's visible text, one space between words."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def rows(html: str, table_class: str) -> list[list[str]]:
    """The body rows of the table of that class, each cell's text."""
    table = re.search(rf'<table class="[^"]*\b{table_class}\b[^"]*">(.*?)</table>', html, re.S)
    assert table, f"no table {table_class}"
    body = table.group(1).split("<tbody>", 1)[1]
    return [[text_of(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]


def ledger(wh: Warehouse, workspace: str = WS) -> tuple[wallet.WalletState, list[wallet.Entry]]:
    return wallet.read(wh, workspace)


# ---- Wallet ----------------------------------------------------------------------------------------------------

def test_the_wallet_shows_the_ledgers_figures_and_filters_by_job_and_kind(warehouse: Warehouse, bench: str,
                                                                          client: TestClient,
                                                                          monkeypatch: pytest.MonkeyPatch):
    funded(warehouse, WS, "10")
    kept = lifecycle.quote(warehouse, WS, local_user(), JobRequest(**{**ASK, "trials_per_task": 1}))
    dropped = lifecycle.quote(warehouse, WS, local_user(), JobRequest(**{**ASK, "trials_per_task": 1}))
    lifecycle.cancel(warehouse, WS, dropped.job_id)  # a quoted Job cancelled: its reservation is refunded
    state, entries = ledger(warehouse)
    credits = sum((e.amount for e in entries if e.kind == "credit"), Decimal(0))
    charges = sum((e.amount for e in entries if e.kind == "charge"), Decimal(0))
    reservations = sum((e.amount for e in entries if e.kind == "reservation"), Decimal(0))
    refunds = sum((e.amount for e in entries if e.kind == "refund"), Decimal(0))
    assert state.balance == credits - charges and state.reserved == reservations - charges - refunds == kept.amount

    page = client.get(f"/w/{WS}/wallet")
    assert page.status_code == 200
    figures = {k: (Decimal(exact), shown)
               for k, exact, shown in re.findall(r'data-figure="(\w+)" title="\$([0-9.]+)">([^<]+)<', page.text)}
    assert figures == {"balance": (state.balance, usd(state.balance)),
                       "reserved": (state.reserved, usd(state.reserved)),
                       "available": (state.available, usd(state.available))}
    shown = rows(page.text, "ledger")
    assert [(int(r[0]), r[2], Decimal(r[3].lstrip("$"))) for r in shown] == [(e.seq, e.kind, e.amount)
                                                                             for e in reversed(entries)]

    only_dropped = rows(client.get(f"/w/{WS}/wallet", params={"job": dropped.job_id}).text, "ledger")
    assert [(r[2], r[4]) for r in only_dropped] == [("refund", dropped.job_id), ("reservation", dropped.job_id)]
    only_refunds = rows(client.get(f"/w/{WS}/wallet", params={"kind": "refund"}).text, "ledger")
    assert [r[2] for r in only_refunds] == ["refund"]
    both = client.get(f"/w/{WS}/wallet", params={"job": kept.job_id, "kind": "refund"})
    assert "No ledger entry matches this filter." in text_of(both.text)
    monkeypatch.setattr(wallet_page, "PAGE_ROWS", 2)  # a busy Wallet's ledger comes a page at a time, newest first
    paged = [rows(client.get(f"/w/{WS}/wallet", params={"page": str(n)}).text, "ledger") for n in (1, 2, 99)]
    assert [int(r[0]) for r in paged[0] + paged[1]] == [e.seq for e in reversed(entries)][:4]
    assert paged[2] == rows(client.get(f"/w/{WS}/wallet", params={"page": str(-(-len(entries) // 2))}).text,
                            "ledger")
    bad = client.get(f"/w/{WS}/wallet", params={"kind": "<b>gift</b>"})
    assert bad.status_code == 400 and "<b>gift</b>" not in bad.text
    assert 'is not a kind of ledger entry: pick credit, reservation, charge or refund.' in text_of(bad.text)


# ---- Benchmarks ------------------------------------------------------------------------------------------------

def test_benchmark_pages_list_versions_tasks_and_each_uploads_verdicts(warehouse: Warehouse, bench: str,
                                                                       client: TestClient, tmp_path: Path):
    funded(warehouse)
    root = tmp_path / "quiz"
    for name in ("capital-city", "invoice-total"):
        shutil.copytree(STATIC / name, root / name)
    (root / "capital-city" / "solution" / "answer.txt").write_text("Sydney\n")
    archive = tmp_path / "quiz.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname=root.name)
    made = uploads.create(warehouse, WS, local_user(), archive, "quiz")
    validation.start(warehouse, WS, local_user(), made.id)

    listing = client.get(f"/w/{WS}/benchmarks")
    assert listing.status_code == 200
    versions = rows(listing.text, "versions")
    assert [(r[0], r[2], r[3]) for r in versions] == [(bench, "12", "public")]
    assert [(r[0], r[1]) for r in rows(listing.text, "uploads")] == [(made.id, "quiz")]

    version = client.get(f"/w/{WS}/benchmarks/{bench}")
    assert [r[0] for r in rows(version.text, "tasks")] == sorted(p.name for p in STATIC.iterdir() if p.is_dir())

    upload = client.get(f"/w/{WS}/benchmarks/{made.id}")
    verdicts = rows(upload.text, "verdicts")
    assert [(r[0], r[1]) for r in verdicts] == [("capital-city", "failed"), ("invoice-total", "passed")]
    assert verdicts[0][2] == ("Its reference answer (solution/answer.txt) fails its own checks: The answer does not "
                              'contain "Canberra".')
    assert f'href="/w/{WS}/benchmarks/{made.id}/tasks/invoice-total"' in upload.text

    task = client.get(f"/w/{WS}/benchmarks/{bench}/tasks/capital-city")
    assert task.status_code == 200
    assert "What is the capital city of Australia?" in text_of(task.text)
    assert [r[0] for r in rows(task.text, "files")] == ["instruction.md", "solution/answer.txt", "task.toml"]
    assert "[metadata.amber.static]" in unescape(task.text)  # a small text file's text
    staged = client.get(f"/w/{WS}/benchmarks/{made.id}/tasks/capital-city")
    assert "Sydney" in text_of(staged.text)
    missing = client.get(f"/w/{WS}/benchmarks/{bench}/tasks/no-such-task")
    assert missing.status_code == 404 and f"No Task no-such-task in {bench}" in text_of(missing.text)
    assert client.get(f"/w/{WS}/benchmarks/nothing-here@1").status_code == 404


def test_a_tasks_instruction_and_files_show_as_text_never_markup(warehouse: Warehouse, client: TestClient,
                                                                 tmp_path: Path):
    folder = tmp_path / "tricky"
    shutil.copytree(STATIC / "capital-city", folder / "capital-city")
    attack = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    (folder / "capital-city" / "instruction.md").write_text(f"Answer this. {attack}\n")
    (folder / "capital-city" / "notes.txt").write_text(f"{attack}\n")
    (folder / "capital-city" / "blob.bin").write_bytes(b"\0\1\2" * 10)
    _, label = registry.register(warehouse, folder, WS, name="tricky")

    page = client.get(f"/w/{WS}/benchmarks/{label}/tasks/capital-city")
    assert page.status_code == 200
    assert "<script>alert" not in page.text and "<img src=x" not in page.text
    # The Instruction, and the texts of instruction.md and notes.txt.
    assert page.text.count("&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;") == 3
    assert "script-src 'self'" in page.headers["content-security-policy"]
    files = {r[0]: r for r in rows(page.text, "files")}
    assert files["blob.bin"][1] == "30"  # listed, without its text
    assert "<tr><td>blob.bin</td>" in page.text and 'href="#file-' in page.text


# ---- New Job ---------------------------------------------------------------------------------------------------

def test_the_preview_prices_each_cell_as_the_quote_reserves_and_moves_no_money_before_confirm(
        warehouse: Warehouse, bench: str, client: TestClient):
    funded(warehouse, WS, "10")
    csrf_token = csrf(client)
    form = client.get(f"/w/{WS}/new")
    assert form.status_code == 200 and bench in form.text and "replay-strong" in form.text
    before = ledger(warehouse)

    preview = client.post(f"/w/{WS}/new", data={**ASK, "csrf": csrf_token, "action": "preview"})
    assert preview.status_code == 200, text_of(preview.text)
    assert ledger(warehouse) == before  # nothing reserved, no entry
    with warehouse.read() as con:
        assert con.execute("select count(*) from quotes").fetchone() == (0,)
        assert con.execute("select count(*) from jobs").fetchone() == (0,)
    cells = rows(preview.text, "cells")
    shown = {label: Decimal(exact) for label, exact in re.findall(  # each cell's exact total
        r'<tr data-cell="[^"]+">\s*<td>([^<]+)</td>.*?<td class="num cell-total" title="\$([0-9.]+)"', preview.text,
        re.S)}
    assert set(shown) == {"direct / replay-strong", "direct / replay-weak"} and len(cells) == 2
    assert all("prior for direct (12 Tasks)" in c[5] for c in cells)  # each estimate's source
    assert "With 12 Tasks this Job detects a change of about 48 points or more" in text_of(preview.text)
    found = re.search(r'Confirming reserves <strong title="\$([0-9.]+)"', preview.text)
    token = re.search(r'name="shown" value="([^"]+)"', preview.text)
    assert found is not None and token is not None
    at_most = found.group(1)
    assert Decimal(at_most) == sum(shown.values())
    # The form keeps what was filled in.
    assert f'<option value="{bench}" selected>' in preview.text
    assert re.search(r'value="replay-weak" id="mc-\d+" checked', preview.text)
    assert 'name="trials_per_task" min="1" max="10" value="2"' in preview.text

    confirmed = client.post(f"/w/{WS}/new", data={**ASK, "csrf": csrf_token, "action": "confirm",
                                                  "shown": token.group(1)}, follow_redirects=False)
    assert confirmed.status_code == 303, text_of(confirmed.text)
    job_id = confirmed.headers["location"].rsplit("/", 1)[1]
    assert confirmed.headers["location"] == f"/w/{WS}/jobs/{job_id}"
    job = records.get_job(warehouse, job_id, WS)
    assert job.status == "running"
    made = quotes.get(warehouse, WS, job_id)
    assert {c.label: Decimal(c.total) for c in made.cells} == shown
    after, entries = ledger(warehouse)
    assert [(e.kind, e.amount, e.job_id) for e in entries[len(before[1]):]] == [("reservation", made.amount, job_id)]
    assert after.available == before[0].available - Decimal(at_most)


def test_refusals_show_their_sentence_on_the_filled_form_and_change_nothing(warehouse: Warehouse, bench: str,
                                                                            client: TestClient):
    workspaces.create(warehouse, Actor(local_user(), None), "empty")
    token = csrf(client, "empty")
    before = ledger(warehouse, "empty")

    preview = client.post("/w/empty/new", data={**ASK, "csrf": token, "action": "preview"})
    assert preview.status_code == 200
    assert re.search(r"Workspace empty has \$0.00 available but this Quote needs \$[0-9.]+: \$[0-9.]+ is missing; "
                     r"ask Amber staff for a Credit\.", text_of(preview.text))
    assert 'value="confirm"' not in preview.text  # nothing to confirm
    confirmed = client.post("/w/empty/new", data={**ASK, "csrf": token, "action": "confirm", "at_most": "1"})
    assert confirmed.status_code == 400  # an amount alone is not a Quote seen
    assert "Confirm a Quote you have seen: press See the Quote first." in text_of(confirmed.text)
    assert f'<option value="{bench}" selected>' in confirmed.text  # kept filled

    unknown = client.post("/w/empty/new", data={**ASK, "model_configurations": ["no-such-model"], "csrf": token,
                                                "action": "preview"})
    assert unknown.status_code == 400 and "no-such-model" in text_of(unknown.text)
    assert 'role="alert" class="refusal"' in unknown.text
    trials = client.post("/w/empty/new", data={**ASK, "trials_per_task": "11", "csrf": token, "action": "preview"})
    assert "Trials per Task must be from 1 to 10, not 11: pick a number in that range." in text_of(trials.text)
    unseen = client.post("/w/empty/new", data={**ASK, "csrf": token, "action": "confirm"})
    assert "Confirm a Quote you have seen" in text_of(unseen.text)
    assert ledger(warehouse, "empty") == before
    with warehouse.read() as con:
        assert con.execute("select count(*) from jobs").fetchone() == (0,)


def test_a_confirm_the_wallet_no_longer_covers_is_refused(warehouse: Warehouse, bench: str, client: TestClient):
    """The Quote shown is reserved as shown, not priced again, but the Wallet is asked again at Confirm."""
    funded(warehouse, WS, "10")
    token = csrf(client)
    preview = client.post(f"/w/{WS}/new", data={**ASK, "csrf": token, "action": "preview"})
    shown = re.search(r'name="shown" value="([^"]+)"', preview.text)
    assert shown is not None
    lifecycle.quote(warehouse, WS, local_user(), JobRequest(**{**ASK, "trials_per_task": 1}, ceiling_usd=10.0))
    before = ledger(warehouse)
    refused = client.post(f"/w/{WS}/new", data={**ASK, "csrf": token, "action": "confirm", "shown": shown.group(1)})
    assert refused.status_code == 400
    assert re.search(r"Workspace default has \$0\.00 available but this Quote needs \$[0-9.]+: \$[0-9.]+ is "
                     r"missing; ask Amber staff for a Credit\.", text_of(refused.text))
    assert 'value="direct" checked' in refused.text  # the form kept filled
    assert ledger(warehouse) == before


def test_a_post_without_the_form_token_is_refused_with_403(warehouse: Warehouse, bench: str, client: TestClient):
    funded(warehouse, WS, "10")
    before = ledger(warehouse)
    for data in ({**ASK, "action": "confirm", "at_most": "10"}, {**ASK, "csrf": "forged", "action": "confirm",
                                                                  "at_most": "10"}):
        answer = client.post(f"/w/{WS}/new", data=data)
        assert answer.status_code == 403
        assert "That form did not come from this Amber's own page" in text_of(answer.text)
    assert ledger(warehouse) == before


# ---- hosted: a Workspace not one's own --------------------------------------------------------------------------

def test_hosted_a_non_member_gets_404_on_another_workspaces_pages(warehouse: Warehouse, bench: str):
    for name in ("alice", "bob"):
        users.add(warehouse, name, "tests")
    workspaces.create(warehouse, Actor("alice", None), "alpha")
    workspaces.create(warehouse, Actor("bob", None), "beta")
    wallet.add_credit(warehouse, Actor(local_user(), None), "alpha", "10", "test credit")
    with TestClient(create_web(warehouse, local=False)) as bob:
        assert bob.get("/w/alpha/wallet", follow_redirects=False).status_code == 303  # not signed in yet
        signed = bob.post("/signin", data={"token": tokens.create(warehouse, "bob").secret}, follow_redirects=False)
        assert signed.status_code == 303
        token = csrf(bob, "beta")
        pages = ["wallet", "benchmarks", f"benchmarks/{bench}", f"benchmarks/{bench}/tasks/capital-city", "new"]
        for page in pages:
            theirs, nowhere = bob.get(f"/w/alpha/{page}"), bob.get(f"/w/nowhere/{page}")
            assert theirs.status_code == nowhere.status_code == 404, page
            assert text_of(theirs.text).replace("alpha", "X") == text_of(nowhere.text).replace("nowhere", "X")
            assert bob.get(f"/w/beta/{page}").status_code == 200, page
        before = ledger(warehouse, "alpha")
        posted = bob.post("/w/alpha/new", data={**ASK, "csrf": token, "action": "confirm", "at_most": "10"})
        assert posted.status_code == 404 and ledger(warehouse, "alpha") == before
