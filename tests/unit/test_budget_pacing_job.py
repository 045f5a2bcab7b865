"""The budget job's Flink functions on a fake runtime context, timer service and state: no cluster."""
from __future__ import annotations

import re
from pathlib import Path

from pyflink.common import Row

import json

import numpy as np
from fastavro.schema import parse_schema

from core.budget_events import SpendWindow
from core.spend import SpendCut, batch_records, heartbeat_record, spend_items
from jobs.budget_pacing import state as pacer_state
from jobs.budget_pacing.functions import DEAD_LETTERS, ROW_FIELDS, Pace, PacerSettings, Route
from schemas import HISTORY_DIR, topics
from schemas.codec import AvroCodec, plain_timestamps

T0 = 1_767_614_400_000  # 2026-01-05 12:00:00 UTC
DOLLAR = 1_000_000
SERVING_CAMPAIGN = topics.record_type(topics.SERVING_CAMPAIGNS)
SPEND_REPORT = topics.record_type(topics.BUDGET_SPEND)
SPEND_WINDOWS_JAVA = Path(__file__).resolve().parents[2] / "jobs" / "jvm" / "io" / "adserve" / "flink" / \
    "SpendWindows.java"


class FakeMapState:
    def __init__(self):
        self.values = {}

    def get(self, key):
        return self.values.get(key)

    def put(self, key, value):
        self.values[key] = value

    def contains(self, key):
        return key in self.values

    def remove(self, key):
        del self.values[key]

    def keys(self):
        return list(self.values)


class FakeValueState:
    def __init__(self):
        self.current = None

    def value(self):
        return self.current

    def update(self, value):
        self.current = value


class FakeCounter:
    def __init__(self):
        self.count = 0

    def inc(self):
        self.count += 1


class FakeRuntimeContext:
    def __init__(self):
        self.states, self.counters, self.gauges = {}, {}, {}

    def get_map_state(self, descriptor):
        return self.states.setdefault(descriptor.name, FakeMapState())

    def get_state(self, descriptor):
        return self.states.setdefault(descriptor.name, FakeValueState())

    def get_metrics_group(self):
        return self

    def counter(self, name):
        return self.counters.setdefault(name, FakeCounter())

    def gauge(self, name, obj):
        self.gauges[name] = obj


class FakeTimerService:
    def __init__(self):
        self.watermark, self.timers = 0, []

    def current_watermark(self):
        return self.watermark

    def register_event_time_timer(self, at_ms):
        self.timers.append(at_ms)


class FakeContext:
    def __init__(self, shard=0):
        self.shard, self.at_ms, self.timers = shard, 0, FakeTimerService()

    def get_current_key(self):
        return self.shard

    def timestamp(self):
        return self.at_ms

    def timer_service(self):
        return self.timers


def _row(kind, campaign_id, value=None, **fields):
    values = dict(fields, kind=kind, campaign_id=campaign_id, v=value, topic="t", part=0, off=1, k=b"k")
    row = Row(*[values.get(name) for name in ROW_FIELDS])
    row.set_field_names(ROW_FIELDS)
    return row


def _campaign(campaign_id, budget_micros, at_ms=T0):
    return {"campaign_id": campaign_id, "advertiser_id": 1, "version": 1, "event_time": at_ms, "status": "ACTIVE",
            "bid_type": "CPC", "daily_budget_micros": budget_micros, "currency": "USD", "timezone": "UTC",
            "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None, "cap_per_week": None,
            "cpa_target_micros": None}


def _report(server, sequence, campaign_id, at_ms, spend):
    return {"server_id": server, "sequence": sequence, "campaign_id": campaign_id, "event_time": at_ms,
            "interval_start": at_ms - 1000, "expected_spend_micros": spend, "served_ads": 1,
            "eligible_requests": 5, "lease_id": None, "max_price_micros": 2 * DOLLAR, "wants_slice": False}


