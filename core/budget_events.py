"""What reaches one campaign's pacer, as typed events, and the one rule that applies each: `apply(state, event,
market) -> (state, outputs)`. Pure: the instant is in the event, the curves and the billing clock in `Market`.

The budget job only turns its rows into these events, loads the state and emits the outputs; it must never
decide anything itself (docs/pacing.md, "The budget pacing job")."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Union

from core.budget import (HEARTBEAT_MS, AdSummary, Output, PacerState, ServerSpend, Window, live_ads, on_ads,
                         on_billed, on_campaign, on_server_spend, on_spend, step)
from core.pacing import Curves


@dataclass(frozen=True)
class SpendWindow:
    """The deduplicated spend of one campaign in one 10 s event-time window, all servers (reduced in the JVM)."""

    end_ms: int
    spend_micros: int
    served: int
    eligible: int
    servers: int
    max_price_micros: int


@dataclass(frozen=True)
class LateReport:
    """A spend report that came after its window closed (counted once, by `core.spend.report_key`): it is
    added at the instant it arrives."""

    report: dict[str, Any]
    at_ms: int


@dataclass(frozen=True)
class CampaignChange:
    """A serving.campaigns record: budget, status, time zone, bid type."""

    record: dict[str, Any]
    at_ms: int


@dataclass(frozen=True)
class AdsChange:
    """The campaign's live ads changed: where they may serve and their highest bid (`of_ads`)."""

    placements: list[str]
    bid_micros: int
    at_ms: int

    @classmethod
    def of_ads(cls, ads: dict[int, AdSummary], at_ms: int) -> "AdsChange":
        placements, bid_micros = live_ads(ads)
        return cls(placements, bid_micros, at_ms)


@dataclass(frozen=True)
class Billed:
    """A billing.billed_spend record: billed totals for the day so far."""

    record: dict[str, Any]


@dataclass(frozen=True)
class Tick:
    """The controller's step at a multiple of 10 s of event time."""

    at_ms: int


Event = Union[SpendWindow, ServerSpend, LateReport, CampaignChange, AdsChange, Billed, Tick]


@dataclass
class Market:
    """What a pacer knows beyond one campaign: the traffic curves, the heartbeat, and the billing clock (the
    newest billed total of any campaign; billing's windows close in event-time order for all of them)."""

    curves: Curves = field(default_factory=Curves)
    heartbeat_ms: int = HEARTBEAT_MS
    billing_clock_ms: int = 0
    _shapes: dict[tuple[int, tuple[str, ...]], list[float] | None] = field(default_factory=dict, repr=False)

    def shape(self, campaign_id: int, placements: list[str]) -> list[float] | None:
        """The campaign's traffic shape (its own, else its placements' average, else none); computed once."""
        key = (campaign_id, tuple(placements))
        if key not in self._shapes:
            self._shapes[key] = self.curves.shape(campaign_id, placements)
        return self._shapes[key]

    def bid_market(self, state: PacerState) -> tuple[float, list[int]]:
        """For a new campaign's forecast: its best bid's value where its ads serve, and the values to beat."""
        return (self.curves.value(state.placements, state.bid_type, state.ad_bid_micros),
                self.curves.values(state.placements))


def new_state(campaign_id: int, market: Market) -> PacerState:
    """A campaign the pacer has not seen: its own traffic shape when the curves have one, else flat."""
    state = PacerState(campaign_id)
    shape = market.shape(campaign_id, [])
    if shape:
        state.shape = list(shape)
    return state


def change_instant_ms(event_ms: int, watermark_ms: int | None) -> int:
    """The instant a change applies at: its event time, or the job's clock when that has passed it (a side
    input's record may come with an older timestamp than the spend already counted)."""
    return max(event_ms, watermark_ms) if watermark_ms is not None and watermark_ms > 0 else event_ms


def window_end_ms(window_timestamp_ms: int) -> int:
    """Flink stamps a window's rows with its last instant; the window ends one millisecond later."""
    return window_timestamp_ms + 1


def apply(state: PacerState, event: Event, market: Market) -> tuple[PacerState, list[Output]]:
    """`event` applied to the campaign's `state` (changed in place and returned) and what goes out."""
    outputs: list[Output] = []
    if isinstance(event, SpendWindow):
        _apply_window(state, event)
    elif isinstance(event, ServerSpend):
        outputs = on_server_spend(state, event, event.spend_micros)  # a 1 s window: its spend is its rate
    elif isinstance(event, LateReport):
        report = event.report
        on_spend(state, Window(event.at_ms, int(report["expected_spend_micros"]), int(report["served_ads"]),
                               int(report["eligible_requests"]), 1), int(report["max_price_micros"]))
    elif isinstance(event, CampaignChange):
        outputs = on_campaign(state, event.record, event.at_ms, market.shape(state.campaign_id, state.placements))
    elif isinstance(event, AdsChange):
        on_ads(state, event.placements, event.bid_micros, event.at_ms,
               market.shape(state.campaign_id, event.placements))
    elif isinstance(event, Billed):
        on_billed(state, event.record)
        market.billing_clock_ms = max(market.billing_clock_ms, int(event.record["event_time"]))
    elif isinstance(event, Tick):
        outputs = _step(state, event.at_ms, market)
    return state, outputs


def apply_held(state: PacerState, held: Iterable[SpendWindow]) -> PacerState:
    """Windows held since the campaign's last step, in the order they came, exactly as if applied on arrival.
    The job applies them before any other change to the campaign, so every rule sees the same state in the same
    order, and writes the campaign's whole state once per step instead of once per window."""
    for window in held:
        _apply_window(state, window)
    return state


def _apply_window(state: PacerState, window: SpendWindow) -> None:
    on_spend(state, Window(window.end_ms, window.spend_micros, window.served, window.eligible, window.servers),
             window.max_price_micros)


def _step(state: PacerState, at_ms: int, market: Market) -> list[Output]:
    return step(state, at_ms, market.shape(state.campaign_id, state.placements), heartbeat_ms=market.heartbeat_ms,
                market=market.bid_market(state) if state.forecast_pending else None,
                billing_clock_ms=market.billing_clock_ms)
