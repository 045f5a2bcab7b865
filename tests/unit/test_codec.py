"""The contracts and their codec: round trips, evolution both ways, corrupt bytes."""
import copy
import json

import pytest

from core.errors import CorruptRecord, SchemaMismatch
from schemas import SCHEMA_DIR
from schemas import topics
from schemas.codec import AvroCodec, SchemaRegistry, schema_fingerprint
from tests.factories import ad_event

SCHEMA_FILES = sorted(p.name for p in SCHEMA_DIR.glob("*.avsc"))
AD_EVENT = topics.record_type(topics.AD_EVENTS)
STATE_SCHEMAS = {"pacer_state.avsc"}  # job state kept in Flink, not records on a topic: no event time of their own


def example_value(schema, depth=0, named=None):
    """A non-default value for any schema, so a round trip exercises every field."""
    named = {} if named is None else named
    if isinstance(schema, list):  # union: take the first non-null branch
        return example_value(next(s for s in schema if s != "null"), depth, named)
    if isinstance(schema, str):
        if schema in named:  # a named type defined earlier in the schema
            return example_value(named[schema], depth, named)
        return {"long": 1_234_567_890_123, "int": 42, "string": "text", "boolean": True, "double": 0.015,
                "float": 0.5, "bytes": b"\x00\xff"}[schema]
    kind = schema["type"]
    if kind in ("record", "enum"):
        named[schema["name"]] = schema
    if kind == "record":
        return {f["name"]: example_value(f["type"], depth + 1, named) for f in schema["fields"]}
    if kind == "enum":
        return schema["symbols"][-1]
    if kind == "array":
        return [example_value(schema["items"], depth + 1, named)]
    if kind == "map":
        return {"feature": example_value(schema["values"], depth + 1, named)}
    return example_value(kind, depth, named)


@pytest.mark.parametrize("file_name", SCHEMA_FILES)
def test_every_schema_round_trips_a_full_record(file_name):
    schema = json.loads((SCHEMA_DIR / file_name).read_text())
    record = example_value(schema)
    codec = AvroCodec()
    assert codec.decode(codec.encode(schema["name"], record), schema["name"]) == record


@pytest.mark.parametrize("file_name", SCHEMA_FILES)
def test_every_field_is_documented_and_every_record_has_event_time(file_name):
    schema = json.loads((SCHEMA_DIR / file_name).read_text())
    assert schema.get("doc")
    undocumented = [f["name"] for f in schema["fields"] if not f.get("doc")]
    assert undocumented == []
    if file_name not in STATE_SCHEMAS:
        assert "event_time" in [f["name"] for f in schema["fields"]]


@pytest.mark.parametrize("file_name", SCHEMA_FILES)
def test_money_fields_are_integer_micros(file_name):
    def walk(fields):
        for f in fields:
            t = f["type"]
            if f["name"].endswith("_micros"):
                assert t in ("long", ["null", "long"]), f"{file_name}: {f['name']} is {t}"
            items = t.get("items") if isinstance(t, dict) else None
            if isinstance(items, dict) and items.get("type") == "record":
                walk(items["fields"])
    walk(json.loads((SCHEMA_DIR / file_name).read_text())["fields"])


def _ad_event_versions():
    current = json.loads((SCHEMA_DIR / "ad_event.avsc").read_text())
    newer = copy.deepcopy(current)
    newer["fields"].append({"name": "viewability_percent", "type": "int", "default": 100,
                            "doc": "Share of the ad on screen when the beacon fired."})
    return current, newer


def test_a_newer_reader_reads_an_older_writer_with_the_added_fields_default():
    older, newer = _ad_event_versions()
    registry = SchemaRegistry()
    registry.register(older)
    newer_fp = registry.register(newer)
    codec = AvroCodec(registry)
    data = codec.encode(registry.by_fingerprint[schema_fingerprint(older)], ad_event(1, campaign_id=7, offset_ms=0))
    decoded = codec.decode(data, registry.by_fingerprint[newer_fp])
    assert decoded["viewability_percent"] == 100
    assert decoded["campaign_id"] == 7


def test_an_older_reader_reads_a_newer_writer_and_ignores_the_new_field():
    older, newer = _ad_event_versions()
    registry = SchemaRegistry()
    older_fp = registry.register(older)
    newer_fp = registry.register(newer)
    codec = AvroCodec(registry)
    record = ad_event(2, campaign_id=9, offset_ms=0) | {"viewability_percent": 55}
    decoded = codec.decode(codec.encode(registry.by_fingerprint[newer_fp], record),
                           registry.by_fingerprint[older_fp])
    assert "viewability_percent" not in decoded
    assert decoded == ad_event(2, campaign_id=9, offset_ms=0)


def test_each_message_carries_its_writer_schema_fingerprint():
    codec = AvroCodec()
    data = codec.encode(AD_EVENT, ad_event(1, campaign_id=7, offset_ms=0))
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == schema_fingerprint(codec.registry.schema(AD_EVENT))


@pytest.mark.parametrize("data, reason", [
    (b"garbage", "missing the C3 01 marker"),
    (None, "empty value"),
    (b"\xc3\x01" + b"\x00" * 8 + b"\x02", "unknown writer schema fingerprint"),
])
def test_malformed_bytes_raise_corrupt_record_naming_topic_partition_and_offset(data, reason):
    with pytest.raises(CorruptRecord) as err:
        AvroCodec().decode(data, AD_EVENT, topic=topics.AD_EVENTS, partition=3, offset=1234)
    assert (err.value.topic, err.value.partition, err.value.offset) == (topics.AD_EVENTS, 3, 1234)
    assert f"topic {topics.AD_EVENTS} partition 3 offset 1234" in str(err.value)
    assert reason in str(err.value)


def test_truncated_body_is_corrupt():
    codec = AvroCodec()
    data = codec.encode(AD_EVENT, ad_event(1, campaign_id=7, offset_ms=0))
    with pytest.raises(CorruptRecord, match="offset 9"):
        codec.decode(data[:-6], AD_EVENT, topic=topics.AD_EVENTS, partition=0, offset=9)


def test_trailing_bytes_are_corrupt():
    codec = AvroCodec()
    data = codec.encode(AD_EVENT, ad_event(1, campaign_id=7, offset_ms=0)) + b"\x00"
    with pytest.raises(CorruptRecord, match="trailing"):
        codec.decode(data, AD_EVENT, topic=topics.AD_EVENTS, partition=0, offset=1)


def test_a_record_that_does_not_fit_its_schema_is_a_schema_mismatch():
    bad = ad_event(1, campaign_id=7, offset_ms=0) | {"price_micros": "1.40"}
    with pytest.raises(SchemaMismatch, match=AD_EVENT):
        AvroCodec().encode(AD_EVENT, bad)


def test_unknown_record_type_is_a_schema_mismatch():
    with pytest.raises(SchemaMismatch, match="unknown record type"):
        AvroCodec().encode("NoSuchRecord", {})
