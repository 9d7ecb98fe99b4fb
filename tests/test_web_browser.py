"""Amber's web pages in a real browser, as a member reads them: `python -m server`'s app on loopback (hosted: sign-in
with an API token), driven through Selenium by Debian's headless Chromium.

One instance for the module, with real Jobs of static Tasks run by the Direct Agent in this process (a few seconds
each, no sandbox, no Docker): alice's Job in Workspace alpha over the static example Benchmark with the two replay
Model Configurations, her Job whose model answers with markup, and bob's Job in Workspace beta. Each page is opened
at 1280x800: what it says is checked against the operations' own numbers, it has no horizontal overflow and no
console error (a script the CSP blocked would be one), and its screenshot is saved under the folder printed at the
end of the run (`AMBER_WEB_SCREENSHOTS` picks another), named after the page. On a failure the screenshot, source
and console of the page are saved beside them, and their paths are in the message.

Chromium and chromedriver are named by path so Selenium Manager never looks for a browser or driver of its own;
scripts/setup.sh installs them (as root on Debian). Without them these tests skip.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import chromium
import httpx
import pytest
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver import Chrome
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait
from web_data import (
    STATIC_BENCH,
    ScriptedModel,
    Served,
    Synthetic,
    copy_tasks,
    finished_job,
    static_task,
    synthetic_job,
    two_members,
)

from amber_pipeline.cli.client import tls
from amber_pipeline.jobs import records
from amber_pipeline.jobs.records import Job
from amber_pipeline.money import wallet
from amber_pipeline.operations.areas import OPERATIONS
from amber_pipeline.warehouse.catalog import Warehouse

pytestmark = [pytest.mark.browser]

WIDTH, HEIGHT = 1280, 800
PAGE_BUDGET_S = 20
MARKUP = "<script>document.title = 'pwned'; window.amberPwned = 1;</script>"
MARKUP_TASK = "greet-the-page"
TRACED_STEPS = 12

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    wh: Warehouse
    url: str
    alice: str  # API tokens
    bob: str
    job: Job  # alice's, in alpha: replay-strong and replay-weak over the static example Benchmark
    markup_job: Job  # alice's, in alpha: a model that answers with a <script> element
    traced: Synthetic  # alice's, in alpha: made-up Trial rows, one Trial with a Harbor folder and a trajectory
    bobs_job: Job  # bob's, in beta


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("web")
    with two_members(root) as (wh, alice, bob):
        job = finished_job(wh, "alpha", "alice", copy_tasks(root / "static-bench"), ["replay-strong", "replay-weak"])
        markup_bench = root / "markup-bench"
        static_task(markup_bench, MARKUP_TASK, "Say hello to the page, in HTML.\n", "hello")
        static_task(markup_bench, "say-goodbye", "Say goodbye, plainly.\n", "goodbye")
        with ScriptedModel.serving(wh, "alpha", "markup-model", markup_bench,
                                   {MARKUP_TASK: [f"{MARKUP} hello"], "say-goodbye": ["goodbye"]}, root) as model:
            markup_job = finished_job(wh, "alpha", "alice", markup_bench, [model.name])
        traced = synthetic_job(wh, "alpha", "alice", root, cells=2, tasks=4, steps=TRACED_STEPS, said=MARKUP)
        bobs_job = finished_job(wh, "beta", "bob", copy_tasks(root / "bobs-bench", ["capital-city", "miles-to-km"]),
                                ["replay-strong"])
        for made in (job, markup_job, bobs_job):
            assert made.status == "completed", made
        with Served.running(wh.paths, local=False) as served:
            yield World(wh, served.url, alice, bob, job, markup_job, traced, bobs_job)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Path]:
    """Where the pages' screenshots go: printed at the end of the run."""
    given = os.environ.get("AMBER_WEB_SCREENSHOTS")
    folder = Path(given) if given else tmp_path_factory.mktemp("web-screenshots", numbered=False)
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # past the capture of the test's output: shown in every run
            reporter.write_line(f"\nweb page screenshots ({WIDTH}x{HEIGHT}): {folder}")


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chrome]:
    why = chromium.missing()
    if why:
        pytest.skip(why)
    made = chromium.chromium(tmp_path_factory.mktemp("chromium-profile"), WIDTH, HEIGHT, console=True)
    # The viewport itself 1280x800, whatever the window's frame takes
    made.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                         {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
    try:
        yield made
    finally:
        made.quit()


class Browser:
    """A browser at the server `base`; failures inside `evidence()` carry a screenshot, the page and its console."""

    def __init__(self, driver: Chrome, base: str, shots: Path) -> None:
        self.driver, self.base, self.shots = driver, base, shots

    def open(self, path: str, status: int | None = 200) -> None:
        """Open `path` and wait for it to load; its HTTP status must be `status` (None: any)."""
        self.driver.get_log("browser")  # what earlier pages logged is theirs
        self.driver.get(self.base + path)
        self.until("the page loaded", lambda d: d.execute_script("return document.readyState") == "complete")
        if status is not None:
            assert self.status() == status, (f"{path} answered {self.status()}, not {status} (a 500's traceback "
                                             "is in the captured log below)")

    def until(self, what: str, condition: Callable[[Chrome], T], budget: float = PAGE_BUDGET_S) -> T:
        try:
            return WebDriverWait(self.driver, budget, poll_frequency=0.1,
                                 ignored_exceptions=(StaleElementReferenceException,)).until(condition)
        except TimeoutException:
            raise AssertionError(f"no {what} within {budget} s at {self.driver.current_url}") from None

    @property
    def path(self) -> str:
        return self.driver.current_url.removeprefix(self.base)

    def status(self) -> int:
        """The HTTP status of the page now shown (Navigation Timing's)."""
        return int(self.driver.execute_script(
            "return performance.getEntriesByType('navigation')[0].responseStatus"))

    def text(self, css: str = "main") -> str:
        return str(self.driver.find_element(By.CSS_SELECTOR, css).text)

    def rows(self, css: str) -> list[list[str]]:
        """The cells' text of each row of the table(s) `css` names."""
        return self.driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'))"
            ".map(r => Array.from(r.children).map(c => c.innerText.trim()));", css)

    def console_errors(self) -> list[str]:
        """What the page logged as errors: not the status of the page itself (a 404 page is one), nor the browser's
        own request for /favicon.ico, which the app has not."""
        own = (f"{self.driver.current_url} - Failed to load resource", f"{self.base}/favicon.ico - ")
        return [e["message"] for e in self.driver.get_log("browser")
                if e["level"] == "SEVERE" and not e["message"].startswith(own)]

    def shoot(self, name: str) -> Path:
        """Save the page's screenshot as NAME.png, after checking it fits 1280 px and logged no error."""
        png = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(png))
        width = self.driver.execute_script("return document.documentElement.scrollWidth")
        assert width <= WIDTH, f"{name}: the page is {width} px wide, past {WIDTH} px (screenshot {png})"
        wrapped = self.driver.execute_script(
            "return Array.from(document.querySelectorAll('table.grid td.num, table.grid td.id')).filter(td => {"
            " const r = document.createRange(); r.selectNodeContents(td);"
            " return new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top))).size > 1;"
            "}).map(td => td.innerText);")
        assert not wrapped, f"{name}: numbers or ids wrap across lines: {wrapped[:5]} (screenshot {png})"
        errors = self.console_errors()
        assert not errors, f"{name}: the console has errors: {errors}"
        return png

    def evidence(self) -> AbstractContextManager[None]:
        return chromium.evidence(self.driver, self.shots, "failed")


