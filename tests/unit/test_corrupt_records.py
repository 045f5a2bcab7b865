"""The corrupt-record injector (tests/corrupt_records.py) against the codec and every job's decoding function on a
fake context: each corrupt record of each kind becomes one dead letter naming where it came from, and is counted;
none raises. The same records go through the deployed jobs in tests/integration/test_corrupt_records.py."""
from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.dead_letters import MAX_EVENT_TIME_MS, time_out_of_range
from core.errors import CorruptRecord
from jobs.common.dead_letters import time_fields
from schemas import topics
from schemas.codec import AvroCodec
from tests import features_records as records
from tests.billed_feed import campaign_version
from tests.corrupt_records import AVRO_KINDS, CDC_KINDS, avro_corrupt, cdc_corrupt, interleave
from tests.unit.flink_fakes import FakeContext, at_key, opened

CODEC = AvroCodec()
T0 = records.T0
AD_EVENT = topics.record_type(topics.AD_EVENTS)
SERVING_CAMPAIGN = topics.record_type(topics.SERVING_CAMPAIGNS)
SPEND_REPORT = topics.record_type(topics.BUDGET_SPEND)
DEAD_LETTER = topics.record_type(topics.DEAD_LETTERS)
SAMPLES = {topics.record_type(topic): sample for topic, sample in {
    topics.AD_EVENTS: records.beacon("imp-1", 10, 1, T0),
    topics.AD_SERVED: records.served("req-1", T0, [records.winner("imp-1", 10, 1)]),
    topics.AD_CONVERSIONS: records.conversion("imp-1", 10, 1, T0),
    topics.AD_FEEDBACK: records.feedback("imp-1", 10, 1, T0),
    topics.SERVING_ADS: records.serving_ad(10, 1, 1, T0),
    topics.SERVING_CAMPAIGNS: campaign_version(1, 100_000_000, at_ms=T0),
    topics.BUDGET_SPEND: {"server_id": "s1", "sequence": 1, "campaign_id": 1, "event_time": T0,
                          "interval_start": T0 - 1000, "expected_spend_micros": 1000, "served_ads": 1,
                          "eligible_requests": 5, "lease_id": None, "max_price_micros": 2_000_000,
                          "wants_slice": False, "campaigns": None},
    topics.BILLED_SPEND: {"campaign_id": 1, "event_time": T0, "budget_day": "2027-01-15",
                          "billed_spend_micros": 1000, "billed_impressions": 1, "billed_clicks": 0,
                          "absorbed_overspend_micros": 0, "invalid_credit_micros": 0, "joined_clicks": 0},
    topics.PRIVACY_DELETIONS: {"user_id": "u-1", "event_time": T0, "request_id": "del-1", "reason": None},
}.items()}
CAMPAIGN_ROW = {"campaign_id": 7, "advertiser_id": 1, "version": 3, "status": "ACTIVE", "bid_type": "CPC",
                "daily_budget_micros": 5_000_000, "currency": "USD", "timezone": "UTC", "flight_start": None,
                "flight_end": None, "dayparts": None, "cap_per_day": None, "cap_per_week": None,
                "cpa_target_micros": None}


def _change(row: dict) -> bytes:
    return json.dumps({"before": None, "after": row, "op": "u", "source": {"ts_ms": T0}}).encode()


