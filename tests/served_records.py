"""Served-log records of auctions, written by the ad server's own served_record and read back through the
Avro codec, for the replay and explain tests."""
from __future__ import annotations

import random
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, Sequence

from core.auction import AuctionResult, AuctionRules, Candidate, run_auction
from core.reserves import AuctionTerms, ReserveBook
from schemas import topics
from schemas.codec import AvroCodec
from serving.adserver.app import AdServer
from serving.adserver.request import parse_ad_request
from serving.decision.engine import Decision, SlotDecision

T0 = 1_800_000_000_000
CODEC = AvroCodec()
SERVED_RECORD = topics.record_type(topics.AD_SERVED)


def decision_of(result: AuctionResult, request_id: str, terms: AuctionTerms | None = None) -> Decision:
    """What serving.decision.engine makes of an auction result (no index: no creatives)."""
    winners = [SlotDecision(
        slot=w.slot, position=w.position, ad_id=int(w.candidate.ad_id), campaign_id=int(w.candidate.campaign_id),
        creative_ref="", landing_url="", billing=w.billing, price_micros=w.price_micros,
        charge_per_event_micros=w.charge_per_event_micros, expected_cost_micros=w.expected_cost_micros(),
        total_value_micros=w.total_value_micros, explanation=w.explanation) for w in result.winners]
    return Decision(request_id, winners, False, result.explored, "model-1", result.sampled_losers,
                    {"preranked": result.candidate_count, "winners": len(winners)}, {}, {}, terms=terms)


def served(result: AuctionResult, *, request_id: str = "r1", placement: str = "feed",
           positions: Sequence[int] = (1,), reserve_micros: int = 0, quality_floor_micros: int | None = None,
           location: str | None = "US/CA", now_ms: int = T0) -> dict[str, Any]:
    """The ad.served record the ad server writes for this result, encoded and decoded as a reader sees it."""
    terms = AuctionTerms(reserve_micros, quality_floor_micros, 0)
    server = SimpleNamespace(config=SimpleNamespace(server_id="adserver-test"),
                             state=SimpleNamespace(snapshot_version=7, features_version=7),
                             engine=SimpleNamespace(reserves=ReserveBook(base=terms)))
    # the server makes every request id; the test stands in for it with a readable one
    ad_request = replace(parse_ad_request({"placement": placement, "slots": [{"position": p} for p in positions]}),
                         request_id=request_id)
    record = AdServer.served_record(server, ad_request, decision_of(result, request_id, terms), location, {},
                                    now_ms)
    return CODEC.decode(CODEC.encode(SERVED_RECORD, record), SERVED_RECORD)


def auction_record(candidates: Sequence[Candidate], positions: Sequence[int] = (1,), *, reserve_micros: int = 0,
                   quality_floor_micros: int | None = None, request_id: str = "r1", placement: str = "feed",
                   location: str | None = "US/CA", now_ms: int = T0, exploration_share: float = 0.0,
                   seed: int = 0) -> dict[str, Any]:
    """Run the auction and log it as the ad server does."""
    result = run_auction(candidates, list(positions), rules=AuctionRules(reserve_micros, quality_floor_micros),
                         rng=random.Random(seed),
                         exploration_share=exploration_share)
    return served(result, request_id=request_id, placement=placement, positions=positions,
                  reserve_micros=reserve_micros, quality_floor_micros=quality_floor_micros, location=location,
                  now_ms=now_ms)


def design_example(reserve_micros: int = 100) -> dict[str, Any]:
    """The design's example: A bids $2.00 CPC at 1.5 % with quality +$0.002, B $3.00 at 0.8 % with -$0.001."""
    a = Candidate(11, 1, "cpc", 2_000_000, [0.015], quality_micros=2_000)
    b = Candidate(22, 2, "cpc", 3_000_000, [0.008], quality_micros=-1_000)
    return auction_record([a, b], [1], reserve_micros=reserve_micros)
