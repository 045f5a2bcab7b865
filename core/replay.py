"""Replay of logged auctions: the served log's auction inputs, the auction rerun on them under another
reserve or quality weight, the explanation of one charged price, and the reserve recommended for a
(placement, country) from its requests replayed under candidate reserves (`recommend_reserves`, whose rule
is `choose_reserve`). Pure: records in, numbers out.

It owns both directions of the served log's replay fields (schemas/ad_served.avsc, version 2): the
functions the ad server calls to write them (`winner_replay_fields`, `loser_record`,
`request_replay_fields`) and the ones that read them back (`logged_candidates`, `replay`,
`explain_winner`), so the two cannot drift apart. Pricing is never written twice: the replay calls
core.auction.run_auction, and the explanation core.auction.exact_total and price_micros.

What is logged per request: the reserve, the slot positions, how many candidates entered the auction;
per winner every input of its total (bid type, bid, pCTR at every slot, pCVR, quality, exclusion
category, its index in the candidate list) and the same for its runner-up; 20 losers sampled uniformly
with the same inputs. A replay rebuilds those candidates (deduplicated by ad id, in their logged
candidate order so ties of total value break as they did) and reruns the auction without exploration.

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

import math
import random
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

from core.auction import (CPA, CPM, AuctionRules, Candidate, exact_bid_value, exact_total, price_micros,
                          reserve_sets_price, run_auction)
from core.errors import AdserveError, InvalidArgument

Record = Mapping[str, Any]


class NotReplayable(AdserveError):
    """A served record without the inputs a replay needs (a version-1 record)."""


class ImpressionNotFound(AdserveError):
    """No winner of the served log has this impression id."""


# writing: what the ad server adds to each ServedRecord ------------------------------------------------

def _symbol(bid_type: str | None) -> str | None:
    return bid_type.upper() if bid_type else None


def winner_replay_fields(explanation: Mapping[str, Any]) -> dict[str, Any]:
    """The version-2 fields of a ServedRecord Winner, from core.auction's explanation of that winner."""
    e = explanation

    def opt(name: str, cast):
        return None if e.get(name) is None else cast(e[name])

    return {
        "bid_type": _symbol(e.get("bid_type")),
        "pctr_by_slot": [float(p) for p in e.get("pctr_by_slot") or []],
        "exclusion_category": int(e.get("exclusion_category") or 0),
        "candidate_index": opt("candidate_index", int),
        "runner_up_ad_id": opt("runner_up_ad_id", int),
        "runner_up_campaign_id": opt("runner_up_campaign_id", int),
        "runner_up_bid_type": _symbol(e.get("runner_up_bid_type")),
        "runner_up_bid_micros": opt("runner_up_bid_micros", int),
        "runner_up_pctr": opt("runner_up_pctr", float),
        "runner_up_pctr_by_slot": [float(p) for p in e.get("runner_up_pctr_by_slot") or []],
        "runner_up_pcvr": opt("runner_up_pcvr", float),
        "runner_up_quality_micros": opt("runner_up_quality_micros", int),
        "runner_up_exclusion_category": opt("runner_up_exclusion_category", int),
        "runner_up_candidate_index": opt("runner_up_candidate_index", int),
    }


def loser_record(loser: Mapping[str, Any]) -> dict[str, Any]:
    """A ServedRecord Loser from one of core.auction's sampled losers."""
    return {
        "ad_id": int(loser["ad_id"]), "campaign_id": int(loser["campaign_id"]), "pctr": float(loser["pctr"]),
        "total_value_micros": int(loser["total_value_micros"]), "bid_type": _symbol(loser.get("bid_type")),
        "bid_micros": None if loser.get("bid_micros") is None else int(loser["bid_micros"]),
        "pctr_by_slot": [float(p) for p in loser.get("pctr_by_slot") or []],
        "pcvr": None if loser.get("pcvr") is None else float(loser["pcvr"]),
        "quality_micros": None if loser.get("quality_micros") is None else int(loser["quality_micros"]),
        "exclusion_category": int(loser.get("exclusion_category") or 0),
        "candidate_index": None if loser.get("candidate_index") is None else int(loser["candidate_index"]),
    }


