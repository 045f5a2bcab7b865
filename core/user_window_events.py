"""What reaches one consented user's window in the features job, as typed events, and the one rule that
applies each: `apply(state, event, rules) -> (state, outputs)`. Pure: the instant and the watermark are in the
event, the windows' shape in `WindowRules`; the arithmetic of buckets and slots is core.feature_windows', the
features core.user_activity's.

A user's window counts impressions and clicks by the ad's category (`KeyWindow`, cells by category), only of
impressions served with consent: a beacon whose served slot never comes is not counted. At every tick the
user's features are written when there are any or the last write had some (so emptied features are written
once). A deletion request forgets the window at once. The features job's function only loads that state,
calls `apply`, and writes what the outputs name; it must never decide anything itself (docs/features.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from core import feature_windows as windows
from core import user_activity
from core.feature_events import TimerAt
from core.feature_inputs import SERVED, UserInput
from core.feature_windows import KeyWindow, ServedSlot, WindowRules


@dataclass
class UserState:
    """What one user's window holds, and whether the user's last write had features."""

    window: KeyWindow
    wrote: bool = False


@dataclass(frozen=True)
class InputIn:
    """One of the user's inputs (core.feature_inputs), arriving while the job's clock is at `watermark_ms`."""

    input: UserInput
    watermark_ms: int


@dataclass(frozen=True)
class Deletion:
    """The user asked to be forgotten."""


@dataclass(frozen=True)
class Tick:
    """The user's tick at a bucket boundary, with the job's clock when it fires."""

    at_ms: int
    watermark_ms: int


Event = Union[InputIn, Deletion, Tick]


@dataclass(frozen=True)
class Write:
    """Write the user's features (empty: the user has none any more)."""

    features: dict[str, float]


@dataclass(frozen=True)
class Forgotten:
    """Everything held of the user is gone; a write still pending for them must go too."""


Output = Union[TimerAt, Write, Forgotten]


def apply(state: UserState, event: Event, rules: WindowRules) -> tuple[UserState, list[Output]]:
    """`event` applied to the user's `state` (changed in place and returned) and what goes out."""
    if isinstance(event, Deletion):
        for held in (state.window.buckets, state.window.slots, state.window.waiting):
            held.clear()
        state.wrote = False
        return state, [Forgotten()]
    if isinstance(event, Tick):
        return state, _tick(state, event, rules)
    found, watermark = event.input, event.watermark_ms
    if found.kind == SERVED:
        if windows.slot_too_old(found.event_ms, watermark, rules):
            return state, []
        state.window.serve(found.impression_id, ServedSlot(int(found.category), found.event_ms))
    elif windows.timing(found.event_ms, watermark, rules) == windows.EXPIRED:
        return state, []
    else:
        slot = state.window.slot(found.impression_id)
        if slot is None:
            state.window.wait(found.impression_id, found.kind, found.event_ms)
        else:
            state.window.count(found.impression_id, slot, found.kind, found.event_ms, None)
    return state, [TimerAt(windows.first_tick(found.event_ms, watermark, rules))]


def _tick(state: UserState, tick: Tick, rules: WindowRules) -> list[Output]:
    """Resolve the beacons due (those without a slot are not counted), write the features when there are any
    or the last write had some, forget what no later tick needs, and set the next tick while the user holds
    anything."""
    state.window.resolve_waiting(tick.at_ms, None)
    features = user_activity.user_features(state.window.totals(tick.at_ms))
    outputs: list[Output] = []
    if features or state.wrote:
        outputs.append(Write(features))
        state.wrote = bool(features)
    holds = state.window.clean(tick.at_ms)
    if windows.keeps_ticking(holds, False, False, tick.watermark_ms):
        outputs.append(TimerAt(tick.at_ms + rules.bucket_ms))
    return outputs
