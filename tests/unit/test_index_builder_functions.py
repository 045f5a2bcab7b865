"""The index builder's Compile on a fake context: newer versions out by kind, stale and bad changes counted."""
from __future__ import annotations

import json
from types import SimpleNamespace

from jobs.index_builder.functions import CAMPAIGNS, DEAD_LETTERS, Compile, change_key, is_newer
from schemas import topics
from schemas.codec import AvroCodec
from tests.unit.flink_fakes import FakeContext, at_key, opened

CODEC = AvroCodec()


def _campaign_change(version: int) -> SimpleNamespace:
    row = {"campaign_id": 7, "advertiser_id": 1, "version": version, "status": "ACTIVE", "bid_type": "CPC",
           "daily_budget_micros": 5_000_000, "currency": "USD", "timezone": "UTC", "flight_start": None,
           "flight_end": None, "dayparts": None, "cap_per_day": None, "cap_per_week": None, "cpa_target_micros": None}
    value = json.dumps({"before": None, "after": row, "op": "u", "source": {"ts_ms": 1_767_614_400_000}})
    return SimpleNamespace(topic=topics.CDC_CAMPAIGNS, k=b'{"campaign_id":7}', v=value.encode(), partition=0,
                           offset=version)


def test_only_a_version_newer_than_the_last_emitted_goes_out():
    assert is_newer(3, None) and is_newer(3, 2)
    assert not is_newer(2, 2) and not is_newer(1, 2)


def test_a_row_is_keyed_by_its_topic_and_row_key():
    assert change_key(_campaign_change(1)) == topics.CDC_CAMPAIGNS + '|{"campaign_id":7}'


def test_a_campaign_change_becomes_a_serving_campaign_on_its_side_output():
    compile_, context = opened(Compile())
    ctx = at_key(context, FakeContext(), f"{topics.CDC_CAMPAIGNS}|7")
    (tag, row), = compile_.process_element(_campaign_change(2), ctx)
    assert tag is CAMPAIGNS and CODEC.decode(row[1], topics.record_type(topics.SERVING_CAMPAIGNS))["version"] == 2


def test_an_older_or_repeated_version_is_dropped_and_counted_stale():
    compile_, context = opened(Compile())
    ctx = at_key(context, FakeContext(), f"{topics.CDC_CAMPAIGNS}|7")
    list(compile_.process_element(_campaign_change(2), ctx))
    assert list(compile_.process_element(_campaign_change(2), ctx)) == []
    assert list(compile_.process_element(_campaign_change(1), ctx)) == []
    assert context.counter("stale_changes") == 2


def test_a_change_that_cannot_compile_goes_to_dead_letters_and_is_counted():
    compile_, context = opened(Compile())
    ctx = at_key(context, FakeContext(), f"{topics.CDC_CAMPAIGNS}|7")
    bad = SimpleNamespace(topic=topics.CDC_CAMPAIGNS, k=b"7", v=b"{not json", partition=0, offset=5)
    (tag, row), = compile_.process_element(bad, ctx)
    assert tag is DEAD_LETTERS
    assert CODEC.decode(row[1], topics.record_type(topics.DEAD_LETTERS))["error_type"] == "BadChange"
    assert context.counter("bad_changes") == 1
