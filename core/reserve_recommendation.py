"""The reserve recommended for a (placement, country) from its requests replayed under candidate reserves
(`recommend_reserves`, whose rule is `choose_reserve`): the candidate grid, the figures summed per reserve, the
fill guard and the gain. Pure: records in, numbers out. docs/decision-engine.md ("Recommending reserves") gives
the reasons for the grid, the guard and the ties."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Iterable, Mapping, Sequence

from core.auction import exact_bid_value
from core.errors import InvalidArgument
from core.replay_fields import Record, auction_candidate, replay_gap, slot_of, winner_bid
from core.rerun import replay, replay_is_exact

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
        own = auction_candidate(w["ad_id"], w["campaign_id"], winner_bid(w, w["pctr_by_slot"]))
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
