"""One ad's window in the features job (core.ad_window_events) on plain state: served slots and beacons into
the window, late and expired beacons, the attributes' versions, and what goes to the publisher at each tick."""
from __future__ import annotations

from core.ad_stats import AdAttributes
from core.ad_window_events import AdState, AdStatus, Expired, InputIn, Late, Tick, apply
from core.feature_events import TickWindow, TimerAt
from core.feature_inputs import ATTRIBUTES, SERVED, AdInput
from core.feature_windows import CLICK, IMPRESSION, UNKNOWN_CELL, Counts, KeyWindow, WindowRules

T0 = 1_800_000_000_000
TICK = 300_000
RULES = WindowRules(bucket_ms=TICK, window_ms=3_600_000)


def _ad() -> AdState:
    return AdState(KeyWindow({}, {}, {}, RULES))


def _served(impression_id: str, at_ms: int, position: int = 1) -> AdInput:
    return AdInput(SERVED, 11, 1, at_ms, impression_id, served_ms=at_ms, placement="feed", position=position)


def _beacon(impression_id: str, at_ms: int, kind: str = IMPRESSION) -> AdInput:
    return AdInput(kind, 11, 1, at_ms, impression_id)


def _attributes(version: int) -> AdInput:
    attributes = AdAttributes(1, 100, version, "CPC", 1_000_000, 0, False, (0.0,) * 16)
    return AdInput(ATTRIBUTES, 11, 1, T0, attributes=attributes)


def _windows(outputs) -> list[TickWindow]:
    return [o for o in outputs if isinstance(o, TickWindow)]


def test_a_beacon_counts_under_its_served_cell_at_its_buckets_tick():
    ad = _ad()
    assert apply(ad, InputIn(_served("i1", T0 + 1_000, position=2), T0), RULES)[1] == [TimerAt(T0 + TICK)]
    apply(ad, InputIn(_beacon("i1", T0 + 2_000, CLICK), T0), RULES)
    (window,) = _windows(apply(ad, Tick(11, T0 + TICK, T0 + TICK), RULES)[1])
    assert window == TickWindow(11, T0 + TICK, 1, None, {("feed", 2): Counts(impressions=1, clicks=1)})


def test_an_on_time_beacon_without_its_slot_waits_and_counts_under_no_placement_if_it_never_comes():
    ad = _ad()
    apply(ad, InputIn(_beacon("i1", T0 + 2_000), T0), RULES)
    assert list(ad.window.waiting) == [("i1", IMPRESSION)]
    (window,) = _windows(apply(ad, Tick(11, T0 + TICK, T0 + TICK), RULES)[1])
    assert window.cells == {UNKNOWN_CELL: Counts(impressions=1)}


def test_a_late_beacon_is_counted_as_late_and_an_expired_one_is_dropped_with_its_reason():
    ad = _ad()
    _, outputs = apply(ad, InputIn(_beacon("i1", T0 + 2_000), T0 + TICK + 10), RULES)
    assert outputs == [Late(), TimerAt(T0 + 2 * TICK)]
    (expired,) = apply(ad, InputIn(_beacon("i2", T0 + 2_000), T0 + 3_600_000), RULES)[1]
    assert isinstance(expired, Expired) and "no snapshot to come counts it" in expired.reason


def test_a_served_record_older_than_the_retention_is_not_held():
    ad = _ad()
    assert apply(ad, InputIn(_served("i1", T0), T0 + RULES.served_retention_ms + TICK), RULES)[1] == []
    assert not ad.window.slots


def test_only_newer_attributes_go_out_once_at_the_next_tick():
    ad = _ad()
    apply(ad, InputIn(_attributes(2), T0), RULES)
    assert ad.status == AdStatus(1, attributes_changed=True)
    (window,) = _windows(apply(ad, Tick(11, T0 + TICK, T0 + TICK), RULES)[1])
    assert window.attributes.version == 2 and window.cells == {}
    assert apply(ad, InputIn(_attributes(1), T0 + TICK), RULES)[1] == []
    assert ad.attributes.version == 2 and _windows(apply(ad, Tick(11, T0 + 2 * TICK, T0 + 2 * TICK), RULES)[1]) == []


def test_an_ad_says_once_that_its_window_emptied_and_stops_ticking_when_it_holds_nothing():
    ad = _ad()
    apply(ad, InputIn(_served("i1", T0 + 1_000), T0), RULES)
    apply(ad, InputIn(_beacon("i1", T0 + 2_000), T0), RULES)
    outputs = [o for n in range(1, 14) for o in apply(ad, Tick(11, T0 + n * TICK, T0 + n * TICK), RULES)[1]]
    windows = _windows(outputs)
    assert len(windows) == 13 and windows[-1].cells == {}
    later = [apply(ad, Tick(11, T0 + n * TICK, T0 + n * TICK), RULES)[1] for n in range(14, 26)]
    assert not _windows(o for outputs in later for o in outputs)
    assert later[-2] == [TimerAt(T0 + 25 * TICK)] and later[-1] == []  # its served slot held for 2 h, then gone
