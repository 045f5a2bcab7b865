"""The features job's windows and its join of beacons to served slots (core.feature_windows)."""
from __future__ import annotations

import pytest

from core import feature_windows as fw
from core.errors import InvalidArgument
from core.feature_windows import CLICK, CONVERSION, HIDE, IMPRESSION, Counts, ServedSlot, WindowRules

RULES = WindowRules(bucket_ms=300_000, window_ms=3_600_000, served_retention_ms=7_200_000)
T0 = 1_800_000_000_000  # a bucket boundary
TICK = RULES.bucket_ms


def test_a_window_must_be_whole_buckets():
    with pytest.raises(InvalidArgument, match="window_ms"):
        WindowRules(bucket_ms=300_000, window_ms=400_000)


def test_an_event_falls_in_the_bucket_of_its_event_time_and_is_first_published_at_its_end():
    bucket = fw.bucket_of(T0 + 299_999, RULES)
    assert bucket == T0
    assert fw.tick_of_bucket(bucket, RULES) == T0 + 300_000
    assert fw.next_tick(T0, RULES) == T0 + 300_000
    assert fw.next_tick(T0 - 1, RULES) == T0


def test_a_tick_window_holds_the_last_window_of_buckets():
    tick = T0 + 3_600_000
    assert fw.in_window(T0, tick, RULES)
    assert not fw.in_window(T0 - 300_000, tick, RULES)
    assert not fw.in_window(tick, tick, RULES)


def test_timing_on_time_late_and_expired():
    assert fw.timing(T0 + 10, T0 + 299_999, RULES) == fw.ON_TIME
    assert fw.timing(T0 + 10, T0 + 300_000, RULES) == fw.LATE
    assert fw.timing(T0 + 10, T0 + 3_600_000 - 1, RULES) == fw.LATE
    assert fw.timing(T0 + 10, T0 + 3_600_000, RULES) == fw.EXPIRED


def test_a_beacon_without_a_slot_counts_its_own_kind():
    assert fw.count_beacon(None, CLICK) == ((CLICK,), None)


def test_a_click_whose_impression_beacon_is_missing_counts_the_impression_too():
    kinds, slot = fw.count_beacon(ServedSlot(("feed", 2), T0), CLICK)
    assert kinds == (IMPRESSION, CLICK)
    assert fw.count_beacon(slot, IMPRESSION)[0] == ()


def test_each_kind_counts_once_per_impression():
    kinds, slot = fw.count_beacon(ServedSlot(("feed", 1), T0), IMPRESSION)
    assert kinds == (IMPRESSION,)
    assert fw.count_beacon(slot, IMPRESSION) == ((), slot)
    kinds, slot = fw.count_beacon(slot, HIDE)
    assert kinds == (HIDE,)
    assert fw.count_beacon(slot, CONVERSION)[0] == (CONVERSION,)


def test_a_repeated_served_record_keeps_what_its_beacons_counted():
    _, counted = fw.count_beacon(ServedSlot(("feed", 1), T0), CLICK)
    assert fw.served_again(counted, ServedSlot(("feed", 1), T0)).counted == counted.counted


def test_slots_are_forgotten_after_the_retention():
    slot = ServedSlot(("feed", 1), T0)
    assert not fw.slot_expired(slot, T0 + 7_200_000, RULES)
    assert fw.slot_expired(slot, T0 + 7_200_001, RULES)


def test_window_totals_sum_the_buckets_of_the_window_by_cell():
    buckets = {
        T0 - 300_000: {("feed", 1): Counts(impressions=7)},  # before the window of T0 + 1 h
        T0: fw.add(fw.add({}, ("feed", 1), [IMPRESSION, CLICK]), ("feed", 2), [IMPRESSION]),
        T0 + 600_000: fw.add({}, ("feed", 1), [IMPRESSION]),
        T0 + 3_600_000: fw.add({}, ("feed", 1), [IMPRESSION]),  # after it
    }
    assert fw.window_totals(buckets, T0 + 3_600_000, RULES) == {
        ("feed", 1): Counts(impressions=2, clicks=1), ("feed", 2): Counts(impressions=1)}


def test_buckets_older_than_the_next_ticks_window_are_dropped():
    starts = [T0, T0 + 300_000, T0 + 600_000]
    assert fw.buckets_to_drop(starts, T0 + 3_600_000, RULES) == [T0]


def test_a_waiting_beacon_is_due_at_its_buckets_tick():
    assert not fw.waiting_due(T0 + 5, T0, RULES)
    assert fw.waiting_due(T0 + 5, T0 + 300_000, RULES)


def test_a_key_stops_ticking_when_it_holds_nothing_or_the_input_ended():
    assert fw.keeps_ticking(True, False, False, T0)
    assert not fw.keeps_ticking(False, False, False, T0)
    assert not fw.keeps_ticking(True, True, True, fw.END_OF_TIME_MS)


def test_what_happens_is_first_published_at_its_buckets_tick_or_the_next_to_fire():
    assert fw.first_tick(T0 + 2_000, T0, RULES) == T0 + TICK
    assert fw.first_tick(T0 + 2_000, T0 + TICK + 5, RULES) == T0 + 2 * TICK


def _key_window() -> fw.KeyWindow:
    return fw.KeyWindow({}, {}, {}, RULES)


def test_a_key_window_counts_a_beacon_under_its_served_cell_once():
    window = _key_window()
    window.serve("i1", ServedSlot(("feed", 2), T0 + 1_000))
    for _ in range(2):
        window.count("i1", window.slot("i1"), CLICK, T0 + 2_000, fw.UNKNOWN_CELL)
    assert window.totals(T0 + TICK) == {("feed", 2): Counts(impressions=1, clicks=1)}


def test_a_key_window_resolves_a_waiting_beacon_at_its_tick_under_the_slot_that_came_or_the_unknown_cell():
    window = _key_window()
    window.wait("i1", IMPRESSION, T0 + 2_000)
    window.wait("i2", CLICK, T0 + 2_000)
    window.serve("i1", ServedSlot(("feed", 3), T0 + 1_000))
    window.resolve_waiting(T0 + TICK - 1, fw.UNKNOWN_CELL)
    assert len(window.waiting) == 2
    window.resolve_waiting(T0 + TICK, fw.UNKNOWN_CELL)
    assert not window.waiting
    assert window.totals(T0 + TICK) == {("feed", 3): Counts(impressions=1), fw.UNKNOWN_CELL: Counts(clicks=1)}


def test_a_key_window_without_an_unknown_cell_drops_a_beacon_whose_slot_never_came():
    window = _key_window()
    window.wait("i1", CLICK, T0 + 2_000)
    window.resolve_waiting(T0 + TICK, None)
    assert window.totals(T0 + TICK) == {} and not window.waiting


def test_a_key_window_cleans_what_no_later_tick_needs_and_says_whether_it_holds_anything():
    window = _key_window()
    window.serve("i1", ServedSlot(("feed", 1), T0 + 1_000))
    window.count("i1", window.slot("i1"), IMPRESSION, T0 + 2_000, fw.UNKNOWN_CELL)
    assert window.clean(T0 + TICK)
    assert not window.clean(T0 + RULES.window_ms + RULES.served_retention_ms + TICK)
    assert not window.buckets and not window.slots
