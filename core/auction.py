"""The generalised second-price auction on total value, with quality, reserves,
a quality floor and exploration. Pure: randomness comes in as a `random.Random`.

Total value per impression (micro-units) = bid x predicted action rate + quality:
  CPM  bid / 1000          CPC  bid x pCTR          CPA  target x pCTR x pCVR
The reserve is a value per impression for the placement and country
(core.reserves). A candidate is eligible for a slot only when both its total
and its bid value (bid x action rate, without quality) reach the reserve, and
its quality term is not under the quality floor: quality can rank an ad, but it
cannot let an ad in that does not pay the reserve, and an ad under the floor
cannot win at any price. Slots are filled in position order, each ranked with
the pCTR predicted for that slot's position; a campaign wins at most once per
page, and two ads of the same competitive-exclusion category never share a page.

Price: each winner pays the least that keeps its place, and never less than
the reserve. The "next" total is the best remaining eligible candidate at that
slot whose total does not exceed the winner's (another campaign's; an
advertiser never bids against its own ads), or the reserve if that is higher
or there is none. Then, in the bid's unit: per click max(next - own quality,
reserve) / own pCTR; per conversion the same over (pCTR x pCVR); per
impression max(next - quality, reserve), i.e. x1000 per mille. Eligibility
makes that floor at most the bid, so the price lies between the reserve and
the bid.

Rounding (money is integer micros): the exact price is computed with
fractions from the predictions' decimal values, rounded UP to a whole micro
(the least whole-micro price that still keeps the place), then capped at the
bid ROUNDED DOWN, so a charge never exceeds the bid. Ranking itself uses
float totals.

Exploration: on `exploration_share` of requests the page is explored. With the candidates' click-rate
posteriors (`ctr_posterior`), by Thompson sampling (core.exploration): each ad whose estimate is still uncertain
ranks on a draw of its pCTR, and each winner logs the probability that sampling puts it in its slot. Without
posteriors, or when no ad on the page is uncertain, the candidates within `exploration_margin` of the best total
(one per campaign) are shuffled and take the first slots, each logging 1 / their number. Either way only the
ranking changes: eligibility, and every price, come from the model's totals (a winner pays for the place its
model total holds over the best rival total at or below it), so a price never exceeds the bid.

The reserve, the quality floor and the quality weight come in together as
`AuctionRules`. Quality weight: `quality_weight` scales the quality term in the
total (and so in the price: next - weight x quality); 1.0 is the live rule.
Only a replay of logged auctions (core.replay) asks for another weight.

The explanation of each winner and each sampled loser carries every input of
its total (bid type, bid, pCTR per slot, pCVR, quality, exclusion category and
its index in the candidate list, which breaks ties of total value), and the
winner's carries the same for its runner-up, so core.replay can rebuild the
candidates from the served log and rerun the auction exactly.

The design's example holds exactly: A bids $2.00 CPC at 1.5 % with quality
+$0.002 (total $0.032), B bids $3.00 at 0.8 % with quality -$0.001 (total
$0.023): A wins and pays (0.023 - 0.002) / 0.015 = $1.40 per click."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Callable, Sequence, Union

import numpy as np

from core.errors import InvalidArgument
from core.exploration import (CtrPosterior, ctr_multipliers, placement_probabilities, sampled_totals,
                              thompson_fill)

BID_TYPES = ("cpm", "cpc", "cpa")
CPM, CPC, CPA = 0, 1, 2
DEFAULT_EXPLORATION_SHARE = 0.01
DEFAULT_EXPLORATION_MARGIN = 0.05  # candidates within 5 % of the best total may be shuffled
SAMPLED_LOSERS = 20
PosteriorSource = Union[CtrPosterior, Callable[[], CtrPosterior]]


def cpa_bids(bid_micros: np.ndarray, bid_code: np.ndarray, multiplier: np.ndarray) -> np.ndarray:
    """The bids an auction sees: a CPA campaign's target bid runs at the budget job's bid multiplier (its
    pacing lever, 0.1-1: the controller buys the cheaper conversions first and never bids above the target);
    CPM and CPC bids are the advertiser's own. The multiplier counts in ten-thousandths (the budget job sends
    4 decimals), so the product is exact integer money, rounded down to a whole micro."""
    bids = np.asarray(bid_micros, dtype=np.int64)
    parts = np.rint(np.clip(np.asarray(multiplier, dtype=np.float64), 0.0, 1.0) * 10_000).astype(np.int64)
    return np.where(np.asarray(bid_code) == CPA, bids * parts // 10_000, bids)


@dataclass(frozen=True)
class Candidate:
    """One ad entering the auction, with its predictions per slot position."""

    ad_id: Any
    campaign_id: Any
    bid_type: str  # cpm | cpc | cpa
    bid_micros: int
    pctr: Sequence[float]  # one per slot, in slot order
    pcvr: float = 0.0
    quality_micros: int = 0
    exclusion_category: int = 0  # 0: no competitive-exclusion rule
    participation_probability: float = 1.0
    row: int = -1  # the index row, when it came from the index

    @property
    def bid_code(self) -> int:
        return BID_TYPES.index(self.bid_type.lower())


@dataclass(frozen=True)
class AuctionRules:
    """What decides who may fill a slot and what a winner pays: the reserve (micros of total value per impression),
    the quality floor (None: none) and the weight of the quality term in a total."""

    reserve_micros: int = 0
    quality_floor_micros: int | None = None
    quality_weight: float = 1.0


@dataclass
class CandidateArrays:
    """The same candidates as columns (what the ad server builds from its index without an object per ad)."""

    ad_id: np.ndarray  # int64 or object
    campaign_id: np.ndarray
    bid_code: np.ndarray  # int8: CPM 0, CPC 1, CPA 2
    bid_micros: np.ndarray  # int64
    pctr: np.ndarray  # float64 (n, slots)
    pcvr: np.ndarray  # float64
    quality_micros: np.ndarray  # int64
    exclusion_category: np.ndarray  # int64
    participation: np.ndarray  # float64
    row: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.bid_micros)

    @classmethod
    def from_candidates(cls, candidates: Sequence[Candidate], slots: int) -> "CandidateArrays":
        n = len(candidates)
        ids = np.empty(n, dtype=object)
        campaigns = np.empty(n, dtype=object)
        ids[:] = [c.ad_id for c in candidates]
        campaigns[:] = [c.campaign_id for c in candidates]
        return cls(
            ad_id=ids, campaign_id=campaigns,
            bid_code=np.array([c.bid_code for c in candidates], dtype=np.int8),
            bid_micros=np.array([c.bid_micros for c in candidates], dtype=np.int64),
            pctr=np.array([list(c.pctr[:slots]) for c in candidates], dtype=np.float64).reshape(n, slots),
            pcvr=np.array([c.pcvr for c in candidates], dtype=np.float64),
            quality_micros=np.array([c.quality_micros for c in candidates], dtype=np.int64),
            exclusion_category=np.array([c.exclusion_category for c in candidates], dtype=np.int64),
            participation=np.array([c.participation_probability for c in candidates], dtype=np.float64),
            row=np.array([c.row for c in candidates], dtype=np.int64))

    def candidate(self, i: int) -> Candidate:
        ad_id, campaign_id = self.ad_id[i], self.campaign_id[i]
        return Candidate(
            ad_id=ad_id.item() if isinstance(ad_id, np.generic) else ad_id,
            campaign_id=campaign_id.item() if isinstance(campaign_id, np.generic) else campaign_id,
            bid_type=BID_TYPES[int(self.bid_code[i])], bid_micros=int(self.bid_micros[i]),
            pctr=self.pctr[i].tolist(), pcvr=float(self.pcvr[i]), quality_micros=int(self.quality_micros[i]),
            exclusion_category=int(self.exclusion_category[i]),
            participation_probability=float(self.participation[i]), row=int(self.row[i]))

    def bid_values(self) -> np.ndarray:
        """Float bid x action rate per impression (micros), without quality; shape (candidates, slots)."""
        code = self.bid_code[:, None]
        action = np.where(code == CPM, 1 / 1000, np.where(code == CPC, self.pctr, self.pctr * self.pcvr[:, None]))
        return self.bid_micros[:, None] * action

    def totals(self, quality_weight: float = 1.0, bid_values: np.ndarray | None = None) -> np.ndarray:
        """Float total value per impression (micros), shape (candidates, slots); `bid_values` if already
        computed."""
        quality = self.quality_micros[:, None]
        bid_values = self.bid_values() if bid_values is None else bid_values
        # weight 1.0 adds the integers unscaled: the live totals stay bit-for-bit what they always were
        return bid_values + (quality if quality_weight == 1.0 else quality_weight * quality)

    def eligible(self, totals: np.ndarray, bid_values: np.ndarray, reserve_micros: int,
                 quality_floor_micros: int | None) -> np.ndarray:
        """Which candidates may fill each slot (float check; the winner is checked exactly): total and bid
        value both reach the reserve, and quality is not under the floor. Shape (candidates, slots)."""
        ok = (totals >= reserve_micros) & (bid_values >= reserve_micros)
        if quality_floor_micros is not None:
            ok &= (self.quality_micros >= quality_floor_micros)[:, None]
        return ok


def charge_per_event(bid_type: str, price_micros: int, pcvr: float | None) -> int:
    """The charge of one billable event for a price in the bid's unit (see Winner.charge_per_event_micros)."""
    if bid_type == "cpm":
        return price_micros // 1000
    if bid_type == "cpa":
        return math.floor(price_micros * _exact(pcvr or 0.0))
    return price_micros


