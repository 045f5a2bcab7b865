"""The `ad.served` record of one decision (schemas/ad_served.avsc): what the ad server logs after it
answered, and what every simulation that stands in for an ad server logs the same way. Pure.

It owns the mapping from a Decision (serving.decision.engine) to the record; it never decides anything."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from core.replay import loser_columns, request_replay_fields, winner_replay_fields
from core.reserves import AuctionTerms

BILLING_OF = {"cpm": "IMPRESSION", "cpc": "CLICK", "cpa": "CLICK"}


def impression_id(request_id: str, slot: int) -> str:
    """The id signed into a slot's token: the request id and the slot number."""
    return f"{request_id}:{slot}"


@dataclass(frozen=True)
class ServedRequest:
    """What the served record says of the request it answers."""

    request_id: str
    placement: str
    location: str | None  # "country/region/city", as far as it is known
    user_id: str | None
    device: str | None
    language: str | None  # the request's languages, comma-separated
    page: str | None
    slot_positions: Sequence[int]


def served_record(decision, request: ServedRequest, *, server_id: str, now_ms: int,
                  user_features: Mapping[str, float], snapshot_version: int, terms: AuctionTerms) -> dict[str, Any]:
    """The ServedRecord (version 4) of one answered request, with what a replay needs (core.replay: the reserve
    and quality floor of the auction's `terms`); its sampled losers as columns (core.replay.loser_columns)."""
    request_id, slot_positions = request.request_id, request.slot_positions
    parts = (request.location or "").split("/")
    winners = []
    for w in decision.winners:
        e = w.explanation
        winners.append({
            "impression_id": impression_id(request_id, w.slot), "slot_position": w.position,
            "ad_id": w.ad_id, "campaign_id": w.campaign_id, "billing_type": BILLING_OF[w.billing],
            "bid_micros": int(e["bid_micros"]), "pctr": float(e["pctr"]),
            "pcvr": None if e.get("pcvr") is None else float(e["pcvr"]),
            "quality_micros": int(e["quality_micros"]), "total_value_micros": int(w.total_value_micros),
            "runner_up_total_value_micros": int(e.get("runner_up_total_value_micros") or 0),
            "price_micros": int(w.price_micros), "expected_cost_micros": int(w.expected_cost_micros),
            "participation_probability": float(e["participation_probability"]),
            "exploration_probability": float(e["exploration_probability"]),
            **winner_replay_fields(e)})
    return {
        "request_id": request_id, "event_time": now_ms, "server_id": server_id, "user_id": request.user_id,
        "placement": request.placement, "country": parts[0] or None if parts else None,
        "region": "/".join(parts[:2]) if len(parts) > 1 else None,
        "city": "/".join(parts[:3]) if len(parts) > 2 else None,
        "device": request.device, "language": request.language, "page": request.page,
        "user_features": {k: float(v) for k, v in user_features.items()},
        # the version of the ad features the model scored with; the server's own when the model names none
        "ad_snapshot_version": int(getattr(decision, "ad_snapshot_version", None) or snapshot_version),
        "model_version": decision.model_version,
        "scored_by_fallback": bool(decision.scored_by_fallback), "exploration": bool(decision.explored),
        "winners": winners,
        **request_replay_fields(terms.reserve_micros, slot_positions, decision.funnel.get("preranked", 0),
                                terms.quality_floor_micros),
        "sampled_losers": [], "loser_columns": loser_columns(decision.sampled_losers, len(slot_positions))}
