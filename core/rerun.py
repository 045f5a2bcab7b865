"""The auction rerun on a served record's logged candidates under another reserve or quality weight (`replay`),
whether that rerun is what the full auction would have done (`replay_is_exact`), and one request logged
against replayed (`compare_request`). Pricing is never written twice: the rerun calls core.auction.run_auction.
Pure: records in, outcomes out.

What a replay can tell, precisely (quality weight 1.0 unless said). An ad may take a slot when its total and
its bid value (bid x action rate) both reach the reserve and its quality is not under the logged quality
floor (core.auction); the statements on another reserve assume every candidate of the auction carried the
same quality term, so that ranking by total is ranking by bid value (the live rule while the quality term is
the placement's default for every ad: core.reserves). `replay_is_exact` checks that on the logged
candidates.
- Unchanged reserve: every winner, every price, the fill and the expected revenue are reproduced
  exactly. A slot's winner and its runner-up were the best eligible candidates, both are in the log,
  and the log keeps their candidate order, so the candidates that were not logged cannot change them.
- A higher reserve: also exact. A winner that clears the new reserve keeps its slot (it was the best
  available ad); one that does not leaves its slot empty, and every later one too (no other ad could
  clear it, and the auction stops at the first empty slot). A kept winner's price stays set by its
  runner-up if the runner-up clears the new reserve (a higher reserve only removes rivals below it);
  otherwise every rival is under the new reserve and the reserve sets the price. The price never falls
  below the new reserve. All of it is in the log.
- A lower reserve: slots the log filled keep their winners, and a price a logged runner-up set stays
  (the ads a lower reserve lets in are all under the old reserve, so under that runner-up): exact when
  every slot was filled and every winner had a runner-up. Where the old reserve set a price, the new
  price is set by the best ad between the two reserves, which the log holds only if it was sampled: the
  replayed price is a lower bound. A slot the log left empty can only be filled from sampled losers: the
  replayed fill is a lower bound and the revenue of such slots an estimate.
- Another quality weight: every total moves, so an ad that was not logged may overtake a winner or
  become a runner-up: an estimate. Exception: when the log holds every candidate of the auction
  (auction_candidates = the logged ones, i.e. at most 20 losers), any reserve and weight is exact.
- Never: advertisers changing their bids in response, pacing and budgets behaving differently (a
  campaign that spends less enters more auctions later), clicks. Revenue is expected revenue at serve
  (price / 1000 per impression for cpm, price x pCTR for cpc, price x pCTR x pCVR for cpa), not billed
  money. Requests of the exploration slice are not replayed (what they logged is a shuffle, not the
  ranking), nor version-1 records (they lack the inputs)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Mapping

from core.auction import AuctionRules, run_auction
from core.replay_fields import Record, logged_candidates, log_is_complete, replay_gap, slot_of


@dataclass(frozen=True)
class SlotOutcome:
    """One filled slot of a request, as logged or as replayed."""

    slot: int
    position: int
    ad_id: int
    campaign_id: int
    price_micros: int
    expected_cost_micros: int


@dataclass(frozen=True)
class AuctionOutcome:
    """A request's filled slots under one reserve and quality weight."""

    request_id: str
    offered_slots: int
    reserve_micros: int
    quality_weight: float
    winners: tuple[SlotOutcome, ...]

    @property
    def filled_slots(self) -> int:
        return len(self.winners)

    @property
    def revenue_micros(self) -> int:
        """Expected revenue at serve: the sum of the winners' expected costs."""
        return sum(w.expected_cost_micros for w in self.winners)

    def at(self, slot: int) -> SlotOutcome | None:
        return next((w for w in self.winners if w.slot == slot), None)


def logged_outcome(record: Record) -> AuctionOutcome:
    """What the ad server decided, as logged."""
    winners = tuple(SlotOutcome(slot_of(w["impression_id"]), int(w["slot_position"]), int(w["ad_id"]),
                                int(w["campaign_id"]), int(w["price_micros"]), int(w["expected_cost_micros"]))
                    for w in record.get("winners") or [])
    reserve = record.get("reserve_micros")
    return AuctionOutcome(str(record["request_id"]), len(record.get("slot_positions") or []),
                          int(reserve or 0), 1.0, winners)


