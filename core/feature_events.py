"""What reaches the features publisher, as typed events, and the one rule that applies each: `apply(state,
event, rules) -> (state, outputs)`. Pure: the instant and the watermark are in the event, the estimates'
priors and the windows' shape in `PublishRules`; also the test of an ad's attributes against the ones held.

The publisher holds every known ad's latest window (`KnownAd`), the windows staged for the ticks to come,
campaign -> advertiser, the fingerprint of each ad's last published row and the last published version. A
window is staged under its tick (or the next tick to fire, if its own has fired), so a tick applies exactly
the windows of that tick and earlier, in tick order. The features job's function only loads that state, calls
`apply`, and writes the snapshot and rows the outputs name; it must never decide anything itself
(docs/features.md)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, MutableMapping, Union

from core import ad_stats
from core import feature_windows as windows
from core.ad_stats import AdAttributes, Cell, EstimateRules, KnownAd
from core.feature_windows import Counts, WindowRules
from core.versions import is_newer


@dataclass(frozen=True)
class TickWindow:
    """One ad's window totals by cell at a tick, as its per-ad window sends them (its attributes only when they
    changed since the last window it sent)."""

    ad_id: int
    tick_ms: int
    campaign_id: int
    attributes: AdAttributes | None
    cells: Mapping[Cell, Counts] = field(default_factory=dict)


@dataclass(frozen=True)
class CampaignSeen:
    """A serving.campaigns record: the advertiser its campaign belongs to."""

    campaign_id: int
    advertiser_id: int


@dataclass(frozen=True)
class WindowIn:
    """An ad's window at a tick, arriving while the job's clock is at `watermark_ms`."""

    window: TickWindow
    watermark_ms: int


@dataclass(frozen=True)
class Tick:
    """The publisher's tick at a bucket boundary of event time."""

    at_ms: int


Event = Union[CampaignSeen, WindowIn, Tick]


@dataclass(frozen=True)
class TimerAt:
    """Fire a tick at this instant (a window is staged for it)."""

    at_ms: int


@dataclass(frozen=True)
class Published:
    """Snapshot `version_ms` holds `records` (every listed ad's AdFeatures record); `changed` are the ads whose
    row says something new, in the order they go out."""

    version_ms: int
    records: list[dict]
    changed: list[tuple[int, dict]]


Output = Union[TimerAt, Published]


@dataclass(frozen=True)
class PublishRules:
    """The estimates' priors and costs, and the windows' shape."""

    estimates: EstimateRules = field(default_factory=EstimateRules)
    windows: WindowRules = field(default_factory=WindowRules)


@dataclass
class PublisherState:
    """What the publisher holds. The maps may be the job's own state stores behind the mapping interface:
    an event reads and writes only the entries it needs (a tick reads them all)."""

    known: MutableMapping[int, KnownAd] = field(default_factory=dict)
    staged: MutableMapping[tuple[int, int], TickWindow] = field(default_factory=dict)  # (tick, ad id) ->
    advertisers: MutableMapping[int, int] = field(default_factory=dict)  # campaign id -> advertiser id
    fingerprints: MutableMapping[int, int] = field(default_factory=dict)  # ad id -> its last row's fingerprint
    version_ms: int | None = None  # the last published snapshot's version


def newer_attributes(held: AdAttributes | None, new: AdAttributes) -> bool:
    """Whether an ad's attributes replace the ones held: only a newer version of serving.ads' record does."""
    return is_newer(new.version, None if held is None else held.version)


def apply(state: PublisherState, event: Event, rules: PublishRules) -> tuple[PublisherState, list[Output]]:
    """`event` applied to the publisher's `state` (changed in place and returned) and what goes out."""
    outputs: list[Output] = []
    if isinstance(event, CampaignSeen):
        if state.advertisers.get(event.campaign_id) != event.advertiser_id:
            state.advertisers[event.campaign_id] = event.advertiser_id
    elif isinstance(event, WindowIn):
        outputs = [TimerAt(_stage(state, event, rules.windows))]
    elif isinstance(event, Tick):
        outputs = _tick(state, event.at_ms, rules)
    return state, outputs


def staging_tick(window_tick_ms: int, watermark_ms: int, rules: WindowRules) -> int:
    """The tick a window is published at: its own, or the next one to fire when its own has fired."""
    return window_tick_ms if window_tick_ms > watermark_ms else windows.next_tick(watermark_ms, rules)


def _stage(state: PublisherState, event: WindowIn, rules: WindowRules) -> int:
    """Stage the window for its tick; a window without attributes keeps the ones staged before it for the same
    tick (a late window staged together with the next one must not lose them)."""
    window = event.window
    tick = staging_tick(window.tick_ms, event.watermark_ms, rules)
    key = (tick, window.ad_id)
    held = state.staged.get(key)
    attributes = window.attributes
    if held is not None and attributes is None and held.attributes is not None:
        attributes = held.attributes
    state.staged[key] = TickWindow(window.ad_id, tick, window.campaign_id, attributes, window.cells)
    return tick


def merge(held: KnownAd | None, window: TickWindow) -> KnownAd:
    """An ad's latest window over what the publisher knew of it: the window's cells; its campaign and
    attributes when it has them, else the ones held."""
    attributes = window.attributes if window.attributes is not None else (held.attributes if held else None)
    campaign_id = window.campaign_id or (held.campaign_id if held is not None else 0)
    return KnownAd(campaign_id, attributes, dict(window.cells))


def apply_staged(state: PublisherState, tick_ms: int) -> dict[int, KnownAd]:
    """Apply the windows staged for this tick or before (in tick order); every known ad afterwards."""
    due = sorted(((key, window) for key, window in state.staged.items() if key[0] <= tick_ms),
                 key=lambda item: item[0][0])
    for key, window in due:
        state.known[window.ad_id] = merge(state.known.get(window.ad_id), window)
        del state.staged[key]
    return dict(state.known.items())


def gone(known: Mapping[int, KnownAd]) -> list[int]:
    """The ads held no longer: not listed, and nothing of theirs in the window."""
    return [ad_id for ad_id, ad in known.items() if not ad.listed and not ad.cells]


def _tick(state: PublisherState, tick_ms: int, rules: PublishRules) -> list[Output]:
    """Apply the tick's windows; publish when the tick is newer than the last snapshot and lists an ad: the
    rows that changed, then the ads that are gone are forgotten."""
    known = apply_staged(state, tick_ms)
    if state.version_ms is not None and tick_ms <= state.version_ms:
        return []
    records = ad_stats.published_records(known, dict(state.advertisers.items()), tick_ms, rules.estimates)
    if not records:
        return []
    state.version_ms = tick_ms
    changed = []
    for ad_id, record in records.items():
        fingerprint = ad_stats.row_fingerprint(record)
        if state.fingerprints.get(ad_id) != fingerprint:
            state.fingerprints[ad_id] = fingerprint
            changed.append((ad_id, record))
    for ad_id in gone(known):
        del state.known[ad_id]
        state.fingerprints.pop(ad_id, None)
    return [Published(tick_ms, list(records.values()), changed)]
