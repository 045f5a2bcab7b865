"""Headless Chromium, as the dashboard's screenshot, its page-load bench and its browser tests drive it: Debian's
`chromium` through Debian's `chromium-driver` by Selenium (infra/bootstrap.sh installs all three)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARGUMENTS = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu")


def missing() -> Path | None:
    """The first of Chromium and its driver this machine lacks, or None when both are there."""
    return next((binary for binary in (CHROMIUM, CHROMEDRIVER) if not binary.exists()), None)


def headless_chromium(*, window: tuple[int, int] = (1400, 900), console_log: bool = False) -> Any:
    """A started WebDriver of headless Chromium with a `window` (width, height) viewport; `console_log` keeps the
    page's console for `driver.get_log("browser")`. The caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in (*ARGUMENTS, f"--window-size={window[0]},{window[1]}"):
        options.add_argument(argument)
    if console_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
