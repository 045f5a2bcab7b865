"""The ad server's state: duplicated and reordered serving records leave it exactly as the newest versions."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from serving.adserver.state import ServingState


def ad(ad_id: int, version: int, bid: int, removed: bool = False) -> dict:
    return {"ad_id": ad_id, "campaign_id": 1, "advertiser_id": 1, "version": version, "event_time": 1_000,
            "removed": removed, "bid_type": "CPM", "bid_micros": bid, "quality_prior": 0.0, "creative_ref": "c",
            "landing_url": "https://x.example/", "static_score": 1.0,
            "targeting": [{"attribute": "placement", "values": [f"p{version % 3}"], "excluded": False}]}


def campaign(version: int, status: str) -> dict:
    return {"campaign_id": 1, "advertiser_id": 1, "version": version, "event_time": 1_000, "status": status,
            "bid_type": "CPM", "daily_budget_micros": 1, "currency": "USD", "timezone": "UTC", "flight_start": None,
            "flight_end": None, "dayparts": [], "cap_per_day": None, "cap_per_week": None, "cpa_target_micros": None}


def snapshot(state: ServingState) -> tuple:
    index = state.index
    ads = sorted((int(index.ad_id.data[r]), int(index.version.data[r]), int(index.bid_micros.data[r]))
                 for r in range(index.size) if r in index.alive)
    row = state.campaigns.row_of(1)
    return ads, (int(state.campaigns.version.data[row]), int(state.campaigns.status.data[row])) if row is not None \
        else None


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_duplicates_and_reordering_leave_the_state_of_the_newest_versions(seed):
    rng = random.Random(seed)
    records = [("serving.campaigns", campaign(v, rng.choice(["ACTIVE", "PAUSED"]))) for v in range(1, 5)]
    for ad_id in range(1, 6):
        for v in range(1, rng.randint(2, 5)):
            records.append(("serving.ads", ad(ad_id, v, rng.randint(1, 10**6), removed=rng.random() < 0.2)))
    in_order = ServingState("s")
    for topic, record in records:
        in_order.apply(topic, record, 2_000)
    shuffled = records + rng.sample(records, len(records) // 2)  # duplicates
    rng.shuffle(shuffled)
    messy = ServingState("s")
    for topic, record in shuffled:
        messy.apply(topic, record, 2_000)
    assert snapshot(messy) == snapshot(in_order)
    assert messy.commit_lag_s == 1.0