@dataclass
class Winner:
    slot: int  # 1-based slot number in the request's order
    position: int  # the slot's position on the page
    candidate: Candidate
    price_micros: int  # in the bid's unit: per mille (cpm), per click (cpc), per conversion (cpa)
    total_value_micros: int
    explanation: dict[str, Any]

    @property
    def billing(self) -> str:
        return self.candidate.bid_type.lower()

    @property
    def charge_per_event_micros(self) -> int:
        """What one billable event costs, rounded down (never above the bid): an impression for cpm (price /
        1000), a click for cpc (the price) and for cpa (the price per conversion x pCVR: a conversion bid is
        billed by the click, at the conversions a click is expected to bring)."""
        return charge_per_event(self.billing, self.price_micros, self.explanation.get("pcvr"))

    def expected_cost_micros(self) -> int:
        """The expected charge recorded as spend at serve: per impression for cpm, price x pCTR for clicks."""
        pctr = self.explanation["pctr"]
        if self.billing == "cpm":
            return self.price_micros // 1000
        if self.billing == "cpc":
            return int(self.price_micros * pctr)
        return int(self.price_micros * pctr * (self.explanation["pcvr"] or 0.0))


@dataclass
class AuctionResult:
    winners: list[Winner]
    explored: bool
    sampled_losers: list[dict[str, Any]] = field(default_factory=list)
    reserve_micros: int = 0
    candidate_count: int = 0  # candidates that entered the auction (the served log's auction_candidates)
    exploration_policy: str | None = None  # "thompson" or "shuffle" on an explored request, else None


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _plain_list(values: np.ndarray) -> list[Any]:
    """Python values of a column (an object column may hold numpy scalars)."""
    return [_plain(v) for v in values] if values.dtype == object else values.tolist()