def loser_columns(losers: Sequence[Mapping[str, Any]], slots: int) -> dict[str, Any]:
    """A ServedRecord's LoserColumns (version 4) from core.auction's sampled losers: a handful of arrays, which
    encode at a fraction of the cost of a record per loser. Each loser's pCTR per slot is padded or cut to the
    request's `slots`, so loser i's rate at slot s is pctr_by_slot[i x slots + s]."""
    pctr: list[float] = []
    for loser in losers:
        by_slot = [float(p) for p in (loser.get("pctr_by_slot") or [loser["pctr"]])[:slots]]
        pctr.extend(by_slot + [by_slot[-1]] * (slots - len(by_slot)))
    return {
        "ad_id": [int(l["ad_id"]) for l in losers], "campaign_id": [int(l["campaign_id"]) for l in losers],
        "total_value_micros": [int(l["total_value_micros"]) for l in losers],
        "bid_type": [_symbol(l["bid_type"]) for l in losers], "bid_micros": [int(l["bid_micros"]) for l in losers],
        "pctr_by_slot": pctr, "pcvr": [float(l.get("pcvr") or 0.0) for l in losers],
        "quality_micros": [int(l["quality_micros"]) for l in losers],
        "exclusion_category": [int(l.get("exclusion_category") or 0) for l in losers],
        "candidate_index": [int(l["candidate_index"]) for l in losers]}


