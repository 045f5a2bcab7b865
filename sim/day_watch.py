"""What watches a simulated day: the pacing dashboard (serving.dashboard) on the run's own budget-state and
campaigns topics, on a fixed address, served from its own event loop on a thread while the day's loop runs;
and at the end of the day, while the jobs still run, a screenshot of its page in headless Chromium with one
campaign selected so its spend and p plots show.

`DayWatch.on_start` is `sim.pacing_day.run_day`'s `on_start` hook; what it finds goes into the day's result as
`result["dashboard"]` (`url`, whether it answered, how many campaigns it listed, the screenshot or why there is
none). The screenshot is an artefact of the run, not its money path: without Chromium, chromedriver or
selenium, or with the port taken, the day goes on and the report says why."""
from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Mapping

from infra import browser

SCREENSHOT_NAME = "dashboard.png"
WINDOW = (1400, 1100)
PAGE_WAIT_S = 60.0  # at most this long for the page's first poll and the selected campaign's series
START_WAIT_S = 30.0


def showcase_campaign(budgets_micros: Mapping[int, int]) -> int | None:
    """The campaign the screenshot selects: the largest daily budget (the smallest id of equals), whose day has
    the most spend to draw; None when there is none."""
    if not budgets_micros:
        return None
    return min(budgets_micros, key=lambda campaign_id: (-budgets_micros[campaign_id], campaign_id))


def dashboard_url(host: str, port: int) -> str:
    return f"http://{host}:{port}/"


