"""One campaign's budget as the budget job keeps it: committed spend, the day's plan, p, slices. Pure.

`PacerState` is the whole keyed state of one campaign (schemas/pacer_state.avsc); `on_campaign`, `on_ads`,
`on_spend`, `on_server_spend`, `on_billed` and `step` change it, each with the instant as a parameter, and
core.budget_events applies them to the job's events. Committed spend, the level and billing's luck:
docs/pacing.md, "The rules"."""
from __future__ import annotations

from dataclasses import astuple, dataclass, field, fields
from functools import lru_cache
from typing import Any

import numpy as np

from core.pacing import (ANY_PLACEMENT, BID_MULTIPLIER_RANGE, CURVE_END_MINUTE, FORECAST_AFTER_MS, NEW_CAMPAIGN_P,
                         P_FLOOR, STEP_MS, ControlInput, RateSums, SliceRequest, SpendPlan, TargetCurve,
                         budget_state_kind, delivery_limit, forecast_participation, local_day, next_participation,
                         slice_amounts, update_rate)
from core.leases import LEASE_LIFETIME_MS

BILLING_SETTLE_MS = 5 * 60_000  # ads served this long before the billed instant may still be billed
LEVEL_PRIOR_CLICKS = 30  # the billed / expected level starts at 1 and moves as billing brings clicks
LEVEL_RANGE = (0.5, 2.0)  # a level outside this says the predictions are broken, not that pacing should follow
HEARTBEAT_MS = 30_000  # a state is re-sent at least this often, so servers can tell the job is alive
COMPACT_MS = 5 * 60_000  # older spend windows are merged into buckets this long
P_HISTORY_BUCKETS = 96  # p by quarter-hour of the local day (for tomorrow's first p and dashboards)
LIVE_STATUSES = ("ACTIVE",)


@dataclass
class Window:
    end_ms: int
    spend_micros: int
    served: int
    eligible: int
    servers: int = 0


@dataclass
class Slice:
    lease_id: str
    server_id: str
    amount_micros: int
    reported_micros: int
    expires_ms: int


_RATE_FIELDS = tuple(f"rate_{f.name}" for f in fields(RateSums))  # PacerState keeps RateSums as these fields