def _exact(x: float) -> Fraction:
    """The decimal value a prediction was written with (0.015 is 3/200, not the nearest binary fraction)."""
    return Fraction(repr(float(x)))


def exact_bid_value(c: Candidate, slot: int) -> Fraction:
    """Bid x action rate per impression at a slot, exactly, in micros: what a price floor is measured against."""
    code = c.bid_code
    if code == CPM:
        action = Fraction(1, 1000)
    elif code == CPC:
        action = _exact(c.pctr[slot])
    else:
        action = _exact(c.pctr[slot]) * _exact(c.pcvr)
    return c.bid_micros * action


def exact_total(c: Candidate, slot: int, quality_weight: float = 1.0) -> Fraction:
    """Total value per impression at a slot, exactly, in micros."""
    return exact_bid_value(c, slot) + weighted_quality(c.quality_micros, quality_weight)


def exactly_eligible(c: Candidate, slot: int, reserve_micros: int, quality_floor_micros: int | None,
                     quality_weight: float = 1.0) -> bool:
    """CandidateArrays.eligible's rule for one candidate, in exact arithmetic."""
    if quality_floor_micros is not None and c.quality_micros < quality_floor_micros:
        return False
    bid_value = exact_bid_value(c, slot)
    return bid_value >= reserve_micros and bid_value + weighted_quality(c.quality_micros, quality_weight) \
        >= reserve_micros


