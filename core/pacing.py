"""Budget pacing rules: target curves, the controller on p, budget states and leased slices. Pure.

What this module owns (design: "Pacing a budget through the day", "Not
overspending across 2,500 servers"):

* `TargetCurve`: the cumulative share of a budget to be spent by each minute of
  the advertiser's day, shaped like the traffic the campaign could reach,
  reaching 100 % at 23:30 local time (the last half hour is margin).
* `SpendPlan`: the curve applied to a budget from an anchor (day start, a new
  campaign's first minute, or a budget change: the rest of the curve is
  rescaled so the extra money spreads over the remaining hours).
* `next_participation`: the controller, run every 10 s of event time.
* `budget_state_kind` and `slice_amounts`: when servers may spend freely,
  only from leased slices, or not at all.

Money is integer micros throughout; shares and probabilities are floats.
Nothing here reads a clock: every instant is a parameter (epoch ms, UTC)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Sequence
from zoneinfo import ZoneInfo

import numpy as np

from core.errors import InvalidArgument
from core.replay import sampled_losers

MINUTES_PER_DAY = 1440
CURVE_END_MINUTE = 23 * 60 + 30  # the curve reaches the budget at 23:30 local time
STEP_MS = 10_000  # one controller step
P_FLOOR = 0.001  # a campaign keeps a trickle of data
P_MAX_CHANGE = 0.25  # p moves at most 25 % per step
NEW_CAMPAIGN_P = 0.05  # below any forecast: under-spending the first hour is easier to undo than overspending
OPEN_MARGIN_MINUTES = 5  # open while more than 5 minutes of peak spend ...
OPEN_MARGIN_CLICKS = 10  # ... or 10 click prices remain, whichever is more
SLICE_SPEND_S = 10  # a slice is about 10 s of that server's spend
SLICE_OUTSTANDING_SHARE = 0.5  # at most half of what remains is leased out at once
GAP_CLOSE_MINUTES = 120  # the integral term closes an accumulated gap over about two hours
VOLUME_HALF_GAIN = 6  # ads served a minute at which the controller acts at half strength
STEP_GAIN = 0.15  # share of a small log rate error one step corrects at full volume (step_gain)
LARGE_ERROR_RATIO = 3.0  # a rate off by this factor is corrected at full gain
BID_MULTIPLIER_RANGE = (0.1, 1.0)  # CPA campaigns: the controller scales the bid, never above the target
RATE_MINUTES = 5.0  # the unthrottled spend rate is an average over about five minutes of spend / p ...
RATE_FAST_MINUTES = 0.5  # ... checked against the last half minute's, which replaces it when traffic jumps
RATE_MIN_ADS = 20.0  # fewer ads behind the average: no estimate yet (the controller steps on the last minute)
RATE_JUMP_SIGMAS = 3.0  # a jump: the last half minute's ads this many standard deviations from the average's ...
RATE_JUMP_RATIO = 1.25  # ... and off by at least this factor (so a busy campaign's small drift is no jump)
RATE_HOLD_SIGMAS = 0.5  # p holds while the p it should have is within half the estimate's noise (1 / sqrt(ads))


@lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def local_day(now_ms: int, tz: str) -> tuple[str, float]:
    """The advertiser's date (ISO) and the minute of that local day (fractional) at this instant."""
    local = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc).astimezone(_zone(tz))
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    minute = (local - midnight).total_seconds() / 60  # wall-clock minutes elapsed (exact across DST)
    return local.date().isoformat(), min(float(minute), MINUTES_PER_DAY - 1e-6)


def next_local_midnight_ms(now_ms: int, tz: str) -> int:
    local = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc).astimezone(_zone(tz))
    tomorrow = (local + timedelta(days=1)).date()
    midnight = datetime(tomorrow.year, tomorrow.month, tomorrow.day, tzinfo=_zone(tz))
    return int(midnight.timestamp() * 1000)


# ------------------------------------------------------------------ curves


