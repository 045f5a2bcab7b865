"""Why one impression cost what it did (`explain_winner`): its price recomputed from the served log's inputs
with core.auction's pricing (exact_total, price_micros) and checked against the logged price. Pure: a record
in, a plain dict out."""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Mapping

from core.auction import CPA, CPM, Candidate, exact_total, price_micros, reserve_sets_price
from core.errors import AdserveError
from core.replay_fields import Record, auction_candidate, runner_up_bid, slot_of, winner_bid, winner_bid_type


class ImpressionNotFound(AdserveError):
    """No winner of the served log has this impression id."""


PRICE_UNIT = {"cpm": "thousand impressions", "cpc": "click", "cpa": "conversion"}


def _number(value: Fraction) -> int | float:
    """A micros amount for JSON: an integer when whole, else a float."""
    return int(value) if value.denominator == 1 else float(value)


def _at_slot(rate: float, slot_index: int) -> list[float]:
    """A pCTR list holding the logged rate at the slot (the only one a price at that slot reads)."""
    return [0.0] * slot_index + [float(rate)]


def _find(record: Record, impression_id: str) -> Mapping[str, Any]:
    for w in record.get("winners") or []:
        if w["impression_id"] == impression_id:
            return w
    raise ImpressionNotFound(f"request {record.get('request_id')} has no winner with impression id {impression_id}")


def _runner_up_candidate(w: Mapping[str, Any], slot_index: int) -> Candidate | None:
    if w.get("runner_up_ad_id") is None or not w.get("runner_up_bid_type"):
        return None
    return auction_candidate(w["runner_up_ad_id"], w["runner_up_campaign_id"],
                             runner_up_bid(w, _at_slot(w["runner_up_pctr"] or 0.0, slot_index)))


def _arithmetic(own: Candidate, slot_index: int, next_total: Fraction, reserve_micros: int) -> dict[str, Any]:
    """The price formula's steps in the bid's unit: max(next - quality, reserve) / rate, rounded up, capped at
    the bid."""
    floored = reserve_sets_price(own, next_total, reserve_micros)
    numerator = Fraction(reserve_micros) if floored else next_total - own.quality_micros
    if own.bid_code == CPM:
        divisor: Fraction | None = Fraction(1, 1000)
    else:
        rate = Fraction(repr(float(own.pctr[slot_index])))
        if own.bid_code == CPA:
            rate *= Fraction(repr(float(own.pcvr)))
        divisor = rate if rate > 0 else None
    raw = numerator / divisor if divisor is not None else None
    rounded = math.ceil(raw) if raw is not None else own.bid_micros
    return {"numerator_micros": _number(numerator), "divisor": float(divisor) if divisor is not None else None,
            "raw_price_micros": _number(raw) if raw is not None else None, "rounded_up_micros": rounded,
            "capped_at_bid": rounded > own.bid_micros, "floored_at_reserve": floored, "floored_at_zero": rounded < 0}


def explain_winner(record: Record, impression_id: str) -> dict[str, Any]:
    """Why one impression cost what it did, recomputed from the logged inputs with core.auction's pricing and
    checked against the logged price (`price_matches`). Raises ImpressionNotFound."""
    w = _find(record, impression_id)
    slot = slot_of(impression_id)
    s = slot - 1
    bid_type = winner_bid_type(w)
    own = auction_candidate(w["ad_id"], w["campaign_id"], winner_bid(w, _at_slot(w["pctr"], s)), 0,
                            w.get("participation_probability", 1.0))
    own_total = exact_total(own, s)
    notes: list[str] = []
    reserve = record.get("reserve_micros")
    if reserve is None:
        notes.append("version-1 record: the reserve was not logged (taken as 0) and the runner-up's total only "
                     "rounded down to a whole micro, so the recomputation may be off by a micro")
    reserve_total = Fraction(int(reserve or 0))
    rival = _runner_up_candidate(w, s)
    if rival is not None:
        runner_total: Fraction | None = exact_total(rival, s)
    elif reserve is None and int(w.get("runner_up_total_value_micros") or 0) > 0:
        runner_total = Fraction(int(w["runner_up_total_value_micros"]))
    else:
        runner_total = None
    next_total = reserve_total if runner_total is None else max(runner_total, reserve_total)
    recomputed = price_micros(own, s, next_total, reserve_micros=int(reserve or 0))
    logged_price = int(w["price_micros"])
    runner_up = None if runner_total is None else {
        "ad_id": w.get("runner_up_ad_id"), "campaign_id": w.get("runner_up_campaign_id"),
        "bid_type": rival.bid_type if rival else None, "bid_micros": rival.bid_micros if rival else None,
        "pctr": w.get("runner_up_pctr"), "pcvr": w.get("runner_up_pcvr"),
        "quality_micros": rival.quality_micros if rival else None, "total_micros": _number(runner_total)}
    return {
        "impression_id": impression_id, "request_id": record.get("request_id"), "slot": slot,
        "slot_position": int(w["slot_position"]), "placement": record.get("placement"),
        "country": record.get("country"), "event_time": record.get("event_time"),
        "ad_id": w["ad_id"], "campaign_id": w["campaign_id"], "bid_type": bid_type,
        "price_unit": PRICE_UNIT[bid_type], "bid_micros": int(w["bid_micros"]), "pctr": float(w["pctr"]),
        "pcvr": None if w.get("pcvr") is None else float(w["pcvr"]), "quality_micros": int(w["quality_micros"]),
        "own_total_micros": _number(own_total),
        "price_set_by": "reserve" if runner_total is None or reserve_sets_price(own, next_total, int(reserve or 0))
        else "runner_up",
        "runner_up": runner_up, "reserve_micros": None if reserve is None else int(reserve),
        "next_total_micros": _number(next_total),
        "arithmetic": _arithmetic(own, s, next_total, int(reserve or 0)),
        "recomputed_price_micros": recomputed, "logged_price_micros": logged_price,
        "price_matches": recomputed == logged_price,
        "expected_cost_micros": int(w["expected_cost_micros"]),
        "participation_probability": float(w.get("participation_probability", 1.0)),
        "exploration": bool(record.get("exploration")),
        "exploration_probability": float(w.get("exploration_probability", 1.0)),
        "scored_by_fallback": bool(record.get("scored_by_fallback")), "model_version": record.get("model_version"),
        "quality_floor_micros": record.get("quality_floor_micros"),
        "record_version": 1 if reserve is None else 2, "notes": notes,
    }
