"""The pacing dashboard's benchmark: the campaign list's latency at 10,000 campaigns over loopback HTTP beside a
same-run baseline (`GET /ready`, which reads no rows), and the page's load time in headless Chromium.

The board is fed directly (synthetic serving.campaigns and budget.state records through PacingBoard.apply), so
no platform is needed: what is measured is the server's list path, from request to JSON on the socket. The
query mix covers the page's own requests: no filter, each filter, and sorts on a number, a text column and the
forecast, both orders, a page of 100."""
from __future__ import annotations

import asyncio
import http.client
import json
import random
import threading
import time
from typing import Any

from aiohttp import web

from bench.common import machine, percentiles_ms
from core.pacing_view import STATES
from schemas import topics
from serving.dashboard.app import DashboardServer
from serving.dashboard.board import PacingBoard

QUERIES = ("", "sort=committed_micros&order=desc", "pace=under&sort=forecast_micros", "state=METERED",
           "advertiser_id=7&sort=pace_ratio&order=desc", "sort=state", "sort=campaign_id&offset=5000")
BUDGET = 100_000_000


def synthetic_board(campaigns: int, seed: int = 7) -> PacingBoard:
    """`campaigns` campaigns of 100 advertisers, each with a serving record and a budget state at a random point
    of its day (a tenth paused, some with a delivery limit)."""
    rng = random.Random(seed)
    board = PacingBoard()
    batch: list[tuple[str, dict[str, Any], int]] = []
    for campaign_id in range(1, campaigns + 1):
        batch.append((topics.SERVING_CAMPAIGNS, {
            "campaign_id": campaign_id, "advertiser_id": campaign_id % 100, "version": 1,
            "status": "PAUSED" if rng.random() < 0.1 else "ACTIVE", "daily_budget_micros": BUDGET,
            "timezone": "UTC"}, 0))
        target = rng.randrange(BUDGET)
        committed = min(BUDGET, int(target * rng.uniform(0.5, 1.3)))
        batch.append((topics.BUDGET_STATE, {
            "campaign_id": campaign_id, "event_time": 1_773_100_000_000, "budget_day": "2026-03-10",
            "state": rng.choice(STATES), "participation_probability": rng.uniform(0.001, 1.0),
            "daily_budget_micros": BUDGET, "billed_spend_micros": committed * 9 // 10,
            "committed_spend_micros": committed, "remaining_micros": BUDGET - committed,
            "target_spend_micros": target, "delivery_limit": rng.choice((None, None, "BID", "AUDIENCE"))}, 0))
    board.apply(batch)
    return board


class _Served:
    """A DashboardServer over `board` on a loopback port, its event loop on a thread."""

    def __init__(self, board: PacingBoard):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="dashboard-bench", daemon=True).start()
        self.runner, self.port = asyncio.run_coroutine_threadsafe(self._start(board), self.loop).result(30)

    async def _start(self, board: PacingBoard):
        runner = web.AppRunner(DashboardServer(board, lambda campaign_id: None).app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)


def _timed_gets(port: int, paths: list[str]) -> list[float]:
    """Milliseconds of each GET over one keep-alive connection, body read and parsed."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    samples = []
    try:
        for path in paths:
            began = time.perf_counter()
            connection.request("GET", path)
            response = connection.getresponse()
            json.loads(response.read())
            samples.append((time.perf_counter() - began) * 1000)
    finally:
        connection.close()
    return samples


def list_latency(campaigns: int = 10_000, requests: int = 700, warmup: int = 50) -> dict[str, Any]:
    """p50/p99 (ms) of `GET /v1/pacing/campaigns` over QUERIES in turn at `campaigns` campaigns, and of
    `GET /ready` (the same server and connection, no rows read) as the run's baseline; requests alternate so
    both see the same machine."""
    server = _Served(synthetic_board(campaigns))
    try:
        lists = [f"/v1/pacing/campaigns?{QUERIES[i % len(QUERIES)]}" for i in range(requests)]
        _timed_gets(server.port, lists[:warmup] + ["/ready"] * warmup)
        samples = _timed_gets(server.port, [path for pair in zip(lists, ["/ready"] * requests) for path in pair])
        list_ms, ready_ms = samples[0::2], samples[1::2]
    finally:
        server.close()
    list_p50, list_p99 = percentiles_ms(list_ms)
    ready_p50, ready_p99 = percentiles_ms(ready_ms)
    return {"campaigns": campaigns, "requests": requests, "list_p50_ms": list_p50, "list_p99_ms": list_p99,
            "ready_p50_ms": ready_p50, "ready_p99_ms": ready_p99, "queries": list(QUERIES)}


def page_load(campaigns: int = 10_000, loads: int = 5, chromium: str = "/usr/bin/chromium",
              chromedriver: str = "/usr/bin/chromedriver") -> dict[str, Any]:
    """The page in headless Chromium at `campaigns` campaigns, `loads` times: the load event and the first
    completed poll (the table drawn from the API), both in ms from navigation start (median and max)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = Options()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(argument)
    server = _Served(synthetic_board(campaigns))
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    load_ms, data_ms = [], []
    try:
        for _ in range(loads):
            driver.get(f"http://127.0.0.1:{server.port}/")
            WebDriverWait(driver, 60, poll_frequency=0.005).until(lambda d: d.execute_script(
                "return window.adserveDashboard && window.adserveDashboard.polls >= 1"))
            data_ms.append(driver.execute_script("return performance.now()"))
            load_ms.append(driver.execute_script(
                "const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd;"))
    finally:
        driver.quit()
        server.close()
    load_ms.sort()
    data_ms.sort()
    return {"campaigns": campaigns, "loads": loads, "load_event_median_ms": round(load_ms[len(load_ms) // 2], 1),
            "load_event_max_ms": round(load_ms[-1], 1), "first_data_median_ms": round(data_ms[len(data_ms) // 2], 1),
            "first_data_max_ms": round(data_ms[-1], 1)}


def run(campaigns: int = 10_000, requests: int = 700, loads: int = 5, browser: bool = True) -> dict[str, Any]:
    """Both measurements and the machine they ran on."""
    figures: dict[str, Any] = {"machine": machine(), "list": list_latency(campaigns, requests)}
    if browser:
        figures["page"] = page_load(campaigns, loads)
    return figures


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
