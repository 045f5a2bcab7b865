"""The budget job's Flink functions on a fake runtime context, timer service and state: no cluster."""
from __future__ import annotations

import re
from pathlib import Path

from pyflink.common import Row

from core.budget_events import SpendWindow
from jobs.budget_pacing import state as pacer_state
from jobs.budget_pacing.functions import DEAD_LETTERS, ROW_FIELDS, Pace, PacerSettings
from schemas.codec import AvroCodec

T0 = 1_767_614_400_000  # 2026-01-05 12:00:00 UTC
DOLLAR = 1_000_000
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
        self.states, self.counters = {}, {}

    def get_map_state(self, descriptor):
        return self.states.setdefault(descriptor.name, FakeMapState())

    def get_state(self, descriptor):
        return self.states.setdefault(descriptor.name, FakeValueState())

    def get_metrics_group(self):
        return self

    def counter(self, name):
        return self.counters.setdefault(name, FakeCounter())


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
    outputs = _feed(pace, ctx, _row("campaign", 7, codec.encode("ServingCampaign", _campaign(7, 100 * DOLLAR))), T0)
    [state] = _states(codec, outputs)
    assert (state["campaign_id"], state["daily_budget_micros"], state["state"]) == (7, 100 * DOLLAR, "METERED")
    assert ctx.timers.timers == [T0 + 10_000]


def test_a_spend_window_is_held_until_the_next_step_and_then_counted():
    pace, runtime, ctx = _pacer()
    codec = AvroCodec()
    _feed(pace, ctx, _row("campaign", 7, codec.encode("ServingCampaign", _campaign(7, 100 * DOLLAR))), T0)
    assert _feed(pace, ctx, _row("window", 7, spend=3 * DOLLAR, served=30, eligible=40, price=DOLLAR, servers=2),
                 T0 + 9_999) == []
    assert [pacer_state.window_from_row(r) for r in runtime.states["held_windows"].get(7)] == [
        SpendWindow(T0 + 10_000, 3 * DOLLAR, 30, 40, 2, DOLLAR)]
    list(pace.on_timer(T0 + 10_000, ctx))
    assert runtime.states["held_windows"].get(7) is None
    assert _committed(pace, 7) == 3 * DOLLAR


def test_a_late_report_and_its_resend_count_once():
    pace, runtime, ctx = _pacer()
    codec = AvroCodec()
    _feed(pace, ctx, _row("campaign", 7, codec.encode("ServingCampaign", _campaign(7, 100 * DOLLAR))), T0)
    late = codec.encode("SpendReport", _report("s9", 1, 7, T0 + 30_000, 777))
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
                              codec.encode("ServingCampaign", _campaign(campaign_id, 100 * DOLLAR))), T0)
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
