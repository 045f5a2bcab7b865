"""The simulated day's billing close: the click aggregator's event time carried past midnight, its last billed
totals awaited, each campaign's bill taken from them (`job_bill`), and the same beacons billed again in one
process by core.clicks.recount to compare."""
from __future__ import annotations

import logging
import time
from typing import Any

from core import clicks
from schemas import topics
from sim.pacing_jobs import DayRun
from sim.pacing_scenario import DAY0_MS, DAY_MS, SIM_DAY, CampaignDay, JobBill

LOG = logging.getLogger(__name__)


CLOCK_CAMPAIGN = 1  # the end-of-day beacons that carry the aggregator's event time past midnight
AD_EVENT = topics.record_type(topics.AD_EVENTS)


def close_billing(run: DayRun, days: dict[int, CampaignDay], beacons: list[dict[str, Any]],
                  versions: list[dict[str, Any]], timeout_s: float = 180) -> dict[str, Any]:
    """End the day for the click aggregator (a beacon of no campaign after midnight moves its event time past
    the last window), wait for its last totals, take each campaign's bill from them, and bill the same beacons
    again with core.clicks.recount to compare. `versions`: the campaign records the day started with (each
    campaign's records published during the day are added from its history)."""
    from core.clicks import progress_key, recount

    feed, producer, codec, events_topic = run.feed, run.producer, run.codec, run.topics["events"]
    for at in (DAY0_MS + DAY_MS + 5_000, DAY0_MS + DAY_MS + 15_000):
        producer.produce(events_topic, key=b"1", timestamp=at, value=codec.encode(AD_EVENT, {
            "event_id": f"clock-{at}", "impression_id": f"clock-{at}", "event_type": "IMPRESSION",
            "event_time": at, "served_time": at, "campaign_id": CLOCK_CAMPAIGN, "ad_id": CLOCK_CAMPAIGN,
            "price_micros": 0, "billing_type": "CLICK", "user_id": None, "ip_address": None, "user_agent": None,
            "token_key_id": "sim"}))
    producer.flush(30)
    # Windows close in event-time order: once the window of the last beacon is billed, every earlier one is
    # (a few seconds more for totals of other shards that closed with it).
    last_window = (max((int(b["event_time"]) for b in beacons), default=DAY0_MS) // 10_000 + 1) * 10_000
    began = time.monotonic()
    while feed.billed_progress_ms < last_window and time.monotonic() - began < timeout_s:
        time.sleep(0.5)
    closed = feed.billed_progress_ms >= last_window
    if not closed:
        LOG.warning("the click aggregator did not bill the day's last window within %.0f s", timeout_s)
    time.sleep(3.0)
    records: dict[int, list[dict[str, Any]]] = {}
    for r in list(feed.billed):
        if r["budget_day"] == SIM_DAY and int(r["campaign_id"]) in days:
            records.setdefault(int(r["campaign_id"]), []).append(r)
    for campaign_id, day in days.items():
        day.bill = job_bill(day, sorted(records.get(campaign_id, []), key=progress_key))
    versions = versions + [v for day in days.values() for v in day.campaign.history]
    reference = recount(beacons, versions)
    fields = ("billed_spend_micros", "absorbed_overspend_micros", "billed_clicks", "billed_impressions")
    mismatched = []
    for campaign_id, day in days.items():
        ref = reference.get((campaign_id, SIM_DAY), {})
        job = (day.bill.billed_micros, day.bill.absorbed_micros, day.bill.billed_clicks, day.bill.billed_impressions)
        if job != tuple(int(ref.get(f, 0)) for f in fields):
            mismatched.append({"campaign_id": campaign_id, "job": job,
                               "recount": tuple(int(ref.get(f, 0)) for f in fields)})
    return {"by": "click_aggregator", "beacons": len(beacons), "totals_read": len(feed.billed),
            "last_window_billed": closed, "recount_mismatches": mismatched,
            "recount": {key: record for key, record in reference.items() if key[0] in days}}


def job_bill(day: CampaignDay, records: list[dict[str, Any]]) -> JobBill:
    """A campaign's day from the aggregator's totals (oldest first): the last totals, billed money by minute
    (each total's growth, in the minute its window ended), and whatever growth took the billed total above the
    billing limit at that instant (core.clicks.billing_limit: the highest budget its events may have been served
    under)."""
    bill = JobBill(day.campaign.budget_micros)
    previous = 0
    for r in records:
        at = int(r["event_time"])
        billed = int(r["billed_spend_micros"])
        budget = clicks.billing_limit([(DAY0_MS + since, b) for since, b in day.budgets], at)
        bill.billed_above_micros += max(0, billed - max(previous, budget))
        minute = min(1439, max(0, (at - 1 - DAY0_MS) // 60_000))
        day.billed_by_minute[minute] += billed - previous
        previous = billed
        bill.billed_micros, bill.absorbed_micros = billed, int(r["absorbed_overspend_micros"])
        bill.billed_clicks, bill.billed_impressions = int(r["billed_clicks"]), int(r["billed_impressions"])
    return bill
