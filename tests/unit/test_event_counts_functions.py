"""The event_counts job's Flink functions on a fake context: decode, count per window, close on the timer."""
from __future__ import annotations

from types import SimpleNamespace

from core import event_counts as rules
from jobs.event_counts.functions import DEAD_LETTERS, CountPerMinute, DecodeEvents
from schemas import topics
from schemas.codec import AvroCodec
from tests.factories import BASE_MS, ad_event
from tests.unit.flink_fakes import FakeContext, at_key, opened

CODEC = AvroCodec()
DEAD_LETTER_TYPE = topics.record_type(topics.DEAD_LETTERS)


def _as_tuple(event, offset=0):
    return (event["campaign_id"], event["event_time"], event["event_type"], event["billing_type"],
            event["price_micros"], topics.AD_EVENTS, 0, offset)


def test_decode_turns_an_ad_event_into_its_tuple():
    decode, _ = opened(DecodeEvents())
    event = ad_event(1, campaign_id=7, offset_ms=1_000)
    row = SimpleNamespace(v=CODEC.encode(topics.record_type(topics.AD_EVENTS), event), k=b"7", topic=topics.AD_EVENTS,
                          partition=0, offset=3, ts=None)
    assert list(decode.process_element(row, FakeContext())) == [_as_tuple(event, offset=3)]


def test_decode_sends_a_corrupt_record_to_dead_letters_and_counts_it():
    decode, context = opened(DecodeEvents())
    row = SimpleNamespace(v=b"not avro", k=b"7", topic=topics.AD_EVENTS, partition=1, offset=9, ts=None)
    (tag, dead), = decode.process_element(row, FakeContext())
    assert tag is DEAD_LETTERS
    assert CODEC.decode(dead[1], DEAD_LETTER_TYPE)["source_offset"] == 9
    assert context.counter("corrupt_records") == 1


def test_the_first_event_of_a_window_sets_the_timer_at_its_last_instant():
    count, context = opened(CountPerMinute())
    ctx = at_key(context, FakeContext(), 7)
    assert list(count.process_element(_as_tuple(ad_event(1, campaign_id=7, offset_ms=1_000)), ctx)) == []
    assert list(count.process_element(_as_tuple(ad_event(2, campaign_id=7, offset_ms=2_000)), ctx)) == []
    assert ctx.timers.timers == [BASE_MS + 59_999]


def test_the_timer_emits_the_window_count_and_forgets_it():
    count, context = opened(CountPerMinute())
    ctx = at_key(context, FakeContext(), 7)
    for n in (1, 2):
        list(count.process_element(_as_tuple(ad_event(n, campaign_id=7, offset_ms=n * 1_000)), ctx))
    (row,) = list(count.on_timer(BASE_MS + 59_999, ctx))
    counted = CODEC.decode(row[1], topics.record_type(topics.EVENT_COUNTS))
    assert counted == rules.event_count_record(7, BASE_MS, rules.Counts(2, 0, 4_000))
    assert list(count.on_timer(BASE_MS + 59_999, ctx)) == []


def test_an_event_behind_the_watermark_goes_to_dead_letters_as_late():
    count, context = opened(CountPerMinute())
    ctx = at_key(context, FakeContext(), 7)
    ctx.timers.watermark_ms = BASE_MS + 60_000
    (tag, dead), = count.process_element(_as_tuple(ad_event(1, campaign_id=7, offset_ms=1_000)), ctx)
    assert tag is DEAD_LETTERS and CODEC.decode(dead[1], DEAD_LETTER_TYPE)["error_type"] == "LateEvent"
    assert context.counter("late_records") == 1