def weighted_quality(quality_micros: int, quality_weight: float = 1.0) -> Fraction | int:
    """The quality term as it enters a total: weight x quality, exactly (the weight as written in decimal)."""
    return quality_micros * _exact(quality_weight) if quality_weight != 1.0 else int(quality_micros)


def price_micros(c: Candidate, slot: int, next_total: Fraction, quality_weight: float = 1.0,
                 reserve_micros: int = 0) -> int:
    """The least whole-micro price (in the bid's unit) that keeps the place and pays the reserve, capped at the
    bid."""
    code = c.bid_code
    numerator = max(next_total - weighted_quality(c.quality_micros, quality_weight), reserve_micros)
    if code == CPM:
        raw = numerator * 1000
    elif code == CPC:
        raw = numerator / _exact(c.pctr[slot]) if c.pctr[slot] > 0 else Fraction(c.bid_micros)
    else:
        rate = _exact(c.pctr[slot]) * _exact(c.pcvr)
        raw = numerator / rate if rate > 0 else Fraction(c.bid_micros)
    price = math.ceil(raw)
    return max(0, min(price, c.bid_micros))


def inputs_of(c: Candidate, slots: int, prefix: str = "") -> dict[str, Any]:
    """Every input of a candidate's total, as the served log writes it (prefix "runner_up_" for a runner-up)."""
    return {
        f"{prefix}campaign_id": _plain(c.campaign_id),
        f"{prefix}bid_type": c.bid_type.lower(),
        f"{prefix}bid_micros": c.bid_micros,
        f"{prefix}pctr_by_slot": [float(x) for x in list(c.pctr)[:slots]],
        f"{prefix}pcvr": float(c.pcvr) if c.bid_code == CPA else None,
        f"{prefix}quality_micros": c.quality_micros,
        f"{prefix}exclusion_category": c.exclusion_category,
    }


def _no_runner_up() -> dict[str, Any]:
    """The runner-up fields of a winner that had none (the reserve set its price)."""
    return {"runner_up_ad_id": None, "runner_up_total_value_micros": None, "runner_up_pctr": None,
            "runner_up_candidate_index": None, "runner_up_campaign_id": None, "runner_up_bid_type": None,
            "runner_up_bid_micros": None, "runner_up_pctr_by_slot": [], "runner_up_pcvr": None,
            "runner_up_quality_micros": None, "runner_up_exclusion_category": None}


def _runner_up(rival: Candidate | None, index: int | None, total: Fraction | None, slot: int,
               slots: int) -> dict[str, Any]:
    """The runner-up fields of a winner: the rival's id, floored total, pCTR at this slot and every input."""
    if rival is None or total is None:
        return _no_runner_up()
    return {"runner_up_ad_id": _plain(rival.ad_id), "runner_up_total_value_micros": math.floor(total),
            "runner_up_pctr": float(rival.pctr[slot]), "runner_up_candidate_index": index,
            **inputs_of(rival, slots, "runner_up_")}


def _losers(columns: CandidateArrays, sample: list[int], value: np.ndarray) -> list[dict[str, Any]]:
    """The sampled losers as the served log writes them, read from the columns a field at a time (no Candidate
    object and no numpy scalar per loser)."""
    if not sample:
        return []
    at = np.asarray(sample, dtype=np.int64)
    codes = columns.bid_code[at].tolist()
    pctr = columns.pctr[at]
    ad_ids, campaign_ids = (_plain_list(ids[at]) for ids in (columns.ad_id, columns.campaign_id))
    return [{"ad_id": ad_id, "campaign_id": campaign_id, "pctr": by_slot[0], "total_value_micros": math.floor(total),
             "candidate_index": i, "bid_type": BID_TYPES[code], "bid_micros": bid, "pctr_by_slot": by_slot,
             "pcvr": pcvr if code == CPA else None, "quality_micros": quality, "exclusion_category": category}
            for i, code, ad_id, campaign_id, total, bid, by_slot, pcvr, quality, category in zip(
                sample, codes, ad_ids, campaign_ids, value[at, 0].tolist(),
                columns.bid_micros[at].astype(np.int64).tolist(), pctr.tolist(),
                columns.pcvr[at].astype(np.float64).tolist(), columns.quality_micros[at].astype(np.int64).tolist(),
                columns.exclusion_category[at].astype(np.int64).tolist())]


