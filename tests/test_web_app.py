"""The web app's core without a browser: sign-in and sessions, form tokens, another Workspace's pages reading as
missing ones, downloads checked like pages, text from Trials escaped, and a page's reads sharing one catalog
connection. The browser tests (tests/test_web_browser.py) drive the pages themselves."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import cli, refusal
from starlette.testclient import TestClient
from web_data import copy_tasks, finished_job, two_members

from amber_pipeline.accounts import tokens
from amber_pipeline.accounts.identity import Actor
from amber_pipeline.operations.areas import OPERATIONS
from amber_pipeline.operations.operation import acting
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse import instances
from amber_pipeline.warehouse.catalog import Warehouse
from web.webapp import create_web


@dataclass
class World:
    wh: Warehouse
    alice: str
    bob: str
    job_id: str  # alice's, in alpha
    trial: str  # one of its Trials' page URL
    bobs_job_id: str


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("webapp")
    with two_members(root) as (wh, alice, bob):
        job = finished_job(wh, "alpha", "alice", copy_tasks(root / "bench", ["capital-city", "miles-to-km"]),
                           ["replay-strong", "replay-weak"])
        bobs = finished_job(wh, "beta", "bob", copy_tasks(root / "bobs", ["capital-city"]), ["replay-strong"])
        op = OPERATIONS["job_tasks"]
        matrix = op.run(acting(wh, Actor("alice", "alpha"), op), op.params(job_id=job.id))
        first = matrix.rows[0].entries[0].attempts[0]
        yield World(wh, alice, bob, job.id, f"/w/alpha/jobs/{job.id}/trials/{first.trial}?cell={first.cell_key}",
                    bobs.id)


def signed_in(world: World, secret: str) -> TestClient:
    client = TestClient(create_web(world.wh, local=False))
    answer = client.post("/signin", data={"token": secret, "next": "/w/alpha/jobs"}, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    return client


def test_a_page_asks_to_sign_in_and_a_token_opens_a_session_that_is_not_the_token(world: World) -> None:
    client = TestClient(create_web(world.wh, local=False))
    asked = client.get(f"/w/alpha/jobs/{world.job_id}", follow_redirects=False)
    assert asked.status_code == 303 and asked.headers["location"].startswith("/signin?next=")
    refused = client.post("/signin", data={"token": "amb_not-a-token", "next": "/"})
    assert refused.status_code == 401 and "valid API token" in refused.text
    answer = client.post("/signin", data={"token": world.alice, "next": f"/w/alpha/jobs/{world.job_id}"},
                         follow_redirects=False)
    assert answer.headers["location"] == f"/w/alpha/jobs/{world.job_id}"
    cookie = answer.headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert world.alice not in cookie  # the session names a server-side session, never the token
    assert client.get(f"/w/alpha/jobs/{world.job_id}").status_code == 200


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:x"])
def test_signing_in_never_sends_the_browser_to_another_site(world: World, target: str) -> None:
    client = TestClient(create_web(world.wh, local=False))
    answer = client.post("/signin", data={"token": world.alice, "next": target}, follow_redirects=False)
    assert answer.headers["location"] == "/"


def test_a_revoked_token_ends_its_session_and_signing_out_ends_it_too(world: World) -> None:
    made = tokens.create(world.wh, "alice")
    client = signed_in(world, made.secret)
    assert client.get("/w/alpha/jobs").status_code == 200
    tokens.revoke(world.wh, "alice", made.token.id)
    assert client.get("/w/alpha/jobs", follow_redirects=False).status_code == 303
    client = signed_in(world, world.alice)
    page = client.get("/w/alpha/jobs").text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert csrf
    client.post("/signout", data={"csrf": csrf.group(1)}, follow_redirects=False)
    assert client.get("/w/alpha/jobs", follow_redirects=False).status_code == 303


def test_a_form_without_its_sessions_token_is_refused_and_changes_nothing(world: World) -> None:
    client = signed_in(world, world.alice)
    before = client.get(f"/w/alpha/jobs/{world.job_id}").text
    for csrf in ("", "0" * 64):
        answer = client.post(f"/w/alpha/jobs/{world.job_id}/cancel", data={"csrf": csrf})
        assert answer.status_code == 403 and "did not come from this Amber" in answer.text
    other = signed_in(world, world.bob)  # bob's form token is not alice's
    bobs = re.search(r'name="csrf" value="([0-9a-f]+)"', other.get("/w/beta/jobs").text)
    assert bobs
    assert client.post(f"/w/alpha/jobs/{world.job_id}/cancel", data={"csrf": bobs.group(1)}).status_code == 403
    assert "state-completed" in before and "state-completed" in client.get(f"/w/alpha/jobs/{world.job_id}").text


def _sentence(html: str) -> str:
    found = re.search(r'<p role="alert" class="refusal">(.*?)</p>', html, re.S)
    assert found, html[:500]
    return found.group(1)


def test_another_workspaces_job_trial_and_downloads_read_as_missing_ones(world: World) -> None:
    bob = signed_in(world, world.bob)
    made_up = "job-0123456789"
    for mine, other in [
        (f"/w/beta/jobs/{world.bobs_job_id}", None),
        (f"/w/beta/jobs/{world.job_id}", f"/w/beta/jobs/{made_up}"),
        (f"/w/alpha/jobs/{world.job_id}", f"/w/alpha/jobs/{made_up}"),
        (world.trial.replace("/w/alpha/", "/w/beta/"), world.trial.replace("/w/alpha/", "/w/beta/")
         .replace(world.job_id, made_up)),
        (f"/w/beta/jobs/{world.job_id}/report.json", f"/w/beta/jobs/{made_up}/report.json"),
        (f"/w/beta/jobs/{world.job_id}/harbor.tar.gz", f"/w/beta/jobs/{made_up}/harbor.tar.gz"),
    ]:
        theirs = bob.get(mine)
        if other is None:
            assert theirs.status_code == 200
            continue
        missing = bob.get(other)
        assert theirs.status_code == missing.status_code == 404, mine
        assert _sentence(theirs.text).replace(world.job_id, made_up) == _sentence(missing.text)


def test_the_report_download_is_the_apis_results(world: World) -> None:
    alice = signed_in(world, world.alice)
    answer = alice.get(f"/w/alpha/jobs/{world.job_id}/report.json")
    op = OPERATIONS["job_results"]
    expected = op.wire(op.run(acting(world.wh, Actor("alice", "alpha"), op), op.params(job_id=world.job_id)))
    assert answer.status_code == 200 and json.loads(answer.text) == json.loads(json.dumps(expected))


def test_the_job_page_shows_the_reports_numbers_and_links_every_trial(world: World) -> None:
    alice = signed_in(world, world.alice)
    page = alice.get(f"/w/alpha/jobs/{world.job_id}").text
    op = OPERATIONS["job_results"]
    report = op.run(acting(world.wh, Actor("alice", "alpha"), op), op.params(job_id=world.job_id)).report
    for cell in report.cells:
        assert f"{cell.mean_reward:.3f}" in page and f"[{cell.ci95[0]:.3f}, {cell.ci95[1]:.3f}]" in page
    data = re.search(r'<script type="application/json" id="matrix-data">(.*?)</script>', page, re.S)
    assert data  # the Task matrix, which the page's script draws
    matrix = json.loads(data.group(1))
    entries = [(matrix["cells"][i], e) for _task, _differs, row in matrix["rows"] for i, e in enumerate(row)]
    assert len(entries) == 4 and all(e[1] is not None for _cell, e in entries)  # 2 Tasks x 2 cells, each a Trial
    for cell, (_mean, trial, _outcome, attempts, _missing) in entries:
        assert attempts == 1
        assert alice.get(f"/w/alpha/jobs/{world.job_id}/trials/{trial}", params={"cell": cell}).status_code == 200


def test_every_page_forbids_inline_script_and_other_sites(world: World) -> None:
    """The second guard behind escaping: a page's own scripts and styles come from the server alone, so markup that
    got through would not run. (tests/test_web_browser.py shows a model's `<script>` as text.)"""
    alice = signed_in(world, world.alice)
    answer = alice.get(world.trial)
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
    assert set(re.findall(r"<script[^>]*>", answer.text)) <= {'<script src="/static/amber.js" defer>',
                                                           '<script type="application/json" id="trial-parts">'}


def test_a_pages_reads_share_one_catalog_connection_and_it_may_not_write(world: World,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    opened = []
    real = instances.attached

    def counting(path, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(path)
        return real(path, **kwargs)

    monkeypatch.setattr(instances, "attached", counting)
    with world.wh.reading():
        for _ in range(5):
            with world.wh.read() as con:
                assert con.execute("select count(*) from jobs").fetchone()[0] >= 2
        with pytest.raises(RuntimeError, match="inside"), world.wh.write():
            pass
    assert len([o for o in opened if str(o).endswith(".duckdb")]) == 1


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "::"])
def test_amber_ui_which_signs_no_one_in_serves_this_machine_only(amber_home: Path, host: str) -> None:
    sentence = refusal(cli("ui", "--host", host, "--port", "3999"))
    assert f"not on {host}" in sentence and f"amber serve --host {host}" in sentence


def test_the_embedded_servers_pages_answer_this_machines_names_only(amber_home: Path) -> None:
    """A page of another site reaching 127.0.0.1 through a name of its own (DNS rebinding) gets nothing of
    `amber ui`, which signs no one in."""
    from server.__main__ import app

    client = TestClient(app(AmberPaths.from_env(), local=True))
    for host in ("127.0.0.1:3000", "localhost:3000", "[::1]:3000"):
        assert client.get("/w/default/jobs", headers={"host": host}).status_code == 200, host
    for host in ("evil.example:3000", "127.0.0.1.evil.example", ""):
        answer = client.get("/w/default/jobs", headers={"host": host})
        assert answer.status_code == 421 and "its own machine only" in answer.text, host
        assert client.get("/ui/", headers={"host": host}).status_code == 421


def test_one_sign_in_serves_the_web_app_and_for_staff_the_dagster_ui(world: World) -> None:
    """A session opened at /signin is the Dagster UI gate's too (no second sign-in for staff); for a user who is not
    staff the gate refuses, and the session stays theirs for the web app."""
    from starlette.datastructures import Headers

    from amber_pipeline.accounts import users
    from amber_pipeline.errors import Forbidden
    from server.dagster_ui import dagster_ui
    from web.sessions import COOKIE, Sessions

    shared = Sessions()
    ui = dagster_ui(world.wh.paths, world.wh, sessions=shared)
    web = TestClient(create_web(world.wh, local=False, sessions=shared))
    users.add(world.wh, "sam", "tests", roles=("staff",))
    web.post("/signin", data={"token": tokens.create(world.wh, "sam").secret, "next": "/"}, follow_redirects=False)
    assert ui._signed_in(Headers({}), web.cookies[COOKIE]).name == "sam"
    web.cookies.clear()
    web.post("/signin", data={"token": world.alice, "next": "/"}, follow_redirects=False)
    with pytest.raises(Forbidden):
        ui._signed_in(Headers({}), web.cookies[COOKIE])
    assert web.get("/w/alpha/jobs").status_code == 200
