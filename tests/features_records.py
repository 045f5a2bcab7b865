"""Literal records of the features job's inputs, field by field (served log, beacons, conversions, feedback,
compiled ads and campaigns), shared by its unit and integration tests."""
from __future__ import annotations

from typing import Any, Sequence

T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z, a 5-minute boundary


def winner(impression_id: str, ad_id: int, campaign_id: int, position: int = 1, category: int = 0) -> dict[str, Any]:
    return {"impression_id": impression_id, "slot_position": position, "ad_id": ad_id, "campaign_id": campaign_id,
            "billing_type": "CLICK", "bid_micros": 1_000_000, "pctr": 0.01, "pcvr": None, "quality_micros": 0,
            "total_value_micros": 10_000, "runner_up_total_value_micros": 0, "price_micros": 500_000,
            "expected_cost_micros": 5_000, "participation_probability": 1.0, "bid_type": "CPC",
            "exclusion_category": category}


def served(request_id: str, at_ms: int, winners: Sequence[dict[str, Any]], *, placement: str = "feed",
           user_id: str | None = None, consented: bool = False) -> dict[str, Any]:
    """A ServedRecord; a consented request logs the user's features (the ad server logs none without consent)."""
    return {"request_id": request_id, "event_time": at_ms, "server_id": "s1", "user_id": user_id,
            "placement": placement, "user_features": {"age": 30.0} if consented else {},
            "ad_snapshot_version": 1, "slot_positions": [w["slot_position"] for w in winners],
            "winners": list(winners)}


def beacon(impression_id: str, ad_id: int, campaign_id: int, at_ms: int, event_type: str = "IMPRESSION", *,
           user_id: str | None = None, n: int = 0) -> dict[str, Any]:
    return {"event_id": f"evt-{impression_id}-{event_type}-{n}", "impression_id": impression_id,
            "event_type": event_type, "event_time": at_ms, "served_time": at_ms - 1_000, "campaign_id": campaign_id,
            "ad_id": ad_id, "price_micros": 500_000, "billing_type": "CLICK", "user_id": user_id,
            "token_key_id": "k1"}


def feedback(impression_id: str, ad_id: int, campaign_id: int, at_ms: int, feedback_type: str = "HIDE") -> dict:
    return {"event_id": f"fb-{impression_id}-{feedback_type}", "impression_id": impression_id,
            "feedback_type": feedback_type, "event_time": at_ms, "served_time": at_ms - 2_000,
            "campaign_id": campaign_id, "ad_id": ad_id, "user_id": None, "token_key_id": "k1"}


def conversion(impression_id: str, ad_id: int, campaign_id: int, at_ms: int) -> dict[str, Any]:
    return {"conversion_id": f"conv-{impression_id}", "impression_id": impression_id, "event_time": at_ms,
            "served_time": at_ms - 60_000, "click_time": at_ms - 30_000, "campaign_id": campaign_id, "ad_id": ad_id,
            "token_key_id": "k1"}


def serving_ad(ad_id: int, campaign_id: int, advertiser_id: int, at_ms: int, *, bid_type: str = "CPC",
               bid_micros: int = 1_000_000, removed: bool = False, version: int = 1) -> dict[str, Any]:
    return {"ad_id": ad_id, "campaign_id": campaign_id, "advertiser_id": advertiser_id, "version": version,
            "event_time": at_ms, "removed": removed, "bid_type": bid_type, "bid_micros": bid_micros,
            "quality_prior": 0.0, "creative_ref": f"creatives/ad-{ad_id}.png",
            "landing_url": f"https://shop{advertiser_id}.example.com/offer/{ad_id}", "static_score": 0.0,
            "targeting": []}


def serving_campaign(campaign_id: int, advertiser_id: int, at_ms: int) -> dict[str, Any]:
    return {"campaign_id": campaign_id, "advertiser_id": advertiser_id, "version": 1, "event_time": at_ms,
            "status": "ACTIVE", "bid_type": "CPC", "daily_budget_micros": 100_000_000, "currency": "USD",
            "timezone": "UTC", "dayparts": []}