def _batch(server, sequence, at_ms, spend_of, leases=None, wants=()):
    """One batch record (a single partition) of `spend_of`: campaign -> spend, as an ad server sends it."""
    ids = np.array(sorted(spend_of), np.int64)
    cut = SpendCut(server, sequence, at_ms - 1000, at_ms, ids, np.array([spend_of[c] for c in ids], np.int64),
                   np.ones(len(ids), np.int32), np.full(len(ids), 5, np.int32), np.full(len(ids), 2 * DOLLAR, np.int64),
                   dict(leases or {}), set(wants))
    [(_, record)] = batch_records(cut, 1)
    return record


def _routed(route, value):
    """What Route makes of a spend_raw row with `value` (campaign unknown: the JVM could not key it)."""
    outputs = list(route.process_element(_row("spend_raw", None, value), None))
    for out in outputs:
        if not isinstance(out, tuple):
            out.set_field_names(ROW_FIELDS)
    return outputs


def _route():
    route, runtime = Route(), FakeRuntimeContext()
    route.open(runtime)
    return route, runtime


def _pacer():
    pace, runtime = Pace(PacerSettings(shards=2)), FakeRuntimeContext()
    pace.open(runtime)
    return pace, runtime, FakeContext()


def _feed(pace, ctx, row, at_ms):
    ctx.at_ms = at_ms
    return list(pace.process_element(row, ctx))


def _states(codec, outputs):
    return [codec.decode(out[1]) for out in outputs if isinstance(out, Row)]  # (key, value) rows


def _committed(pace, campaign_id):
    return pace._load(campaign_id).committed_micros()


def test_a_campaign_change_sends_its_budget_state_at_once_and_schedules_the_shards_step():
    pace, _, ctx = _pacer()
    codec = AvroCodec()
    outputs = _feed(pace, ctx, _row("campaign", 7, codec.encode(SERVING_CAMPAIGN, _campaign(7, 100 * DOLLAR))), T0)
    [state] = _states(codec, outputs)
    assert (state["campaign_id"], state["daily_budget_micros"], state["state"]) == (7, 100 * DOLLAR, "METERED")
    assert ctx.timers.timers == [T0 + 10_000]


def test_a_spend_window_is_held_until_the_next_step_and_then_counted():
    pace, runtime, ctx = _pacer()
    codec = AvroCodec()
    _feed(pace, ctx, _row("campaign", 7, codec.encode(SERVING_CAMPAIGN, _campaign(7, 100 * DOLLAR))), T0)
    assert _feed(pace, ctx, _row("window", 7, spend=3 * DOLLAR, served=30, eligible=40, price=DOLLAR, servers=2),
                 T0 + 9_999) == []
    assert [pacer_state.window_from_row(r) for r in runtime.states["held_windows"].get(7)] == [
        SpendWindow(T0 + 10_000, 3 * DOLLAR, 30, 40, 2, DOLLAR)]
    list(pace.on_timer(T0 + 10_000, ctx))
    assert runtime.states["held_windows"].get(7) is None
    assert _committed(pace, 7) == 3 * DOLLAR


def test_a_server_row_that_hands_its_slices_back_drops_them_and_grants_nothing():
    pace, _, ctx = _pacer()
    codec = AvroCodec()
    _feed(pace, ctx, _row("campaign", 7, codec.encode(SERVING_CAMPAIGN, _campaign(7, 100 * DOLLAR))), T0)
    asks = _feed(pace, ctx, _row("server", 7, server_id="s1", spend=0, price=2 * DOLLAR, wants=True), T0 + 999)
    [lease] = [codec.decode(out[1][1]) for out in asks if isinstance(out, tuple)]
    assert pace._load(7).outstanding_micros(T0 + 1000) == lease["amount_micros"]
    last = _feed(pace, ctx, _row("server", 7, server_id="s1", lease_id=lease["lease_id"], spend=DOLLAR // 10,
                                 price=2 * DOLLAR, wants=True, released=True), T0 + 1_999)
    assert [out for out in last if isinstance(out, tuple)] == []  # no slice for a server that leaves
    assert pace._load(7).slices == [] and pace._load(7).outstanding_micros(T0 + 2000) == 0


