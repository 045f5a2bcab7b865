"""The Java decoders (jobs/jvm/io/adserve/flink) read exactly what the Python codec (schemas/codec.py) writes.

Golden bytes: records are encoded here with the project's codec and its .avsc files (older versions from
schemas/history too), decoded by the Java classes through the golden driver (jobs/jvm/test, no cluster), and
compared field by field with the records that were encoded; a spend batch with the reports
core.spend.spend_items expands it to. Bytes the codec never writes (negative block counts, malformed
columns) are written by hand, and must decode as fastavro reads them or not at all."""
from __future__ import annotations

import io
import json

import fastavro
import numpy as np
import pytest
from fastavro.schema import parse_schema

from core.spend import SpendCut, batch_records, heartbeat_record, spend_items
from jobs.jvm import run_golden_driver
from schemas import HISTORY_DIR
from schemas import topics
from schemas.codec import HEADER_LEN, AvroCodec, default_registry, plain_timestamps

CODEC = AvroCodec()
AD_EVENT_TYPE = topics.record_type(topics.AD_EVENTS)
SPEND_REPORT_TYPE = topics.record_type(topics.BUDGET_SPEND)
SERVING_AD_TYPE = topics.record_type(topics.SERVING_ADS)
BILLED_SPEND_TYPE = topics.record_type(topics.BILLED_SPEND)

SPEND_REPORT = {"server_id": "ad-server-7", "sequence": 41, "campaign_id": 1001, "event_time": 1_700_000_012_345,
                "interval_start": 1_700_000_011_345, "expected_spend_micros": 1_400_000, "served_ads": 3,
                "eligible_requests": 12, "lease_id": None, "max_price_micros": 2_000_000, "wants_slice": False}

CLICK = {"event_id": "ev-click-1", "impression_id": "imp-\u00e9\u4e2d\U0001F600", "event_type": "CLICK",
         "event_time": 1_700_000_000_123, "served_time": 1_699_999_999_000, "campaign_id": 2**63 - 1,
         "ad_id": 7, "price_micros": 1_400_000, "billing_type": "CLICK", "user_id": "user-9",
         "ip_address": "203.0.113.9", "user_agent": "Mozilla/5.0 (X11) Firefox/120", "token_key_id": "k1"}


def header_hex(record_type: str) -> str:
    return CODEC.encode(record_type, _example(record_type))[:HEADER_LEN].hex()


def _example(record_type: str) -> dict:
    return {SPEND_REPORT_TYPE: SPEND_REPORT, AD_EVENT_TYPE: CLICK}[record_type]


def _older(file_name: str):
    return parse_schema(plain_timestamps(json.loads((HISTORY_DIR / file_name).read_text())), named_schemas={})


def _one(command: str):
    return run_golden_driver([command])[0]


def test_the_avro_reader_reads_every_primitive_as_the_python_codec_writes_it():
    event = dict(CLICK, event_time=-1, served_time=0, ad_id=-(2**63), price_micros=2**31, user_id=None)
    body = CODEC.encode(AD_EVENT_TYPE, event)[HEADER_LEN:]
    types = "string,string,enum2,long,long,long,long,long,enum2,nullable_string,nullable_string,nullable_string," \
            "string,at_end"
    assert _one(f"read {body.hex()} {types}") == [
        event["event_id"], event["impression_id"], 1, -1, 0, 2**63 - 1, -(2**63), 2**31, 1, None,
        event["ip_address"], event["user_agent"], event["token_key_id"], True]


def test_the_avro_reader_refuses_a_truncated_string_instead_of_reading_past_the_record():
    body = CODEC.encode(AD_EVENT_TYPE, CLICK)[HEADER_LEN:]
    assert _one(f"read {body[:5].hex()} string") == [{"error": "IllegalArgumentException"}]
    assert _one("read 80 long") == [{"error": "ArrayIndexOutOfBoundsException"}]  # a varint cut short


# A decoded row: the top-level fields but `campaigns`, then whether the entry's slices are handed back.
SPEND_ITEM_FIELDS = [f["name"] for f in default_registry().schema(SPEND_REPORT_TYPE)["fields"]
                     if f["name"] != "campaigns"] + ["released"]
MAP_OF_STRINGS = parse_schema({"type": "map", "values": "string"})
ARRAY_OF_LONGS = parse_schema({"type": "array", "items": "long"})