@settings(max_examples=60, deadline=None)
@given(record_type=st.sampled_from(sorted(SAMPLES)), seed=st.integers(0, 2**32 - 1))
def test_no_corrupt_record_of_any_kind_decodes_as_a_record_of_its_topics_type(record_type, seed):
    bad = avro_corrupt(CODEC.encode(record_type, SAMPLES[record_type]), random.Random(seed))
    assert [b.kind for b in bad] == list(AVRO_KINDS)
    for record in bad[:-1]:
        with pytest.raises(CorruptRecord):
            CODEC.decode(record.value, record_type, topic="t", partition=0, offset=1)
    assert bad[-1].kind == "time_out_of_range"  # decodes, and the jobs' decoder refuses its time
    assert time_out_of_range(CODEC.decode(bad[-1].value, record_type), time_fields(record_type)) is not None


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), valid=st.integers(2, 20))
def test_interleaving_keeps_the_valid_order_and_puts_every_corrupt_record_between_valid_ones(seed, valid):
    rng = random.Random(seed)
    rows = [(b"k", CODEC.encode(AD_EVENT, records.beacon(f"i{i}", 1, 1, T0 + i)), T0 + i) for i in range(valid)]
    out = interleave(rows, avro_corrupt(rows[0][1], rng), rng)
    assert [(r.key, r.value, r.timestamp_ms) for r in out if not r.corrupt] == rows
    assert sorted(r.kind for r in out if r.corrupt) == sorted(AVRO_KINDS)
    assert not out[0].corrupt and not out[-1].corrupt
    assert all(r.timestamp_ms == before.timestamp_ms for before, r in zip(out, out[1:]) if r.corrupt)


def _rows(record_type: str, seed: int, **fields):
    """One raw Kafka row per corrupt kind, as the job's decoding function receives it (`fields`: the row's kind
    and how the job names its coordinates)."""
    part, off = fields.pop("names", ("partition", "offset"))
    bad = avro_corrupt(CODEC.encode(record_type, SAMPLES[record_type]), random.Random(seed))
    return [SimpleNamespace(topic="t.in", k=b.key, v=b.value, ts=None, **{part: 0, off: n}, **fields)
            for n, b in enumerate(bad)]


def _decoders():
    """(job's decoding function, its input rows' extra fields, record type) for every topic every job reads."""
    from jobs.budget_pacing.functions import Route as PacingRoute
    from jobs.click_aggregator.functions import Route as ClickRoute
    from jobs.event_counts.functions import DecodeEvents
    from jobs.features.functions import RECORD_TYPES as FEATURE_TYPES, Decode
    from jobs.training_join.functions import RECORD_TYPES as JOIN_TYPES, DecodeDeletion, Split

    short = ("part", "off")
    cases = [("event_counts", DecodeEvents, {}, AD_EVENT)]
    cases += [("training_join", Split, {"kind": kind}, t) for kind, t in JOIN_TYPES.items()]
    cases += [("training_join", DecodeDeletion, {}, topics.record_type(topics.PRIVACY_DELETIONS))]
    cases += [("features", lambda: Decode(user_features=True), {"kind": kind}, t) for kind, t in FEATURE_TYPES.items()]
    cases += [("click_aggregator", ClickRoute, {"kind": kind, "names": short}, topics.record_type(topic))
              for kind, topic in (("raw", topics.AD_EVENTS), ("campaign", topics.SERVING_CAMPAIGNS))]
    cases += [("budget_pacing", PacingRoute, {"kind": kind, "names": short}, topics.record_type(topic))
              for kind, topic in (("spend_raw", topics.BUDGET_SPEND), ("campaign", topics.SERVING_CAMPAIGNS),
                                  ("billed", topics.BILLED_SPEND), ("ad", topics.SERVING_ADS))]
    return cases