@dataclass
class PacerState:
    campaign_id: int
    timezone: str = "UTC"
    bid_type: str = "CPC"
    status: str = "ACTIVE"
    budget_micros: int = 0
    shape: list[float] = field(default_factory=lambda: [1.0] * 24)
    budget_day: str = ""
    plan_budget_micros: int = 0
    plan_anchor_minute: float = 0.0
    plan_anchor_spend_micros: int = 0
    participation_probability: float = NEW_CAMPAIGN_P
    bid_multiplier: float = 1.0
    reported_today_micros: int = 0
    windows: list[Window] = field(default_factory=list)
    billed_micros: int = 0
    billed_until_ms: int = 0  # 0: no billing today yet
    invalid_credit_micros: int = 0
    expired_unreported: list[Window] = field(default_factory=list)  # slices that expired unspent
    slices: list[Slice] = field(default_factory=list)
    lease_counter: int = 0
    peak_minute_micros: int = 0
    click_price_micros: int = 0
    impression_charge_micros: int = 0
    p_today: list[float] = field(default_factory=list)
    p_yesterday: list[float] = field(default_factory=list)
    last_state: str = ""
    last_p: float = -1.0
    last_emit_ms: int = 0
    last_step_ms: int = 0
    delivery_limit: str | None = None
    spend_per_server_s_micros: int = 0  # last minute's spend per second per reporting server
    luck_absorbed_micros: int = 0  # the part of billing's luck already spread into the plan (see step)
    level_spend_micros: int = 0  # reported expected cost, each step's converted at that step's level()
    level_reported_micros: int = 0  # reported_today_micros when level_spend_micros last took it in
    placements: list[str] = field(default_factory=list)  # where its live ads may serve (ANY_PLACEMENT: anywhere)
    ad_bid_micros: int = 0  # the highest bid among its live ads (0: none known)
    forecast_pending: bool = False  # a new campaign's first p waits for a minute of eligible counts
    first_eligible_ms: int = 0  # end of today's first window with eligible requests (0: none yet)
    # What p = 1 would spend a minute (core.pacing.RateSums), kept across days: the controller's feed-forward
    rate_spend: float = 0.0
    rate_served: float = 0.0
    rate_exposure: float = 0.0
    rate_fast_spend: float = 0.0
    rate_fast_served: float = 0.0
    rate_fast_exposure: float = 0.0

    # ---------------------------------------------------------------- derived

    def plan(self) -> SpendPlan:
        return SpendPlan(_curve(tuple(self.shape)), self.plan_budget_micros, self.plan_anchor_minute,
                         self.plan_anchor_spend_micros)

    def unsettled_micros(self) -> tuple[int, int]:
        """(expected cost reported for windows billing may not cover yet, unreported remainders of expired
        slices counted as spent until billing covers them); with no billing yet today, everything."""
        if self.billed_until_ms <= 0:
            estimates = self.reported_today_micros
        else:
            cutoff = self.billed_until_ms - BILLING_SETTLE_MS
            estimates = sum(w.spend_micros for w in self.windows if w.end_ms > cutoff)
        unreported = sum(w.spend_micros for w in self.expired_unreported
                         if self.billed_until_ms <= 0 or w.end_ms > self.billed_until_ms - BILLING_SETTLE_MS)
        return estimates, unreported

    def committed_micros(self, unsettled: tuple[int, int] | None = None) -> int:
        """Billed + the unsettled expected cost and slice remainders (`unsettled_micros`, passed when known)."""
        estimates, unreported = unsettled if unsettled is not None else self.unsettled_micros()
        return self.billed_micros - self.invalid_credit_micros + estimates + unreported

    def level(self, estimates: int | None = None) -> float:
        """Billed money per micro of expected cost, over what billing covers today, shrunk toward 1 by a prior
        worth LEVEL_PRIOR_CLICKS click prices: how far the predictions behind the reported expected cost run
        above or below the clicks that come (an auction's winners are the ads it over-rated, and a campaign's
        placements and audience move its true click rate away from the priors). 1 before any billing."""
        if self.billed_until_ms <= 0:
            return 1.0
        if estimates is None:
            estimates, _ = self.unsettled_micros()
        prior = LEVEL_PRIOR_CLICKS * max(self.click_price_micros, 1)
        settled = max(0, self.reported_today_micros - estimates)
        level = (self.billed_micros - self.invalid_credit_micros + prior) / (settled + prior)
        return min(LEVEL_RANGE[1], max(LEVEL_RANGE[0], level))

    def billing_luck_micros(self, estimates: int | None = None) -> int:
        """Billed minus what the level made of the expected cost billing covers (`level_spend_micros`, less
        the unsettled part at today's level): the clicks the level does not explain. 0 before any billing."""
        if self.billed_until_ms <= 0:
            return 0
        if estimates is None:
            estimates, _ = self.unsettled_micros()
        settled_level_spend = self.level_spend_micros - round(self.level(estimates) * estimates)
        return self.billed_micros - self.invalid_credit_micros - settled_level_spend

    def rate_sums(self) -> RateSums:
        return RateSums(*(getattr(self, name) for name in _RATE_FIELDS))

    def keep_rate_sums(self, sums: RateSums) -> None:
        for name, value in zip(_RATE_FIELDS, astuple(sums)):
            setattr(self, name, value)

    def remaining_micros(self) -> int:
        return max(0, self.budget_micros - self.committed_micros())

    def outstanding_micros(self, now_ms: int) -> int:
        return sum(max(0, s.amount_micros - s.reported_micros) for s in self.slices if s.expires_ms > now_ms)


@lru_cache(maxsize=4096)
def _curve(shape: tuple[float, ...]) -> TargetCurve:
    return TargetCurve.from_shape(shape)