class DayDashboard:
    """The dashboard server on its own event loop thread: `start()` binds it (raises OSError when the port is
    taken), `get(path)` reads its API, `close()` stops it."""

    def __init__(self, *, bootstrap: str, redis_url: str, prometheus_url: str | None, state_topic: str,
                 campaigns_topic: str, host: str, port: int):
        # the day's records carry simulated times: readiness and state age follow them, not the wall clock
        self.options = dict(kafka_bootstrap=bootstrap, redis_url=redis_url, prometheus_url=prometheus_url,
                            state_topic=state_topic, campaigns_topic=campaigns_topic, host=host, port=port)
        self.host, self.port = host, port
        self.loop: asyncio.AbstractEventLoop | None = None
        self.runner = None

    @property
    def url(self) -> str:
        return dashboard_url(self.host, self.port)

    def start(self) -> str:
        from serving.dashboard.app import DashboardSettings, start_dashboard

        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="day-dashboard", daemon=True).start()
        started = asyncio.run_coroutine_threadsafe(
            start_dashboard(DashboardSettings(**self.options), event_time=True), self.loop)
        try:
            self.runner, self.port, _, _ = started.result(timeout=START_WAIT_S)
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.loop = None
            raise
        return self.url

    def get(self, path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(self.url.rstrip("/") + path, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def check(self) -> dict[str, Any]:
        """Whether it answers now: /ready, and the campaigns its list holds (and how many have a budget state)."""
        try:
            ready, _ = self.get("/ready")
            status, listed = self.get("/v1/pacing/campaigns?limit=1000")
        except (urllib.error.URLError, OSError, ValueError) as error:
            return {"answered": False, "error": f"{type(error).__name__}: {error}"}
        rows = listed.get("campaigns", []) if status == 200 and isinstance(listed, dict) else []
        return {"answered": status == 200, "ready": ready == 200, "campaigns_listed": len(rows),
                "campaigns_with_state": sum(1 for row in rows if row.get("state") is not None)}

    def close(self) -> None:
        if self.loop is None:
            return
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=START_WAIT_S)
            self.runner = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.loop = None


def screenshot(url: str, path: Path, campaign_id: int | None, *, wait_s: float = PAGE_WAIT_S) -> str | None:
    """The page at `url` in headless Chromium, `campaign_id` selected and its series drawn, saved as PNG at
    `path`; None when saved, else why not (Chromium, chromedriver or selenium missing, or the page not drawn)."""
    absent = browser.missing()
    if absent is not None:
        return f"{absent} is missing: no screenshot (install chromium and chromium-driver)"
    try:
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        return "selenium is not installed: no screenshot (pip install -e '.[test]')"
    try:
        driver = browser.headless_chromium(window=WINDOW)
    except WebDriverException as error:
        return f"Chromium did not start: {error.msg or error}"
    try:
        driver.get(url)
        wait = WebDriverWait(driver, wait_s, poll_frequency=0.2)
        view = "return JSON.parse(JSON.stringify(window.adserveDashboard || null));"
        wait.until(lambda d: ((d.execute_script(view) or {}).get("polls") or 0) >= 1, message="the page's first poll")
        if campaign_id is not None:
            # found and clicked in one script call: the page re-renders its rows on every poll
            driver.execute_script("const row = document.querySelector(arguments[0]); if (row) row.click();",
                                  f'#campaigns tbody tr[data-campaign-id="{campaign_id}"]')
            wait.until(lambda d: _drawn(d.execute_script(view), campaign_id),
                       message=f"campaign {campaign_id}'s series on the page")
        wait.until(lambda d: (d.execute_script(view) or {}).get("fleet") is not None, message="the fleet panels")
        # the whole page, fleet panels included: the window grown until its viewport holds the document
        for _ in range(3):
            short = int(driver.execute_script(
                "return document.documentElement.scrollHeight - window.innerHeight"))
            if short <= 0:
                break
            driver.set_window_size(WINDOW[0], driver.get_window_size()["height"] + short + 16)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not driver.save_screenshot(str(path)):
            return f"Chromium could not write {path}"
    except WebDriverException as error:  # includes the waits' TimeoutException
        return f"the page was not drawn: {type(error).__name__}: {error.msg or error}"
    finally:
        driver.quit()
    return None


def fleet_panels(dashboard: DayDashboard) -> dict[str, Any]:
    """The fleet panels at the end of the day: `fleet_with_data` and `fleet_without_data` (panel names), or
    `fleet_error` when the dashboard could not evaluate them (no Prometheus)."""
    try:
        status, fleet = dashboard.get("/v1/fleet")
    except (urllib.error.URLError, OSError, ValueError) as error:
        return {"fleet_error": f"{type(error).__name__}: {error}"}
    if status != 200 or not isinstance(fleet, dict) or fleet.get("reason"):
        return {"fleet_error": (fleet or {}).get("reason") if isinstance(fleet, dict) else f"HTTP {status}"}
    has_data = {p["name"]: any(s.get("value") is not None for s in p["series"]) for p in fleet.get("panels", [])}
    return {"fleet_with_data": [name for name, data in has_data.items() if data],
            "fleet_without_data": [name for name, data in has_data.items() if not data]}


def _drawn(view: Mapping[str, Any] | None, campaign_id: int) -> bool:
    series = (view or {}).get("series") or {}
    return series.get("campaign_id") == campaign_id and bool(series.get("minutes"))


class DayWatch:
    """The dashboard of one simulated day: `on_start` starts it on the day's topics and prints its address;
    the end callback it returns asks it for its campaign list, takes the screenshot into `out_dir`, stops it
    and puts what it found into the day's result. `close()` stops it whatever happened (idempotent)."""

    def __init__(self, *, bootstrap: str, prometheus_url: str | None, host: str, port: int, out_dir: Path,
                 log: Callable[[str], None] = print):
        self.bootstrap, self.prometheus_url, self.host, self.port = bootstrap, prometheus_url, host, port
        self.out_dir, self.log = out_dir, log
        self.dashboard: DayDashboard | None = None

    def on_start(self, topics: Mapping[str, str], redis_url: str) -> Callable[[dict[str, Any]], None]:
        dashboard = DayDashboard(bootstrap=self.bootstrap, redis_url=redis_url, prometheus_url=self.prometheus_url,
                                 state_topic=topics["state"], campaigns_topic=topics["campaigns"], host=self.host,
                                 port=self.port)
        try:
            url = dashboard.start()
        except OSError as error:  # the port is taken: the day runs without its dashboard
            reason = f"could not listen on {dashboard_url(self.host, self.port)}: {error}"
            self.log(f"pacing dashboard: {reason}; the day runs without it")
            return lambda result: result.update(dashboard={"url": None, "answered": False, "error": reason,
                                                           "screenshot": None, "screenshot_error": reason})
        self.dashboard = dashboard
        self.log(f"pacing dashboard: {url}")
        return self.on_end

    def on_end(self, result: dict[str, Any]) -> None:
        dashboard = self.dashboard
        if dashboard is None:
            return
        found: dict[str, Any] = {"url": dashboard.url, "state_topic": dashboard.options["state_topic"],
                                 "campaigns_topic": dashboard.options["campaigns_topic"], **dashboard.check(),
                                 **fleet_panels(dashboard)}
        budgets = {campaign_id: day.campaign.budget_micros for campaign_id, day in result.get("days", {}).items()}
        found["selected_campaign"] = showcase_campaign(budgets)
        path = self.out_dir / SCREENSHOT_NAME
        path.unlink(missing_ok=True)  # never a previous day's picture under this day's name
        self.log(f"pacing dashboard: taking its screenshot into {path} ...")
        error = screenshot(dashboard.url, path, found["selected_campaign"])
        found.update(screenshot=None if error else str(path), screenshot_error=error)
        if error:
            self.log(f"pacing dashboard: {error}")
        result["dashboard"] = found
        self.close()

    def close(self) -> None:
        if self.dashboard is not None:
            self.dashboard.close()
            self.dashboard = None