def reserve_sets_price(c: Candidate, next_total: Fraction, reserve_micros: int, quality_weight: float = 1.0) -> bool:
    """Whether the reserve, not the ad below, set a winner's price (its floor binds)."""
    return reserve_micros > next_total - weighted_quality(c.quality_micros, quality_weight)


def _winner(board: _Board, eligible: np.ndarray, chosen: int, slot: int, slot_positions: Sequence[int],
            exploration_probability: float, scores_from_fallback: bool) -> Winner:
    """The chosen candidate's price (set by the best eligible rival of another campaign at or below it, or by the
    reserve) and its explanation."""
    slots = len(slot_positions)
    value, campaigns, rules = board.value, board.campaigns, board.rules
    reserve_micros, quality_weight = rules.reserve_micros, rules.quality_weight
    own = board.candidate(chosen)
    rivals = eligible & (campaigns != campaigns[chosen]) & (value[:, slot] <= value[chosen, slot])
    runner_up = int(np.argmax(np.where(rivals, value[:, slot], -np.inf))) if rivals.any() else None
    rival = board.candidate(runner_up) if runner_up is not None else None
    runner_total = exact_total(rival, slot, quality_weight) if rival is not None else None
    next_total = Fraction(reserve_micros) if runner_total is None else max(runner_total, Fraction(reserve_micros))
    price = price_micros(own, slot, next_total, quality_weight, reserve_micros)
    own_total = exact_total(own, slot, quality_weight)
    return Winner(
        slot=slot + 1, position=int(slot_positions[slot]), candidate=own, price_micros=price,
        total_value_micros=math.floor(own_total),
        explanation={
            "total_value_micros": math.floor(own_total),
            **_runner_up(rival, runner_up, runner_total, slot, slots),
            "price_set_by": "reserve" if runner_total is None
            or reserve_sets_price(own, next_total, reserve_micros, quality_weight) else "runner_up",
            "pctr": float(own.pctr[slot]), "pcvr": float(own.pcvr) if own.bid_code == CPA else None,
            "quality_micros": own.quality_micros,
            "reserve_micros": reserve_micros,
            "quality_floor_micros": rules.quality_floor_micros,
            "quality_weight": quality_weight,
            "bid_micros": own.bid_micros,
            "bid_type": own.bid_type.lower(),
            "pctr_by_slot": [float(x) for x in list(own.pctr)[:slots]],
            "exclusion_category": own.exclusion_category,
            "candidate_index": chosen,
            "participation_probability": own.participation_probability,
            # only a placement exploration made has a propensity below 1 (the shuffle's 1 / n, Thompson
            # sampling's share of draws); slots filled after the shuffle are greedy
            "exploration_probability": exploration_probability,
            "scored_by_fallback": scores_from_fallback,
        })


def _exploration_order(value: np.ndarray, allowed: np.ndarray, campaigns: np.ndarray, rng: random.Random,
                       margin: float) -> list[int]:
    """The exploration slice's shuffle: the candidates eligible for the first slot within `margin` of the best
    total, one per campaign, in a uniformly random order."""
    eligible = np.flatnonzero(allowed[:, 0])
    if not len(eligible):
        return []
    best = value[eligible, 0].max()
    near = [int(i) for i in eligible[np.argsort(-value[eligible, 0], kind="stable")]
            if value[i, 0] >= best - abs(best) * margin]
    distinct, seen = [], set()
    for i in near:
        if campaigns[i] not in seen:
            distinct.append(i)
            seen.add(campaigns[i])
    return rng.sample(distinct, len(distinct))


