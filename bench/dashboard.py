"""`adserve bench dashboard`: the operator's and the advertiser's read paths on the local platform: the pacing
campaign list at 10,000 campaigns, a 30-day hourly advertiser report, and the dashboard page in headless
Chromium, each beside a baseline measured in the same run on the same server.

Part 1, the pacing API: --campaigns campaigns (default 10,000, of 100 advertisers) go to fresh
serving.campaigns and budget.state topics in Kafka, each with a budget state at a random point of its day,
and the first page's campaigns get a pacing day in Redis (minutes 0-659). The dashboard
(serving.dashboard.app.start_dashboard, with the platform's Redis and Prometheus) follows the two topics until
it holds every campaign; then `GET /v1/pacing/campaigns` is asked --requests times over one keep-alive
connection, cycling through the page's own queries (no filter, each filter, sorts on a number, a text column
and the forecast, both orders, a deep page), alternating with `GET /ready` (no rows read) as the baseline.
A sample runs from the request to the parsed JSON body. Target: p99 <= 50 ms.

Part 2, the advertiser report: one advertiser of --report-campaigns campaigns (default 10, a mid-size
advertiser) is created in the campaign store; 31 days of its hourly BilledSpend records (one per campaign and
hour, the cumulative totals of the budget day as the click aggregator emits them) and conversions (0-3 per
campaign and hour) go to fresh topics and are landed into PostgreSQL by the landing job itself
(serving.report_landing, until caught up). The advertiser API (serving.advertiser.api) then answers
`GET /v1/reports?from=2026-02-01&to=2026-03-03&granularity=hour` (every campaign, 720 hours each) --requests
times, alternating with `GET /v1/campaigns/{id}` (the same key check and one row read) as the baseline.
Target: p99 <= 100 ms.

Part 3, the page: headless Chromium (/usr/bin/chromium through /usr/bin/chromedriver, selenium) opens the
dashboard of part 1 --loads times, each a fresh navigation; a figure is the time from navigation start to the
end of the first poll (the campaign table, the first campaign's charts and the fleet panels drawn:
window.adserveDashboard.polls becomes 1), read in the page from performance.now(). Baseline: navigating to
one of its static files (/static/style.css, the load event) in the same browser, alternating. Target: the
median <= 1,500 ms; the first load (cold cache) is given too.

Figures (--json names): pacing_api_p50_ms, pacing_api_p99_ms, pacing_baseline_p50_ms, pacing_baseline_p99_ms,
pacing_campaigns, pacing_requests; report_api_p50_ms, report_api_p99_ms, report_baseline_p50_ms,
report_baseline_p99_ms, report_campaigns, report_hours, report_rows, report_requests; page_load_ms (median),
page_load_max_ms, page_load_first_ms, page_baseline_ms, page_loads; targets (figure -> {"target", "met"});
machine, load_average (1-minute load before and after the run)."""
from __future__ import annotations

import asyncio
import http.client
import json
import os
import random
import threading
import time
import uuid
from datetime import date, timedelta
from typing import Any, Callable, Iterable, Sequence

from core.errors import RunFailed
from core.pacing_view import STATES
from core.reports import day_start_ms
from infra.platform import PlatformSettings
from schemas import topics as topic_names

BUDGET_MICROS = 100_000_000
PACING_DAY = "2026-03-10"
PACING_NOW_MS = 1_773_140_400_000  # 2026-03-10 11:00 UTC: the budget states' event time
PACING_MINUTES = range(0, 660)  # the first page's pacing day up to 11:00
PAGE_SIZE = 100
QUERIES = ("", "sort=committed_micros&order=desc", "pace=under&sort=forecast_micros", "state=METERED",
           "advertiser_id=7&sort=pace_ratio&order=desc", "sort=state", "sort=campaign_id&offset=5000")