def sign_in(browser: Browser, token: str, then: str) -> None:
    """Sign in at /signin with an API token, as a person pastes it; the browser lands on `then`."""
    browser.open(f"/signin?next={quote(then, safe='')}")
    browser.driver.find_element(By.NAME, "token").send_keys(token)
    browser.driver.find_element(By.CSS_SELECTOR, "form[action='/signin'] button[type=submit]").click()
    browser.until(f"{then} after signing in", lambda d: browser.path == then)


@pytest.fixture(scope="module")
def alice(driver: Chrome, world: World, shots: Path) -> Browser:
    """The browser, signed in as alice (member of alpha)."""
    browser = Browser(driver, world.url, shots)
    with browser.evidence():
        browser.open("/w/alpha/jobs", status=None)
        browser.until("the sign-in page", lambda d: browser.path.startswith("/signin"))
        browser.shoot("signin")
        sign_in(browser, world.alice, "/w/alpha/jobs")
    return browser


def api(world: World, token: str, operation: str, workspace: str, **fields: Any) -> Any:
    """An operation's answer through the API under /v1, as its JSON."""
    op = OPERATIONS[operation]
    with httpx.Client(verify=tls(), base_url=world.url, headers={"authorization": f"Bearer {token}"},
                      timeout=60) as http:
        answer = http.request(op.method, op.path_for(workspace, fields),
                              params={k: v for k, v in fields.items() if k not in op.path_fields})
    assert answer.status_code == 200, answer.text
    return answer.json()