def test_a_late_report_and_its_resend_count_once():
    pace, runtime, ctx = _pacer()
    codec = AvroCodec()
    _feed(pace, ctx, _row("campaign", 7, codec.encode(SERVING_CAMPAIGN, _campaign(7, 100 * DOLLAR))), T0)
    late = codec.encode(SPEND_REPORT, _report("s9", 1, 7, T0 + 30_000, 777))
    for _ in range(2):
        _feed(pace, ctx, _row("spend_raw", 7, late), T0 + 30_000)
    assert _committed(pace, 7) == 777
    assert runtime.counters["late_reports"].count == 1
    assert runtime.states["late_reports"].keys() == ["s9|1|7"]


def test_a_timer_tick_steps_every_campaign_of_the_shard_and_schedules_the_next_step():
    pace, runtime, ctx = _pacer()
    codec = AvroCodec()
    for campaign_id in (7, 9):
        _feed(pace, ctx, _row("campaign", campaign_id,
                              codec.encode(SERVING_CAMPAIGN, _campaign(campaign_id, 100 * DOLLAR))), T0)
    outputs = list(pace.on_timer(T0 + 10_000, ctx))
    assert runtime.counters["controller_steps"].count == 2
    assert {s["campaign_id"] for s in _states(codec, outputs)} <= {7, 9}
    assert ctx.timers.timers[-1] == T0 + 20_000


def test_a_corrupt_campaign_record_goes_to_the_dead_letters():
    pace, runtime, ctx = _pacer()
    [(tag, dead)] = _feed(pace, ctx, _row("campaign", 7, b"\xc3\x01 not a campaign"), T0)
    assert tag is DEAD_LETTERS and dead[0] == b"budget_pacing"
    assert runtime.counters["corrupt_records"].count == 1
    assert runtime.states["pacer_states"].keys() == []


def test_an_ad_change_is_kept_as_typed_rows_and_read_back_the_same():
    ads = {1: (2, 30_000, ("feed", "video"), False), 2: (1, 50_000, ("any",), True)}
    assert pacer_state.ads_from_rows(pacer_state.ads_to_rows(ads)) == ads


def test_the_row_layout_is_the_jvm_operators():
    declared = re.search(r"OUTPUT_FIELDS = \{(.*?)\};", SPEND_WINDOWS_JAVA.read_text(), re.S).group(1)
    assert ROW_FIELDS == re.findall(r'"(\w+)"', declared)


def test_late_report_keys_expire_by_flinks_state_ttl_without_turning_the_state_cache_off():
    from pyflink.datastream.state import StateTtlConfig

    ttl = pacer_state.late_reports()._ttl_config
    assert ttl.get_ttl().to_milliseconds() == 3_600_000
    assert ttl.get_update_type() == StateTtlConfig.UpdateType.OnCreateAndWrite
    assert ttl.get_state_visibility() == StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp


def test_route_splits_a_late_batch_into_single_campaign_reports_each_keyed_by_its_own_campaign():
    route, _ = _route()
    codec = AvroCodec()
    batch = _batch("s9", 4, T0 + 30_000, {7: 700, 9: 900, 12: 0}, leases={9: "lease-9"}, wants={12})
    rows = _routed(route, codec.encode(SPEND_REPORT, batch))
    assert [(r.kind, r.campaign_id, r.topic, r.part, r.off, r.k) for r in rows] == [
        ("spend_raw", c, "t", 0, 1, b"k") for c in (7, 9, 12)]
    assert [codec.decode(r.v) for r in rows] == [dict(item, campaigns=None) for item in spend_items(batch)]