REPORT_FROM, REPORT_DAYS = "2026-02-01", 30
HOUR_MS = 3_600_000
TARGETS = {"pacing_api_p99_ms": 50.0, "report_api_p99_ms": 100.0, "page_load_ms": 1_500.0}
WAIT_S = 300.0
SERVING_CAMPAIGN, BUDGET_STATE_TYPE, BILLED_SPEND_TYPE, AD_CONVERSION = (topic_names.record_type(topic) for topic in (
    topic_names.SERVING_CAMPAIGNS, topic_names.BUDGET_STATE, topic_names.BILLED_SPEND, topic_names.AD_CONVERSIONS))

# The page's first poll, timed inside the page: a hook installed before any script of the document runs
# records performance.now() when app.js counts its first completed poll.
FIRST_POLL_HOOK = """
Object.defineProperty(window, "adserveDashboard", {configurable: true, set(view) {
  let polls = view.polls;
  Object.defineProperty(view, "polls", {enumerable: true, configurable: true, get() { return polls; },
    set(value) { polls = value; if (value >= 1 && window.adserveFirstPollMs === undefined)
                   window.adserveFirstPollMs = performance.now(); }});
  Object.defineProperty(window, "adserveDashboard", {value: view, writable: true, configurable: true});
}});
"""


# ------------------------------------------------------------------------------------------ figures (pure)
def _median(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def latency_figures(prefix: str, samples_ms: Sequence[float], baseline_ms: Sequence[float]) -> dict[str, float]:
    """`<prefix>_api_p50_ms`, `_p99_ms` and `<prefix>_baseline_p50_ms`, `_p99_ms` from the samples."""
    from bench.common import percentiles_ms

    if not samples_ms or not baseline_ms:
        raise RunFailed(f"{prefix}: no latency samples were taken")
    p50, p99 = percentiles_ms(samples_ms)
    base50, base99 = percentiles_ms(baseline_ms)
    return {f"{prefix}_api_p50_ms": p50, f"{prefix}_api_p99_ms": p99,
            f"{prefix}_baseline_p50_ms": base50, f"{prefix}_baseline_p99_ms": base99}


def page_figures(loads_ms: Sequence[float], baseline_ms: Sequence[float]) -> dict[str, float | int]:
    """The page's loads in the order they ran: the median (`page_load_ms`), the slowest, the first (a cold
    cache) and the baseline's median."""
    if not loads_ms or not baseline_ms:
        raise RunFailed("page: no load was timed")
    return {"page_load_ms": round(_median(loads_ms), 1), "page_load_max_ms": round(max(loads_ms), 1),
            "page_load_first_ms": round(loads_ms[0], 1), "page_baseline_ms": round(_median(baseline_ms), 1),
            "page_loads": len(loads_ms)}


def verdicts(figures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """figure -> {"target": limit, "met": value <= limit} for each targeted figure the run measured."""
    return {name: {"target": limit, "met": figures[name] <= limit}
            for name, limit in TARGETS.items() if figures.get(name) is not None}


def interleave(measured: Sequence[str], baseline: str) -> list[str]:
    """measured[0], baseline, measured[1], baseline, ...: both see the same moments of the machine."""
    return [path for item in measured for path in (item, baseline)]


# ------------------------------------------------------------------------------------------ records (pure)
def pacing_records(first_id: int, campaigns: int, seed: int = 7) -> tuple[list[dict], list[dict]]:
    """(ServingCampaign records, BudgetState records) of campaigns first_id .. first_id + campaigns - 1, of 100
    advertisers: a tenth paused, each at a random point of its day, some with a delivery limit."""
    rng = random.Random(seed)
    serving, states = [], []
    for campaign_id in range(first_id, first_id + campaigns):
        serving.append({"campaign_id": campaign_id, "advertiser_id": campaign_id % 100, "version": 1,
                        "event_time": PACING_NOW_MS - 3_600_000,
                        "status": "PAUSED" if rng.random() < 0.1 else "ACTIVE", "bid_type": "CPC",
                        "daily_budget_micros": BUDGET_MICROS, "currency": "USD", "timezone": "UTC",
                        "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None,
                        "cap_per_week": None, "cpa_target_micros": None})
        target = rng.randrange(BUDGET_MICROS // 2)
        committed = min(BUDGET_MICROS, int(target * rng.uniform(0.5, 1.3)))
        states.append({"campaign_id": campaign_id, "event_time": PACING_NOW_MS, "budget_day": PACING_DAY,
                       "state": rng.choice(STATES), "participation_probability": rng.uniform(0.001, 1.0),
                       "bid_multiplier": 1.0, "daily_budget_micros": BUDGET_MICROS,
                       "billed_spend_micros": committed * 9 // 10, "committed_spend_micros": committed,
                       "remaining_micros": BUDGET_MICROS - committed, "target_spend_micros": target,
                       "delivery_limit": rng.choice((None, None, "BID", "AUDIENCE"))})
    return serving, states


def pacing_points(campaign_id: int, minutes: Iterable[int]) -> list[dict[str, Any]]:
    """A pacing day's minutes as the budget job writes them (streams.pacing_store)."""
    return [{"campaign_id": campaign_id, "budget_day": PACING_DAY, "minute": m, "budget_micros": BUDGET_MICROS,
             "state": "OPEN", "participation_probability": round(0.3 + m % 7 / 100, 4), "target_micros": 40_000 * m,
             "committed_micros": 39_000 * m + m % 5, "billed_micros": 36_000 * m,
             "event_time": PACING_NOW_MS - (660 - m) * 60_000} for m in minutes]


def report_range() -> tuple[str, str]:
    """(from, to) of the report: REPORT_DAYS days from REPORT_FROM, `to` exclusive."""
    return REPORT_FROM, (date.fromisoformat(REPORT_FROM) + timedelta(days=REPORT_DAYS)).isoformat()


def billed_records(campaign_ids: Sequence[int], first_day: str, days: int, seed: int = 11) -> list[dict[str, Any]]:
    """BilledSpend records (schemas/billed_spend.avsc) of UTC CPC campaigns, one per campaign and hour (stamped
    at the hour's end, so the landing files it in that hour) over `days` days from `first_day`: the cumulative
    totals of the budget day, as the click aggregator emits them, growing with a daily traffic shape."""
    rng = random.Random(seed)
    start_ms = day_start_ms(first_day)
    records = []
    for campaign_id in campaign_ids:
        for day in range(days):
            budget_day = (date.fromisoformat(first_day) + timedelta(days=day)).isoformat()
            clicks = spend = invalid = 0
            for hour in range(24):
                shape = 0.3 + 0.7 * (1 - abs(hour - 14) / 14)
                new_clicks = rng.randrange(int(40 * shape) + 1)
                clicks += new_clicks
                spend += sum(rng.choice((150_000, 400_000, 1_250_000)) for _ in range(new_clicks))
                invalid += rng.choice((0, 0, 0, 150_000))
                records.append({"campaign_id": campaign_id, "budget_day": budget_day,
                                "event_time": start_ms + (day * 24 + hour + 1) * HOUR_MS,
                                "billed_spend_micros": spend, "billed_impressions": 0, "billed_clicks": clicks,
                                "absorbed_overspend_micros": 0, "invalid_credit_micros": invalid,
                                "joined_clicks": clicks})
    return records


def conversion_records(billed: Iterable[dict[str, Any]], seed: int = 13) -> list[dict[str, Any]]:
    """AdConversion records: 0-3 per campaign and hour of `billed`, inside that hour."""
    rng = random.Random(seed)
    out = []
    for record in billed:
        hour_start = record["event_time"] - HOUR_MS
        for n in range(rng.randrange(4)):
            at = hour_start + rng.randrange(HOUR_MS)
            out.append({"conversion_id": uuid.UUID(int=rng.getrandbits(128)).hex,
                        "impression_id": f"bench-{record['campaign_id']}-{hour_start}-{n}-{seed}",
                        "event_time": at, "served_time": at - 900_000, "click_time": at - 600_000,
                        "campaign_id": record["campaign_id"], "ad_id": record["campaign_id"] * 10,
                        "token_key_id": "k1"})
    return out


def render(f: dict[str, Any]) -> str:
    m = f["machine"]
    met = {name: "met" if v["met"] else "NOT met" for name, v in f["targets"].items()}
    lines = [f"machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB; 1-minute load "
             f"{f['load_average'][0]} before, {f['load_average'][1]} after"]
    if "pacing_api_p99_ms" in f:
        lines.append(f"pacing campaign list, {f['pacing_campaigns']:,} campaigns, {f['pacing_requests']} requests: "
                     f"p50 {f['pacing_api_p50_ms']} ms, p99 {f['pacing_api_p99_ms']} ms "
                     f"(target <= {TARGETS['pacing_api_p99_ms']:g} ms: {met['pacing_api_p99_ms']}); "
                     f"baseline GET /ready: p50 {f['pacing_baseline_p50_ms']} ms, p99 {f['pacing_baseline_p99_ms']} ms")
    if "report_api_p99_ms" in f:
        lines.append(f"30-day hourly report, {f['report_campaigns']} campaigns x {f['report_hours']} hours "
                     f"({f['report_rows']:,} rows), {f['report_requests']} requests: p50 {f['report_api_p50_ms']} ms, "
                     f"p99 {f['report_api_p99_ms']} ms (target <= {TARGETS['report_api_p99_ms']:g} ms: "
                     f"{met['report_api_p99_ms']}); baseline GET /v1/campaigns/{{id}}: p50 "
                     f"{f['report_baseline_p50_ms']} ms, p99 {f['report_baseline_p99_ms']} ms")
    if "page_load_ms" in f:
        lines.append(f"page to its first drawn poll, headless Chromium, {f['page_loads']} loads: median "
                     f"{f['page_load_ms']} ms, max {f['page_load_max_ms']} ms, first (cold cache) "
                     f"{f['page_load_first_ms']} ms (target <= {TARGETS['page_load_ms']:g} ms: {met['page_load_ms']});"
                     f" baseline a static file: {f['page_baseline_ms']} ms")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ the runs (I/O)
class _Loop:
    """An asyncio event loop on its own thread, for the servers under test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bench-dashboard", daemon=True)
        self.thread.start()

    def run(self, coroutine, timeout_s: float = WAIT_S):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _timed_gets(port: int, paths: Sequence[str], headers: dict[str, str] | None = None) -> list[float]:
    """Milliseconds of each GET over one keep-alive connection, from the request to the parsed JSON body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    samples = []
    try:
        for path in paths:
            began = time.perf_counter()
            connection.request("GET", path, headers=headers or {})
            response = connection.getresponse()
            body = response.read()
            json.loads(body)
            samples.append((time.perf_counter() - began) * 1000)
            if response.status != 200 and path != "/ready":
                raise RunFailed(f"GET {path} answered {response.status}: {body[:300]!r}")
    finally:
        connection.close()
    return samples


def _alternated(port: int, measured: Sequence[str], baseline: str, *, warmup: int,
                headers: dict[str, str] | None = None) -> tuple[list[float], list[float]]:
    _timed_gets(port, interleave(list(measured[:warmup]), baseline), headers)
    samples = _timed_gets(port, interleave(measured, baseline), headers)
    return samples[0::2], samples[1::2]


def _wait(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise RunFailed(f"{what}: not within {WAIT_S:.0f} s")
        time.sleep(0.5)


def _produce(settings: PlatformSettings, topic: str, record_type: str, records: Sequence[dict],
             key_field: str) -> None:
    from schemas.codec import AvroCodec
    from streams import kafka

    codec = AvroCodec()
    kafka.produce_all(settings.kafka_bootstrap, topic, [
        (str(r[key_field]).encode(), codec.encode(record_type, r), int(r["event_time"])) for r in records])


def _fresh_topics(settings: PlatformSettings, *names: str, partitions: int = 2) -> dict[str, str]:
    from infra.platform.topics import TopicSpec, ensure_topics

    suffix = uuid.uuid4().hex[:8]
    topics = {n: f"bench.dashboard.{n}.{suffix}" for n in names}
    ensure_topics(settings.kafka_bootstrap, tuple(TopicSpec(t, key="campaign id", schema="", partitions=partitions)
                                                  for t in topics.values()))
    return topics


class _PacingWorld:
    """Part 1's campaigns on fresh topics, the first page's pacing days in Redis and the dashboard on them."""

    def __init__(self, settings: PlatformSettings, loop: _Loop, campaigns: int, log) -> None:
        from streams.pacing_store import PacingStore

        self.settings, self.loop, self.campaigns = settings, loop, campaigns
        self.first_id = 900_000_000 + random.randrange(1_000) * 100_000  # apart from other runs' Redis keys
        self.store = PacingStore(settings.redis_url)
        self.runner = None
        topics = _fresh_topics(settings, "campaigns", "state")
        serving, states = pacing_records(self.first_id, campaigns)
        log(f"publishing {campaigns:,} campaigns and their budget states to {topics['state']} ...")
        _produce(settings, topics["campaigns"], SERVING_CAMPAIGN, serving, "campaign_id")
        _produce(settings, topics["state"], BUDGET_STATE_TYPE, states, "campaign_id")
        for campaign_id in range(self.first_id, self.first_id + min(PAGE_SIZE, campaigns)):
            self.store.write(pacing_points(campaign_id, PACING_MINUTES))
        from serving.dashboard.app import DashboardSettings, start_dashboard

        self.runner, self.port, self.server, _ = loop.run(start_dashboard(DashboardSettings(
            settings.kafka_bootstrap, settings.redis_url, prometheus_url=settings.prometheus_url,
            state_topic=topics["state"], campaigns_topic=topics["campaigns"], port=0)))
        log(f"dashboard on port {self.port}: following the topics until it holds every campaign ...")
        _wait("the dashboard holding every campaign's budget state",
              lambda: self.server.is_ready() and self.server.board.applied >= 2 * campaigns)

    def close(self) -> None:
        from streams import redis_keys

        if self.runner is not None:
            self.loop.run(self.runner.cleanup())
        self.store.client.delete(*(redis_keys.pacing(c) for c in
                                   range(self.first_id, self.first_id + min(PAGE_SIZE, self.campaigns))))
        self.store.close()


def bench_pacing_api(world: _PacingWorld, requests: int, log) -> dict[str, Any]:
    log(f"GET /v1/pacing/campaigns x {requests}, alternating with GET /ready ...")
    lists = [f"/v1/pacing/campaigns?{QUERIES[i % len(QUERIES)]}" for i in range(requests)]
    list_ms, ready_ms = _alternated(world.port, lists, "/ready", warmup=50)
    return {**latency_figures("pacing", list_ms, ready_ms), "pacing_campaigns": world.campaigns,
            "pacing_requests": requests, "pacing_queries": list(QUERIES)}


def bench_page(port: int, loads: int, log) -> dict[str, Any]:
    from selenium.webdriver.support.ui import WebDriverWait

    from infra.browser import headless_chromium

    log(f"the page in headless Chromium x {loads}, alternating with a static file ...")
    driver = headless_chromium()
    page_ms, static_ms = [], []
    try:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": FIRST_POLL_HOOK})
        for _ in range(loads):
            driver.get(f"http://127.0.0.1:{port}/")
            page_ms.append(WebDriverWait(driver, 60, poll_frequency=0.05).until(
                lambda d: d.execute_script("return window.adserveFirstPollMs"),
                message="the dashboard page's first poll"))
            driver.get(f"http://127.0.0.1:{port}/static/style.css")
            static_ms.append(WebDriverWait(driver, 60, poll_frequency=0.05).until(lambda d: d.execute_script(
                "const t = performance.getEntriesByType('navigation')[0]; return t && t.loadEventEnd;"),
                message="the static file's load event"))
    finally:
        driver.quit()
    return page_figures([float(v) for v in page_ms], [float(v) for v in static_ms])


async def _advertiser(dsn: str, campaigns: int) -> tuple[int, str, list[int]]:
    """A new advertiser, its API key and its `campaigns` UTC CPC campaigns, through the campaign store."""
    from core.campaigns import validate_campaign
    from serving.advertiser.store import CampaignStore

    store = await CampaignStore(dsn).open()
    try:
        advertiser_id, key = await store.create_advertiser(f"bench-reports-{uuid.uuid4().hex[:8]}")
        ids = []
        for n in range(campaigns):
            row = await store.create_campaign(advertiser_id, validate_campaign({
                "name": f"bench-report-{n}", "bid_type": "CPC", "timezone": "UTC",
                "daily_budget_micros": 500 * 1_000_000}))
            ids.append(int(row["campaign_id"]))
        return advertiser_id, key, ids
    finally:
        await store.close()


def bench_report_api(settings: PlatformSettings, loop: _Loop, campaigns: int, requests: int,
                     log) -> dict[str, Any]:
    from serving.report_landing.main import land
    from serving.report_landing.settings import ReportLandingSettings
    from serving.advertiser.api import start_advertiser_api
    from serving.advertiser.store import migrate

    migrate(settings.postgres_dsn)
    _, key, ids = loop.run(_advertiser(settings.postgres_dsn, campaigns))
    first, to = report_range()
    day_before = (date.fromisoformat(first) - timedelta(days=1)).isoformat()
    billed = billed_records(ids, day_before, REPORT_DAYS + 1)
    conversions = conversion_records(billed)
    topics = _fresh_topics(settings, "billed", "conversions", "dead")
    log(f"landing {len(billed):,} hourly billed records and {len(conversions):,} conversions of {campaigns} "
        f"campaigns through serving.report_landing ...")
    _produce(settings, topics["billed"], BILLED_SPEND_TYPE, billed, "campaign_id")
    _produce(settings, topics["conversions"], AD_CONVERSION, conversions, "impression_id")
    counts = land(ReportLandingSettings(settings.kafka_bootstrap, settings.postgres_dsn, topics["billed"],
                                        topics["conversions"], topics["dead"], f"bench-dashboard-{uuid.uuid4().hex[:6]}",
                                        until_caught_up=True))
    log(f"landed: {counts}")
    runner, port, store = loop.run(start_advertiser_api(settings.postgres_dsn, port=0))
    try:
        path = f"/v1/reports?from={first}&to={to}&granularity=hour"
        headers = {"Authorization": f"Bearer {key}"}
        rows = sum(len(c["rows"]) for c in _get_json(port, path, headers)["campaigns"])
        log(f"GET {path} x {requests} ({rows:,} rows), alternating with GET /v1/campaigns/{ids[0]} ...")
        report_ms, campaign_ms = _alternated(port, [path] * requests, f"/v1/campaigns/{ids[0]}", warmup=10,
                                             headers=headers)
    finally:
        loop.run(runner.cleanup())
        loop.run(store.close())
    return {**latency_figures("report", report_ms, campaign_ms), "report_campaigns": campaigns,
            "report_hours": REPORT_DAYS * 24, "report_rows": rows, "report_requests": requests}


def _get_json(port: int, path: str, headers: dict[str, str]) -> Any:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RunFailed(f"GET {path} answered {response.status}: {body[:300]!r}")
        return json.loads(body)
    finally:
        connection.close()


def run(*, campaigns: int = 10_000, requests: int = 700, report_campaigns: int = 10, report_requests: int = 200,
        loads: int = 7, browser: bool = True, log=print) -> dict[str, Any]:
    from bench.common import machine
    from infra.platform import control

    settings = PlatformSettings.from_env()
    control.up(settings, log=log)
    figures: dict[str, Any] = {"machine": machine()}
    load_before = round(os.getloadavg()[0], 2)
    loop = _Loop()
    try:
        world = _PacingWorld(settings, loop, campaigns, log)
        try:
            figures.update(bench_pacing_api(world, requests, log))
            if browser:
                figures.update(bench_page(world.port, loads, log))
        finally:
            world.close()
        figures.update(bench_report_api(settings, loop, report_campaigns, report_requests, log))
    finally:
        loop.close()
    figures["load_average"] = [load_before, round(os.getloadavg()[0], 2)]
    figures["targets"] = verdicts(figures)
    return figures


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
