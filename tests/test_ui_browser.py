"""The Dagster UI in a real browser: quote a Job from submit_job's launchpad, start it from start_quote's with the
Quote's id the run showed, then read its cells' scores.

The UI that tests/test_dagster_ui.py's fixture starts on a temporary AMBER_HOME, as `amber ui` does, driven
through Selenium by Debian's headless Chromium and chromedriver, named by path so Selenium Manager never looks
for a browser or driver of its own. scripts/setup.sh installs them (as root on Debian); without them this test
skips. On a failure the screenshot, source and console of the page are saved in tmp_path, and their paths are
in the message.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import chromium
import pytest
import yaml
from helpers import funded
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait
from test_dagster_ui import RUN_STATUS, RUNS_OF_JOB, Dagster, dagster_dev  # noqa: F401 - the fixture

from amber_pipeline.accounts.identity import DEFAULT_WORKSPACE
from amber_pipeline.jobs import records
from amber_pipeline.money import wallet
from amber_pipeline.money.prices import show
from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

pytestmark = [pytest.mark.dagster_ui, pytest.mark.docker, pytest.mark.browser]

STARTUP_BUDGET_S = 90  # amber ui up and the amber code location loaded
PAGE_BUDGET_S = 30  # one page of the UI rendering what it is asked for
FIRST_PAGE_BUDGET_S = 60  # the first, which also loads and compiles the UI's scripts on a busy machine
CELLS_BUDGET_S = 240  # the Job's cell runs starting and all of them finishing
TERMINAL = ("SUCCESS", "FAILURE", "CANCELED")
# A 95% CI as the UI shows it, "[0.000, 1.000]" (a narrow column may wrap it after the comma)
CI = re.compile(r"\[\s*-?\d+\.\d{3}\s*,\s*-?\d+\.\d{3}\s*\]")
DOLLARS = r"\$\d[\d,]*\.\d+"  # an amount as the UI shows it (money/prices.show)
# The submit_job run's log: the Quote's next step, with what confirming it reserves and its id
SHOWN = re.compile(rf"to reserve ({DOLLARS}) from {DEFAULT_WORKSPACE}'s Wallet and start the Job, launch start_quote "
                   r"with quote_id (job-[0-9a-f]+)")
# The start_quote run's log: what it reserved, for which Job
RESERVED = re.compile(rf"reserved ({DOLLARS}) for (job-[0-9a-f]+)")
LOCATION = """{ workspaceOrError { ... on Workspace { locationEntries {
  name loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }"""
STEP_FAILURES = """
query($runId: ID!) { logsForRun(runId: $runId) { ... on EventConnection { events {
  ... on ExecutionStepFailureEvent { stepKey error { message causes { message } } } } } } }"""
# The text of each table row with no table inside it: the rows of the metadata tables in the page.
INNER_ROWS_JS = ("return Array.from(document.querySelectorAll('tr'))"
                 ".filter(r => !r.querySelector('tr')).map(r => r.innerText);")
# The launchpad's config editor is CodeMirror 5, whose element carries the editor object
GET_CONFIG_JS = ("const e = document.querySelector('.CodeMirror');"
                 "return e && e.CodeMirror ? e.CodeMirror.getValue() : '';")
SET_CONFIG_JS = "document.querySelector('.CodeMirror').CodeMirror.setValue(arguments[0]);"
EDITOR_JS = "const e = document.querySelector('.CodeMirror'); return !!(e && e.CodeMirror);"

T = TypeVar("T")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    why = chromium.missing()
    if why:
        pytest.skip(why)
    driver = chromium.chromium(tmp_path / "chromium-profile", 1600, 1000, console=True)
    try:
        yield driver
    finally:
        driver.quit()


class UI:
    """The Dagster UI at `base` in `driver`; any failure inside `evidence()` carries a screenshot and the page."""

    def __init__(self, driver: WebDriver, base: str, out: Path):
        self.driver, self.base, self.out = driver, base, out

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def visit(self, path: str, what: str, condition: Callable[[WebDriver], T], budget: float = PAGE_BUDGET_S) -> T:
        """Open `path` and wait for `condition`. Chromium fails a page's requests with ERR_NETWORK_CHANGED when a
        network interface comes or goes on the host, as Docker's do for the sandboxes of tests running beside this
        one (the launchpad then leaves for the job's page): such a page is opened once more."""
        self.open(path)
        try:
            return self.until(what, condition, budget)
        except AssertionError:
            if not any("ERR_NETWORK_CHANGED" in e["message"] for e in self.driver.get_log("browser")):
                raise
        self.open(path)
        return self.until(what, condition, budget)

    def until(self, what: str, condition: Callable[[WebDriver], T], budget: float = PAGE_BUDGET_S) -> T:
        try:
            return WebDriverWait(self.driver, budget, poll_frequency=0.25,
                                 ignored_exceptions=(StaleElementReferenceException,)).until(condition)
        except TimeoutException:
            raise AssertionError(f"no {what} within {budget} s at {self.driver.current_url}") from None

    def rows(self) -> list[str]:
        return self.driver.execute_script(INNER_ROWS_JS)

    def button(self, label: str) -> Any:
        """The enabled button labelled `label`, or None."""
        for b in self.driver.find_elements(By.XPATH, f"//button[normalize-space()='{label}']"):
            if b.is_displayed() and b.is_enabled() and b.get_attribute("disabled") is None:
                return b
        return None

    def evidence(self) -> AbstractContextManager[None]:
        return chromium.evidence(self.driver, self.out, "ui")


@pytest.mark.slow
def test_launch_a_job_from_the_launchpad_and_read_its_cells_ci(
        browser: WebDriver, dagster_dev: Dagster, tmp_path: Path) -> None:  # noqa: F811 - the imported fixture
    started = time.monotonic()
    client = dagster_dev.client
    dagster_dev.wait("/server_info 200", STARTUP_BUDGET_S, lambda: client.get("/server_info").status_code == 200)

    def amber_loaded() -> bool:
        [entry] = [e for e in dagster_dev.graphql(LOCATION)["workspaceOrError"]["locationEntries"]
                   if e["name"] == "amber"] or [None]
        if entry is None or entry["loadStatus"] != "LOADED":
            return False
        loaded = entry["locationOrLoadError"]
        assert loaded["__typename"] != "PythonError", f"the amber code location failed to load: {loaded['message']}"
        return True

    dagster_dev.wait("LOADED code location", STARTUP_BUDGET_S - (time.monotonic() - started), amber_loaded)
    wh = Warehouse(AmberPaths.from_env())
    funded(wh)  # the Job's Quote is reserved from this Wallet
    bench = tmp_path / "ui-bench"
    shutil.copytree(PROJECT_ROOT / "examples" / "demo-bench" / "fix-off-by-one", bench / "fix-off-by-one")
    ui = UI(browser, str(client.base_url).rstrip("/"), tmp_path)

    with ui.evidence():
        # ---- submit_job's launchpad: the demo request it opens with becomes ours, then Launch Run
        default = ui.visit("/locations/amber/jobs/submit_job/playground",
                           "the launchpad's editor with the default request",
                           lambda d: "benchmark:" in (text := d.execute_script(GET_CONFIG_JS)) and text,
                           FIRST_PAGE_BUDGET_S)
        quote_run = launch(ui, smaller_request(default, bench))

        # ---- the submit_job run's page: its log shows the Quote's id and what confirming it reserves
        shown_amount, job_id = ui.until("the Quote's next step in the run's log", lambda d: (m := SHOWN.search(
            d.find_element(By.TAG_NAME, "body").text)) and m.groups())
    assert run_status(dagster_dev, "submit_job", quote_run) == "SUCCESS"
    assert records.list_jobs(wh, DEFAULT_WORKSPACE) == []  # shown, nothing reserved or started

    with ui.evidence():
        # ---- start_quote's launchpad: the id the Quote showed, then Launch Run
        ui.visit("/locations/amber/jobs/start_quote/playground", "the launchpad's editor",
                 lambda d: d.execute_script(EDITOR_JS))
        start_run = launch(ui, yaml.safe_dump({"ops": {"confirm_quote": {"config": {"quote_id": job_id}}}}))
        assert start_run != quote_run

        # ---- the start_quote run's page: its log names the Job and what it reserved
        reserved_amount, started_id = ui.until("'reserved $… for job-…' in the run's log", lambda d: (
            m := RESERVED.search(d.find_element(By.TAG_NAME, "body").text)) and m.groups())
    assert run_status(dagster_dev, "start_quote", start_run) == "SUCCESS"
    [job] = records.list_jobs(wh, DEFAULT_WORKSPACE)
    assert (job.id, job.benchmark_label) == (job_id, "ui-bench@1") and started_id == job_id
    with wh.read() as con:
        reserved, _, _ = wallet.quote_totals(con, job.quote_id)
    assert shown_amount == reserved_amount == show(reserved)  # the Quote shown is what was reserved
    agents = {c.cell_key: c.agent for c in records.cells_of(wh, job_id)}
    assert sorted(agents.values()) == ["nop", "oracle"]

    # ---- the Job's cell runs, one per cell, each to its end
    def cell_runs_done() -> list[dict[str, Any]] | None:
        runs = [r for r in dagster_dev.graphql(RUNS_OF_JOB, {"job": job_id})["runsOrError"]["results"]
                if r["jobName"] == "cell_job"]
        return runs if len(runs) == len(agents) and all(r["status"] in TERMINAL for r in runs) else None

    runs = dagster_dev.wait(f"{len(agents)} finished cell runs of {job_id}", CELLS_BUDGET_S, cell_runs_done)
    failed = {r["runId"]: step_failures(dagster_dev, r["runId"]) for r in runs if r["status"] != "SUCCESS"}
    assert not failed, f"cell runs of {job_id} did not succeed: {failed}"
    # a cell's partition is its name, for people; its key is the tag amber/cell
    partitions = {}
    for r in runs:
        tags = {t["key"]: t["value"] for t in r["tags"]}
        partitions[tags["dagster/partition"]] = agents[tags["amber/cell"]]
    assert sorted(partitions) == ["ui-bench@1/nop", "ui-bench@1/oracle"]

    with ui.evidence():
        # ---- cell_aggregates: each cell's latest materialization shows the cell with its 95% CI
        for partition, agent in sorted(partitions.items()):
            ui.open(f"/assets/cell_aggregates?view=partitions&partition={quote(partition, safe='')}")
            cell_row(ui, agent)
        # The asset's overview shows the latest materialization of all: the cell that finished last.
        ui.visit("/assets/cell_aggregates", "the latest materialization's cell with its 95% CI on the overview",
                 lambda d: any(_row_naming(ui.rows(), agent) for agent in agents.values()))


def launch(ui: UI, run_config: str) -> str:
    """Put `run_config` in the launchpad's editor and click Launch Run; the id of the run whose page opens."""
    # The editor is CodeMirror 5: set its text through its own API, which fires the change the launchpad
    # listens to (typing into it would fight its auto-indent and autocompletion).
    ui.driver.execute_script(SET_CONFIG_JS, run_config)
    ui.until("our request in the editor", lambda d: d.execute_script(GET_CONFIG_JS) == run_config)
    ui.until("a config without errors", lambda d: "No errors" in d.find_element(By.TAG_NAME, "body").text)
    ui.until("an enabled Launch Run button", lambda d: ui.button("Launch Run")).click()
    return ui.until("the launched run's page", lambda d: (m := re.search(r"/runs/([0-9a-f-]{36})",
                                                                          d.current_url)) and m.group(1))


def run_status(dagster: Dagster, what: str, run_id: str) -> str:
    """The run's status once it has ended."""
    def done() -> str | None:
        status = dagster.graphql(RUN_STATUS, {"runId": run_id})["runOrError"]["status"]
        return status if status in TERMINAL else None
    return str(dagster.wait(f"{what} run end", PAGE_BUDGET_S, done))


def step_failures(dagster: Dagster, run_id: str) -> list[str]:
    """What made a run's steps fail: each failed step's error with its causes."""
    events = dagster.graphql(STEP_FAILURES, {"runId": run_id})["logsForRun"].get("events", [])
    return [f"{e['stepKey']}: " + " <- ".join(m["message"].strip()[:400] for m in [e["error"], *e["error"]["causes"]])
            for e in events if e.get("stepKey")]


def smaller_request(default_yaml: str, bench: Path) -> str:
    """The launchpad's default run config with a smaller request in place of the demo's: nop over `bench`
    with oracle and nop as bounds, that is two cells of one Task each, with no Model and no API key."""
    config = yaml.safe_load(default_yaml)
    config["ops"]["quote_job"]["config"] |= {"benchmark": str(bench), "agent": "nop", "model_configurations": [],
                                             "bounds": True, "trials_per_task": 1, "workspace": DEFAULT_WORKSPACE}
    return yaml.safe_dump(config, sort_keys=False)


def _names(text: str, agent: str) -> bool:
    """Whether `text` names the Agent: as a word or the last part of a cell's name (`ui-bench@1/nop`), not
    inside a cell key (`agent=nop@6da1a771`)."""
    return re.search(rf"(?<![\w@-]){re.escape(agent)}(?![\w@-])", text) is not None


def cell_row(ui: UI, agent: str) -> str:
    """The row of the cells table in the materialization's metadata that shows `agent` with a 95% CI."""
    return ui.until(f"row of {agent} with a 95% CI in the cells table", lambda d: _row_naming(ui.rows(), agent))


def _row_naming(rows: list[str], agent: str) -> str | None:
    return next((text for text in rows if _names(text, agent) and CI.search(text)), None)