def replay(record: Record, reserve_micros: int | None = None, quality_weight: float = 1.0) -> AuctionOutcome:
    """The auction rerun on the logged candidates with a reserve (default: the logged one) and a quality
    weight (1.0: the live rule), without exploration (an exploration request replays as the ranking would
    have filled it, not as it was logged). Raises NotReplayable (see replay_gap)."""
    candidates = logged_candidates(record)
    positions = [int(p) for p in record["slot_positions"]]
    reserve = int(record["reserve_micros"]) if reserve_micros is None else int(reserve_micros)
    rules = AuctionRules(reserve, record.get("quality_floor_micros"), quality_weight)
    result = run_auction(candidates, positions, rules=rules, rng=random.Random(0), exploration_share=0.0)
    winners = tuple(SlotOutcome(w.slot, w.position, int(w.candidate.ad_id), int(w.candidate.campaign_id),
                                w.price_micros, w.expected_cost_micros()) for w in result.winners)
    return AuctionOutcome(str(record["request_id"]), len(positions), reserve, quality_weight, winners)


def replay_is_exact(record: Record, reserve_micros: int, quality_weight: float = 1.0) -> bool:
    """Whether replay(record, reserve_micros, quality_weight) is what the full auction would have done (the
    module docstring gives the reasons)."""
    if record.get("exploration") or replay_gap(record) is not None:
        return False
    if log_is_complete(record):
        return True
    if quality_weight != 1.0:
        return False
    if reserve_micros == int(record["reserve_micros"]):
        return True
    if len({c.quality_micros for c in logged_candidates(record)}) > 1:
        return False  # ranking by total is not ranking by bid value: an unlogged ad may take a slot
    if reserve_micros > int(record["reserve_micros"]):
        return True
    winners = record.get("winners") or []
    return len(winners) == len(record["slot_positions"]) and all(
        w.get("runner_up_ad_id") is not None for w in winners)


@dataclass(frozen=True)
class RequestComparison:
    """One request, logged against replayed (status "replayed"), or why it was left out ("exploration",
    "not_replayable"): left-out requests carry only their counts of offered slots."""

    placement: str
    country: str | None
    status: str
    offered_slots: int = 0
    logged_filled_slots: int = 0
    replayed_filled_slots: int = 0
    logged_revenue_micros: int = 0
    replayed_revenue_micros: int = 0
    changed_winners: int = 0
    changed_prices: int = 0
    exact: bool = False


def compare(logged: AuctionOutcome, replayed: AuctionOutcome) -> tuple[int, int]:
    """(slots whose ad changed, filled or emptied included; slots with the same ad at another price)."""
    changed_winners = changed_prices = 0
    for slot in range(1, max(logged.offered_slots, replayed.offered_slots) + 1):
        before, after = logged.at(slot), replayed.at(slot)
        if (before.ad_id if before else None) != (after.ad_id if after else None):
            changed_winners += 1
        elif before and after and before.price_micros != after.price_micros:
            changed_prices += 1
    return changed_winners, changed_prices


@dataclass(frozen=True)
class ReservePolicy:
    """Replayed reserves: per (placement, country), else per placement, else the default, else the logged one
    (the same precedence as the ad server's EngineConfig.reserve). Countries are upper case."""

    default_micros: int | None = None
    by_placement: Mapping[str, int] = field(default_factory=dict)
    by_placement_country: Mapping[tuple[str, str], int] = field(default_factory=dict)

    def reserve_for(self, placement: str, country: str | None, logged_micros: int) -> int:
        if country and (placement, country.upper()) in self.by_placement_country:
            return self.by_placement_country[(placement, country.upper())]
        if placement in self.by_placement:
            return self.by_placement[placement]
        return logged_micros if self.default_micros is None else self.default_micros


def compare_request(record: Record, policy: ReservePolicy = ReservePolicy(),
                    quality_weight: float = 1.0) -> RequestComparison:
    """One served record replayed under a reserve policy and quality weight, against what it logged."""
    placement, country = str(record["placement"]), record.get("country")
    offered = len(record.get("slot_positions") or [])
    if record.get("exploration"):
        return RequestComparison(placement, country, "exploration", offered)
    if replay_gap(record) is not None:
        return RequestComparison(placement, country, "not_replayable", offered)
    logged = logged_outcome(record)
    reserve = policy.reserve_for(placement, country, logged.reserve_micros)
    replayed = replay(record, reserve, quality_weight)
    changed_winners, changed_prices = compare(logged, replayed)
    return RequestComparison(placement, country, "replayed", offered, logged.filled_slots, replayed.filled_slots,
                             logged.revenue_micros, replayed.revenue_micros, changed_winners, changed_prices,
                             replay_is_exact(record, reserve, quality_weight))
