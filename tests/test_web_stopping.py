"""The web app's faces of a Job that stops once its comparison is decided, as a user reads them: the Job page says
whether it stopped early and after how many Tasks, each comparison's verdict with its anytime-valid interval for the
whole Benchmark Version, what stopping saved, and marks the cells that ran only some Tasks partial; the Jobs list
says "stopped early" in the Job's state; the New Job page's checkbox and margin reach the Job, and what the server
refuses is shown in its sentence. A Job without the flag shows none of it.

The Jobs are real (`stopping_data`: static Tasks, the Direct Agent and models of known skill on the provider double,
in this process), and every page is the app's own, read as the embedded default's local user."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from stopping_data import N_TASKS, run_job, stopping_request, yes_no_bench

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE, local_user
from amber_pipeline.errors import AmberError
from amber_pipeline.jobs import lifecycle, records
from amber_pipeline.jobs.decisions import JobDecision, PairInterval, Stopping
from amber_pipeline.jobs.records import Job
from amber_pipeline.jobs.request import JobRequest
from amber_pipeline.money import wallet
from amber_pipeline.paths import AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse
from web.render import usd
from web.webapp import create_web

WS = DEFAULT_WORKSPACE
LABEL = "yes-no@1"  # the Version the first Job makes of the yes-or-no Benchmark


@dataclass
class World:
    wh: Warehouse
    client: TestClient
    bench: Path
    stopped: Job  # sharp against shaky: stops early, sharp better
    close: Job  # sharp against its twin, 3 Trials per Task, margin 10: stops early, too close to matter


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("web-stopping")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AMBER_HOME", str(root / "amber"))
        env.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        wh = Warehouse(AmberPaths.from_env())
        with yes_no_bench(root, wh) as bench, TestClient(create_web(wh, local=True)) as client:
            stopped = run_job(wh, stopping_request(bench, ["sharp", "shaky"]))
            close = run_job(wh, stopping_request(bench, ["sharp", "sharp-twin"], trials=3, margin=10))
            yield World(wh, client, bench, stopped, close)


@dataclass
class RanThrough:
    plain: Job  # sharp against shaky without the flag: every Task run
    undecided: Job  # sharp against its twin with the flag and no margin: every Task run, never decided


@pytest.fixture(scope="module")
def ran_through(world: World) -> RanThrough:
    return RanThrough(plain=run_job(world.wh, stopping_request(world.bench, ["sharp", "shaky"], stop=False)),
                      undecided=run_job(world.wh, stopping_request(world.bench, ["sharp", "sharp-twin"])))


# ---- reading a page as a user does --------------------------------------------------------------------------------

def text_of(html: str) -> str:
    """The visible text, one space between words and none before punctuation (where an element ended)."""
    return re.sub(r" ([:;,.])", r"\1", " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split()))


def job_page(world: World, job: Job) -> str:
    answer = world.client.get(f"/w/{WS}/jobs/{job.id}")
    assert answer.status_code == 200, text_of(answer.text)[:500]
    return answer.text


def panel(html: str) -> str:
    """The Job page's "Stopping once decided" panel."""
    found = re.search(r'<section class="card stopping" data-live="stopping">(.*?)</section>', html, re.S)
    assert found, "no stopping panel"
    return found.group(1)


def stopping_of(world: World, job: Job) -> Stopping:
    """The Job's Stopping record as the API gives it (the page's own download of the results)."""
    results = world.client.get(f"/w/{WS}/jobs/{job.id}/report.json").json()
    assert results["stopping"] is not None
    return Stopping.model_validate(results["stopping"])