@pytest.mark.parametrize("job, make, fields, record_type", _decoders(),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_jobs_decoder_dead_letters_and_counts_every_corrupt_record(job, make, fields, record_type):
    function, context = opened(make())
    rows = _rows(record_type, seed=len(job), **dict(fields))
    outputs = [out for row in rows for out in function.process_element(row, FakeContext())]
    assert [tag.tag_id for tag, _ in outputs] == ["dead-letters"] * len(AVRO_KINDS)
    letters = [CODEC.decode(row[1], DEAD_LETTER) for _, row in outputs]
    assert [(d["job"], d["source_topic"], d["source_offset"]) for d in letters] == \
        [(job, "t.in", n) for n in range(len(AVRO_KINDS))]
    assert [d["value"] for d in letters] == [row.v for row in rows]
    assert context.counter("corrupt_records") == len(AVRO_KINDS)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_index_builder_dead_letters_and_counts_every_corrupt_change(seed):
    from jobs.index_builder.functions import Compile

    compile_, context = opened(Compile())
    bad = cdc_corrupt(_change(CAMPAIGN_ROW), random.Random(seed))
    assert [b.kind for b in bad] == list(CDC_KINDS)
    outputs = []
    for n, record in enumerate(bad):
        row = SimpleNamespace(topic=topics.CDC_CAMPAIGNS, k=record.key, v=record.value, partition=0, offset=n)
        outputs += list(compile_.process_element(row, at_key(context, FakeContext(), f"k{n}")))
    assert [tag.tag_id for tag, _ in outputs] == ["dead-letters"] * len(CDC_KINDS)
    assert [CODEC.decode(row[1], DEAD_LETTER)["source_offset"] for _, row in outputs] == list(range(len(CDC_KINDS)))
    assert context.counter("bad_changes") == len(CDC_KINDS)


JSON_VALUES = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=8) \
    | st.lists(st.integers(-3, 3) | st.text(max_size=3), max_size=3) \
    | st.dictionaries(st.text(max_size=8), st.integers(-3, 3), max_size=3)


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(sorted(CAMPAIGN_ROW)), value=JSON_VALUES)
def test_a_campaign_change_with_any_value_in_any_column_is_compiled_or_dead_lettered_never_raised(field, value):
    """A change whose row has a value its column never holds (a type, a range, an unknown status) compiles to a
    serving record that fits its schema, or goes to the dead letters: it never fails the job."""
    from jobs.index_builder.functions import Compile

    compile_, context = opened(Compile())
    row = SimpleNamespace(topic=topics.CDC_CAMPAIGNS, k=b'{"campaign_id":7}',
                          v=_change(dict(CAMPAIGN_ROW, **{field: value})), partition=0, offset=9)
    outputs = list(compile_.process_element(row, at_key(context, FakeContext(), "k")))
    assert len(outputs) == 1
    tag, out = outputs[0]
    if tag.tag_id == "dead-letters":
        assert context.counter("bad_changes") == 1
    else:
        assert tag.tag_id == "campaigns" and CODEC.decode(out[1], SERVING_CAMPAIGN)["campaign_id"] is not None


def test_a_time_between_1970_and_the_end_of_9999_is_an_events_and_one_outside_is_not():
    assert time_out_of_range({"event_time": 0, "served_time": MAX_EVENT_TIME_MS}, ("event_time", "served_time")) is None
    assert time_out_of_range({"event_time": 5, "flight_end": None}, ("event_time", "flight_end")) is None
    for bad in (-1, MAX_EVENT_TIME_MS + 1, 2**63 - 1):
        assert "served_time" in time_out_of_range({"event_time": 5, "served_time": bad}, ("event_time", "served_time"))


def test_the_jvm_decoders_leave_a_record_with_a_time_out_of_range_to_the_python_path():
    """DecodeAdEvent and DecodeSpendReport read the same range as core.dead_letters (AvroBinaryReader.MAX_TIME_MS):
    out of it, the record takes the Python path, whose decoder dead-letters it."""
    from jobs.jvm import SOURCE_DIR, run_golden_driver

    reader = (SOURCE_DIR / "io/adserve/flink/AvroBinaryReader.java").read_text()
    assert f"MAX_TIME_MS = {MAX_EVENT_TIME_MS:_}L;" in reader
    event, spend = SAMPLES[AD_EVENT], SAMPLES[SPEND_REPORT]
    commands = []
    for field, kind, record in (("event_time", "event", event), ("served_time", "event", event),
                                ("event_time", "spend", spend), ("interval_start", "spend", spend)):
        for value in (0, MAX_EVENT_TIME_MS, -1, MAX_EVENT_TIME_MS + 1, 2**63 - 1):
            encoded = CODEC.encode(AD_EVENT if kind == "event" else SPEND_REPORT, dict(record, **{field: value}))
            commands.append(f"{kind} {encoded[:10].hex()} {encoded.hex()}")
    answers = run_golden_driver(commands)
    read = [answer is not None and answer != [] and answer[0] is not False for answer in answers]
    assert read == [True, True, False, False, False] * 4