def test_route_drops_a_late_heartbeat_and_a_late_batch_of_no_campaigns():
    route, runtime = _route()
    codec = AvroCodec()
    assert _routed(route, codec.encode(SPEND_REPORT, heartbeat_record("s9", 5, T0))) == []
    assert _routed(route, codec.encode(SPEND_REPORT, _batch("s9", 5, T0, {}))) == []
    assert runtime.counters.get("corrupt_records").count == 0


def test_route_passes_a_single_campaign_report_of_an_older_version_on_as_it_came():
    route, _ = _route()
    v2 = parse_schema(plain_timestamps(json.loads((HISTORY_DIR / "spend_report.v2.avsc").read_text())),
                      named_schemas={})
    value = AvroCodec().encode(v2, _report("s9", 1, 7, T0, 777))
    [row] = _routed(route, value)
    assert (row.kind, row.campaign_id, row.v) == ("spend_raw", 7, value)


def test_route_sends_a_batch_with_columns_of_unequal_length_to_the_dead_letters_naming_them():
    route, runtime = _route()
    codec = AvroCodec()
    batch = _batch("s9", 4, T0, {7: 700, 9: 900})
    value = codec.encode(SPEND_REPORT, dict(batch, campaigns=dict(batch["campaigns"], served_ads=b"\1\0\0\0")))
    [(tag, dead)] = _routed(route, value)
    letter = codec.decode(dead[1])
    assert tag is DEAD_LETTERS and "unequal length" in letter["reason"]
    assert (letter["error_type"], letter["value"], letter["source_topic"]) == ("SchemaMismatch", value, "t")
    assert runtime.counters["corrupt_records"].count == 1


def test_route_sends_a_batch_with_a_column_not_of_whole_entries_to_the_dead_letters():
    route, runtime = _route()
    codec = AvroCodec()
    batch = _batch("s9", 4, T0, {7: 700, 9: 900})
    value = codec.encode(SPEND_REPORT, dict(batch, campaigns=dict(batch["campaigns"],
                                                                   campaign_id=batch["campaigns"]["campaign_id"][:-1])))
    [(tag, dead)] = _routed(route, value)
    assert tag is DEAD_LETTERS and codec.decode(dead[1])["error_type"] == "SchemaMismatch"
    assert runtime.counters["corrupt_records"].count == 1


def test_a_late_batch_its_resend_and_the_same_report_sent_alone_count_each_campaign_once():
    route, _ = _route()
    pace, runtime, ctx = _pacer()
    codec = AvroCodec()
    for campaign_id in (7, 9):
        _feed(pace, ctx, _row("campaign", campaign_id,
                              codec.encode(SERVING_CAMPAIGN, _campaign(campaign_id, 100 * DOLLAR))), T0)
    batch = codec.encode(SPEND_REPORT, _batch("s9", 1, T0 + 30_000, {7: 700, 9: 900}))
    alone = codec.encode(SPEND_REPORT, _report("s9", 1, 9, T0 + 30_000, 900))
    for value in (batch, batch, alone):
        for row in _routed(route, value):
            _feed(pace, ctx, row, T0 + 30_000)
    assert (_committed(pace, 7), _committed(pace, 9)) == (700, 900)
    assert runtime.counters["late_reports"].count == 2
    assert sorted(runtime.states["late_reports"].keys()) == ["s9|1|7", "s9|1|9"]


def test_the_pacer_counts_only_its_rows_campaign_of_a_spend_record_that_carries_several():
    pace, runtime, ctx = _pacer()
    codec = AvroCodec()
    batch = codec.encode(SPEND_REPORT, _batch("s9", 1, T0 + 30_000, {7: 700, 9: 900}))
    _feed(pace, ctx, _row("spend_raw", 7, batch), T0 + 30_000)
    assert (_committed(pace, 7), _committed(pace, 9)) == (700, 0)
    assert runtime.states["late_reports"].keys() == ["s9|1|7"]