def cell_rows(html: str) -> dict[str, str]:
    """The Cells table: each row's first entry (the cell, with its badges) as HTML, by the cell's route."""
    table = re.search(r'<table class="grid sortable" data-live="cells">.*?<tbody>(.*?)</tbody>', html, re.S)
    assert table
    firsts = [re.search(r"<td>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)]
    return {text_of(f.group(1)).removesuffix(" partial"): f.group(1) for f in firsts if f}


def list_state(world: World, job: Job) -> str:
    """The Jobs list's State entry of the Job, as text."""
    html = world.client.get(f"/w/{WS}/jobs").text
    row = re.search(rf'<a href="/w/{WS}/jobs/{job.id}">.*?</td>\s*<td>(.*?)</td>', html, re.S)
    assert row, f"{job.id} not listed"
    return text_of(row.group(1))


def refusal_of(html: str) -> str:
    found = re.search(r'<p role="alert" class="refusal">(.*?)</p>', html, re.S)
    assert found, text_of(html)[:500]
    return text_of(found.group(1))


def csrf(world: World) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', world.client.get(f"/w/{WS}/new").text)
    assert found
    return found.group(1)


# ---- the Job page ---------------------------------------------------------------------------------------------------

def test_a_job_that_stopped_early_says_after_how_many_tasks_and_each_verdict_with_its_interval(world: World) -> None:
    stopping = stopping_of(world, world.stopped)
    d = stopping.decision
    assert stopping.stopped_early and d.tasks_seen < d.tasks_total == N_TASKS  # the Job did stop early
    shown = text_of(panel(job_page(world, world.stopped)))
    assert shown.startswith(f"Stopped early after {d.tasks_seen} of {N_TASKS} Tasks: every comparison is decided")
    [pair] = d.pairs
    assert (pair.a, pair.b, pair.verdict) == ("direct / sharp", "direct / shaky", "a_better")
    assert pair.sentence() in shown  # "direct / sharp is better than direct / shaky (+x to +y points)"
    assert f"[{pair.lower_points:+.1f}, {pair.upper_points:+.1f}] {pair.tasks_compared}" in shown
    assert (f"Each interval is for the difference in mean Reward over the whole Benchmark Version ({N_TASKS} "
            "Tasks), not only the Tasks run. They are anytime-valid 95% intervals for all the Job's comparisons "
            "together") in shown
    assert "No margin: a comparison is decided once its interval leaves 0 out." in shown


def test_what_stopping_saved_is_the_stopping_record(world: World) -> None:
    stopping = stopping_of(world, world.stopped)
    html = panel(job_page(world, world.stopped))

    def entry(name: str) -> str:
        found = re.search(rf'class="{name}"[^>]*>([^<]+)<', html)
        assert found, name
        return found.group(1)

    assert stopping.trials_saved > 0
    assert [int(entry(n)) for n in ("trials-run", "trials-planned", "trials-saved")] == [
        stopping.trials_run, stopping.trials_planned, stopping.trials_saved]
    for name, amount in (("charged", stopping.charged_usd), ("reserved", stopping.reserved_usd),
                         ("refunded", stopping.refunded_usd)):
        assert entry(name) == usd(amount), name
        exact = re.search(rf'class="{name}" title="\$([0-9.e-]+)"', html)
        assert exact and float(exact.group(1)) == amount, name  # the exact amount, a hover away
    # The refund is the Wallet's: what the Job reserved and did not spend went back.
    _, entries = wallet.read(world.wh, WS)
    refunds = [e.amount for e in entries if e.job_id == world.stopped.id and e.kind == "refund"]
    assert float(sum(refunds)) == pytest.approx(stopping.refunded_usd)
    assert f"{stopping.trials_run} of {stopping.trials_planned} planned run; {stopping.trials_saved} not run" in (
        text_of(html))


def test_cells_that_ran_only_some_tasks_are_marked_partial_and_why(world: World) -> None:
    report = world.client.get(f"/w/{WS}/jobs/{world.stopped.id}/report.json").json()["report"]
    html = job_page(world, world.stopped)
    rows = cell_rows(html)
    assert set(rows) == {c["route"] for c in report["cells"]} == {"direct/sharp", "direct/shaky"}
    for cell in report["cells"]:
        assert cell["partial"] is True and cell["n_tasks"] < N_TASKS
        badge = re.search(r'<span class="tag partial" title="([^"]+)">partial</span>', rows[cell["route"]])
        assert badge, cell["route"]
        assert f"its mean covers the {cell['n_tasks']} Tasks it scored, not the whole Version" in unescape(
            badge.group(1))
    assert "partial marks a cell below that ran only the Tasks before the stop" in text_of(panel(html))


def test_too_close_to_matter_is_said_with_its_margin(world: World) -> None:
    stopping = stopping_of(world, world.close)
    [pair] = stopping.decision.pairs
    assert pair.verdict == "too_close_to_matter" and stopping.decision.margin_points == 10
    html = panel(job_page(world, world.close))
    shown = text_of(html)
    assert pair.sentence() in shown and "are too close to matter" in shown
    assert "Margin 10 points: a difference within ±10 (the shaded band) is too close to matter." in shown
    assert '<span class="verdict close">' in html
    assert '<rect x="92.0" y="1" width="20.0"' in html  # the band drawn from -10 to +10 points


def test_a_job_without_the_flag_shows_no_panel_and_no_partial_cell(world: World, ran_through: RanThrough) -> None:
    html = job_page(world, ran_through.plain)
    assert world.client.get(f"/w/{WS}/jobs/{ran_through.plain.id}/report.json").json()["stopping"] is None
    for said in ("Stopping once decided", 'class="card stopping"', "partial", "Stopped early", "once decided",
                 "the decision above"):
        assert said not in html, said
    assert set(cell_rows(html)) == {"direct/sharp", "direct/shaky"}
    assert list_state(world, ran_through.plain) == "completed"


def test_a_flagged_job_that_ran_every_task_undecided_says_where_it_stands(world: World,
                                                                           ran_through: RanThrough) -> None:
    stopping = stopping_of(world, ran_through.undecided)
    assert not stopping.stopped_early and not stopping.decision.decided
    html = panel(job_page(world, ran_through.undecided))
    shown = text_of(html)
    assert shown.startswith(f"Not decided after {N_TASKS} of {N_TASKS} Tasks: every Task ran, and these "
                            "comparisons stayed undecided.")
    [pair] = stopping.decision.pairs
    assert pair.sentence() in shown and "is undecided" in shown
    assert f"{stopping.trials_planned} of {stopping.trials_planned} planned run; 0 not run" in shown
    assert "partial" not in job_page(world, ran_through.undecided)
    assert "what stopping saved" not in shown
    assert list_state(world, ran_through.undecided) == "completed stops once decided"


# ---- the Jobs list --------------------------------------------------------------------------------------------------

def test_the_jobs_list_says_a_job_stopped_early_and_after_how_many_tasks(world: World) -> None:
    for job in (world.stopped, world.close):
        d = stopping_of(world, job).decision
        assert list_state(world, job) == f"completed · stopped early ({d.tasks_seen} of {N_TASKS} Tasks)"


# ---- the New Job page -----------------------------------------------------------------------------------------------

ASK = {"benchmark": LABEL, "agent": "direct", "model_configurations": ["sharp", "shaky"], "trials_per_task": "1"}


def test_stop_once_decided_and_its_margin_reach_the_job_through_the_quote(world: World) -> None:
    token = csrf(world)
    form = world.client.get(f"/w/{WS}/new").text
    assert '<input type="checkbox" name="stop_when_decided">' in form
    assert 'name="margin_points" min="0" max="50"' in form
    asked = {**ASK, "stop_when_decided": "on", "margin_points": "5", "csrf": token}

    preview = world.client.post(f"/w/{WS}/new", data={**asked, "action": "preview"})
    assert preview.status_code == 200, text_of(preview.text)[:500]
    assert "This Job stops once every comparison is decided, with a margin of 5 points" in text_of(preview.text)
    assert '<input type="checkbox" name="stop_when_decided" checked>' in preview.text  # kept as filled
    confirm = re.search(r'<form method="post" action="/w/default/new" class="confirm">(.*?)</form>', preview.text,
                        re.S)
    assert confirm
    assert '<input type="hidden" name="stop_when_decided" value="on">' in confirm.group(1)
    assert '<input type="hidden" name="margin_points" value="5">' in confirm.group(1)
    shown = re.search(r'name="shown" value="([^"]+)"', confirm.group(1))
    assert shown

    confirmed = world.client.post(f"/w/{WS}/new", data={**asked, "action": "confirm", "shown": shown.group(1)},
                                  follow_redirects=False)
    assert confirmed.status_code == 303, text_of(confirmed.text)[:500]
    job = records.get_job(world.wh, confirmed.headers["location"].rsplit("/", 1)[1], WS)
    assert job.request is not None
    assert (job.request.stop_when_decided, job.request.margin_points) == (True, 5.0)
    assert job.request.order_seed is not None  # its Tasks' order, fixed when it was quoted

    # No daemon runs its cells here: it is running, and its page says where it stands so far.
    shown_panel = text_of(panel(job_page(world, job)))
    assert shown_panel.startswith(f"Not decided yet after 0 of {N_TASKS} Tasks: the Job runs its Tasks in a "
                                  "random order and stops once every comparison is decided")
    assert "Margin 5 points" in shown_panel and "planned run so far" in shown_panel
    assert list_state(world, job) == "running stops once decided"


def server_refusal(world: World, **fields: object) -> str:
    """The sentence the request's own check refuses it with, as the CLI and the API say it."""
    request = JobRequest.model_validate({**ASK, "trials_per_task": 1, **fields})
    with pytest.raises(AmberError) as refused:
        request.check(world.wh.paths, WS)
    return str(refused.value)


@pytest.mark.parametrize(("typed", "fields"), [
    ({"margin_points": "5"}, {"margin_points": 5.0}),  # a margin without the flag
    ({"stop_when_decided": "on", "model_configurations": ["sharp"]},
     {"stop_when_decided": True, "model_configurations": ["sharp"]}),  # nothing to compare
    ({"stop_when_decided": "on", "margin_points": "60"}, {"stop_when_decided": True, "margin_points": 60.0}),
])
def test_what_the_server_refuses_is_shown_in_its_sentence_on_the_filled_form(
        world: World, typed: dict[str, object], fields: dict[str, object]) -> None:
    jobs_before, ledger_before = records.list_jobs(world.wh, WS), wallet.read(world.wh, WS)
    for action in ("preview", "confirm"):
        answer = world.client.post(f"/w/{WS}/new", data={**ASK, **typed, "csrf": csrf(world), "action": action,
                                                         "shown": "x"})
        assert answer.status_code == 400
        assert refusal_of(answer.text) == server_refusal(world, **fields), action
        assert f'<option value="{LABEL}" selected>' in answer.text  # the form keeps what was filled in
        if "margin_points" in typed:
            assert f'value="{typed["margin_points"]}"' in answer.text
    assert records.list_jobs(world.wh, WS) == jobs_before and wallet.read(world.wh, WS) == ledger_before


@pytest.mark.parametrize("margin", ["five", "5e1", "-5", "0x10"])
def test_a_margin_that_is_not_a_plain_number_is_refused_as_typed(world: World, margin: str) -> None:
    answer = world.client.post(f"/w/{WS}/new", data={**ASK, "stop_when_decided": "on", "margin_points": margin,
                                                     "csrf": csrf(world), "action": "preview"})
    assert answer.status_code == 400
    assert refusal_of(answer.text) == (f'The margin must be a number of points from 0 to 50, like 5 or 2.5, not '
                                       f'"{margin}": type a plain number, or leave it empty for none.')


# ---- text a user controls stays text --------------------------------------------------------------------------------

MARKUP_A = 'direct / <script>alert("a")</script>'
MARKUP_B = "direct / <img src=x onerror=alert(1)>"


def test_labels_with_markup_in_a_decision_are_shown_as_text(world: World) -> None:
    """Model Configuration names cannot carry markup today, so a Job's recorded decision is written here as one whose
    labels would: the panel shows them as text wherever they appear."""
    _, job = lifecycle.submit(world.wh, WS, local_user(), stopping_request(world.bench, ["sharp", "shaky"]))
    decision = JobDecision(tasks_seen=3, tasks_total=N_TASKS, margin_points=0.0, pairs=[PairInterval(
        a=MARKUP_A, b=MARKUP_B, a_cell="a", b_cell="b", lower_points=5.0, upper_points=80.0, verdict="a_better",
        tasks_compared=3)])
    with world.wh.write(job=job.id) as con:
        con.execute("update jobs set stop = ? where id = ?", [decision.model_dump_json(), job.id])
    html = job_page(world, job)
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&#34;a&#34;)&lt;/script&gt;" in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert decision.pairs[0].sentence() in text_of(panel(html))
    assert list_state(world, job) == f"running · stopped early (3 of {N_TASKS} Tasks)"