Output = tuple[str, dict[str, Any]]  # ("state" | "lease" | "pacing", record)


def _start_day(state: PacerState, day: str, minute: float, shape: list[float] | None = None) -> None:
    """A new budget day: the plan from the day's first minute (with the day's traffic shape, when the
    curve pipeline has a newer one); p from yesterday at the same point."""
    if shape:
        state.shape = list(shape)
    if state.budget_day:
        state.p_yesterday = state.p_today or state.p_yesterday
    first_day = not state.budget_day
    state.budget_day, state.p_today = day, [-1.0] * P_HISTORY_BUCKETS
    if not first_day:  # spend reported before the campaign's first record still counts for that day
        state.reported_today_micros, state.windows, state.expired_unreported = 0, [], []
        state.billed_micros, state.billed_until_ms, state.invalid_credit_micros = 0, 0, 0
        state.peak_minute_micros, state.slices, state.first_eligible_ms = 0, [], 0
    state.luck_absorbed_micros = state.level_spend_micros = state.level_reported_micros = 0
    state.plan_budget_micros = state.budget_micros
    # A campaign seen for the first time mid-day spreads its budget over the remaining hours.
    state.plan_anchor_minute, state.plan_anchor_spend_micros = (minute if first_day else 0.0), 0
    bucket = int(minute * P_HISTORY_BUCKETS / 1440)
    yesterday = state.p_yesterday[bucket] if len(state.p_yesterday) == P_HISTORY_BUCKETS else -1.0
    state.participation_probability = yesterday if yesterday > 0 else NEW_CAMPAIGN_P
    state.forecast_pending = yesterday <= 0  # no p to start from: forecast one (step)
    state.bid_multiplier = 1.0


def on_campaign(state: PacerState, record: dict[str, Any], now_ms: int,
                shape: list[float] | None = None) -> list[Output]:
    """A new version of the campaign: a budget raised mid-day rescales the rest of the curve; one lowered
    below today's spend stops the campaign at once (the state goes out now, not at the next step)."""
    state.timezone, state.bid_type, state.status = record["timezone"], record["bid_type"], record["status"]
    new_budget = int(record["daily_budget_micros"])
    day, minute = local_day(now_ms, state.timezone)
    if not state.budget_day or state.budget_day != day:
        state.budget_micros = new_budget
        _start_day(state, day, minute, shape)
    elif new_budget != state.budget_micros:
        state.budget_micros = new_budget
        plan = state.plan().rebudget(new_budget, minute)
        state.plan_budget_micros, state.plan_anchor_minute = plan.budget_micros, plan.anchor_minute
        state.plan_anchor_spend_micros = plan.anchor_spend_micros
    return _emit(state, now_ms, force=True)


AdSummary = tuple[int, int, tuple[str, ...], bool]  # (version, bid micros, placements, removed)


def ad_summary(record: dict[str, Any]) -> AdSummary:
    """What the budget job keeps of a serving.ads record: its version, its bid, the placements its targeting
    allows (ANY_PLACEMENT without a placement clause that allows some), removed."""
    allowed = [c["values"] for c in record.get("targeting") or []
               if c["attribute"] == "placement" and not c.get("excluded")]
    placements = tuple(sorted(set(allowed[0]).intersection(*allowed[1:]))) if allowed else (ANY_PLACEMENT,)
    return (int(record["version"]), int(record["bid_micros"]), placements, bool(record["removed"]))


def apply_ad(ads: dict[int, AdSummary], ad_id: int, record: dict[str, Any]) -> bool:
    """A campaign's ads (by ad id) with `record` applied; an older version never overwrites a newer one.
    True when it changed them."""
    held = ads.get(ad_id)
    if held is not None and held[0] >= int(record["version"]):
        return False
    ads[ad_id] = ad_summary(record)
    return True


def live_ads(ads: dict[int, AdSummary]) -> tuple[list[str], int]:
    """(the placements the campaign's live ads may serve on, sorted; the highest bid among them)."""
    live = [a for a in ads.values() if not a[3]]
    placements = sorted({p for a in live for p in a[2]})
    return ([ANY_PLACEMENT] if ANY_PLACEMENT in placements else placements), max((a[1] for a in live), default=0)


