"""Debian's headless Chromium driven by Selenium, the one way the browser tests and bench/web_pages.py start it.

The browser and its driver are named by path and Selenium Manager is told to stay offline, so nothing is ever
downloaded; the flags keep Chromium from reaching out on this closed network (background networking, component
updates, sync, QUIC) and give it a profile of its own. scripts/setup.sh installs both as root on Debian.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions")


def missing() -> str | None:
    """Why Chromium cannot be driven here, in a sentence; None when it can."""
    absent = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if not absent:
        return None
    return (f"no {' or '.join(absent)}: scripts/setup.sh installs Debian's chromium and chromium-driver when run "
            "as root on Debian")


def chromium(profile: Path, width: int, height: int, *, console: bool = False,
             page_load_timeout_s: float = 60) -> webdriver.Chrome:
    """Chromium with a window of `width` x `height` and its own `profile` folder; `console`: keep the pages'
    console for the tests to read."""
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never download a browser or a driver
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    if console:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for arg in (*FLAGS, f"--window-size={width},{height}", f"--user-data-dir={profile}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(page_load_timeout_s)
    return driver


@contextmanager
def evidence(driver: webdriver.Chrome, folder: Path, prefix: str) -> Iterator[None]:
    """Any failure inside carries what the page showed: its screenshot, source and console, saved in `folder`."""
    try:
        yield
    except (AssertionError, WebDriverException) as e:
        raise AssertionError(f"{e}\n{save(driver, folder, prefix)}") from e


def save(driver: webdriver.Chrome, folder: Path, prefix: str) -> str:
    stamp = time.strftime("%H%M%S")
    png, html, console = (folder / f"{prefix}-{stamp}.{ext}" for ext in ("png", "html", "console.txt"))
    try:
        driver.save_screenshot(str(png))
        html.write_text(driver.page_source)
        console.write_text("".join(f"{e['level']} {e['message']}\n" for e in driver.get_log("browser")))
    except WebDriverException as e:
        return f"(no screenshot or page source: {e.msg})"
    return f"screenshot: {png}\npage source: {html}\nbrowser console: {console}"