def three(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def usd(value: Decimal) -> str:
    """An amount as the pages show it (web.render.usd)."""
    return f"${value:,.2f}" if value >= 1 or value == 0 else f"${value:,.4f}"


# ---------------------------------------------------------------------------------------------------- the pages

def test_the_jobs_page_lists_the_workspaces_jobs_and_only_those(alice: Browser, world: World) -> None:
    with alice.evidence():
        alice.open("/w/alpha/jobs")
        rows = alice.rows("table[data-live=jobs]")
        listed = {r[0].split()[0]: r for r in rows}
        assert set(listed) == {j.id for j in records.list_jobs(world.wh, "alpha")}, rows
        assert {world.job.id, world.markup_job.id, world.traced.job.id} <= set(listed), rows
        assert world.bobs_job.id not in alice.text("body")
        job_row = listed[world.job.id]
        assert job_row[1] == "completed" and job_row[2] == world.job.benchmark_label and job_row[3] == "2", job_row
        assert job_row[4].endswith("24/24"), job_row  # 12 Tasks x 2 cells, each Trial finished
        alice.shoot("jobs")
        # its link opens the Job's page
        alice.driver.find_element(By.LINK_TEXT, world.job.id).click()
        alice.until("the Job's page", lambda d: alice.path == f"/w/alpha/jobs/{world.job.id}")


def test_the_job_page_shows_each_cells_mean_reward_and_ci_as_job_results(alice: Browser, world: World) -> None:
    results = api(world, world.alice, "job_results", "alpha", job_id=world.job.id)
    cells = {c["route"]: c for c in results["report"]["cells"]}
    assert set(cells) == {"direct/replay-strong", "direct/replay-weak"}
    with alice.evidence():
        alice.open(f"/w/alpha/jobs/{world.job.id}")
        assert alice.text("h1") == f"Job {world.job.id}"
        shown = {r[0]: r for r in alice.rows("table[data-live=cells]")}
        assert set(shown) == set(cells), shown
        for route, cell in cells.items():
            row = shown[route]
            assert row[1] == "done" or row[1] in ("completed",), row
            assert row[2] == three(cell["mean_reward"]), (row, cell)
            low, high = cell["ci95"]
            assert row[3].endswith(f"[{three(low)}, {three(high)}]"), (row, cell)
            assert row[8] == str(cell["n_tasks"]) == "12" and row[9] == str(cell["n_trials"]), row
        # the examples' README: replay-strong solves 11 of the 12 Tasks, replay-weak 5
        assert shown["direct/replay-strong"][2] == "0.917" and shown["direct/replay-weak"][2] == "0.417"
        comparisons = alice.rows("table[data-live=comparisons]")
        [comparison] = results["report"]["comparisons"]
        assert len(comparisons) == 1 and comparisons[0][1] == three(comparison["mean_difference"]), comparisons
        summary = alice.text("section[data-live=summary]")
        assert "completed" in summary and "24 of 24 Trials" in summary, summary
        alice.shoot("job")


def test_the_compare_page_compares_two_cells_of_a_job(alice: Browser, world: World) -> None:
    with alice.evidence():
        alice.open("/w/alpha/compare")
        alice.shoot("compare-form")
        strong, weak = f"{world.job.id} direct/replay-strong", f"{world.job.id} direct/replay-weak"
        alice.open(f"/w/alpha/compare?baseline={quote(weak)}&candidate={quote(strong)}")
        [section] = alice.driver.find_elements(By.CSS_SELECTOR, "section.comparison")
        text = section.text
        assert f"{strong} against {weak}" in text, text
        assert "Paired cases\n12" in text or "Paired cases 12" in text, text
        assert re.search(r"baseline 41\.7%, candidate 91\.7%", text), text
        assert re.search(r"Improved \(\d+\)", text) and re.search(r"Regressed \(\d+\)", text), text
        alice.shoot("compare")


def test_the_wallet_page_shows_the_ledgers_balance(alice: Browser, world: World) -> None:
    with world.wh.read() as con:
        credits, charges = con.execute(
            "select coalesce(sum(amount) filter (where kind = 'credit'), 0), "
            "coalesce(sum(amount) filter (where kind = 'charge'), 0) from ledger where workspace = ?",
            ["alpha"]).fetchone()
    balance = Decimal(credits) - Decimal(charges)
    state = wallet.read(world.wh, "alpha")[0]
    assert state.balance == balance
    with alice.evidence():
        alice.open("/w/alpha/wallet")
        figure = alice.driver.find_element(By.CSS_SELECTOR, "[data-figure=balance]")
        assert figure.text == usd(balance), figure.text
        assert Decimal(str(figure.get_attribute("title")).removeprefix("$")) == balance
        entries = alice.rows("table.ledger")
        with world.wh.read() as con:
            n_entries = con.execute("select count(*) from ledger where workspace = ?", ["alpha"]).fetchone()[0]
        assert len(entries) == n_entries, entries
        assert world.bobs_job.id not in alice.text("body")
        alice.shoot("wallet")


# ---------------------------------------------------------------------------------------------------- not found

@pytest.mark.parametrize("page", ["job", "trial"])
def test_another_workspaces_job_or_trial_reads_as_a_made_up_one(alice: Browser, world: World, page: str) -> None:
    """alice opens bob's Job (and its Trial) by its id, in her Workspace and in bob's: each page is the 404 page a
    made-up id gets, word for word but for the id."""
    made_up = "job-0123456789"
    trial = "capital-city__1"  # a Trial of bob's Job (Trial names are Task names, not secrets)
    assert trial in {t["trial"] for row in api(world, world.bob, "job_tasks", "beta", job_id=world.bobs_job.id)["rows"]
                     for e in row["entries"] for t in e["attempts"]}
    suffix = "" if page == "job" else f"/trials/{trial}"
    seen = {}
    with alice.evidence():
        for name, job_id in (("bobs", world.bobs_job.id), ("made-up", made_up)):
            for workspace in ("alpha", "beta"):
                alice.open(f"/w/{workspace}/jobs/{job_id}{suffix}", status=404)
                seen[name, workspace] = (alice.text("body").replace(job_id, "ID"), alice.driver.title)
        alice.shoot(f"{page}-not-found")
    for workspace in ("alpha", "beta"):
        assert seen["bobs", workspace] == seen["made-up", workspace], seen
        assert world.bobs_job.id not in seen["bobs", workspace][0]
    assert "not found" in seen["bobs", "alpha"][1].lower(), seen


# ---------------------------------------------------------------------------------------------------- Trials

def trial_path(job_id: str, trial: str, cell_key: str) -> str:
    return f"/w/alpha/jobs/{job_id}/trials/{quote(trial, safe='')}?cell={quote(cell_key, safe='')}"


def test_the_trial_page_shows_the_trajectory_the_verifier_and_the_model_calls(alice: Browser, world: World) -> None:
    traced = world.traced
    detail = api(world, world.alice, "trial_detail", "alpha", job_id=traced.job.id, trial=traced.trial,
                 cell_key=traced.cell_key)
    assert len(detail["trajectory"]["steps"]) == TRACED_STEPS and len(detail["model_calls"]) == TRACED_STEPS
    with alice.evidence():
        alice.open(trial_path(traced.job.id, traced.trial, traced.cell_key))
        main = alice.text()
        assert f"Trial {traced.trial}" in alice.text("h1"), alice.text("h1")
        assert f"{TRACED_STEPS} steps by terminus-2 2.0.0, model model" in main, main
        assert len(alice.driver.find_elements(By.CSS_SELECTOR, ".step[id^=step-]")) == TRACED_STEPS
        assert f"Model calls ({TRACED_STEPS})" in main, main
        assert f"Rewards: reward = {three(detail['reward'])}" in main, main
        assert f"{TRACED_STEPS} passed" in main  # the Verifier's stdout
        assert alice.driver.find_elements(By.CSS_SELECTOR, "figure svg"), "no timing bar"
        alice.shoot("trial")
        # a static Trial: its model call, and the Verifier's sentence when it failed
        alice.open(f"/w/alpha/jobs/{world.job.id}/task/town-population?route=direct%2Freplay-strong")
        assert "/trials/town-population__1?cell=" in alice.path, alice.path
        main = alice.text()
        assert "Outcome\nfailed, Reward 0.000" in main, main
        assert "The answer's last number is 14,500, not 14580 (tolerance 0.5)." in main, main
        assert "Model calls (1)" in main and "No trajectory (a static Trial" in main, main
        alice.shoot("trial-static")


def test_model_output_with_markup_is_shown_as_text(alice: Browser, world: World) -> None:
    """A model's answer holding a <script> element, in a static Trial's model call and in a trajectory step: the
    page shows the text, and no script element is made from it (nor does it run)."""
    with alice.evidence():
        alice.open(f"/w/alpha/jobs/{world.markup_job.id}/trials/{MARKUP_TASK}__1")
        call = alice.driver.find_element(
            By.XPATH, "//div[@data-part][button[starts-with(normalize-space(), 'Call 0')]]")
        call.find_element(By.CSS_SELECTOR, "button.summary").click()
        response = call.find_elements(By.TAG_NAME, "pre")[-1]
        alice.until("the response's text", lambda d: MARKUP in response.text)
        alice.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", response)
        assert response.is_displayed()
        assert_no_script_from_data(alice)
        alice.shoot("trial-markup")
        # in the trajectory: its second step is open, its message ends with the markup
        traced = world.traced
        alice.open(trial_path(traced.job.id, traced.trial, traced.cell_key))
        step = alice.driver.find_element(By.ID, "step-2")
        assert "open" in (step.get_attribute("class") or "").split()
        assert step.find_element(By.TAG_NAME, "pre").text.endswith(MARKUP)
        assert_no_script_from_data(alice)


def at_path(browser: Browser, path: str) -> Callable[[Chrome], bool]:
    return lambda _: browser.path == path


def assert_no_script_from_data(browser: Browser) -> None:
    scripts = browser.driver.execute_script(
        "return Array.from(document.scripts).map(s => [s.getAttribute('src'), s.type, s.textContent.length]);")
    assert all(src == "/static/amber.js" or kind == "application/json" for src, kind, _ in scripts), scripts
    assert browser.driver.execute_script("return window.amberPwned === undefined && document.title !== 'pwned';")


def test_keys_move_between_trials(alice: Browser, world: World) -> None:
    """ArrowRight and ArrowLeft go to the next and previous Trial of the cell, ArrowDown to the same Task in the
    other cell: the URLs the Trial's neighbours name."""
    tasks = api(world, world.alice, "job_tasks", "alpha", job_id=world.job.id)
    strong = next(c["cell_key"] for c in tasks["columns"] if c["route"] == "direct/replay-strong")
    first = trial_path(world.job.id, "capital-city__1", strong)
    near = api(world, world.alice, "trial_detail", "alpha", job_id=world.job.id, trial="capital-city__1",
               cell_key=strong)["neighbours"]
    assert near["previous"] is None and near["next"] is not None and len(near["other_cells"]) == 1
    after = api(world, world.alice, "trial_detail", "alpha", job_id=world.job.id, trial=near["next"]["trial"],
                cell_key=strong)["neighbours"]
    with alice.evidence():
        alice.open(first)
        for key, ref in ((Keys.ARROW_RIGHT, near["next"]), (Keys.ARROW_RIGHT, after["next"]),
                         (Keys.ARROW_LEFT, near["next"]), (Keys.ARROW_LEFT, None), (Keys.ARROW_DOWN, None)):
            expected = (first if ref is None and key == Keys.ARROW_LEFT else
                        trial_path(world.job.id, "capital-city__1", near["other_cells"][0]["cell_key"])
                        if ref is None else trial_path(world.job.id, ref["trial"], ref["cell_key"]))
            before = alice.path
            ActionChains(alice.driver).send_keys(key).perform()
            alice.until(f"{expected} after the key {key!r} at {before}", at_path(alice, expected))
            alice.until("the page loaded", lambda d: d.execute_script("return document.readyState") == "complete")


# ---------------------------------------------------------------------------------------------------- a New Job

def test_a_new_job_reserves_nothing_until_confirmed_then_opens_its_page(alice: Browser, world: World) -> None:
    def ledger() -> list[tuple]:
        with world.wh.read() as con:
            return con.execute("select seq, kind, amount, job_id from ledger where workspace = ? order by seq",
                               ["alpha"]).fetchall()

    before, jobs_before = ledger(), {j.id for j in records.list_jobs(world.wh, "alpha")}
    with alice.evidence():
        alice.open("/w/alpha/new")
        alice.shoot("new-job")
        Select(alice.driver.find_element(By.NAME, "benchmark")).select_by_value(world.job.benchmark_label)
        alice.driver.find_element(By.CSS_SELECTOR, "input[name=agent][value=direct]").click()
        alice.driver.find_element(By.CSS_SELECTOR, "input[name=model_configurations][value=replay-strong]").click()
        alice.driver.find_element(By.CSS_SELECTOR, "button[value=preview]").click()
        quote_title = alice.until("the Quote", lambda d: d.find_element(By.CSS_SELECTOR, ".quote-preview h2"))
        shown = Decimal(str(alice.driver.find_element(By.CSS_SELECTOR, ".quote-preview strong[title]")
                            .get_attribute("title")).removeprefix("$"))
        assert quote_title.text.startswith(f"Quote for {world.job.benchmark_label}: "), quote_title.text
        [cell] = alice.rows(".quote-preview table.cells")
        assert cell[0] == "direct / replay-strong" and cell[1] == "12", cell
        assert ledger() == before and {j.id for j in records.list_jobs(world.wh, "alpha")} == jobs_before
        alice.shoot("new-job-quote")
        alice.driver.find_element(By.CSS_SELECTOR, "form.confirm button[value=confirm]").click()
        alice.until("the new Job's page", lambda d: re.fullmatch(r"/w/alpha/jobs/job-[0-9a-f]+", alice.path))
    job_id = alice.path.rsplit("/", 1)[1]
    assert job_id not in jobs_before
    added = ledger()[len(before):]
    assert [(kind, amount, job) for _, kind, amount, job in added] == [("reservation", shown, job_id)], added
    assert alice.text("h1") == f"Job {job_id}"


# ---------------------------------------------------------------------------------------------------- Benchmarks

def test_the_benchmark_pages_list_the_workspaces_versions_and_their_tasks(alice: Browser, world: World) -> None:
    listed = api(world, world.alice, "benchmark_list", "alpha")["versions"]
    with alice.evidence():
        alice.open("/w/alpha/benchmarks")
        rows = {r[0]: r for r in alice.rows("table.versions")}
        assert set(rows) == {v["label"] for v in listed}, rows
        assert world.job.benchmark_label in rows and world.bobs_job.benchmark_label not in alice.text("body")
        assert rows[world.job.benchmark_label][2] == "12", rows
        alice.shoot("benchmarks")
        alice.driver.find_element(By.LINK_TEXT, world.job.benchmark_label).click()
        alice.until("the Version's page", lambda d: alice.text("h1") ==
                    f"Benchmark Version {world.job.benchmark_label}")
        tasks = [r[0] for r in alice.rows("table.tasks")]
        assert tasks == sorted(p.name for p in STATIC_BENCH.iterdir() if (p / "task.toml").is_file()), tasks
        alice.shoot("benchmark-version")
        alice.driver.find_element(By.LINK_TEXT, "capital-city").click()
        alice.until("the Task's page", lambda d: alice.text("h1") == "Task capital-city")
        assert (STATIC_BENCH / "capital-city" / "instruction.md").read_text().splitlines()[0].lstrip("# ") in \
            alice.text()
        alice.shoot("benchmark-task")
