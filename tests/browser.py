"""Headless Chromium for the tests that drive the console in a real browser (Selenium, with
Debian's `chromium` and `chromium-driver`). Where none is installed the tests are skipped, saying
how to install one; under CI=true a missing browser fails them instead."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

INSTALL_HINT = (
    "no headless Chromium for the browser tests: install Debian's `chromium` and "
    "`chromium-driver` (apt-get install -y chromium chromium-driver; .ci/run does it as root), "
    "or set CHROMIUM and CHROMEDRIVER to their paths"
)


def find_chromium() -> tuple[str, str] | None:
    """(browser, driver) paths, from CHROMIUM / CHROMEDRIVER or the PATH."""
    browser = os.environ.get("CHROMIUM") or next(
        (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None
    )
    driver = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
    if browser and driver and Path(browser).exists() and Path(driver).exists():
        return browser, driver
    return None


def require_chromium() -> tuple[str, str]:
    found = find_chromium()
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(INSTALL_HINT + " (CI=true: the browser tests must run)", pytrace=False)
        pytest.skip(INSTALL_HINT)
    try:
        import selenium  # noqa: F401
    except ImportError:
        message = "selenium is not installed: make setup installs the test extra"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


def headless_chromium(width: int = 1200, height: int = 900) -> Any:
    """A Selenium driver of a new headless Chromium, its performance log (the network events of
    every request the page makes) kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    browser, driver = require_chromium()
    options = Options()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))