def spend_rows(record: dict) -> list[list]:
    """What DecodeSpendReport must answer for `record`: core.spend.spend_items' reports as rows."""
    return [[item.get(f, False) for f in SPEND_ITEM_FIELDS] for item in spend_items(record)]


def a_cut(campaigns: list[int], *, sequence: int = 41, released: frozenset[int] = frozenset()) -> SpendCut:
    """A cut of `campaigns` with figures at the edges of their columns' widths, some leased, some asking, the
    `released` ones handed back."""
    n = len(campaigns)
    ids = np.array(sorted(campaigns), np.int64)
    return SpendCut("ad-server-7", sequence, 1_700_000_011_345, 1_700_000_012_345, ids,
                    np.array([2**63 - 1, 0, 1_400_000, 7][:n] + [5] * max(0, n - 4), np.int64),
                    np.array([2**31 - 1, 0, 3, -(2**31)][:n] + [1] * max(0, n - 4), np.int32),
                    np.array([12, 2**31 - 1, 0, 4][:n] + [2] * max(0, n - 4), np.int32),
                    np.array([2_000_000, -1, 0, 2**62][:n] + [9] * max(0, n - 4), np.int64),
                    {int(ids[0]): "lease-\u00e9", int(ids[-1]): "lease-9"}, {int(ids[1 % n])}, set(released))


def avro_long(value: int) -> bytes:
    """Avro's zig-zag varint, written by hand for bytes the Python codec never writes (negative block counts)."""
    raw, out = (value << 1) ^ (value >> 63), bytearray()
    while raw & ~0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def avro_string(text: str) -> bytes:
    return avro_long(len(text.encode())) + text.encode()


def with_columns(**columns) -> dict:
    """A batch record of `a_cut([5, 6, 7])` with some of its packed columns replaced."""
    (_, record), = batch_records(a_cut([5, 6, 7]), 1)
    return dict(record, campaigns=dict(record["campaigns"], **columns))


@pytest.mark.parametrize("report", [SPEND_REPORT, dict(SPEND_REPORT, lease_id="lease-3", wants_slice=True,
                                                       campaign_id=2**63 - 1, sequence=2**40)])
def test_the_spend_decoder_reads_every_field_of_a_report_the_python_codec_writes(report):
    value = CODEC.encode(SPEND_REPORT_TYPE, report)
    assert _one(f"spend {header_hex(SPEND_REPORT_TYPE)} {value.hex()}") == [[report.get(f, False)
                                                                              for f in SPEND_ITEM_FIELDS]]


def test_the_spend_decoder_reads_a_batch_as_the_reports_spend_items_expands_it_to():
    cut = a_cut([3, 11, 12, 2**63 - 1, 40, 41], released=frozenset({3, 2**63 - 1}))
    records = [record for _, record in batch_records(cut, 3)]
    records.append(dict(records[0], campaign_id=1001, lease_id="lease-top", wants_slice=True))  # both forms at once
    items = [item for r in records for item in spend_items(r)]
    assert len(items) == 6 + 1 + len(records[0]["campaigns"]["campaign_id"]) // 8
    assert {"lease-\u00e9", "lease-9", None} <= {i["lease_id"] for i in items} and {True, False} == {
        i["wants_slice"] for i in items}
    assert {i["campaign_id"] for i in items if i.get("released")} == {3, 2**63 - 1}
    header = header_hex(SPEND_REPORT_TYPE)
    assert run_golden_driver([f"spend {header} {CODEC.encode(SPEND_REPORT_TYPE, r).hex()}" for r in records]) \
        == [spend_rows(r) for r in records]


def test_a_heartbeat_and_a_batch_of_no_campaigns_decode_to_no_reports():
    (_, empty), = batch_records(SpendCut("s", 1, 0, 1_000, *(np.zeros(0, t) for t in
                                                             (np.int64, np.int64, np.int32, np.int32, np.int64))), 1)
    header = header_hex(SPEND_REPORT_TYPE)
    heartbeat = CODEC.encode(SPEND_REPORT_TYPE, heartbeat_record("s", 1, 1_000))
    assert run_golden_driver([f"spend {header} {heartbeat.hex()}",
                              f"spend {header} {CODEC.encode(SPEND_REPORT_TYPE, empty).hex()}"]) == [[], []]


