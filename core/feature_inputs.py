"""What the features job reads from each record: the per-ad inputs (served slots, beacons, conversions,
feedback, the ad's compiled attributes) and the per-user inputs of requests served with personalisation
consent. Pure: decoded records in, typed inputs out (docs/features.md).

Consent: the ad server logs a request's user features only when the user consented to personalisation
(serving.adserver.app: `features = user.features() if consented else {}`), so a served record whose
user_features are empty is treated as not consented and none of its impressions or clicks reach a user's
features."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from core.ad_content import content_embedding
from core.ad_stats import AdAttributes
from core.feature_windows import CLICK, CONVERSION, IMPRESSION

SERVED, ATTRIBUTES = "SERVED", "ATTRIBUTES"  # the per-ad input kinds besides the beacon kinds


@dataclass(frozen=True)
class AdInput:
    """One thing an ad's window learns: a served slot, a beacon (IMPRESSION, CLICK, CONVERSION, HIDE,
    REPORT) or its attributes."""

    kind: str
    ad_id: int
    campaign_id: int
    event_ms: int
    impression_id: str = ""
    served_ms: int = 0
    placement: str = ""
    position: int = 0
    attributes: AdAttributes | None = None


@dataclass(frozen=True)
class UserInput:
    """One thing a consented user's window learns: a served slot with its ad's category, or a beacon
    (IMPRESSION, CLICK) of one of the user's impressions."""

    kind: str
    user_id: str
    impression_id: str
    event_ms: int
    category: int = 0


def served_inputs(served: Mapping[str, Any]) -> list[AdInput]:
    """One served slot per winner of a ServedRecord: where the ad was shown."""
    return [AdInput(SERVED, int(w["ad_id"]), int(w["campaign_id"]), int(served["event_time"]),
                    impression_id=w["impression_id"], served_ms=int(served["event_time"]),
                    placement=served["placement"], position=int(w["slot_position"]))
            for w in served.get("winners", [])]


def beacon_input(record_type: str, record: Mapping[str, Any]) -> AdInput:
    """An AdEvent (its event type), an AdConversion (CONVERSION) or an AdFeedback (its feedback type)."""
    kind = {"AdEvent": lambda: record["event_type"], "AdConversion": lambda: CONVERSION,
            "AdFeedback": lambda: record["feedback_type"]}[record_type]()
    return AdInput(kind, int(record["ad_id"]), int(record["campaign_id"]), int(record["event_time"]),
                   impression_id=record["impression_id"], served_ms=int(record["served_time"]))


def attributes_input(ad: Mapping[str, Any]) -> AdInput:
    """A ServingAd as the ad's attributes, with its content embedding. Its category is its
    competitive-exclusion category (0 when the record has none)."""
    category = int(ad.get("exclusion_category", 0) or 0)
    attributes = AdAttributes(
        campaign_id=int(ad["campaign_id"]), advertiser_id=int(ad["advertiser_id"]), version=int(ad["version"]),
        bid_type=ad["bid_type"], bid_micros=int(ad["bid_micros"]), category=category, removed=bool(ad["removed"]),
        embedding=tuple(content_embedding(ad["creative_ref"], ad["landing_url"], category)))
    return AdInput(ATTRIBUTES, int(ad["ad_id"]), int(ad["campaign_id"]), int(ad["event_time"]),
                   attributes=attributes)


def consented(served: Mapping[str, Any]) -> bool:
    """Whether the request was served with personalisation consent, as far as its served record shows."""
    return bool(served.get("user_id")) and bool(served.get("user_features"))


def user_served_inputs(served: Mapping[str, Any]) -> list[UserInput]:
    """The served slots of a consented request for its user's window (none without consent)."""
    if not consented(served):
        return []
    return [UserInput(SERVED, served["user_id"], w["impression_id"], int(served["event_time"]),
                      int(w.get("exclusion_category", 0) or 0)) for w in served.get("winners", [])]


def user_beacon_input(event: Mapping[str, Any]) -> UserInput | None:
    """An AdEvent of a known user for its user's window (it counts only if its impression's served slot,
    from a consented request, is known)."""
    if not event.get("user_id") or event["event_type"] not in (IMPRESSION, CLICK):
        return None
    return UserInput(event["event_type"], event["user_id"], event["impression_id"], int(event["event_time"]))