def sampled_losers(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The sampled losers of a ServedRecord of any version, one Loser dict each (the version-2 form): read from
    loser_columns when the record has them (version 4), else from sampled_losers."""
    columns = record.get("loser_columns")
    if not columns:
        return list(record.get("sampled_losers") or [])
    slots = len(record.get("slot_positions") or []) or 1
    pctr = columns["pctr_by_slot"]
    return [{"ad_id": ad_id, "campaign_id": campaign_id, "pctr": pctr[i * slots],
             "total_value_micros": total, "bid_type": bid_type, "bid_micros": bid,
             "pctr_by_slot": pctr[i * slots:(i + 1) * slots], "pcvr": pcvr if bid_type == "CPA" else None,
             "quality_micros": quality, "exclusion_category": category, "candidate_index": index}
            for i, (ad_id, campaign_id, total, bid_type, bid, pcvr, quality, category, index) in enumerate(zip(
                columns["ad_id"], columns["campaign_id"], columns["total_value_micros"], columns["bid_type"],
                columns["bid_micros"], columns["pcvr"], columns["quality_micros"], columns["exclusion_category"],
                columns["candidate_index"]))]


def request_replay_fields(reserve_micros: int, slot_positions: Sequence[int], auction_candidates: int | None,
                          quality_floor_micros: int | None = None) -> dict[str, Any]:
    """The top-level replay fields of a ServedRecord (version 2, and the quality floor of version 3)."""
    return {"reserve_micros": int(reserve_micros), "slot_positions": [int(p) for p in slot_positions],
            "auction_candidates": None if auction_candidates is None else int(auction_candidates),
            "quality_floor_micros": None if quality_floor_micros is None else int(quality_floor_micros)}


# reading: the logged candidates ----------------------------------------------------------------------

def winner_bid_type(winner: Record) -> str:
    """A winner's bid type (cpm/cpc/cpa); a version-1 record has none, but the auction logged a pCVR only
    for cpa bids, so impression billing is cpm and click billing with a pCVR is cpa."""
    if winner.get("bid_type"):
        return str(winner["bid_type"]).lower()
    if winner["billing_type"] == "IMPRESSION":
        return "cpm"
    return "cpa" if winner.get("pcvr") is not None else "cpc"


def slot_of(impression_id: str) -> int:
    """The 1-based slot number at the end of an impression id ("{request_id}:{slot}")."""
    return int(str(impression_id).rsplit(":", 1)[1])


def replay_gap(record: Record) -> str | None:
    """Why this record cannot be replayed, or None when it can."""
    slots = len(record.get("slot_positions") or [])
    if not slots or record.get("reserve_micros") is None:
        return "a version-1 record (no reserve or slot positions logged)"
    for w in record.get("winners") or []:
        if not w.get("bid_type") or len(w.get("pctr_by_slot") or []) != slots:
            return f"winner {w.get('impression_id')} lacks its bid type or pCTR per slot"
        if w.get("runner_up_ad_id") is not None and (
                not w.get("runner_up_bid_type") or len(w.get("runner_up_pctr_by_slot") or []) != slots):
            return f"the runner-up of {w.get('impression_id')} lacks its inputs"
    for loser in sampled_losers(record):
        if not loser.get("bid_type") or len(loser.get("pctr_by_slot") or []) != slots:
            return f"sampled loser {loser.get('ad_id')} lacks its inputs"
    return None


def _candidate(ad_id: Any, campaign_id: Any, bid_type: str, bid_micros: int, pctr: Sequence[float],
               pcvr: float | None, quality_micros: int, exclusion_category: int,
               participation: float = 1.0) -> Candidate:
    return Candidate(ad_id=ad_id, campaign_id=campaign_id, bid_type=str(bid_type).lower(),
                     bid_micros=int(bid_micros), pctr=[float(p) for p in pctr], pcvr=float(pcvr or 0.0),
                     quality_micros=int(quality_micros), exclusion_category=int(exclusion_category or 0),
                     participation_probability=float(participation))


def _logged(record: Record) -> list[tuple[int | None, Candidate]]:
    """(candidate index, candidate) of every logged ad: winners, runner-ups, sampled losers, in that order."""
    found: list[tuple[int | None, Candidate]] = []
    for w in record.get("winners") or []:
        found.append((w.get("candidate_index"), _candidate(
            w["ad_id"], w["campaign_id"], winner_bid_type(w), w["bid_micros"], w["pctr_by_slot"], w.get("pcvr"),
            w["quality_micros"], w.get("exclusion_category", 0), w.get("participation_probability", 1.0))))
    for w in record.get("winners") or []:
        if w.get("runner_up_ad_id") is not None:
            found.append((w.get("runner_up_candidate_index"), _candidate(
                w["runner_up_ad_id"], w["runner_up_campaign_id"], w["runner_up_bid_type"],
                w["runner_up_bid_micros"], w["runner_up_pctr_by_slot"], w.get("runner_up_pcvr"),
                w["runner_up_quality_micros"], w.get("runner_up_exclusion_category", 0))))
    for loser in sampled_losers(record):
        found.append((loser.get("candidate_index"), _candidate(
            loser["ad_id"], loser["campaign_id"], loser["bid_type"], loser["bid_micros"], loser["pctr_by_slot"],
            loser.get("pcvr"), loser["quality_micros"], loser.get("exclusion_category", 0))))
    return found


def logged_candidates(record: Record) -> list[Candidate]:
    """The candidates a replay can rerun: each logged ad once, in the auction's candidate order (an ad
    without a logged index after those with one, winners before runner-ups before losers).

    Raises NotReplayable when the record lacks the inputs (see replay_gap)."""
    gap = replay_gap(record)
    if gap:
        raise NotReplayable(f"request {record.get('request_id')}: {gap}")
    seen: dict[Any, tuple[tuple[int, int, int], Candidate]] = {}
    for order, (index, candidate) in enumerate(_logged(record)):
        if candidate.ad_id not in seen:
            key = (0, index, order) if index is not None else (1, 0, order)
            seen[candidate.ad_id] = (key, candidate)
    return [c for _, c in sorted(seen.values(), key=lambda kc: kc[0])]


def log_is_complete(record: Record) -> bool:
    """Whether the log holds every candidate of the auction (then any replay of it is exact)."""
    count = record.get("auction_candidates")
    return count is not None and replay_gap(record) is None and len(logged_candidates(record)) >= int(count)


# the replay ------------------------------------------------------------------------------------------

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


# recommending a reserve ------------------------------------------------------------------------------
# docs/decision-engine.md ("Recommending reserves") gives the reasons for the grid, the guard and the ties.

RESERVE_GRID_HALF_OCTAVES_BELOW = 8  # the default grid reaches down to ~1/16 of the median winner's bid value
RESERVE_GRID_HALF_OCTAVES_ABOVE = 2  # ... and up to ~2x it
DEFAULT_MIN_FILL_RATIO = 0.8  # a recommended reserve keeps at least 80 % of the fill that no reserve gets


def per_thousand(micros: int, requests: int) -> int:
    """Micros per thousand requests, rounded half up (integer arithmetic: equal sums give equal RPMs)."""
    return (2000 * micros + requests) // (2 * requests) if requests else 0


def is_replayed(record: Record) -> bool:
    """Whether a replay reruns this request (not an exploration request, not a version-1 record)."""
    return not record.get("exploration") and replay_gap(record) is None


def reserve_key(record: Record) -> tuple[str, str]:
    """The (placement, country) a recommended rule is written for; a request without a country counts under
    "*" (the rule that also covers the placement's countries without a rule of their own)."""
    country = record.get("country")
    return str(record["placement"]), str(country).upper() if country else "*"


def winner_bid_values_micros(record: Record) -> list[int]:
    """Bid x action rate per impression of each logged winner at its slot, in whole micros rounded down: what a
    reserve is measured against (core.auction.exact_bid_value)."""
    values = []
    for w in record.get("winners") or []:
        own = _candidate(w["ad_id"], w["campaign_id"], winner_bid_type(w), w["bid_micros"], w["pctr_by_slot"],
                         w.get("pcvr"), w["quality_micros"], 0)
        values.append(math.floor(exact_bid_value(own, slot_of(w["impression_id"]) - 1)))
    return values


def half_octave(value_micros: int) -> int | None:
    """k with 2^(k/2) <= value < 2^((k+1)/2), exactly in integers (None under one micro)."""
    return (value_micros * value_micros).bit_length() - 1 if value_micros >= 1 else None


def _two_significant_digits(value: int) -> int:
    scale = 10 ** max(0, len(str(value)) - 2)
    return (value + scale // 2) // scale * scale


@dataclass(frozen=True)
class BidProfile:
    """What the default candidate grid of a (placement, country) is drawn from: its winners' bid values per
    impression counted by half-octave, and the reserves its requests were served with. Sums like counts, so a
    pipeline combines it in any order."""

    half_octaves: Mapping[int, int] = field(default_factory=dict)
    logged_reserves: frozenset[int] = frozenset()

    @classmethod
    def of(cls, record: Record) -> "BidProfile":
        counts: dict[int, int] = {}
        for value in winner_bid_values_micros(record):
            k = half_octave(value)
            if k is not None:
                counts[k] = counts.get(k, 0) + 1
        return cls(counts, frozenset({int(record["reserve_micros"])}))

    def __add__(self, other: "BidProfile") -> "BidProfile":
        counts = dict(self.half_octaves)
        for k, n in other.half_octaves.items():
            counts[k] = counts.get(k, 0) + n
        return BidProfile(counts, self.logged_reserves | other.logged_reserves)

    def median_half_octave(self) -> int | None:
        """The half-octave holding the median winner's bid value (the lower middle one of an even count)."""
        rank, running = (sum(self.half_octaves.values()) + 1) // 2, 0
        for k in sorted(self.half_octaves):
            running += self.half_octaves[k]
            if running >= rank:
                return k
        return None

    def grid(self) -> list[int]:
        """The default candidate reserves: 0, the logged reserves, and 2^(j/2) micros for j from the median
        winner's half-octave - 8 to + 2 (about 1/16 to 2x its bid value), rounded to two significant digits.
        Sorted, no repeats."""
        grid = {0, *self.logged_reserves}
        k = self.median_half_octave()
        if k is not None:
            for j in range(max(0, k - RESERVE_GRID_HALF_OCTAVES_BELOW), k + RESERVE_GRID_HALF_OCTAVES_ABOVE + 1):
                grid.add(_two_significant_digits(math.isqrt(1 << j)))
        return sorted(grid)


def candidate_grid(reserves: Sequence[int]) -> list[int]:
    """An operator's candidate reserves, with 0 (no reserve: the baseline of the gain and the fill guard)
    always among them. Sorted, no repeats."""
    return sorted({0, *(int(r) for r in reserves)})


@dataclass(frozen=True)
class ReserveFigures:
    """The replayed requests of one (placement, country) summed under one candidate reserve."""

    reserve_micros: int
    requests: int = 0
    offered_slots: int = 0
    filled_slots: int = 0
    revenue_micros: int = 0
    exact_requests: int = 0

    def __add__(self, other: "ReserveFigures") -> "ReserveFigures":
        if other.reserve_micros != self.reserve_micros:
            raise InvalidArgument(f"figures of reserves {self.reserve_micros} and {other.reserve_micros} do not add")
        return ReserveFigures(self.reserve_micros, self.requests + other.requests,
                              self.offered_slots + other.offered_slots, self.filled_slots + other.filled_slots,
                              self.revenue_micros + other.revenue_micros, self.exact_requests + other.exact_requests)

    @property
    def revenue_per_mille_micros(self) -> int:
        """Expected revenue per thousand requests, micros."""
        return per_thousand(self.revenue_micros, self.requests)

    @property
    def fill_rate(self) -> float:
        return round(self.filled_slots / self.offered_slots, 6) if self.offered_slots else 0.0

    @property
    def exact_share(self) -> float:
        return round(self.exact_requests / self.requests, 6) if self.requests else 0.0


def reserve_figures(record: Record, reserve_micros: int, quality_weight: float = 1.0) -> ReserveFigures:
    """One replayed request's figures under a candidate reserve (the caller keeps to is_replayed records)."""
    outcome = replay(record, reserve_micros, quality_weight)
    return ReserveFigures(int(reserve_micros), 1, outcome.offered_slots, outcome.filled_slots,
                          outcome.revenue_micros, int(replay_is_exact(record, reserve_micros, quality_weight)))


def sum_figures(figures: Iterable[ReserveFigures]) -> ReserveFigures:
    """The sum of one reserve's figures (a Beam CombineFn's callable: any order, any grouping)."""
    items = list(figures)
    if not items:
        raise InvalidArgument("no figures to sum")
    total = items[0]
    for more in items[1:]:
        total = total + more
    return total


def sum_profiles(profiles: Iterable[BidProfile]) -> BidProfile:
    total = BidProfile()
    for profile in profiles:
        total = total + profile
    return total


@dataclass(frozen=True)
class ReserveChoice:
    """The recommended reserve of one (placement, country), against no reserve, with every candidate's figures
    (by reserve) and the least fill rate the choice was allowed."""

    recommended: ReserveFigures
    no_reserve: ReserveFigures
    candidates: tuple[ReserveFigures, ...]
    min_fill_rate: float

    @property
    def revenue_per_mille_gain_pct(self) -> float | None:
        """The recommended reserve's revenue per thousand requests against no reserve's, in % (2 decimals; from
        the exact revenues, over the same requests); None when no reserve earns nothing and the recommended does."""
        return gain_pct(self.recommended.revenue_micros, self.no_reserve.revenue_micros)


def gain_pct(revenue_micros: int, baseline_micros: int) -> float | None:
    """(revenue - baseline) / baseline in %, 2 decimals; 0.0 when both are 0, None when only the baseline is."""
    if baseline_micros == 0:
        return 0.0 if revenue_micros == 0 else None
    return round(float(Fraction(100 * (revenue_micros - baseline_micros), baseline_micros)), 2)


def choose_reserve(candidates: Sequence[ReserveFigures],
                   min_fill_ratio: float = DEFAULT_MIN_FILL_RATIO) -> ReserveChoice:
    """Of one (placement, country)'s candidates (the same requests replayed under each reserve, reserve 0 among
    them), the one with the highest revenue per thousand requests whose fill rate is at least min_fill_ratio x
    the fill rate with no reserve; of equal revenues, the lower reserve. Reserve 0 always qualifies, so there is
    always a choice. Raises InvalidArgument on candidates that do not fit that description."""
    if not 0.0 <= min_fill_ratio <= 1.0:
        raise InvalidArgument(f"min_fill_ratio must be between 0 and 1 (a share of the fill with no reserve), "
                              f"got {min_fill_ratio}")
    by_reserve = {c.reserve_micros: c for c in candidates}
    if len(by_reserve) != len(candidates):
        raise InvalidArgument("each candidate reserve may appear once")
    if 0 not in by_reserve:
        raise InvalidArgument("the candidates must include reserve 0, the baseline of the fill guard and the gain")
    base = by_reserve[0]
    if any((c.requests, c.offered_slots) != (base.requests, base.offered_slots) for c in candidates):
        raise InvalidArgument("every candidate must replay the same requests")
    ratio = Fraction(repr(float(min_fill_ratio)))
    allowed = [c for c in candidates if c.filled_slots >= ratio * base.filled_slots]  # same offered slots
    best = min(allowed, key=lambda c: (-c.revenue_micros, c.reserve_micros))
    floor = round(float(ratio) * base.fill_rate, 6)
    return ReserveChoice(best, base, tuple(sorted(candidates, key=lambda c: c.reserve_micros)), floor)


def recommend_reserves(records: Iterable[Record], candidate_reserves: Sequence[int] | None = None, *,
                       min_fill_ratio: float = DEFAULT_MIN_FILL_RATIO,
                       quality_weight: float = 1.0) -> dict[tuple[str, str], ReserveChoice]:
    """Served records (one per request) -> the recommended reserve of each (placement, country), replaying its
    requests under each candidate (`candidate_reserves` for every key, 0 added; default each key's
    BidProfile.grid). Exploration requests and version-1 records are left out. The rule the pipeline
    `auction_replay --recommend` runs, in one process."""
    by_key: dict[tuple[str, str], list[Record]] = {}
    for record in records:
        if is_replayed(record):
            by_key.setdefault(reserve_key(record), []).append(record)
    choices = {}
    for key, mine in sorted(by_key.items()):
        grid = candidate_grid(candidate_reserves) if candidate_reserves is not None else \
            sum_profiles(BidProfile.of(r) for r in mine).grid()
        figures = [sum_figures(reserve_figures(r, reserve, quality_weight) for r in mine) for reserve in grid]
        choices[key] = choose_reserve(figures, min_fill_ratio)
    return choices


def overall_gain_pct(choices: Mapping[tuple[str, str], ReserveChoice],
                     keys: Iterable[tuple[str, str]] | None = None) -> float | None:
    """Revenue per thousand requests over every (placement, country), each at its recommended reserve (only
    `keys` when given; the others at no reserve), against every one at no reserve, in % (as gain_pct)."""
    chosen = set(choices) if keys is None else set(keys)
    base = sum(c.no_reserve.revenue_micros for c in choices.values())
    recommended = sum(c.recommended.revenue_micros if k in chosen else c.no_reserve.revenue_micros
                      for k, c in choices.items())
    return gain_pct(recommended, base)


# explaining one price --------------------------------------------------------------------------------

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
    return _candidate(w["runner_up_ad_id"], w["runner_up_campaign_id"], w["runner_up_bid_type"],
                      w["runner_up_bid_micros"], _at_slot(w["runner_up_pctr"] or 0.0, slot_index),
                      w.get("runner_up_pcvr"), w["runner_up_quality_micros"], 0)


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
    own = _candidate(w["ad_id"], w["campaign_id"], bid_type, w["bid_micros"], _at_slot(w["pctr"], s),
                     w.get("pcvr"), w["quality_micros"], 0, w.get("participation_probability", 1.0))
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