def test_the_spend_decoder_reads_lease_map_and_slice_array_blocks_of_negative_count_as_fastavro_does():
    record = with_columns(lease_id={}, wants_slice=[], released=[])
    prefix = CODEC.encode(SPEND_REPORT_TYPE, record)[:-3]  # up to the (empty) lease map, slice and release arrays
    entry = avro_string("6") + avro_string("lease-6")
    leases = avro_long(-1) + avro_long(len(entry)) + entry + avro_long(1) + avro_string("7") + avro_string("l7") \
        + avro_long(0)
    wants = avro_long(-2) + avro_long(len(avro_long(5) + avro_long(7))) + avro_long(5) + avro_long(7) + avro_long(0)
    released = avro_long(-1) + avro_long(len(avro_long(6))) + avro_long(6) + avro_long(0)
    decoded = CODEC.decode(prefix + leases + wants + released, SPEND_REPORT_TYPE)
    assert decoded["campaigns"]["lease_id"] == {"6": "lease-6", "7": "l7"}
    assert decoded["campaigns"]["wants_slice"] == [5, 7]
    assert decoded["campaigns"]["released"] == [6]
    value = prefix + leases + wants + released
    assert _one(f"spend {header_hex(SPEND_REPORT_TYPE)} {value.hex()}") == spend_rows(decoded)


def test_the_avro_reader_reads_bytes_maps_and_arrays_in_blocks_as_fastavro_does():
    entry = avro_string("k1") + avro_string("v1")
    leases = avro_long(-1) + avro_long(len(entry)) + entry + avro_long(2) + avro_string("k2") + avro_string("") \
        + avro_string("k1") + avro_string("again") + avro_long(0)
    wants = avro_long(1) + avro_long(-(2**63)) + avro_long(-1) + avro_long(10) + avro_long(2**63 - 1) + avro_long(0)
    column = bytes(range(17))
    value = avro_long(len(column)) + column + leases + wants
    reader = io.BytesIO(value[len(column) + 1:])
    as_fastavro = [fastavro.schemaless_reader(reader, MAP_OF_STRINGS),
                   fastavro.schemaless_reader(reader, ARRAY_OF_LONGS)]
    assert as_fastavro == [{"k1": "again", "k2": ""}, [-(2**63), 2**63 - 1]]
    assert _one(f"read {value.hex()} bytes,string_map,long_set,at_end") == [column.hex(), *as_fastavro, True]


def test_the_avro_reader_refuses_a_block_whose_size_does_not_match_its_items():
    entry = avro_string("k1") + avro_string("v1")
    for size in (len(entry) - 1, len(entry) + 1, -1, 10**6):
        value = avro_long(-1) + avro_long(size) + entry + avro_long(0)
        assert _one(f"read {value.hex()} string_map") == [{"error": "IllegalArgumentException"}], size
    assert _one(f"read {(avro_long(10**6) + avro_long(0)).hex()} long_set") == [{"error": "IllegalArgumentException"}]


def test_the_spend_decoder_leaves_an_older_version_and_corrupt_bytes_to_the_python_path():
    v1 = CODEC.encode(_older("spend_report.v1.avsc"), {k: v for k, v in SPEND_REPORT.items()
                                                      if k not in ("max_price_micros", "wants_slice")})
    v2 = CODEC.encode(_older("spend_report.v2.avsc"), SPEND_REPORT)
    v3 = CODEC.encode(_older("spend_report.v3.avsc"), SPEND_REPORT)
    current = CODEC.encode(SPEND_REPORT_TYPE, SPEND_REPORT)
    header = header_hex(SPEND_REPORT_TYPE)
    answers = run_golden_driver([f"spend {header} {v1.hex()}", f"spend {header} {v2.hex()}",
                                 f"spend {header} {v3.hex()}",
                                 f"spend {header} {current.hex()}00", f"spend {header} {current[:-3].hex()}",
                                 f"spend {header} {current[:-1].hex()}04",  # campaigns: union branch 2
                                 f"spend {header} -"])
    assert answers == [None] * 7