def on_ads(state: PacerState, placements: list[str], bid_micros: int, now_ms: int,
           shape: list[float] | None) -> None:
    """The campaign's live ads changed (`live_ads`): their placements and their highest bid (a new campaign's
    forecast reads them). `shape`: the shape the campaign's curve should now have (the
    job's: its own traffic history, else its placements' average); a campaign already in its day whose shape
    changes (its first ads came after its record) re-plans the rest of the day along it, from where its
    target stands now."""
    state.placements, state.ad_bid_micros = list(placements), int(bid_micros)
    if not state.budget_day or not shape or list(shape) == state.shape:
        return
    _, minute = local_day(now_ms, state.timezone)
    plan = state.plan().reshape(_curve(tuple(shape)), minute)
    state.shape = list(shape)
    state.plan_anchor_minute, state.plan_anchor_spend_micros = plan.anchor_minute, plan.anchor_spend_micros


def on_spend(state: PacerState, window: Window, max_price_micros: int) -> None:
    """The deduplicated spend of one 10 s window (all servers). Late windows count the same."""
    if window.eligible and (not state.first_eligible_ms or window.end_ms < state.first_eligible_ms):
        state.first_eligible_ms = window.end_ms
    state.reported_today_micros += window.spend_micros
    state.windows.append(window)
    state.click_price_micros = max(state.click_price_micros, max_price_micros)
    if window.served:
        state.impression_charge_micros = max(state.impression_charge_micros,
                                             -(-window.spend_micros // window.served))


@dataclass(frozen=True)
class ServerSpend:
    """One server's 1 s spend on a metered campaign; may ask for a slice, or hand its slices back (`released`)."""

    server_id: str
    lease_id: str | None
    spend_micros: int
    wants_slice: bool
    max_price_micros: int
    at_ms: int
    released: bool = False


def on_server_spend(state: PacerState, report: ServerSpend, spend_per_s_micros: float) -> list[Output]:
    """One server's spend on the campaign (1 s windows, only for reports naming a slice, asking for one or
    handing slices back): draws the slice down, and grants a new slice at `report.at_ms` when the campaign is
    metered and the server asks (sized for at least `spend_per_s_micros`). `released`: the server's last report
    (it drains) hands back every slice it holds of the campaign. They are dropped: what they had not spent is
    neither outstanding nor, once they would have expired, counted as spent until billing settles it, so the
    campaign may spend it again at once. Safe because the server serves nothing after that report, and all it
    spent is in the reports (the 10 s windows count it whether or not its slice is still held)."""
    server_id, now_ms = report.server_id, report.at_ms
    state.click_price_micros = max(state.click_price_micros, report.max_price_micros)
    for s in state.slices:
        if s.lease_id == report.lease_id:
            s.reported_micros += report.spend_micros
    if report.released:
        state.slices = [s for s in state.slices if s.server_id != server_id]
        return []
    if not report.wants_slice or state.last_state != "METERED":
        return []
    if any(s.server_id == server_id and s.expires_ms > now_ms and s.reported_micros < s.amount_micros
           for s in state.slices):
        return []
    rate = max(spend_per_s_micros, state.spend_per_server_s_micros)
    return _grant(state, [SliceRequest(server_id, rate)], now_ms)


def _grant(state: PacerState, requests: list[SliceRequest], now_ms: int) -> list[Output]:
    out: list[Output] = []
    grants = slice_amounts(state.remaining_micros(), state.outstanding_micros(now_ms), state.click_price_micros,
                           state.impression_charge_micros, requests)
    for server_id, amount in grants:
        state.lease_counter += 1
        lease_id = f"{state.campaign_id}-{state.budget_day}-{state.lease_counter}"
        expires = now_ms + LEASE_LIFETIME_MS
        state.slices.append(Slice(lease_id, server_id, amount, 0, expires))
        out.append(("lease", {"lease_id": lease_id, "server_id": server_id, "campaign_id": state.campaign_id,
                              "event_time": now_ms, "amount_micros": amount, "expires_at": expires}))
    return out


def on_billed(state: PacerState, record: dict[str, Any]) -> None:
    """Billed totals for the day so far: they replace the estimates up to their instant."""
    if record["budget_day"] != state.budget_day or int(record["event_time"]) < state.billed_until_ms:
        return
    state.billed_micros = int(record["billed_spend_micros"])
    state.invalid_credit_micros = 0  # billed totals already exclude invalid traffic
    state.billed_until_ms = int(record["event_time"])


def step(state: PacerState, now_ms: int, shape: list[float] | None = None,
         heartbeat_ms: int = HEARTBEAT_MS, market: tuple[float, list[int]] | None = None,
         billing_clock_ms: int = 0) -> list[Output]:
    """One controller step at `now_ms` (a multiple of 10 s of event time). `shape`: the traffic shape a
    new day starts with (default: keep the current one). `market`, read only while `forecast_pending`: what
    the campaign's best bid is worth per impression where its ads serve, and a sample of what an ad had to be
    worth to win there (`Curves.value`, `Curves.values`): a campaign with no p to start from takes its first
    p from a forecast (`forecast_participation`) once it has a minute of eligible-request counts, and the
    controller goes on from there. `billing_clock_ms`: the instant of the newest billed total the job has seen
    for any campaign (0: none; billing's windows close in event-time order for every campaign at once)."""
    if not state.budget_day:
        return []  # no campaign record yet: keep counting its spend, decide nothing about it
    day, minute = local_day(now_ms, state.timezone)
    if day != state.budget_day:
        _start_day(state, day, 0.0, shape)
    last_minute = _tidy(state, now_ms, billing_clock_ms)
    totals = _last_minute_totals(state, last_minute)
    _measure_rate(state, last_minute, now_ms)
    plan = state.plan()
    reading = _read_money(state, plan, minute, now_ms)
    forecast = _forecast(state, plan, minute, reading.target_now_micros, now_ms, totals.eligible, market)
    if state.status in LIVE_STATUSES and forecast is None:
        _control(state, plan, minute, reading, totals)
    state.p_today[int(minute * P_HISTORY_BUCKETS / 1440)] = state.participation_probability
    state.last_step_ms = now_ms
    out = _emit(state, now_ms, heartbeat_ms=heartbeat_ms)
    out.append(("pacing", {"campaign_id": state.campaign_id, "event_time": now_ms, "budget_day": day,
                           "minute": minute, "target_micros": reading.target_now_micros,
                           "committed_micros": reading.committed_micros,
                           "reported_micros": state.reported_today_micros, "billed_micros": state.billed_micros,
                           "participation_probability": state.participation_probability,
                           "state": state.last_state, "budget_micros": state.budget_micros}))
    return out


def _tidy(state: PacerState, now_ms: int, billing_clock_ms: int) -> list[Window]:
    """Expire slices, drop the windows billing covers (compacting the older rest) and the expired slices' remainders
    billing has settled; returns the windows of the last minute."""
    _expire_slices(state, now_ms)
    cutoff = min(now_ms - 60_000, state.billed_until_ms - BILLING_SETTLE_MS) if state.billed_until_ms else \
        now_ms - 60_000
    last_minute = [w for w in state.windows if w.end_ms > now_ms - 60_000]
    state.windows = _compact([w for w in state.windows if w.end_ms > cutoff], now_ms - 60_000)
    # Billing covers an expired slice's remainder once it has got BILLING_SETTLE_MS past the expiry: by this
    # campaign's own totals, or by the billing clock (the newest total of any campaign): the aggregator sends a
    # campaign's totals only for windows with its beacons, so a campaign that stopped serving when its slices
    # ran out would otherwise never see billing pass them, and stay stopped with money left.
    settle_clock = max(state.billed_until_ms, billing_clock_ms)
    if settle_clock:
        settled = settle_clock - BILLING_SETTLE_MS
        state.expired_unreported = [w for w in state.expired_unreported if w.end_ms > settled]
    return last_minute


@dataclass(frozen=True)
class _MinuteTotals:
    spend_micros: int
    served: int
    eligible: int
    cost_per_ad_micros: int  # only an empty minute asks for it (0 otherwise)


def _last_minute_totals(state: PacerState, last_minute: list[Window]) -> _MinuteTotals:
    """The last minute's spend, served ads and eligible requests; the peak minute and the spend per server
    and second follow them."""
    spend_minute = sum(w.spend_micros for w in last_minute)
    state.peak_minute_micros = max(state.peak_minute_micros, spend_minute)
    cost_per_ad = _cost_per_ad(state) if spend_minute <= 0 else 0
    servers = max((w.servers for w in last_minute), default=0)
    state.spend_per_server_s_micros = spend_minute // (60 * max(1, servers))
    return _MinuteTotals(spend_minute, sum(w.served for w in last_minute), sum(w.eligible for w in last_minute),
                         cost_per_ad)


@dataclass(frozen=True)
class _MoneyReading:
    target_now_micros: int
    target_minute_micros: int
    committed_micros: int
    committed_at_level_micros: int
    level: float
    unabsorbed_luck_micros: int


def _read_money(state: PacerState, plan: SpendPlan, minute: float, now_ms: int) -> _MoneyReading:
    """Where the plan stands, what is committed (as reported and at the level), and billing's luck not yet
    spread into the plan; takes the step's reported spend into the level's books."""
    target_now = plan.target_micros(minute)
    target_minute = target_now - plan.target_micros(max(0.0, minute - 1))
    estimates, unreported = state.unsettled_micros()
    committed = state.committed_micros((estimates, unreported))
    level = state.level(estimates)
    state.level_spend_micros += round(level * (state.reported_today_micros - state.level_reported_micros))
    state.level_reported_micros = state.reported_today_micros
    committed_at_level = state.billed_micros - state.invalid_credit_micros + round(level * (estimates + unreported))
    unabsorbed = _absorb_luck(state, plan, minute, target_now, now_ms, state.billing_luck_micros(estimates))
    return _MoneyReading(target_now, target_minute, committed, committed_at_level, level, unabsorbed)


def _forecast(state: PacerState, plan: SpendPlan, minute: float, target_now: int, now_ms: int,
              eligible_minute: int, market: tuple[float, list[int]] | None) -> float | None:
    """A new campaign's first p, once it has a minute of eligible counts (None: no forecast this step)."""
    if not (state.forecast_pending and state.first_eligible_ms and now_ms - state.first_eligible_ms >=
            FORECAST_AFTER_MS - STEP_MS):  # windows end at their last instant: six of them make the minute
        return None
    state.forecast_pending = False
    if state.status not in LIVE_STATUSES or state.bid_type == "CPA":
        return None
    rate = plan.target_micros(minute + 1) - target_now
    value, values_to_beat = market or (0.0, [])
    forecast = forecast_participation(rate, eligible_minute, value, values_to_beat)
    if forecast is not None:
        state.participation_probability = forecast
    return forecast


def _control(state: PacerState, plan: SpendPlan, minute: float, reading: _MoneyReading,
             totals: _MinuteTotals) -> None:
    """The controller's move: p (or a CPA campaign's bid multiplier) and the delivery limit."""
    controlled = ControlInput(
        participation_probability=state.bid_multiplier if state.bid_type == "CPA"
        else state.participation_probability,
        spend_last_minute_micros=totals.spend_micros, target_last_minute_micros=reading.target_minute_micros,
        gap_micros=reading.target_now_micros - reading.committed_at_level_micros,
        minutes_to_curve_end=CURVE_END_MINUTE - minute, served_last_minute=totals.served,
        billing_luck_micros=reading.unabsorbed_luck_micros,
        plan_remaining_micros=plan.budget_micros - reading.target_now_micros,
        cost_per_ad_micros=totals.cost_per_ad_micros, level=reading.level, metered=state.last_state == "METERED",
        unthrottled_spend=state.rate_sums().rate() if _measures_rate(state) else 0.0,
        unthrottled_ads=state.rate_served)
    if state.bid_type == "CPA":  # the system sets CPA bids: steer the bid, keep entering every auction
        low, high = BID_MULTIPLIER_RANGE
        state.bid_multiplier = min(high, max(low, next_participation(controlled)))
        state.participation_probability = 1.0
    else:
        state.participation_probability = next_participation(controlled)
    state.delivery_limit = delivery_limit(state.participation_probability, totals.spend_micros,
                                          reading.target_minute_micros, totals.served, totals.eligible)


def _measures_rate(state: PacerState) -> bool:
    """The spend of a step measures the unthrottled rate while the campaign is OPEN: p is then all that throttles
    it. Metered, the slices limit its spend too (a server without one loses the auctions it wins until one
    comes); a CPA campaign enters every auction with a steered bid."""
    return state.last_state == "OPEN" and state.status in LIVE_STATUSES and state.bid_type != "CPA"


def _measure_rate(state: PacerState, last_minute: list[Window], now_ms: int) -> None:
    """Take the windows that ended since the last step into the unthrottled rate (`RateSums`), with the p they
    were served under, while `_measures_rate` holds."""
    if not state.last_step_ms or now_ms <= state.last_step_ms:
        return
    if not _measures_rate(state):
        return
    minutes = min(now_ms - state.last_step_ms, 10 * STEP_MS) / 60_000
    new = [w for w in last_minute if state.last_step_ms < w.end_ms <= now_ms]
    state.keep_rate_sums(update_rate(state.rate_sums(), sum(w.spend_micros for w in new),
                                     sum(w.served for w in new), state.participation_probability, minutes))


def _cost_per_ad(state: PacerState) -> int:
    """The expected cost of one served ad over the windows still held (the last minutes, and those billing
    may not cover), or the largest per-ad charge seen today when they served none."""
    spend = served = 0
    for w in state.windows:
        spend += w.spend_micros
        served += w.served
    return spend // served if served else state.impression_charge_micros


def _absorb_luck(state: PacerState, plan: SpendPlan, minute: float, target_now: int, now_ms: int, luck: int) -> int:
    """Spread billing's luck over the rest of the plan; returns the part not absorbed yet.

    Each step absorbs the share of the unabsorbed luck that this step's slice of the plan is of everything
    the plan still asked for before it: luck L seen at a point with R left to spend lowers (or raises) each
    later minute's rate by L / R of its target, and is fully absorbed when the plan ends at 23:30."""
    if luck == state.luck_absorbed_micros:
        return 0  # nothing left to absorb (no billing yet, or billing exactly as the level expects)
    since_ms = now_ms - state.last_step_ms if state.last_step_ms else STEP_MS
    elapsed = min(max(since_ms, 0), 10 * STEP_MS) / 60_000
    before = plan.target_micros(max(0.0, minute - elapsed))
    remaining_before = plan.budget_micros - before
    step_target = target_now - before
    share = 1.0 if remaining_before <= 0 else min(1.0, step_target / remaining_before)
    state.luck_absorbed_micros += int((luck - state.luck_absorbed_micros) * share)
    return luck - state.luck_absorbed_micros


def _compact(windows: list[Window], older_than_ms: int) -> list[Window]:
    """Windows older than the last minute are kept only for the billing cutoff: merge them into 5-minute
    buckets stamped with the bucket's end (a bucket straddling the cutoff then counts whole: the safe
    direction). Bounds the state when billing is sparse (a campaign with a click every few hours)."""
    out: list[Window] = []
    for w in windows:
        end = -(-w.end_ms // COMPACT_MS) * COMPACT_MS
        if end <= older_than_ms:  # the whole bucket is older than the last minute the controller reads
            if out and out[-1].end_ms == end:
                last = out[-1]
                out[-1] = Window(end, last.spend_micros + w.spend_micros, last.served + w.served,
                                 last.eligible + w.eligible, max(last.servers, w.servers))
                continue
            w = Window(end, w.spend_micros, w.served, w.eligible, w.servers)
        out.append(w)
    return out


def _expire_slices(state: PacerState, now_ms: int) -> None:
    """An expired slice's unreported remainder counts as spent until billing covers its expiry."""
    live = []
    for s in state.slices:
        if s.expires_ms > now_ms:
            live.append(s)
        elif s.amount_micros > s.reported_micros:
            state.expired_unreported.append(Window(s.expires_ms, s.amount_micros - s.reported_micros, 0, 0))
    state.slices = live


def _emit(state: PacerState, now_ms: int, force: bool = False, heartbeat_ms: int = HEARTBEAT_MS) -> list[Output]:
    """The budget state record when something a server acts on changed, or as a heartbeat."""
    committed = state.committed_micros()
    if state.status not in LIVE_STATUSES:
        kind = "STOPPED"
    else:
        kind = budget_state_kind(state.budget_micros, committed, max(state.peak_minute_micros,
                                                                     state.plan().peak_minute_micros()),
                                 state.click_price_micros)
        if kind == "OPEN" and state.click_price_micros == 0:
            kind = "METERED"  # no price seen yet: fail closed until the first report tells us one
    p = round(max(P_FLOOR, state.participation_probability), 4)
    changed = kind != state.last_state or abs(p - state.last_p) > 0.01 * max(state.last_p, P_FLOOR)
    if not (force or changed or now_ms - state.last_emit_ms >= heartbeat_ms):
        return []
    state.last_state, state.last_p, state.last_emit_ms = kind, p, now_ms
    plan = state.plan()
    _, minute = local_day(now_ms, state.timezone)
    return [("state", {
        "campaign_id": state.campaign_id, "event_time": now_ms, "budget_day": state.budget_day, "state": kind,
        "participation_probability": p, "bid_multiplier": round(state.bid_multiplier, 4),
        "daily_budget_micros": state.budget_micros, "billed_spend_micros": state.billed_micros,
        "committed_spend_micros": committed, "remaining_micros": max(0, state.budget_micros - committed),
        "target_spend_micros": plan.target_micros(minute), "delivery_limit": state.delivery_limit})]


def next_step_ms(now_ms: int) -> int:
    return (now_ms // STEP_MS + 1) * STEP_MS


_PACKED_FLOATS = ("shape", "p_today", "p_yesterday")
_PACKED_WINDOWS = ("windows", "expired_unreported")
_SCALARS = tuple(f.name for f in fields(PacerState) if f.name not in _PACKED_FLOATS + _PACKED_WINDOWS + ("slices",))


def to_record(state: PacerState) -> dict[str, Any]:
    """The state as a schemas/pacer_state.avsc record (how the job keeps it in Flink state). The long arrays are
    packed into bytes: the job writes this record after every change, and per-value encoding was its main cost."""
    record = {name: getattr(state, name) for name in _SCALARS}
    for name in _PACKED_FLOATS:
        record[name] = np.asarray(getattr(state, name), dtype="<f8").tobytes()
    for name in _PACKED_WINDOWS:
        rows = [(w.end_ms, w.spend_micros, w.served, w.eligible, w.servers) for w in getattr(state, name)]
        record[name] = np.asarray(rows, dtype="<i8").reshape(-1, 5).tobytes()
    record["slices"] = [vars(s) for s in state.slices]
    return record


def from_record(record: dict[str, Any]) -> PacerState:
    values = {name: record[name] for name in _SCALARS}
    for name in _PACKED_FLOATS:
        values[name] = np.frombuffer(record[name], dtype="<f8").tolist()
    for name in _PACKED_WINDOWS:
        values[name] = [Window(*map(int, row)) for row in np.frombuffer(record[name], dtype="<i8").reshape(-1, 5)]
    values["slices"] = [Slice(**s) for s in record["slices"]]
    return PacerState(**values)
