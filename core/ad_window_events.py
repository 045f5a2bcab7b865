"""What reaches one ad's window in the features job, as typed events, and the one rule that applies each:
`apply(state, event, rules) -> (state, outputs)`. Pure: the instant and the watermark are in the event, the
windows' shape in `WindowRules`; the arithmetic of buckets and slots is core.feature_windows'.

An ad's window holds its buckets, served slots and waiting beacons (`KeyWindow`), its newest attributes and
a status: its campaign, whether its attributes changed since its last window went out, and whether that
window had traffic (so an ad says once that its window emptied). At every tick it sends its window to the
publisher (core.feature_events) when it has traffic, had some, or has new attributes. The features job's
function only loads that state, calls `apply`, and emits what the outputs name; it must never decide
anything itself (docs/features.md)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Union

from core import feature_windows as windows
from core.ad_stats import AdAttributes
from core.feature_events import TickWindow, TimerAt, newer_attributes
from core.feature_inputs import ATTRIBUTES, SERVED, AdInput
from core.feature_windows import UNKNOWN_CELL, KeyWindow, ServedSlot, WindowRules


@dataclass(frozen=True)
class AdStatus:
    """The ad's campaign, whether its attributes changed since its last window went out, and whether that
    window had traffic."""

    campaign_id: int = 0
    attributes_changed: bool = False
    sent_traffic: bool = False


@dataclass
class AdState:
    """What one ad's window holds (`status` None: nothing yet)."""

    window: KeyWindow
    attributes: AdAttributes | None = None
    status: AdStatus | None = None


@dataclass(frozen=True)
class InputIn:
    """One of the ad's inputs (core.feature_inputs), arriving while the job's clock is at `watermark_ms`."""

    input: AdInput
    watermark_ms: int


@dataclass(frozen=True)
class Tick:
    """The ad's tick at a bucket boundary, with the job's clock when it fires."""

    ad_id: int
    at_ms: int
    watermark_ms: int


Event = Union[InputIn, Tick]


@dataclass(frozen=True)
class Late:
    """A beacon that came after its bucket's tick: it counts from the next tick on."""


@dataclass(frozen=True)
class Expired:
    """A beacon no tick to come counts: dropped, for the reason given."""

    reason: str


Output = Union[TimerAt, Late, Expired, TickWindow]


def apply(state: AdState, event: Event, rules: WindowRules) -> tuple[AdState, list[Output]]:
    """`event` applied to the ad's `state` (changed in place and returned) and what goes out."""
    if isinstance(event, Tick):
        return state, _tick(state, event, rules)
    found, watermark = event.input, event.watermark_ms
    _note_campaign(state, found.campaign_id)
    if found.kind == ATTRIBUTES:
        if found.attributes is None or not newer_attributes(state.attributes, found.attributes):
            return state, []
        state.attributes = found.attributes
        state.status = replace(state.status or AdStatus(), attributes_changed=True)
        return state, [_tick_at(found.event_ms, watermark, rules)]
    if found.kind == SERVED:
        if windows.slot_too_old(found.served_ms, watermark, rules):
            return state, []
        state.window.serve(found.impression_id, ServedSlot((found.placement, found.position), found.served_ms))
        return state, [_tick_at(found.served_ms, watermark, rules)]
    return state, _beacon(state, found, watermark, rules)


def _tick_at(time_ms: int, watermark_ms: int, rules: WindowRules) -> TimerAt:
    return TimerAt(windows.first_tick(time_ms, watermark_ms, rules))


def _note_campaign(state: AdState, campaign_id: int) -> None:
    """The ad's campaign, from the first input and any later one that names another."""
    if state.status is None or (campaign_id and state.status.campaign_id != campaign_id):
        state.status = replace(state.status or AdStatus(), campaign_id=campaign_id)


def _beacon(state: AdState, found: AdInput, watermark_ms: int, rules: WindowRules) -> list[Output]:
    """An expired beacon is dropped; one whose slot is not known yet waits for it while on time; any other
    counts at once (under the unknown cell without a slot)."""
    timing = windows.timing(found.event_ms, watermark_ms, rules)
    if timing == windows.EXPIRED:
        return [Expired(windows.late_reason(found.event_ms, watermark_ms, rules))]
    outputs: list[Output] = [Late()] if timing == windows.LATE else []
    slot = state.window.slot(found.impression_id)
    if slot is None and timing == windows.ON_TIME:
        state.window.wait(found.impression_id, found.kind, found.event_ms)
    else:
        state.window.count(found.impression_id, slot, found.kind, found.event_ms, UNKNOWN_CELL)
    return outputs + [_tick_at(found.event_ms, watermark_ms, rules)]


def _tick(state: AdState, tick: Tick, rules: WindowRules) -> list[Output]:
    """Resolve the beacons due, send the window when it has traffic, had some or has new attributes, forget
    what no later tick needs, and set the next tick while the ad holds anything."""
    state.window.resolve_waiting(tick.at_ms, UNKNOWN_CELL)
    totals = state.window.totals(tick.at_ms)
    status = state.status or AdStatus()
    outputs: list[Output] = []
    if totals or status.sent_traffic or status.attributes_changed:
        attributes = state.attributes if status.attributes_changed else None
        outputs.append(TickWindow(tick.ad_id, tick.at_ms, status.campaign_id, attributes, totals))
    state.status = AdStatus(status.campaign_id, False, bool(totals))
    holds = state.window.clean(tick.at_ms)
    if windows.keeps_ticking(holds, False, False, tick.watermark_ms):
        outputs.append(TimerAt(tick.at_ms + rules.bucket_ms))
    return outputs