def test_the_spend_decoder_also_reads_the_layout_before_hand_backs_when_given_its_header():
    """A record of an ad server not yet upgraded (schemas/history/spend_report.v3.avsc) decodes in the JVM during
    a rollout, with nothing handed back; other versions still go to the Python path."""
    from jobs.budget_pacing.topology import EARLIER_SPEND_REPORT, history_header

    earlier = _older(EARLIER_SPEND_REPORT)
    (_, batch), = batch_records(a_cut([5, 6, 7]), 1)
    old_batch = dict(batch, campaigns={k: v for k, v in batch["campaigns"].items() if k != "released"})
    v3 = [CODEC.encode(earlier, old_batch), CODEC.encode(earlier, SPEND_REPORT)]
    v2 = CODEC.encode(_older("spend_report.v2.avsc"), SPEND_REPORT)
    header, old = header_hex(SPEND_REPORT_TYPE), history_header(EARLIER_SPEND_REPORT)
    assert old == v3[0][:HEADER_LEN].hex() != header
    answers = run_golden_driver([f"spend {header} {v.hex()} {old}" for v in v3] + [f"spend {header} {v2.hex()} {old}",
                                f"spend {header} {CODEC.encode(SPEND_REPORT_TYPE, batch).hex()} {old}"])
    assert answers == [spend_rows(batch), spend_rows(SPEND_REPORT), None, spend_rows(batch)]


def test_the_spend_decoder_leaves_a_whole_batch_with_a_malformed_column_to_the_python_path():
    batch = CODEC.encode(SPEND_REPORT_TYPE, with_columns())
    ids = with_columns()["campaigns"]["campaign_id"]
    malformed = [
        with_columns(campaign_id=ids[:-1]),  # not 8 bytes an id
        with_columns(campaign_id=ids[:-8]),  # two ids, three entries in the other columns
        with_columns(served_ads=with_columns()["campaigns"]["served_ads"] + b"\0"),
        with_columns(eligible_requests=with_columns()["campaigns"]["eligible_requests"] + bytes(4)),
        with_columns(max_price_micros=with_columns()["campaigns"]["max_price_micros"] + bytes(8)),
        with_columns(expected_spend_micros=bytes(23)),
    ]
    body = batch[:-1]  # without its (empty) release array
    values = [CODEC.encode(SPEND_REPORT_TYPE, r) for r in malformed] + [
        batch + b"\0",  # a trailing byte
        body,  # no release array
        body[:-2] + avro_long(1) + b"\x80",  # a lease map entry cut short in its key's length
        body[:-1] + avro_long(1) + b"\xff" * 10 + b"\x01" + avro_long(0) + b"\0",  # a slice id's varint too long
        body[:-2] + avro_long(-1) + avro_long(3) + avro_string("5") + avro_string("x") + avro_long(0) + b"\0" + b"\0",
        batch[:-1] + avro_long(1) + b"\xff" * 10 + b"\x01" + avro_long(0),  # a released id's varint too long
    ]
    header = header_hex(SPEND_REPORT_TYPE)
    assert _one(f"spend {header} {batch.hex()}") == spend_rows(with_columns())
    assert run_golden_driver([f"spend {header} {v.hex()}" for v in values]) == [None] * len(values)


def test_the_event_decoder_reads_a_click_whole_and_an_impression_without_its_per_user_fields():
    impression = dict(CLICK, event_type="IMPRESSION", billing_type="IMPRESSION", event_id="ev-imp-1")
    header = header_hex(AD_EVENT_TYPE)
    click_row, impression_row = run_golden_driver([f"event {header} {CODEC.encode(AD_EVENT_TYPE, CLICK).hex()}",
                                                   f"event {header} {CODEC.encode(AD_EVENT_TYPE, impression).hex()}"])
    columns = ["event_id", "impression_id", "event_type", "event_time", "served_time", "campaign_id", "ad_id",
               "price_micros", "billing_type", "user_id", "ip_address", "user_agent"]
    agent_lower = CLICK["user_agent"].lower()
    assert click_row == [True, *(CLICK[c] for c in columns), None, agent_lower]
    per_user = {"event_id", "user_id", "ip_address", "user_agent"}
    assert impression_row == [True, *(None if c in per_user else impression[c] for c in columns), None, agent_lower]


def test_the_event_decoder_marks_a_record_it_cannot_read_not_ok_for_the_python_path():
    value = CODEC.encode(AD_EVENT_TYPE, CLICK)
    header = header_hex(AD_EVENT_TYPE)
    not_ok = [False] + [None] * 14
    assert run_golden_driver([f"event {header} {value.hex()}ff", f"event {header} {value[:HEADER_LEN + 4].hex()}",
                              f"event {header_hex(SPEND_REPORT_TYPE)} {value.hex()}", f"event {header} -"]) \
        == [not_ok] * 4