class _Board:
    """One auction's columns, totals and eligibility, with the exact re-check near the reserve."""

    def __init__(self, columns: CandidateArrays, rules: AuctionRules) -> None:
        self.columns = columns
        self.rules = rules
        self.bid_values = columns.bid_values()
        self.value = columns.totals(rules.quality_weight, self.bid_values)
        self.allowed = columns.eligible(self.value, self.bid_values, rules.reserve_micros, rules.quality_floor_micros)
        _, self.campaigns = np.unique(columns.campaign_id.astype(str) if columns.campaign_id.dtype == object
                                      else columns.campaign_id, return_inverse=True)
        self._picked: dict[int, Candidate] = {}

    def candidate(self, i: int) -> Candidate:
        if i not in self._picked:
            self._picked[i] = self.columns.candidate(i)
        return self._picked[i]

    def exact(self, i: int, slot: int) -> bool:
        """The float check passed; near the reserve, money decides in exact arithmetic (a rounding never lets an
        ad under). Elsewhere the float's relative error (~1e-16) is far inside the margin."""
        rules = self.rules
        value, bid_value, reserve = self.value[i, slot], self.bid_values[i, slot], rules.reserve_micros
        margin = 1e-9 * max(1.0, abs(reserve), abs(value), abs(bid_value))
        if min(value, bid_value) - reserve > margin:
            return True
        return exactly_eligible(self.candidate(i), slot, reserve, rules.quality_floor_micros, rules.quality_weight)

    def exactly_allowed(self) -> np.ndarray:
        """`allowed` with the exact check applied where the float check is close to the reserve: who may fill
        each slot, decided as `exact` decides it for a winner. Shape (candidates, slots)."""
        allowed, rules = self.allowed.copy(), self.rules
        value, bid_value, reserve = self.value, self.bid_values, rules.reserve_micros
        scale = np.maximum(np.maximum(1.0, abs(reserve)), np.maximum(np.abs(value), np.abs(bid_value)))
        for i, slot in np.argwhere(allowed & (np.minimum(value, bid_value) - reserve <= 1e-9 * scale)):
            allowed[i, slot] = exactly_eligible(self.candidate(int(i)), int(slot), reserve,
                                                rules.quality_floor_micros, rules.quality_weight)
        return allowed

    def best(self, eligible: np.ndarray, slot: int) -> int | None:
        """The highest total among `eligible` that also passes the exact check (`eligible` is narrowed)."""
        while eligible.any():
            i = int(np.argmax(np.where(eligible, self.value[:, slot], -np.inf)))
            if self.exact(i, slot):
                return i
            eligible[i] = False
        return None

    def from_shuffle(self, shuffled: list[int], eligible: np.ndarray, slot: int) -> int | None:
        """The next candidate of the exploration shuffle still eligible for `slot` (consumed from `shuffled`)."""
        while shuffled:
            i = shuffled.pop(0)
            if eligible[i] and self.exact(i, slot):
                return i
        return None


def run_auction(candidates: Sequence[Candidate] | CandidateArrays, slot_positions: Sequence[int], *,
                rules: AuctionRules = AuctionRules(), rng: random.Random | None = None,
                exploration_share: float = DEFAULT_EXPLORATION_SHARE,
                exploration_margin: float = DEFAULT_EXPLORATION_MARGIN,
                scores_from_fallback: bool = False, ctr_posterior: PosteriorSource | None = None) -> AuctionResult:
    """Fill the slots; see the module docstring for the rules (`rules`: reserve, quality floor and quality weight).
    `ctr_posterior`: the candidates' click-rate posteriors (or a function returning them, called only on an
    explored request) for Thompson sampling in the exploration slice; without it the slice shuffles near ties."""
    rng = rng or random.Random(0)
    slots = len(slot_positions)
    if not len(candidates) or not slots:
        return AuctionResult([], False, reserve_micros=rules.reserve_micros, candidate_count=len(candidates))
    columns = candidates if isinstance(candidates, CandidateArrays) else \
        CandidateArrays.from_candidates(candidates, slots)
    board = _Board(columns, rules)
    explored = exploration_share > 0 and rng.random() < exploration_share
    policy = None
    if explored:
        posterior = ctr_posterior() if callable(ctr_posterior) else ctr_posterior
        page = _thompson_page(board, slot_positions, posterior, rng, scores_from_fallback) \
            if posterior is not None else None
        if page is not None:
            (winners, won), policy = page, "thompson"
    if policy is None:
        shuffled = _exploration_order(board.value, board.allowed, board.campaigns, rng, exploration_margin) \
            if explored else []
        propensity = 1.0 / len(shuffled) if len(shuffled) > 1 else 1.0
        policy = "shuffle" if explored and len(shuffled) > 1 else None
        winners, won = _fill_slots(board, slot_positions, shuffled if policy else [], propensity,
                                   scores_from_fallback)
    losers = sorted(set(range(len(columns))) - set(won))
    sample = sorted(rng.sample(losers, min(SAMPLED_LOSERS, len(losers))))
    sampled = _losers(columns, sample, board.value)
    return AuctionResult(winners, policy is not None, sampled, rules.reserve_micros, len(columns), policy)


