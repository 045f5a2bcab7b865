"""A day of beacons and the BilledSpend records the click aggregator emits for them, made with the aggregator's
own pure functions (core.clicks: deduplication, burst counts, tags, 10 s windows, then `bill_step` window by
window as the job's Bill does), for the report tests: the records have the topic's exact format and the
aggregator's cumulative, per campaign-day semantics, without a Flink cluster."""
from __future__ import annotations

import random
import uuid
from typing import Any, Iterable, Mapping

from core import clicks

T0 = 1_773_100_800_000  # 2026-03-10 00:00:00 UTC
HOUR_MS = 3_600_000
DOLLAR = 1_000_000
AGENTS = ("Mozilla/5.0", "Mozilla/5.0", "Mozilla/5.0", "Googlebot/2.1", "curl/8.0")


def campaign_version(campaign_id: int, budget_micros: int, timezone: str = "UTC", at_ms: int = T0 - 60_000,
                     bid_type: str = "CPC") -> dict[str, Any]:
    """A ServingCampaign record (schemas/serving_campaign.avsc)."""
    return {"campaign_id": campaign_id, "advertiser_id": 1, "version": 1, "event_time": at_ms, "status": "ACTIVE",
            "bid_type": bid_type, "daily_budget_micros": budget_micros, "currency": "USD", "timezone": timezone,
            "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None, "cap_per_week": None,
            "cpa_target_micros": None}


def beacons(campaigns: Mapping[int, str], hours: int, per_hour: int, seed: int = 7,
            start_ms: int = T0) -> list[dict[str, Any]]:
    """AdEvent records for `campaigns` (id -> billing type) over `hours` hours from `start_ms`: impressions,
    clicks on some (a few too soon after serving, a few from bots), and resends of some beacons."""
    rng = random.Random(seed)
    out = []
    for campaign_id, billing in campaigns.items():
        for i in range(hours * per_hour):
            at = start_ms + rng.randrange(hours * HOUR_MS)
            impression = f"i-{campaign_id}-{i}-{seed}"
            price = rng.choice((150_000, 400_000, 1_250_000))
            base = {"impression_id": impression, "served_time": at - 2_000, "campaign_id": campaign_id,
                    "ad_id": campaign_id * 10, "price_micros": price, "billing_type": billing,
                    "user_id": f"u{rng.randrange(50)}", "ip_address": f"10.0.0.{rng.randrange(30)}",
                    "user_agent": rng.choice(AGENTS), "token_key_id": "k1"}
            out.append({**base, "event_id": uuid.UUID(int=rng.getrandbits(128)).hex, "event_type": "IMPRESSION",
                        "event_time": at})
            if rng.random() < 0.3:
                delay = rng.choice((500, 4_000, 30_000))
                out.append({**base, "event_id": uuid.UUID(int=rng.getrandbits(128)).hex, "event_type": "CLICK",
                            "event_time": at + delay})
            if rng.random() < 0.1:  # the beacon fired again
                out.append({**out[-1], "event_id": uuid.UUID(int=rng.getrandbits(128)).hex,
                            "event_time": out[-1]["event_time"] + 1_500})
    return sorted(out, key=lambda e: e["event_time"])


def conversions(events: Iterable[Mapping[str, Any]], share: float = 0.4, seed: int = 3) -> list[dict[str, Any]]:
    """AdConversion records for some clicked impressions, a few of them reported twice (two conversion ids)."""
    rng = random.Random(seed)
    out = []
    for e in events:
        if e["event_type"] != "CLICK" or rng.random() >= share:
            continue
        record = {"conversion_id": uuid.UUID(int=rng.getrandbits(128)).hex, "impression_id": e["impression_id"],
                  "event_time": int(e["event_time"]) + 600_000, "served_time": e["served_time"],
                  "click_time": e["event_time"], "campaign_id": e["campaign_id"], "ad_id": e["ad_id"],
                  "token_key_id": "k1"}
        out.append(record)
        if rng.random() < 0.2:
            out.append({**record, "conversion_id": uuid.UUID(int=rng.getrandbits(128)).hex,
                        "event_time": record["event_time"] + 5_000})
    return out


def windows(events: Iterable[Mapping[str, Any]]) -> dict[int, list[clicks.WindowTotals]]:
    """campaign id -> its 10 s windows, from the same steps as core.clicks.recount."""
    firsts: dict[tuple[str, str], Mapping[str, Any]] = {}
    for e in events:
        key = clicks.dedupe_key(e)
        firsts[key] = clicks.first_of([firsts[key], e]) if key in firsts else e
    unique = list(firsts.values())
    click_events = [e for e in unique if e["event_type"] == "CLICK"]
    by_user, by_ip = clicks.burst_counts(click_events, "user_id"), clicks.burst_counts(click_events, "ip_address")
    seen = clicks.impression_times(unique)
    grouped: dict[tuple[int, int], list] = {}
    for e in unique:
        key, event, reason, joined = clicks.tag(e, by_user.get(e["event_id"], 0), by_ip.get(e["event_id"], 0),
                                                seen.get(str(e["impression_id"])))
        grouped.setdefault(key, []).append((event, reason, joined))
    out: dict[int, list[clicks.WindowTotals]] = {}
    for (campaign_id, end), tagged in sorted(grouped.items()):
        out.setdefault(campaign_id, []).append(clicks.totals_of(end, tagged))
    return out


def billed_stream(events: Iterable[Mapping[str, Any]], campaigns: Iterable[Mapping[str, Any]]
                  ) -> list[dict[str, Any]]:
    """Every BilledSpend record the aggregator's bill emits for these events, in emission order: the campaign
    version first, then each window in event-time order through `core.clicks.bill_step`."""
    versions = {int(c["campaign_id"]): c for c in campaigns}
    out = []
    for campaign_id, campaign_windows in sorted(windows(events).items()):
        bill = clicks.CampaignBill(campaign_id)
        if campaign_id in versions:
            bill, _ = clicks.bill_step(bill, clicks.CampaignVersion(versions[campaign_id]))
        for totals in campaign_windows:
            bill, record = clicks.bill_step(bill, clicks.WindowPart(totals))
            if record is not None:
                out.append(record)
    return out
