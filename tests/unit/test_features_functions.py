"""The features job's Flink functions on a fake context: decode, the per-ad window, the publisher and the
per-user window, each driven by scripted records, watermarks and timers."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from core import feature_inputs
from core.ad_stats import EstimateRules
from core.feature_events import TickWindow
from core.feature_windows import UNKNOWN_CELL, Counts, WindowRules
from jobs.features import state
from jobs.features.functions import (CAMPAIGNS, DEAD_LETTERS, REGISTRY, USERS, AdWindow, Decode, Publish,
                                     UserWindow)
from schemas import topics
from schemas.codec import AvroCodec
from streams import ad_features
from tests.features_records import (T0, beacon, feedback, served, serving_ad, serving_campaign, winner)
from tests.unit.flink_fakes import FakeContext, FakeMapState, FakeMetrics, FakeRuntimeContext, at_key, opened

CODEC = AvroCodec()
SERVED_RECORD = topics.record_type(topics.AD_SERVED)
DEAD_LETTER = topics.record_type(topics.DEAD_LETTERS)
AD_FEATURES = topics.record_type(topics.FEATURES_ADS)
TICK = 300_000
RULES = WindowRules(bucket_ms=TICK, window_ms=3_600_000)


class GaugedMetrics(FakeMetrics):
    def __init__(self) -> None:
        super().__init__()
        self.gauges: dict = {}

    def gauge(self, name: str, read):
        self.gauges[name] = read


class GaugedContext(FakeRuntimeContext):
    def __init__(self) -> None:
        super().__init__()
        self.metrics = GaugedMetrics()


def _raw(kind: str, record_type: str, record, offset: int = 0):
    return SimpleNamespace(kind=kind, v=CODEC.encode(record_type, record), k=b"k", topic=f"t.{kind}", partition=0,
                           offset=offset)


def _ad_row(found: feature_inputs.AdInput, offset: int = 0):
    return state.ad_input_row(found, "t", 0, offset)


# ------------------------------------------------------------------ Decode

def test_decode_gives_one_input_per_winner_and_user_inputs_only_with_consent():
    decode, _ = opened(Decode())
    record = served("r1", T0, [winner("r1:1", 11, 1, 1, category=4), winner("r1:2", 12, 1, 2)],
                    user_id="u1", consented=True)
    out = list(decode.process_element(_raw("served", SERVED_RECORD, record), FakeContext()))
    ads = [r for r in out if not isinstance(r, tuple)]
    users = [r[1] for r in out if isinstance(r, tuple) and r[0] is USERS]
    assert [(r.kind, r.ad_id, r.impression_id, r.placement, r.position) for r in ads] == [
        ("SERVED", 11, "r1:1", "feed", 1), ("SERVED", 12, "r1:2", "feed", 2)]
    assert [(u.user_id, u.impression_id, u.category) for u in users] == [("u1", "r1:1", 4), ("u1", "r1:2", 0)]
    anonymous = served("r2", T0, [winner("r2:1", 11, 1)], user_id="u2", consented=False)
    out = list(decode.process_element(_raw("served", SERVED_RECORD, anonymous), FakeContext()))
    assert not [r for r in out if isinstance(r, tuple)]


def test_decode_turns_a_compiled_ad_into_attributes_with_its_embedding():
    decode, _ = opened(Decode())
    raw = _raw("ad", topics.record_type(topics.SERVING_ADS), serving_ad(11, 1, 100, T0, bid_type="CPM"))
    (row,) = decode.process_element(raw, FakeContext())
    attributes = state.attributes_from_row(row.attributes)
    assert (row.kind, row.ad_id, attributes.bid_type, attributes.advertiser_id) == ("ATTRIBUTES", 11, "CPM", 100)
    assert len(attributes.embedding) == 16


def test_decode_sends_campaigns_to_the_publisher_and_feedback_to_the_ad():
    decode, _ = opened(Decode())
    raw = _raw("campaign", topics.record_type(topics.SERVING_CAMPAIGNS), serving_campaign(1, 100, T0))
    ((tag, campaign),) = decode.process_element(raw, FakeContext())
    assert tag is CAMPAIGNS and (campaign.kind, campaign.campaign_id, campaign.advertiser_id) == ("campaign", 1, 100)
    raw = _raw("feedback", topics.record_type(topics.AD_FEEDBACK), feedback("r1:1", 11, 1, T0))
    (hide,) = decode.process_element(raw, FakeContext())
    assert (hide.kind, hide.ad_id, hide.impression_id) == ("HIDE", 11, "r1:1")


def test_decode_sends_a_corrupt_record_to_dead_letters_and_counts_it():
    decode, context = opened(Decode())
    row = SimpleNamespace(kind="event", v=b"not avro", k=b"1", topic=topics.AD_EVENTS, partition=2, offset=9)
    ((tag, dead),) = decode.process_element(row, FakeContext())
    assert tag is DEAD_LETTERS
    assert CODEC.decode(dead[1], DEAD_LETTER)["source_offset"] == 9
    assert context.counter("corrupt_records") == 1


# ------------------------------------------------------------------ AdWindow

def _window():
    function, context = opened(AdWindow(RULES))
    return function, context, at_key(context, FakeContext(), 11)


def _served_input(impression_id: str, at_ms: int, position: int = 1, placement: str = "feed"):
    (found,) = feature_inputs.served_inputs(served("r", at_ms, [winner(impression_id, 11, 1, position)],
                                                   placement=placement))
    return _ad_row(found)


def _beacon_input(impression_id: str, at_ms: int, kind: str = "IMPRESSION", n: int = 0):
    record = beacon(impression_id, 11, 1, at_ms, kind, n=n)
    return _ad_row(feature_inputs.beacon_input(topics.record_type(topics.AD_EVENTS), record))


def _cells(row):
    return state.cells_from_rows(row.cells)


def test_beacons_count_under_their_served_placement_and_position_at_the_tick():
    window, _, ctx = _window()
    list(window.process_element(_served_input("i1", T0 + 1_000, position=2), ctx))
    list(window.process_element(_beacon_input("i1", T0 + 2_000), ctx))
    list(window.process_element(_beacon_input("i1", T0 + 3_000, "CLICK"), ctx))
    assert T0 + TICK in ctx.timers.timers
    (row,) = window.on_timer(T0 + TICK, ctx)
    assert (row.kind, row.ad_id, row.tick, row.campaign_id) == ("window", 11, T0 + TICK, 1)
    assert _cells(row) == {("feed", 2): Counts(impressions=1, clicks=1)}


def test_a_beacon_before_its_served_record_waits_for_it_until_the_tick():
    window, _, ctx = _window()
    list(window.process_element(_beacon_input("i1", T0 + 2_000), ctx))
    list(window.process_element(_served_input("i1", T0 + 1_000, position=3), ctx))
    (row,) = window.on_timer(T0 + TICK, ctx)
    assert _cells(row) == {("feed", 3): Counts(impressions=1)}


def test_a_beacon_whose_served_record_never_came_counts_at_the_top_of_no_placement():
    window, _, ctx = _window()
    list(window.process_element(_beacon_input("i1", T0 + 2_000, "CLICK"), ctx))
    (row,) = window.on_timer(T0 + TICK, ctx)
    assert _cells(row) == {UNKNOWN_CELL: Counts(clicks=1)}


def test_a_repeated_beacon_counts_once_and_a_click_proves_its_impression():
    window, _, ctx = _window()
    list(window.process_element(_served_input("i1", T0 + 1_000), ctx))
    for n in range(2):
        list(window.process_element(_beacon_input("i1", T0 + 3_000, "CLICK", n=n), ctx))
    list(window.process_element(_beacon_input("i1", T0 + 4_000), ctx))
    (row,) = window.on_timer(T0 + TICK, ctx)
    assert _cells(row) == {("feed", 1): Counts(impressions=1, clicks=1)}


def test_a_late_beacon_still_counts_in_the_next_tick():
    window, context, ctx = _window()
    list(window.process_element(_served_input("i1", T0 + 1_000), ctx))
    ctx.timers.watermark_ms = T0 + TICK + 10
    list(window.process_element(_beacon_input("i1", T0 + 2_000), ctx))
    assert context.counter("late_records") == 1
    assert T0 + 2 * TICK in ctx.timers.timers
    (row,) = window.on_timer(T0 + 2 * TICK, ctx)
    assert _cells(row) == {("feed", 1): Counts(impressions=1)}


def test_a_beacon_older_than_the_window_goes_to_dead_letters():
    window, context, ctx = _window()
    ctx.timers.watermark_ms = T0 + 3_600_000
    ((tag, dead),) = window.process_element(_beacon_input("i1", T0 + 2_000), ctx)
    assert tag is DEAD_LETTERS and CODEC.decode(dead[1], DEAD_LETTER)["error_type"] == "LateEvent"
    assert context.counter("expired_records") == 1


def test_attributes_go_out_once_and_an_older_version_is_ignored():
    window, _, ctx = _window()
    attributes = _ad_row(feature_inputs.attributes_input(serving_ad(11, 1, 100, T0, version=2)))
    list(window.process_element(attributes, ctx))
    (row,) = window.on_timer(T0 + TICK, ctx)
    assert state.attributes_from_row(row.attributes).version == 2 and row.cells == []
    older = _ad_row(feature_inputs.attributes_input(serving_ad(11, 1, 100, T0, version=1, removed=True)))
    list(window.process_element(older, ctx))
    assert list(window.on_timer(T0 + 2 * TICK, ctx)) == []


def test_the_window_slides_and_an_ad_says_once_that_its_window_emptied():
    window, _, ctx = _window()
    list(window.process_element(_served_input("i1", T0 + 1_000), ctx))
    list(window.process_element(_beacon_input("i1", T0 + 2_000), ctx))
    ticks = [T0 + TICK * n for n in range(1, 14)]
    rows = [r for t in ticks for r in window.on_timer(t, ctx)]
    assert [r.tick for r in rows] == ticks  # 12 ticks with the bucket in the window, one that says it is empty
    assert _cells(rows[11]) == {("feed", 1): Counts(impressions=1)} and rows[12].cells == []
    assert list(window.on_timer(T0 + 14 * TICK, ctx)) == []


# ------------------------------------------------------------------ Publish

def _publisher(tmp_path, keep: int = 10):
    function, context = opened(Publish(EstimateRules(), RULES, str(tmp_path), keep), GaugedContext())
    return function, context, at_key(context, FakeContext(), 0)


def _attributes(ad_id: int, campaign_id: int, advertiser_id: int, removed: bool = False):
    ad = serving_ad(ad_id, campaign_id, advertiser_id, T0, removed=removed)
    return feature_inputs.attributes_input(ad).attributes


def _run(result) -> list:
    """What a function call emitted (None: nothing)."""
    return list(result or [])


def _decoded(rows, record_type):
    return [CODEC.decode(r[1], record_type) for r in rows]


def test_a_tick_writes_the_snapshot_then_emits_the_rows_and_the_registry_entry(tmp_path):
    publish, context, ctx = _publisher(tmp_path)
    _run(publish.process_element(state.campaign_row(1, 100, T0), ctx))
    tick = T0 + TICK
    for ad_id, cells in ((11, {("feed", 1): Counts(impressions=1_000, clicks=50)}),
                         (12, {("feed", 1): Counts(impressions=1_000, clicks=5)}), (13, {})):
        _run(publish.process_element(state.window_row(ad_id, tick, 1, _attributes(ad_id, 1, 0), cells), ctx))
    assert ctx.timers.timers == [tick] * 3
    out = list(publish.on_timer(tick, ctx))
    rows = [r for r in out if not isinstance(r, tuple)]
    (registry,) = [r[1] for r in out if isinstance(r, tuple) and r[0] is REGISTRY]
    features = {f["ad_id"]: f for f in _decoded(rows, AD_FEATURES)}
    assert features[11]["ctr_estimate"] > features[12]["ctr_estimate"]
    assert features[13]["advertiser_id"] == 100 and features[13]["impressions"] == 0
    entry = CODEC.decode(registry[1], topics.record_type(topics.MODEL_REGISTRY))
    assert (entry["role"], entry["snapshot_version"], entry["snapshot_dir"]) == ("FEATURES", tick, str(tmp_path))
    assert registry[0] == b"FEATURES" and registry[2] == tick and all(r[2] == tick for r in rows)
    snapshot = ad_features.load(tmp_path)
    assert snapshot.version == tick and sorted(snapshot.ad_id.tolist()) == [11, 12, 13]
    row = snapshot.rows([11])[0]
    assert snapshot.ctr_prior[row] == pytest.approx(features[11]["ctr_estimate"])
    assert snapshot.impressions[row] == 1_000
    assert context.counter("snapshots_published") == 1
    assert context.metrics.gauges["ads_in_last_snapshot"]() == 3


def test_a_tick_sees_only_the_windows_of_that_tick(tmp_path):
    publish, _, ctx = _publisher(tmp_path)
    first, second = T0 + TICK, T0 + 2 * TICK
    _run(publish.process_element(state.window_row(11, first, 1, _attributes(11, 1, 100),
                                                  {("feed", 1): Counts(impressions=10)}), ctx))
    _run(publish.process_element(state.window_row(11, second, 1, None, {("feed", 1): Counts(impressions=99)}), ctx))
    rows = [r for r in publish.on_timer(first, ctx) if not isinstance(r, tuple)]
    assert _decoded(rows, AD_FEATURES)[0]["impressions"] == 10
    rows = [r for r in publish.on_timer(second, ctx) if not isinstance(r, tuple)]
    assert _decoded(rows, AD_FEATURES)[0]["impressions"] == 99


def test_an_unchanged_ad_is_not_emitted_again_but_the_snapshot_is(tmp_path):
    publish, _, ctx = _publisher(tmp_path)
    _run(publish.process_element(state.window_row(11, T0 + TICK, 1, _attributes(11, 1, 100), {}), ctx))
    assert len([r for r in publish.on_timer(T0 + TICK, ctx) if not isinstance(r, tuple)]) == 1
    _run(publish.process_element(state.window_row(12, T0 + 2 * TICK, 2, _attributes(12, 2, 200), {}), ctx))
    out = list(publish.on_timer(T0 + 2 * TICK, ctx))
    assert [CODEC.decode(r[1], AD_FEATURES)["ad_id"] for r in out if not isinstance(r, tuple)] == [12]
    assert ad_features.versions(tmp_path) == [T0 + TICK, T0 + 2 * TICK]


def test_removed_ads_are_left_out_and_a_tick_without_a_listed_ad_publishes_nothing(tmp_path):
    publish, context, ctx = _publisher(tmp_path)
    _run(publish.process_element(state.window_row(11, T0 + TICK, 1, _attributes(11, 1, 100, removed=True),
                                                  {("feed", 1): Counts(impressions=10)}), ctx))
    _run(publish.process_element(state.window_row(12, T0 + TICK, 1, None, {("feed", 1): Counts(impressions=5)}),
                                 ctx))
    assert list(publish.on_timer(T0 + TICK, ctx)) == []
    assert ad_features.versions(tmp_path) == [] and context.counter("snapshots_published") == 0


def test_only_the_newest_snapshots_are_kept(tmp_path):
    publish, _, ctx = _publisher(tmp_path, keep=2)
    for n in range(1, 5):
        _run(publish.process_element(state.window_row(11, T0 + n * TICK, 1, _attributes(11, 1, 100),
                                                      {("feed", 1): Counts(impressions=n)}), ctx))
        list(publish.on_timer(T0 + n * TICK, ctx))
    assert ad_features.versions(tmp_path) == [T0 + 3 * TICK, T0 + 4 * TICK]


def test_a_window_that_comes_after_its_tick_is_published_at_the_next(tmp_path):
    publish, _, ctx = _publisher(tmp_path)
    ctx.timers.watermark_ms = T0 + TICK + 5
    _run(publish.process_element(state.window_row(11, T0 + TICK, 1, _attributes(11, 1, 100), {}), ctx))
    assert ctx.timers.timers == [T0 + 2 * TICK]


# ------------------------------------------------------------------ UserWindow

class RecordingStore:
    def __init__(self) -> None:
        self.written: list[dict] = []

    def write(self, features_by_user) -> int:
        self.written.append(dict(features_by_user))
        return len(features_by_user)

    def close(self) -> None:
        pass


class UserWindowOnRecording(UserWindow):
    def _store(self):
        return RecordingStore()


def _user_rows(record):
    return [state.user_input_row(u) for u in feature_inputs.user_served_inputs(record)]


def _user_beacon(impression_id: str, at_ms: int, kind: str, user_id: str = "u1"):
    return state.user_input_row(feature_inputs.user_beacon_input(beacon(impression_id, 11, 1, at_ms, kind,
                                                                        user_id=user_id)))


def test_a_consented_users_clicks_by_category_are_written_at_the_tick():
    window, context = opened(UserWindowOnRecording(RULES, "redis://unused", 1_000))
    ctx = at_key(context, FakeContext(), "u1")
    record = served("r1", T0 + 1_000, [winner("r1:1", 11, 1, 1, category=4), winner("r1:2", 12, 1, 2)],
                    user_id="u1", consented=True)
    for row in _user_rows(record):
        window.process_element(row, ctx)
    window.process_element(_user_beacon("r1:1", T0 + 2_000, "IMPRESSION"), ctx)
    window.process_element(_user_beacon("r1:1", T0 + 3_000, "CLICK"), ctx)
    window.process_element(_user_beacon("r1:2", T0 + 3_500, "IMPRESSION"), ctx)
    window.on_timer(T0 + TICK, ctx)
    window.close()
    assert window.store.written == [{"u1": {"impressions_window": 2.0, "clicks_window": 1.0, "clicks_cat_4": 1.0}}]


def test_clicks_on_impressions_served_without_consent_never_count():
    window, context = opened(UserWindowOnRecording(RULES, "redis://unused", 1_000))
    ctx = at_key(context, FakeContext(), "u2")
    anonymous = served("r2", T0 + 1_000, [winner("r2:1", 11, 1, 1, category=4)], user_id="u2", consented=False)
    assert _user_rows(anonymous) == []
    window.process_element(_user_beacon("r2:1", T0 + 3_000, "CLICK", user_id="u2"), ctx)
    window.on_timer(T0 + TICK, ctx)
    window.close()
    assert window.store.written == []


def test_a_late_window_staged_with_the_next_keeps_its_attributes(tmp_path):
    publish, _, ctx = _publisher(tmp_path)
    ctx.timers.watermark_ms = T0 + TICK + 5
    _run(publish.process_element(state.window_row(11, T0 + TICK, 1, _attributes(11, 1, 100), {}), ctx))
    _run(publish.process_element(state.window_row(11, T0 + 2 * TICK, 1, None, {("feed", 1): Counts(impressions=3)}),
                                 ctx))
    (row,) = [r for r in publish.on_timer(T0 + 2 * TICK, ctx) if not isinstance(r, tuple)]
    record = CODEC.decode(row[1], AD_FEATURES)
    assert (record["ad_id"], record["advertiser_id"], record["impressions"]) == (11, 100, 3)


def test_a_map_view_reads_and_writes_the_flink_state_in_cores_types():
    staged = FakeMapState()
    view = state.MapView(staged, state.tick_window_from_row, state.tick_window_to_row, state.staged_key_of,
                         lambda key: state.staged_key(*key))
    window = TickWindow(11, T0 + TICK, 1, None, {("feed", 1): Counts(impressions=2)})
    view[(T0 + TICK, 11)] = window
    assert list(staged.held) == [f"{T0 + TICK}:11"]
    assert view[(T0 + TICK, 11)] == window and view.get((T0, 11)) is None and len(view) == 1
    assert list(view.items()) == [((T0 + TICK, 11), window)]
    del view[(T0 + TICK, 11)]
    assert not view
    view[(T0, 12)] = window
    view.clear()
    assert staged.held == {}