@dataclass(frozen=True)
class TargetCurve:
    """Cumulative spend share at each minute boundary 0..1440 of the local day: 0 at 00:00, 1 from 23:30."""

    cumulative: np.ndarray  # float64, length 1441, non-decreasing

    @classmethod
    def from_shape(cls, weights: Sequence[float] | np.ndarray) -> "TargetCurve":
        """From traffic weights over the day in equal buckets (24 hourly, 96 quarter-hours, 1440 minutes...).

        Weights after 23:30 are dropped; a day with no traffic at all gets a flat curve (even spend)."""
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1 or len(w) == 0 or MINUTES_PER_DAY % len(w) or np.any(w < 0) or not np.all(np.isfinite(w)):
            raise InvalidArgument(f"a traffic shape needs non-negative weights in buckets that divide the day "
                             f"(24, 96, 1440...), got {len(w)}")
        per_minute = np.repeat(w, MINUTES_PER_DAY // len(w))[:CURVE_END_MINUTE]
        if per_minute.sum() <= 0:
            per_minute = np.ones(CURVE_END_MINUTE)
        cumulative = np.concatenate([[0.0], np.cumsum(per_minute) / per_minute.sum(),
                                     np.ones(MINUTES_PER_DAY - CURVE_END_MINUTE)])
        cumulative[CURVE_END_MINUTE:] = 1.0  # exactly: the plan lands on the budget, not a rounding below it
        return cls(cumulative)

    @classmethod
    def flat(cls) -> "TargetCurve":
        return cls.from_shape([1.0] * 24)

    def share(self, minute: float) -> float:
        """Share of the day's budget to be spent by this (fractional) minute of the local day."""
        m = min(max(minute, 0.0), float(MINUTES_PER_DAY))
        i = int(m)
        if i >= MINUTES_PER_DAY:
            return 1.0
        return float(self.cumulative[i] + (self.cumulative[i + 1] - self.cumulative[i]) * (m - i))

    def peak_minute_share(self) -> float:
        return float(np.max(np.diff(self.cumulative)))


def average_shape(shapes: Sequence[Sequence[float]]) -> list[float]:
    """The mean of several traffic shapes, each normalised first (a placement's average shape)."""
    rows = [np.asarray(s, dtype=np.float64) for s in shapes if sum(s) > 0]
    if not rows:
        return [1.0] * 24
    return list(np.mean([r / r.sum() for r in rows], axis=0))


@dataclass(frozen=True)
class SpendPlan:
    """The day's target: from `anchor_spend_micros` at `anchor_minute` to the budget along the curve.

    At day start the anchor is (0, 0). A campaign that starts mid-day anchors at its first minute, and a
    budget change re-anchors at the current target, so the rest of the curve is rescaled over the
    remaining hours instead of the difference being spent at once."""

    curve: TargetCurve
    budget_micros: int
    anchor_minute: float = 0.0
    anchor_spend_micros: int = 0

    def target_micros(self, minute: float) -> int:
        start = self.curve.share(self.anchor_minute)
        if minute <= self.anchor_minute:
            return self.anchor_spend_micros
        if start >= 1.0:  # after 23:30: whatever is left may go now
            return self.budget_micros
        share = (self.curve.share(minute) - start) / (1.0 - start)
        return self.anchor_spend_micros + int((self.budget_micros - self.anchor_spend_micros) * share)

    def rebudget(self, budget_micros: int, minute: float) -> "SpendPlan":
        anchor = min(self.target_micros(minute), budget_micros)
        return SpendPlan(self.curve, budget_micros, minute, anchor)

    def reshape(self, curve: TargetCurve, minute: float) -> "SpendPlan":
        """The rest of the plan along another curve, from where the target stands at `minute`."""
        return SpendPlan(curve, self.budget_micros, minute, min(self.target_micros(minute), self.budget_micros))

    def peak_minute_micros(self) -> int:
        start = self.curve.share(self.anchor_minute)
        scale = (self.budget_micros - self.anchor_spend_micros) / max(1e-9, 1.0 - start) if start < 1 else 0
        return int(self.curve.peak_minute_share() * scale)


# ------------------------------------------------------------------ controller


@dataclass(frozen=True)
class ControlInput:
    """What one controller step sees. Rates are per minute; the gap is target minus committed spend."""

    participation_probability: float
    spend_last_minute_micros: int  # expected cost reported for the last minute of event time
    target_last_minute_micros: int  # what the curve asked for over that minute
    gap_micros: int  # target so far minus committed spend (positive: behind)
    minutes_to_curve_end: float  # until 23:30 local
    served_last_minute: int  # ads served in the last minute: the controller's confidence
    billing_luck_micros: int = 0  # billed minus expected cost over what billing covers, not yet absorbed
    plan_remaining_micros: int = 0  # what the plan still asks for after now (budget minus target so far)
    cost_per_ad_micros: int = 0  # recent expected cost of one served ad (0: not known yet)
    level: float = 1.0  # billed money per micro of expected cost (core.budget.PacerState.level)
    metered: bool = False  # servers spend only from leased slices: an empty minute may be unused slices
    unthrottled_spend: float = 0.0  # expected cost a minute at p = 1 (`RateSums.rate`; 0: not known)
    unthrottled_ads: float = 0.0  # the ads behind that estimate (`RateSums.served`): its noise


def step_gain(ratio: float) -> float:
    """Share of the log rate error one step corrects: STEP_GAIN for the small errors that are mostly noise,
    rising to 1 for a rate off by LARGE_ERROR_RATIO or more (a spike is answered within a minute)."""
    size = min(1.0, abs(math.log(max(ratio, 1e-9))) / math.log(LARGE_ERROR_RATIO))
    return STEP_GAIN + (1.0 - STEP_GAIN) * size * size


@dataclass(frozen=True)
class RateSums:
    """What p = 1 would spend a minute, from exponentially decayed sums: expected cost reported, ads served, and
    exposure (p x minutes, with the p in force while they were served), over about RATE_MINUTES (the
    average the controller uses) and about RATE_FAST_MINUTES (the jump check, `update_rate`)."""

    spend: float = 0.0
    served: float = 0.0
    exposure: float = 0.0
    fast_spend: float = 0.0
    fast_served: float = 0.0
    fast_exposure: float = 0.0

    def rate(self) -> float:
        """Expected cost a minute at p = 1, or 0 while fewer than RATE_MIN_ADS ads stand behind the average."""
        if self.served < RATE_MIN_ADS or self.exposure <= 0:
            return 0.0
        return self.spend / self.exposure


def update_rate(sums: RateSums, spend_micros: int, served: int, p: float, minutes: float) -> RateSums:
    """The sums after `minutes` more in which the servers, entering auctions with probability `p`, served `served`
    ads of `spend_micros` expected cost.

    The average reacts to noise with a fifth of a minute's worth each step, which keeps p still where a
    one-minute reading would swing it. A real change of traffic (the evening spike, a placement going quiet)
    shows in the last half minute as many more or fewer ads than the average expects, beyond its Poisson noise
    (RATE_JUMP_SIGMAS) and by at least RATE_JUMP_RATIO: the average then restarts from the fast sums, so
    the controller answers a spike within a minute."""
    slow, fast = math.exp(-minutes / RATE_MINUTES), math.exp(-minutes / RATE_FAST_MINUTES)
    exposure = max(0.0, p) * minutes
    new = RateSums(sums.spend * slow + spend_micros, sums.served * slow + served,
                   sums.exposure * slow + exposure, sums.fast_spend * fast + spend_micros,
                   sums.fast_served * fast + served, sums.fast_exposure * fast + exposure)
    if new.served <= 0 or new.exposure <= 0 or new.fast_exposure <= 0:
        return new
    expected = new.served / new.exposure * new.fast_exposure  # ads the average predicts for the fast sums
    seen = new.fast_served
    jumped = abs(seen - expected) > RATE_JUMP_SIGMAS * math.sqrt(max(expected, 1.0)) and \
        (seen > RATE_JUMP_RATIO * expected or seen * RATE_JUMP_RATIO < expected)
    if jumped:
        return RateSums(new.fast_spend, new.fast_served, new.fast_exposure,
                        new.fast_spend, new.fast_served, new.fast_exposure)
    return new


def next_participation(step: ControlInput) -> float:
    """p for the next step: feed-forward on the unthrottled spend rate, with an integral term on the gap.

    With the unthrottled rate known (`unthrottled_spend`, `RateSums`), p is the desired rate over what
    p = 1 would spend (in billed money, at the level): the curve's rate is met as traffic moves without
    waiting for an error, and only the accumulated gap (target minus committed, spread over the next ~2
    hours) corrects what the estimate gets wrong. The last minute's spend is not read at all, so its noise
    does not move p; p still moves at most +-25 % a step, floored at 0.001 and capped at 1.

    Until enough ads stand behind the estimate (a new campaign; a CPA campaign, whose bid multiplier is
    steered instead of p), it falls back to proportional-integral control in log space (so gains are
    relative). Desired rate = the curve's rate over the last minute (proportional part) + the accumulated gap spread
    over the next ~2 hours (integral part: the gap is the integral of the rate error). p is scaled by
    desired / actual, raised to a gain: step_gain (a share of a small error, all of a large one: the last
    minute's spend answers p with a delay, and correcting all of a delayed error each step overshoots)
    times a factor that grows with the campaign's volume (a $50-a-day campaign is not swung by one
    click); limited to +-25 % per step, floored at 0.001 and capped at 1.

    Billed spend corrects the level, not the loop (design): the part of the gap that is billing's luck
    (clicks above or below the expected cost they cover, `billing_luck_micros`) is not closed over two
    hours but spread over the rest of the plan, in proportion to what each minute of it asks for. A
    campaign with a few clicks an hour is then not swung by each one, and the budget still lands by 23:30."""
    p = step.participation_probability
    close_over = min(GAP_CLOSE_MINUTES, max(10.0, step.minutes_to_curve_end))
    luck, remaining = step.billing_luck_micros, step.plan_remaining_micros
    if remaining > 0:  # the loop closes the gap without the luck; the curve's rate carries the luck's share
        rate = step.target_last_minute_micros * max(0.0, 1.0 - luck / remaining)
        desired = max(0.0, rate + (step.gap_micros + luck) / close_over)
    else:  # past the curve's end: whatever is left, luck included, closes now
        desired = max(0.0, step.target_last_minute_micros + step.gap_micros / close_over)
    if step.unthrottled_spend > 0 and p > 0:
        wanted = desired / (step.unthrottled_spend * step.level)
        if abs(math.log(max(wanted, 1e-12) / p)) <= RATE_HOLD_SIGMAS / math.sqrt(max(step.unthrottled_ads, 1.0)):
            return p  # within the estimate's own noise: hold
        factor = min(1 + P_MAX_CHANGE, max(1 - P_MAX_CHANGE, wanted / p))
        return min(1.0, max(P_FLOOR, p * factor))
    actual = float(step.spend_last_minute_micros) * step.level  # in the money billing will take for it
    if actual <= 0:
        ratio = (1 + P_MAX_CHANGE) if desired > 0 else (1 - P_MAX_CHANGE)
        # No ad in the last minute says little when the curve asked for a fraction of one: the evidence is
        # worth the ads the desired rate expects, with the same volume scaling as a minute that served some.
        # Metered, an empty minute can be slices the servers did not use at a low p: the full step.
        expected_ads = desired / (step.cost_per_ad_micros * step.level) \
            if step.cost_per_ad_micros > 0 and not step.metered else float("inf")
        gain = 1.0 if expected_ads == float("inf") else expected_ads / (expected_ads + VOLUME_HALF_GAIN)
    else:
        ratio = max(desired, 1e-9) / actual
        gain = step_gain(ratio) * step.served_last_minute / (step.served_last_minute + VOLUME_HALF_GAIN)
    factor = math.exp(gain * math.log(ratio))
    factor = min(1 + P_MAX_CHANGE, max(1 - P_MAX_CHANGE, factor))
    return min(1.0, max(P_FLOOR, p * factor))


def p_moves_by_hour(minutes: Sequence[int], ps: Sequence[float]) -> list[float]:
    """The sum of |change of p| in each hour of the day (24 values), from p at the given minutes of the day
    (0-1439, in order; a NaN is a minute p was not seen and is skipped): how much the controller moved p. The
    design's controller moves p with traffic and spikes; one that answers noise walks it up and down all day."""
    moves = [0.0] * 24
    last = None
    for minute, p in zip(minutes, ps):
        if p != p:  # NaN
            continue
        if last is not None:
            moves[min(23, max(0, int(minute) // 60))] += abs(float(p) - last)
        last = float(p)
    return [round(m, 4) for m in moves]


def delivery_limit(participation_probability: float, spend_last_minute_micros: int,
                   target_last_minute_micros: int, served_last_minute: int,
                   eligible_last_minute: int) -> str | None:
    """At p = 1 and under target: "BID" when the campaign loses most auctions it enters, "AUDIENCE" when it
    wins them but there are too few; None otherwise."""
    if participation_probability < 1.0 or spend_last_minute_micros >= 0.9 * target_last_minute_micros:
        return None
    win_rate = served_last_minute / eligible_last_minute if eligible_last_minute else 0.0
    return "BID" if eligible_last_minute and win_rate < 0.5 else "AUDIENCE"


# ------------------------------------------------------------------ budget states and slices


def open_margin_micros(peak_minute_micros: int, click_price_micros: int) -> int:
    """Open while more than this remains: max(5 minutes of peak spend, 10 click prices)."""
    return max(OPEN_MARGIN_MINUTES * peak_minute_micros, OPEN_MARGIN_CLICKS * click_price_micros)


def budget_state_kind(budget_micros: int, committed_micros: int, peak_minute_micros: int,
                      click_price_micros: int) -> str:
    """OPEN, METERED or STOPPED. Stopped at the budget (also at once when a budget is lowered below
    today's spend) or once less than one click price remains (grants have stopped; billing's true-up can
    reopen it); metered within the margin, where servers spend only from leased slices."""
    remaining = budget_micros - committed_micros
    if remaining <= 0 or remaining < click_price_micros:
        return "STOPPED"  # at the budget, or less than one click price left: no slice could be granted
    return "OPEN" if remaining > open_margin_micros(peak_minute_micros, click_price_micros) else "METERED"


@dataclass(frozen=True)
class SliceRequest:
    server_id: str
    spend_per_s_micros: float  # that server's recent expected spend rate on the campaign


def slice_amounts(remaining_micros: int, outstanding_micros: int, click_price_micros: int,
                  impression_charge_micros: int, requests: Sequence[SliceRequest]) -> list[tuple[str, int]]:
    """Slices to grant now, in request order: about 10 s of each server's spend and at least one
    impression's charge, only while at least one click price remains, and never more than half of what
    remains outstanding at once (`remaining_micros` already excludes the expected cost in flight).

    Before any impression of the campaign was counted its charge is unknown, and the floor is the click price
    (the highest per-event price reported, so never below one impression's charge): a slice smaller than what
    one served event costs would let a server spend past its slice on its first event."""
    if remaining_micros < max(1, click_price_micros):
        return []
    room = int(remaining_micros * SLICE_OUTSTANDING_SHARE) - outstanding_micros
    floor = max(impression_charge_micros or click_price_micros, 1)
    grants = []
    for request in requests:
        amount = max(int(request.spend_per_s_micros * SLICE_SPEND_S), floor)
        if amount > room:
            break
        grants.append((request.server_id, amount))
        room -= amount
    return grants


# ------------------------------------------------------------------ shapes from traffic counts

MIN_SHAPE_REQUESTS = 240  # fewer requests over the days than this: too thin to shape a curve (use the default)


def shape_from_counts(hour_counts: dict[int, int] | Sequence[int], min_requests: int = MIN_SHAPE_REQUESTS
                      ) -> list[float] | None:
    """A 24-hour traffic shape (shares summing to 1) from request counts per hour of the local day, or None when
    there were too few requests to shape a curve. Every hour keeps at least 1 % of the mean, so a campaign whose
    history has an empty hour can still spend a little there (and be measured)."""
    counts = [int(hour_counts.get(h, 0)) for h in range(24)] if isinstance(hour_counts, dict) else \
        [int(c) for c in hour_counts]
    if len(counts) != 24:
        raise InvalidArgument(f"a shape needs 24 hourly counts, got {len(counts)}")
    total = sum(counts)
    if total < min_requests:
        return None
    floor = 0.01 * total / 24
    weights = [max(c, floor) for c in counts]
    return [round(w / sum(weights), 6) for w in weights]


# ------------------------------------------------------------------ a new campaign: its curve and its first p

ANY_PLACEMENT = "*"  # an ad without a placement clause (or with only exclusions) may serve on any placement
FORECAST_SHARE = 0.5  # a new campaign starts at half its forecast p, and the controller raises it
FORECAST_AFTER_MS = 60_000  # the forecast waits for a whole minute of the campaign's eligible-request counts
VALUE_QUANTILES = 21  # the values to beat kept per placement: minimum, every 5 %, maximum


def placement_shape(placements: Sequence[str], placement_shapes: dict[str, Sequence[float]],
                    default: Sequence[float] | None) -> list[float] | None:
    """The traffic shape of a campaign without its own history: the average shape of the placements its ads
    may serve on (`placement_shapes`: the curve pipeline's, by placement). `default` when its ads may serve
    anywhere (ANY_PLACEMENT), when it has no ads yet, or when none of its placements has a shape."""
    if not placements or ANY_PLACEMENT in placements:
        return list(default) if default else None
    known = [placement_shapes[p] for p in sorted(placements) if p in placement_shapes]
    if not known:
        return list(default) if default else None
    return known[0] if len(known) == 1 else [round(w, 6) for w in average_shape(known)]


def value_to_beat(slots: int, winner_values_micros: Sequence[int], reserve_micros: int | None) -> int:
    """What an ad's total value per impression had to exceed to win a slot in one auction: the lowest winner's
    total value when every slot was filled, else the reserve (0 without one)."""
    if slots > 0 and len(winner_values_micros) >= slots:
        return int(min(winner_values_micros))
    return int(reserve_micros or 0)


def value_per_bid_samples(record: dict) -> list[tuple[str, float]]:
    """From one served record: ("<placement>|<bid type>", what a micro of bid was worth per impression there,
    (total value - quality) / bid: the predicted action rate the auction gave it) for each winner and sampled
    loser that names its bid. Their median, by placement and bid type, turns a new campaign's bid into a
    value comparable with the values to beat (`Curves.value`)."""
    out = []
    for ad in list(record.get("winners") or []) + sampled_losers(record):
        bid, bid_type = ad.get("bid_micros"), ad.get("bid_type")
        if bid and bid_type and ad.get("total_value_micros") is not None:
            value = int(ad["total_value_micros"]) - int(ad.get("quality_micros") or 0)
            out.append((f"{record['placement']}|{str(bid_type).upper()}", value / int(bid)))
    return out


def value_per_bid_table(medians: dict[str, float]) -> dict[str, dict[str, float]]:
    """The curve document's `value_per_bid` ({placement: {bid type: median}}) from medians keyed as
    `value_per_bid_samples` keys its samples ("<placement>|<bid type>")."""
    table: dict[str, dict[str, float]] = {}
    for key, median in sorted(medians.items()):
        placement, bid_type = key.rsplit("|", 1)
        table.setdefault(placement, {})[bid_type] = float(median)
    return table


def win_forecast(value_micros: float, values_to_beat: Sequence[int]) -> tuple[float, float]:
    """(share of auctions won, expected cost per auction entered, in micros) for an ad worth `value_micros` per
    impression, against a sample of the values to beat where it serves (quantiles from the served log,
    pipelines.traffic_curves): it wins the auctions whose value to beat is below its own, and pays about that
    value there (a second price)."""
    if not values_to_beat:
        return 0.0, 0.0
    beaten = [v for v in values_to_beat if v < value_micros]
    return len(beaten) / len(values_to_beat), sum(beaten) / len(values_to_beat)


def forecast_participation(target_per_minute_micros: float, eligible_per_minute: float, value_micros: float,
                           values_to_beat: Sequence[int]) -> float | None:
    """A new campaign's first p (design: "A new campaign starts at 15:00 with no history"): eligible requests a
    minute x the win rate and the cost of a win at its ads' value (`win_forecast`) is what p = 1 would spend a
    minute; p is solved for the target rate and started at FORECAST_SHARE of that. None when there is nothing
    to forecast from (no eligible requests, no value, no values to beat) or it forecasts no win at all: the
    controller then goes on from where p stands."""
    if eligible_per_minute <= 0 or value_micros <= 0 or not values_to_beat or target_per_minute_micros <= 0:
        return None
    _, cost_per_entry = win_forecast(value_micros, values_to_beat)
    if cost_per_entry <= 0:
        return None
    p = FORECAST_SHARE * target_per_minute_micros / (eligible_per_minute * cost_per_entry)
    return min(1.0, max(P_FLOOR, p))


@dataclass(frozen=True)
class Curves:
    """The curve pipeline's document (pipelines.traffic_curves) as the budget job reads it: the default shape,
    each campaign's own, each placement's, and for the forecast of a new campaign's first p, by placement a
    sample of the values to beat (`value_to_beat` quantiles) and per bid type the median value of a micro of
    bid (`value_per_bid_samples`)."""

    default: list[float] | None = None
    campaigns: dict[int, list[float]] | None = None
    placements: dict[str, list[float]] | None = None
    values_to_beat: dict[str, list[int]] | None = None
    value_per_bid: dict[str, dict[str, float]] | None = None

    @classmethod
    def from_document(cls, doc: dict) -> "Curves":
        return cls(doc.get("default"), {int(k): v for k, v in (doc.get("campaigns") or {}).items()},
                   dict(doc.get("placements") or {}),
                   {k: [int(x) for x in v] for k, v in (doc.get("values_to_beat") or {}).items()},
                   {k: {t: float(x) for t, x in v.items()} for k, v in (doc.get("value_per_bid") or {}).items()})

    def shape(self, campaign_id: int, placements: Sequence[str] = ()) -> list[float] | None:
        """The campaign's own shape, else its placements' average (`placement_shape`), else the default."""
        own = (self.campaigns or {}).get(campaign_id)
        return own if own else placement_shape(placements, self.placements or {}, self.default)

    def values(self, placements: Sequence[str]) -> list[int]:
        """The values to beat where the campaign's ads serve, pooled (every placement's for ANY_PLACEMENT)."""
        by_placement = self.values_to_beat or {}
        names = by_placement if ANY_PLACEMENT in placements else [p for p in placements if p in by_placement]
        return sorted(v for name in names for v in by_placement[name])

    def value(self, placements: Sequence[str], bid_type: str, bid_micros: int) -> float:
        """What an ad bidding `bid_micros` of `bid_type` is worth per impression where the campaign's ads serve,
        by ads of the same bid type there (mean over its placements); 0 when none is known."""
        by_placement = self.value_per_bid or {}
        names = by_placement if ANY_PLACEMENT in placements else placements
        ratios = [by_placement[p][bid_type] for p in names if bid_type in by_placement.get(p, {})]
        return bid_micros * sum(ratios) / len(ratios) if ratios else 0.0
