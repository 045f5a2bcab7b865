"""The simulated day's script: its clock, its traffic curve, its campaigns and their changes, the curve document
the budget job starts it with, and what the day records of each campaign. Plain data and pure functions: nothing
here talks to Kafka, Redis or the jobs."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from core.campaigns import static_score
from sim.synthetic import diurnal

DAY_MS = 86_400_000
SIM_DAY = "2026-03-10"
DAY0_MS = int(datetime(2026, 3, 10, tzinfo=timezone.utc).timestamp() * 1000)
DOLLAR = 1_000_000
PLACEMENTS = {"feed": (0.5, 4.0), "article": (0.3, 3.0), "video": (0.2, 5.0)}  # share, pCTR multiplier
COUNTRIES = {"US": 0.5, "GB": 0.2, "DE": 0.2, "CA": 0.1}
SLOTS = (1, 2)
SPIKE = (20 * 3600, 22 * 3600, 3.0)  # the live event: from, to (seconds of the day), traffic factor
RESERVE_MICROS = 20_000  # every placement's reserve: $0.02 of total value per impression (a lone bidder pays it)
# The full-size day: the requests and servers its budgets are written for. A smaller day (`adserve simulate`'s
# default) scales every budget by requests / FULL_DAY_REQUESTS, so each campaign meets the same share of its
# demand (the same p, the same throttling) in fewer requests.
FULL_DAY_REQUESTS = 200_000
FULL_DAY_SERVERS = 3


def traffic(second: float) -> float:
    start, end, factor = SPIKE
    return diurnal(second) * (factor if start <= second < end else 1.0)


@dataclass
class SimCampaign:
    campaign_id: int
    name: str
    budget_micros: int
    bid_type: str
    bid_micros: int
    placements: tuple[str, ...]
    countries: tuple[str, ...]
    ads: int = 2
    version: int = 1
    status: str = "ACTIVE"
    planned_budget_micros: int = 0  # the full-size day's starting budget: the size class it is reported under
    launch_s: int = 0  # second of the day it is created (0: it ran last week and starts the day)
    history: list[dict[str, Any]] = field(default_factory=list)  # its records published during the day

    def __post_init__(self) -> None:
        self.planned_budget_micros = self.planned_budget_micros or self.budget_micros

    def record(self, at_ms: int) -> dict[str, Any]:
        return {"campaign_id": self.campaign_id, "advertiser_id": self.campaign_id, "version": self.version,
                "event_time": at_ms, "status": self.status, "bid_type": self.bid_type,
                "daily_budget_micros": self.budget_micros, "currency": "USD", "timezone": "UTC",
                "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None,
                "cap_per_week": None, "cpa_target_micros": None}

    def ad_records(self, at_ms: int) -> list[dict[str, Any]]:
        clauses = [{"attribute": "placement", "values": sorted(self.placements), "excluded": False},
                   {"attribute": "location", "values": sorted(self.countries), "excluded": False}]
        return [{"ad_id": self.campaign_id * 100 + i, "campaign_id": self.campaign_id,
                 "advertiser_id": self.campaign_id, "version": 1, "event_time": at_ms, "removed": False,
                 "bid_type": self.bid_type, "bid_micros": self.bid_micros, "quality_prior": 0.0,
                 "creative_ref": f"creative-{self.campaign_id}-{i}",
                 "landing_url": f"https://sim.example/{self.campaign_id}",
                 "static_score": static_score(self.bid_type, self.bid_micros, 0.0), "targeting": clauses}
                for i in range(self.ads)]


@dataclass
class Event:
    second: int
    kind: str  # raise | lower | pause | resume | launch | kill
    campaign_id: int = 0
    factor: float = 1.0


def script(base_id: int, seed: int, budget_scale: float = 1.0) -> tuple[list[SimCampaign], list[Event]]:
    """The day's campaigns and changes. Budgets are written for the full-size day; `budget_scale` (requests /
    FULL_DAY_REQUESTS) scales each, and each keeps its full-size budget as the size class it is reported under
    (a $10,000 campaign of a day at 30 % is still a large campaign with 30 % of the traffic)."""
    rng = random.Random(seed)
    every = tuple(PLACEMENTS)
    campaigns = [SimCampaign(base_id, "large-50k", 50_000 * DOLLAR, "CPC", 45 * DOLLAR, every, ("US", "CA", "GB")),
                 SimCampaign(base_id + 1, "large-10k-a", 10_000 * DOLLAR, "CPC", 20 * DOLLAR, every, ("US", "DE")),
                 SimCampaign(base_id + 2, "large-10k-b", 10_000 * DOLLAR, "CPM", 1_200 * DOLLAR, ("video", "feed"),
                             ("US", "GB", "DE", "CA"))]
    for i in range(10):
        placements = tuple(sorted(rng.sample(every, rng.randint(1, 3))))
        countries = tuple(sorted(rng.sample(tuple(COUNTRIES), rng.randint(1, 4))))
        budget = rng.choice([500, 1_000, 2_000, 3_000, 5_000]) * DOLLAR
        if i % 3 == 2:
            campaigns.append(SimCampaign(base_id + 10 + i, f"medium-{i}", budget, "CPM",
                                         rng.randint(300, 600) * DOLLAR, placements, countries))
        else:
            campaigns.append(SimCampaign(base_id + 10 + i, f"medium-{i}", budget, "CPC",
                                         rng.randint(8, 15) * DOLLAR, placements, countries))
    for i in range(16):
        placements = tuple(sorted(rng.sample(every, rng.randint(1, 2))))
        countries = tuple(sorted(rng.sample(tuple(COUNTRIES), rng.randint(1, 3))))
        budget = rng.choice([20, 20, 30, 50, 100]) * DOLLAR
        campaigns.append(SimCampaign(base_id + 30 + i, f"small-{i}", budget, "CPC", 2 * DOLLAR, placements,
                                     countries))
    # $300 from 15:00 on video in the US and GB at $15 a click: about half of what p = 1 would spend there
    launched = SimCampaign(base_id + 50, "launched-15h", 300 * DOLLAR, "CPC", 15 * DOLLAR, ("video",),
                           ("US", "GB"), launch_s=15 * 3600)
    campaigns.append(launched)
    for c in campaigns:
        c.planned_budget_micros, c.budget_micros = c.budget_micros, int(c.budget_micros * budget_scale)
    events = [Event(12 * 3600, "pause", base_id + 11), Event(15 * 3600, "resume", base_id + 11),
              Event(launched.launch_s, "launch", launched.campaign_id),
              Event(14 * 3600, "raise", base_id + 10, 1.5), Event(16 * 3600, "lower", base_id + 12, 0.5),
              Event(21 * 3600 + 1800, "kill")]
    return campaigns, sorted(events, key=lambda e: e.second)


def curves(campaigns: list[SimCampaign], market: dict[str, Any]) -> dict[str, Any]:
    """The curve document the budget job starts the day with (pipelines.traffic_curves' form): last week's
    hourly request volume (the same diurnal shape; the live event is news to it) for every campaign that ran
    then and every placement, and last week's market (`last_week`)."""
    shape = [round(diurnal(h * 3600 + 1800), 6) for h in range(24)]
    return {"default": shape, "campaigns": {str(c.campaign_id): shape for c in campaigns if not c.launch_s},
            "placements": {p: shape for p in PLACEMENTS}, "values_to_beat": market["values_to_beat"],
            "value_per_bid": market["value_per_bid"]}


@dataclass
class JobBill:
    """What the click aggregator billed a campaign for the day (its last BilledSpend totals), and what of it
    went above the budget in force when it was billed (checked at every total it published: must be 0)."""

    budget_micros: int
    billed_micros: int = 0
    absorbed_micros: int = 0
    billed_above_micros: int = 0
    billed_clicks: int = 0
    billed_impressions: int = 0


@dataclass
class CampaignDay:
    campaign: SimCampaign
    budgets: list[tuple[int, int]]  # (from ms, daily budget): the budget in force over the day
    bill: JobBill | None = None  # the click aggregator's, once the day is over
    served_by_minute: np.ndarray = field(default_factory=lambda: np.zeros(1440, dtype=np.int64))
    expected_by_minute: np.ndarray = field(default_factory=lambda: np.zeros(1440, dtype=np.int64))
    billed_by_minute: np.ndarray = field(default_factory=lambda: np.zeros(1440, dtype=np.int64))
    p_by_minute: np.ndarray = field(default_factory=lambda: np.full(1440, np.nan))
    state_by_minute: list[str] = field(default_factory=lambda: [""] * 1440)
    clicks: int = 0  # clicks drawn (the aggregator's billed count is bill.billed_clicks)
    last_served_s: int = -1
    stopped_after_lower_s: int | None = None
