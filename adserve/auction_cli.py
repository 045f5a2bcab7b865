"""`adserve auction --input FILE|-`: the auction alone, on candidates given as JSON.

Input:
  {"slots": [{"position": 1}, ...],
   "reserve_micros": 100,                    the reserve per impression: the least bid value and total an ad needs
                                             and the least it pays (optional; default the platform's, 100)
   "quality_floor_micros": -500,             an ad whose quality is under it cannot win (optional; default none)
   "exploration_share": 0.0, "seed": 0,      optional; the CLI does not explore unless asked
   "candidates": [{"ad_id": "A", "campaign_id": "a", "bid_type": "cpc" | "cpm" | "cpa",
                   "bid_micros": 2000000, "pctr": [0.015, ...one per slot], "pcvr": 0.0,
                   "quality_micros": 2000, "exclusion_category": 0}, ...]}
Output: {"winners": [{"slot": 1, "position": 1, "ad_id": "A", "campaign_id": "a", "price_micros": 1400000,
          "billing": "cpc", "total_value_micros": 32000, "explanation": {...}}, ...],
         "explored": false, "sampled_losers": [...]}
Bad JSON or a bad field: exit status 2 and a message naming the field."""
from __future__ import annotations

import json
import random
import sys
from typing import Any, TextIO

from core.auction import BID_TYPES, AuctionRules, Candidate, run_auction
from core.errors import AdserveError
from core.reserves import PLATFORM_TERMS


class InputError(AdserveError, ValueError):
    pass


def _int(value: Any, field: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{field}: expected an integer (micros), got {json.dumps(value)}")
    if minimum is not None and value < minimum:
        raise InputError(f"{field}: must be >= {minimum}, got {value}")
    return value


def _rate(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise InputError(f"{field}: expected a probability between 0 and 1, got {json.dumps(value)}")
    return float(value)


def parse(document: Any) -> tuple[list[Candidate], list[int], int, int | None, float, int]:
    if not isinstance(document, dict):
        raise InputError("input: expected a JSON object with slots and candidates")
    slots = document.get("slots")
    if not isinstance(slots, list) or not 1 <= len(slots) <= 3:
        raise InputError("slots: expected a list of 1 to 3 slots, e.g. [{\"position\": 1}]")
    positions = [_int(s.get("position") if isinstance(s, dict) else None, f"slots[{i}].position", 1)
                 for i, s in enumerate(slots)]
    reserve = _int(document.get("reserve_micros", PLATFORM_TERMS.reserve_micros), "reserve_micros", 0)
    floor = document.get("quality_floor_micros")
    floor = None if floor is None else _int(floor, "quality_floor_micros")
    exploration = _rate(document.get("exploration_share", 0.0), "exploration_share")
    seed = _int(document.get("seed", 0), "seed")
    raw = document.get("candidates")
    if not isinstance(raw, list):
        raise InputError("candidates: expected a list of candidates")
    candidates = []
    for i, c in enumerate(raw):
        where = f"candidates[{i}]"
        if not isinstance(c, dict):
            raise InputError(f"{where}: expected an object")
        for key in ("ad_id", "campaign_id"):
            if not isinstance(c.get(key), (str, int)) or isinstance(c.get(key), bool):
                raise InputError(f"{where}.{key}: expected a string or integer id")
        bid_type = c.get("bid_type")
        if not isinstance(bid_type, str) or bid_type.lower() not in BID_TYPES:
            raise InputError(f"{where}.bid_type: expected one of {list(BID_TYPES)}, got {json.dumps(bid_type)}")
        pctr = c.get("pctr")
        if not isinstance(pctr, list) or len(pctr) != len(positions):
            raise InputError(f"{where}.pctr: expected a list with one pCTR per slot ({len(positions)})")
        candidates.append(Candidate(
            ad_id=c["ad_id"], campaign_id=c["campaign_id"], bid_type=bid_type.lower(),
            bid_micros=_int(c.get("bid_micros"), f"{where}.bid_micros", 0),
            pctr=[_rate(p, f"{where}.pctr[{j}]") for j, p in enumerate(pctr)],
            pcvr=_rate(c.get("pcvr", 0.0), f"{where}.pcvr"),
            quality_micros=_int(c.get("quality_micros", 0), f"{where}.quality_micros"),
            exclusion_category=_int(c.get("exclusion_category", 0), f"{where}.exclusion_category", 0)))
    return candidates, positions, reserve, floor, exploration, seed


def run(stream: TextIO, out: TextIO = sys.stdout) -> int:
    try:
        document = json.load(stream)
    except json.JSONDecodeError as exc:
        print(f"adserve auction: input is not valid JSON: {exc}", file=sys.stderr)
        return 2
    try:
        candidates, positions, reserve, floor, exploration, seed = parse(document)
    except InputError as exc:
        print(f"adserve auction: {exc}", file=sys.stderr)
        return 2
    result = run_auction(candidates, positions, rules=AuctionRules(reserve, floor),
                         rng=random.Random(seed), exploration_share=exploration)
    json.dump({
        "winners": [{"slot": w.slot, "position": w.position, "ad_id": w.candidate.ad_id,
                     "campaign_id": w.candidate.campaign_id, "price_micros": w.price_micros, "billing": w.billing,
                     "total_value_micros": w.total_value_micros, "explanation": w.explanation}
                    for w in result.winners],
        "explored": result.explored,
        "sampled_losers": result.sampled_losers,
    }, out, indent=2)
    out.write("\n")
    return 0