def _thompson_page(board: _Board, slot_positions: Sequence[int], posterior: CtrPosterior, rng: random.Random,
                   scores_from_fallback: bool) -> tuple[list[Winner], list[int]] | None:
    """The exploration slice's page by Thompson sampling (core.exploration): draw 0 ranks the candidates, draws
    1..K estimate each winner's probability of its slot. Prices come from the model's totals, as on any page
    (_winner). None when no candidate allowed on the page is uncertain, or fewer than two are allowed: then
    sampling is the greedy order and the slice shuffles near ties instead."""
    columns = board.columns
    if len(posterior.alpha) != len(columns):
        raise InvalidArgument(f"ctr_posterior: {len(posterior.alpha)} posteriors for {len(columns)} candidates")
    allowed = board.exactly_allowed()
    anywhere = allowed.any(axis=1)
    if anywhere.sum() < 2 or not (anywhere & posterior.uncertain()).any():
        return None
    # only candidates allowed in some slot can be drawn onto the page: sample those alone
    cut = np.flatnonzero(anywhere)
    contenders = replace(posterior, alpha=np.asarray(posterior.alpha)[cut], beta=np.asarray(posterior.beta)[cut])
    multipliers = ctr_multipliers(contenders, posterior.draws + 1, np.random.default_rng(rng.getrandbits(64)))
    sampled = sampled_totals(board.value[cut], board.bid_values[cut], columns.pctr[cut], columns.bid_code[cut] != CPM,
                             multipliers)
    categories = columns.exclusion_category
    picked = thompson_fill(sampled, allowed[cut], board.campaigns[cut], categories[cut])
    chosen = np.where(picked >= 0, cut[np.maximum(picked, 0)], -1)
    probabilities = placement_probabilities(chosen, posterior.propensity_floor)
    available = np.ones(len(columns), dtype=bool)
    winners: list[Winner] = []
    won: list[int] = []
    for slot, pick in enumerate(chosen[0].tolist()):
        if pick < 0:
            break
        eligible = available & allowed[:, slot]
        winners.append(_winner(board, eligible, pick, slot, slot_positions, float(probabilities[slot]),
                               scores_from_fallback))
        won.append(pick)
        available &= board.campaigns != board.campaigns[pick]
        if categories[pick]:
            available &= categories != categories[pick]
    return winners, won


def _fill_slots(board: _Board, slot_positions: Sequence[int], shuffled: list[int], propensity: float,
                scores_from_fallback: bool) -> tuple[list[Winner], list[int]]:
    """Slot by slot: the shuffle's next eligible candidate while exploring, else the best total; one ad per
    campaign and per exclusion category."""
    categories = board.columns.exclusion_category
    available = np.ones(len(board.columns), dtype=bool)
    winners: list[Winner] = []
    won: list[int] = []
    for slot in range(len(slot_positions)):
        eligible = available & board.allowed[:, slot]
        chosen = board.from_shuffle(shuffled, eligible, slot) if shuffled else None
        from_shuffle = chosen is not None
        if chosen is None:
            chosen = board.best(eligible, slot)
        if chosen is None:
            break
        winners.append(_winner(board, eligible, chosen, slot, slot_positions,
                               propensity if from_shuffle else 1.0, scores_from_fallback))
        won.append(chosen)
        available &= board.campaigns != board.campaigns[chosen]
        if categories[chosen]:
            available &= categories != categories[chosen]
    return winners, won
