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
            raise ValueError(f"a traffic shape needs non-negative weights in buckets that divide the day "
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


def step_gain(ratio: float) -> float:
    """Share of the log rate error one step corrects: STEP_GAIN for the small errors that are mostly noise,
    rising to 1 for a rate off by LARGE_ERROR_RATIO or more (a spike is answered within a minute)."""
    size = min(1.0, abs(math.log(max(ratio, 1e-9))) / math.log(LARGE_ERROR_RATIO))
    return STEP_GAIN + (1.0 - STEP_GAIN) * size * size


def next_participation(step: ControlInput) -> float:
    """Proportional-integral control of p on the spend rate, in log space (so gains are relative).

    Desired rate = the curve's rate over the last minute (proportional part) + the accumulated gap spread
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
    remains outstanding at once (`remaining_micros` already excludes the expected cost in flight)."""
    if remaining_micros < max(1, click_price_micros):
        return []
    room = int(remaining_micros * SLICE_OUTSTANDING_SHARE) - outstanding_micros
    grants = []
    for request in requests:
        amount = max(int(request.spend_per_s_micros * SLICE_SPEND_S), impression_charge_micros, 1)
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
        raise ValueError(f"a shape needs 24 hourly counts, got {len(counts)}")
    total = sum(counts)
    if total < min_requests:
        return None
    floor = 0.01 * total / 24
    weights = [max(c, floor) for c in counts]
    return [round(w / sum(weights), 6) for w in weights]
