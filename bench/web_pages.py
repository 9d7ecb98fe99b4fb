"""How long Amber's web pages take to load in a browser, the Job page and the Trial page above all.

A Job of 10 cells (the Direct Agent with 10 Model Configurations) x 500 static Tasks, quoted and started as any
Job, whose 5,000 Trial rows are made up and then written, charged and scored by Amber's own code as cell runs
do them (`tests/web_data.py`'s `synthetic_job`: the catalog records, the Trial Parquet files, the ledger, the
scores), so the pages' real operations read them. Its first Trial has a Harbor folder with an ATIF trajectory
of 300 steps and 300 model calls in the proxy's transcripts.

`python -m server` serves the instance on loopback in a process of its own (hosted: the browser signs in once
with an API token), and Debian's headless Chromium (through Selenium, by path: Selenium Manager downloads
nothing) opens each page many times in a row. For each load, from the browser's Navigation Timing: the server's
time to first byte (`responseStart`) and the whole load, to the end of the load event (`loadEventEnd`, both
from the navigation's start). p50 and p95 of each, per page; the headline figures are the p95 of the whole load:

    FIGURE web_job_page_ms_p95 <ms> ms
    FIGURE web_trial_page_ms_p95 <ms> ms

The goal is both at most 300 ms on 2 cores. `--smoke` is a small run for the test suite: 2 cells x 20 Tasks, a
20-step trajectory, one load of each page with none to warm it.

    .venv/bin/python bench/web_pages.py [--cells 10] [--tasks 500] [--steps 300] [--loads 30] [--smoke] [--keep]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
from synthetic import scratch_home

from amber_pipeline.paths import PROJECT_ROOT, AmberPaths
from amber_pipeline.warehouse.catalog import Warehouse

sys.path.insert(0, str(PROJECT_ROOT / "tests"))
import chromium as browser  # noqa: E402 - tests/ on the path first
from web_data import member, synthetic_job  # noqa: E402

WORKSPACE, USER = "team", "alice"
GOAL_MS = 300
WIDTH, HEIGHT = 1280, 800
# The Navigation Timing of the page now shown, once its load event has ended
TIMING_JS = """const n = performance.getEntriesByType('navigation')[0];
return n && n.loadEventEnd > 0 ? [n.responseStart - n.startTime, n.loadEventEnd - n.startTime, n.responseStatus,
                                  n.transferSize] : null;"""


@dataclass
class Loads:
    page: str
    path: str
    ttfb_ms: list[float]
    load_ms: list[float]
    bytes: int


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile, nearest rank (of 30 loads, p95 is the 29th fastest)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(len(ordered) * p / 100) - 1))]


@contextmanager
def server(home: Path) -> Iterator[str]:
    """`python -m server` (hosted) over `home` on a free loopback port, until it answers."""
    from servers.ports import free_port

    port = free_port()
    env = {**os.environ, "AMBER_HOME": str(home), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    process = subprocess.Popen([sys.executable, "-m", "server", "--host", "127.0.0.1", "--port", str(port)],
                               cwd=PROJECT_ROOT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/signin", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"python -m server did not answer at {url}")
            time.sleep(0.1)
        print(f"python -m server (pid {process.pid}) at {url}")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def chromium() -> Iterator:

    why = browser.missing()
    if why:
        raise SystemExit(why)
    with tempfile.TemporaryDirectory(prefix="amber-web-bench-chromium-") as profile:
        driver = browser.chromium(Path(profile), WIDTH, HEIGHT, page_load_timeout_s=120)
        try:
            yield driver
        finally:
            driver.quit()


def sign_in(driver, url: str, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/signin?next=/w/{WORKSPACE}/jobs")
    driver.find_element(By.NAME, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form[action='/signin'] button[type=submit]").click()
    deadline = time.monotonic() + 30
    while not driver.current_url.endswith(f"/w/{WORKSPACE}/jobs"):
        if time.monotonic() > deadline:
            raise SystemExit(f"signing in did not reach the Jobs page: {driver.current_url}")
        time.sleep(0.05)


def load(driver, url: str, page: str, path: str, n: int, warm_ups: int) -> Loads:
    """`n` loads of the page, after ``warm_ups`` to warm it (not counted)."""
    found = Loads(page, path, [], [], 0)
    for i in range(n + warm_ups):
        driver.get(url + path)
        deadline = time.monotonic() + 120
        while (timing := driver.execute_script(TIMING_JS)) is None:
            if time.monotonic() > deadline:
                raise SystemExit(f"{page}: no load event within 120 s")
            time.sleep(0.005)
        ttfb, whole, status, size = timing
        if status != 200:
            raise SystemExit(f"{page}: {path} answered {status}")
        if i >= warm_ups:
            found.ttfb_ms.append(ttfb)
            found.load_ms.append(whole)
            found.bytes = size
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--steps", type=int, default=300, help="the traced Trial's trajectory steps")
    parser.add_argument("--loads", type=int, default=30, help="loads of each page, after one to warm it")
    parser.add_argument("--smoke", action="store_true", help="2 cells x 20 Tasks, 20 steps, one cold load (the "
                                                             "suite)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary AMBER_HOME")
    args = parser.parse_args()
    warm_ups = 1
    if args.smoke:
        args.cells, args.tasks, args.steps, args.loads, warm_ups = 2, 20, 20, 1, 0

    with scratch_home("amber-webbench-", args.keep) as home, \
            tempfile.TemporaryDirectory(prefix="amber-webbench-tasks-") as sources:  # outside AMBER_HOME
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        wh = Warehouse(AmberPaths(home))
        token = member(wh, USER, WORKSPACE, credit="100000")
        t0 = time.perf_counter()
        made = synthetic_job(wh, WORKSPACE, USER, Path(sources), args.cells, args.tasks, args.steps)
        job = made.job
        print(f"a finished Job {job.id}: {args.cells} cells x {args.tasks} Tasks ({args.cells * args.tasks:,} "
              f"Trials) and a Trial of {args.steps} trajectory steps, made in {time.perf_counter() - t0:.1f} s "
              f"under {home}; {os.cpu_count()} cores")
        cells = [c.split("|mc=")[1].split("@")[0] for c in _cell_keys(wh, job.id)]
        pair = [quote(f"{job.id} direct/{m}") for m in cells[:2]]
        pages = {
            "jobs": f"/w/{WORKSPACE}/jobs",
            "job": f"/w/{WORKSPACE}/jobs/{job.id}",
            "trial": f"/w/{WORKSPACE}/jobs/{job.id}/trials/{made.trial}?cell={quote(made.cell_key, safe='')}",
            "compare": f"/w/{WORKSPACE}/compare?baseline={pair[0]}&candidate={pair[1]}",
            "benchmarks": f"/w/{WORKSPACE}/benchmarks",
            "benchmark_version": f"/w/{WORKSPACE}/benchmarks/{quote(job.benchmark_label, safe='')}",
            "wallet": f"/w/{WORKSPACE}/wallet",
            "new_job": f"/w/{WORKSPACE}/new",
        }
        with server(home) as url, chromium() as driver:
            sign_in(driver, url, token)
            results = [load(driver, url, page, path, args.loads, warm_ups) for page, path in pages.items()]
        print(f"{'page':<18} {'TTFB p50':>9} {'TTFB p95':>9} {'load p50':>9} {'load p95':>9} {'size':>9}   "
              f"({args.loads} loads each, ms)")
        for r in results:
            print(f"{r.page:<18} {statistics.median(r.ttfb_ms):>9.0f} {percentile(r.ttfb_ms, 95):>9.0f} "
                  f"{statistics.median(r.load_ms):>9.0f} {percentile(r.load_ms, 95):>9.0f} "
                  f"{r.bytes / 1024:>7.0f} kB")
        by_page = {r.page: r for r in results}
        job_p95, trial_p95 = (percentile(by_page[p].load_ms, 95) for p in ("job", "trial"))
        print(f"FIGURE web_job_page_ms_p95 {job_p95:.0f} ms")
        print(f"FIGURE web_trial_page_ms_p95 {trial_p95:.0f} ms")
        met = job_p95 <= GOAL_MS and trial_p95 <= GOAL_MS
        print(f"goal at most {GOAL_MS} ms for both: {'met' if met else 'MISSED'}")


def _cell_keys(wh: Warehouse, job_id: str) -> list[str]:
    from amber_pipeline.jobs import records

    return [c.cell_key for c in records.cells_of(wh, job_id)]


if __name__ == "__main__":
    main()