CAMPAIGN = {"campaign_id": 31, "advertiser_id": 5, "version": 2, "event_time": 1_700_000_000_000,
            "status": "ACTIVE", "bid_type": "CPM", "daily_budget_micros": 50_000_000, "currency": "USD",
            "timezone": "UTC", "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None,
            "cap_per_week": None, "cpa_target_micros": None}
AD = {"ad_id": 900_001, "campaign_id": 32, "advertiser_id": 5, "version": 1, "event_time": 1_700_000_000_000,
      "removed": False, "bid_type": "CPC", "bid_micros": 1_000_000, "quality_prior": 0.5, "creative_ref": "c",
      "landing_url": "https://example.com", "static_score": 0.1, "targeting": []}
BILLED = {"campaign_id": 33, "event_time": 1_700_000_000_000, "budget_day": "2023-11-14",
          "billed_spend_micros": 10, "billed_impressions": 1, "billed_clicks": 0, "absorbed_overspend_micros": 0,
          "invalid_credit_micros": 0, "joined_clicks": 0}


def test_leading_campaign_id_reads_the_campaign_of_campaign_ad_and_billing_records():
    commands = [f"campaign {CODEC.encode(t, r)[:HEADER_LEN].hex()} {CODEC.encode(t, r).hex()} {leading}"
                for t, r, leading in [(topics.record_type(topics.SERVING_CAMPAIGNS), CAMPAIGN, 0),
                                      (SERVING_AD_TYPE, AD, 1), (BILLED_SPEND_TYPE, BILLED, 0)]]
    assert run_golden_driver(commands) == [31, 32, 33]


def test_leading_campaign_id_leaves_an_older_version_or_a_campaign_zero_to_the_python_path():
    billed_header = CODEC.encode(BILLED_SPEND_TYPE, BILLED)[:HEADER_LEN].hex()
    older = CODEC.encode(_older("billed_spend.v1.avsc"), {k: v for k, v in BILLED.items() if k != "joined_clicks"})
    zero = CODEC.encode(BILLED_SPEND_TYPE, dict(BILLED, campaign_id=0))
    assert run_golden_driver([f"campaign {billed_header} {older.hex()} 0", f"campaign {billed_header} {zero.hex()} 0",
                              f"campaign {billed_header} {older[:HEADER_LEN].hex()} 0"]) == [None, None, None]


def test_leading_campaign_id_reads_a_serving_ad_with_its_exclusion_category_and_leaves_version_1_to_python():
    header = CODEC.encode(SERVING_AD_TYPE, AD)[:HEADER_LEN].hex()
    current = CODEC.encode(SERVING_AD_TYPE, dict(AD, exclusion_category=7))
    version_1 = CODEC.encode(_older("serving_ad.v1.avsc"), AD)
    assert run_golden_driver([f"campaign {header} {current.hex()} 1", f"campaign {header} {version_1.hex()} 1"]) \
        == [32, None]
    assert CODEC.decode(version_1, SERVING_AD_TYPE)["campaign_id"] == 32  # the Python path resolves the old version


def test_first_seen_takes_each_decoded_column_from_its_named_input_position():
    value = CODEC.encode(AD_EVENT_TYPE, CLICK)
    (emitted,) = _one(f"split {header_hex(AD_EVENT_TYPE)} {value.hex()} true bot_agent")
    columns = ["event_id", "impression_id", "event_type", "event_time", "served_time", "campaign_id",
               "price_micros", "billing_type", "user_id", "ip_address", "user_agent"]
    assert emitted == [*(CLICK[c] for c in columns), True, "bot_agent"]


def test_first_seen_sends_an_undecodable_record_on_raw_with_its_kafka_coordinates():
    value = CODEC.encode(AD_EVENT_TYPE, CLICK)[:-1]
    (emitted,) = _one(f"split {header_hex(AD_EVENT_TYPE)} {value.hex()} false -")
    raw = [None] * 25
    raw[0], raw[18:24] = "raw", [1000, topics.AD_EVENTS, 3, 42, None, value.hex()]
    assert emitted == {"side": "raw", "row": raw}
