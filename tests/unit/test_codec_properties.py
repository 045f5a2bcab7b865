"""Property tests of the Avro codec (schemas/codec.py), on every current schema: a generated record of the
schema encodes and decodes to itself, and bytes that are not a record (arbitrary bytes, a valid header over
arbitrary bytes, a real record cut short or with a byte changed) raise CorruptRecord and nothing else, so a
consumer can always dead-letter what it cannot read.

Examples per property: hypothesis's settings below (bounded, for `.ci/run`); raise them with
ADSERVE_FUZZ_EXAMPLES."""
from __future__ import annotations

import math
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from core.errors import CorruptRecord
from schemas.codec import HEADER_LEN, MAGIC, AvroCodec, default_registry

EXAMPLES = int(os.environ.get("ADSERVE_FUZZ_EXAMPLES", 60))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=os.environ.get("ADSERVE_FUZZ_RANDOM") != "1",
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
REGISTRY = default_registry()
CODEC = AvroCodec(REGISTRY)
RECORD_TYPES = sorted(REGISTRY.current)
INT32 = (-2**31, 2**31 - 1)
INT64 = (-2**63, 2**63 - 1)


def values(schema: Any, named: dict[str, Any]) -> st.SearchStrategy:
    """Values that fit an Avro schema (parsed by fastavro, timestamps plain): the oracle's own generator,
    written from the Avro specification rather than from the codec."""
    if isinstance(schema, list):  # a union: one of its branches
        return st.one_of([values(branch, named) for branch in schema])
    if isinstance(schema, str):
        primitive = {"null": st.none(), "boolean": st.booleans(), "int": st.integers(*INT32),
                     "long": st.integers(*INT64), "bytes": st.binary(max_size=20), "string": st.text(max_size=20),
                     "double": st.floats(allow_nan=False),
                     "float": st.floats(allow_nan=False, width=32)}.get(schema)
        return primitive if primitive is not None else values(named[schema], named)
    kind = schema["type"]
    if isinstance(kind, (dict, list)) or kind in ("null", "boolean", "int", "long", "bytes", "string", "double",
                                                   "float"):
        return values(kind, named)
    if "name" in schema:
        named[schema["name"]] = schema
    if kind == "record":
        return st.fixed_dictionaries({f["name"]: values(f["type"], named) for f in schema["fields"]})
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "array":
        return st.lists(values(schema["items"], named), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=8), values(schema["values"], named), max_size=3)
    if kind == "fixed":
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    raise AssertionError(f"no generator for Avro type {kind!r}")


def same(decoded: Any, written: Any) -> bool:
    """Equal, with -0.0 == 0.0 and floats compared as the float they were written as."""
    if isinstance(written, dict):
        return isinstance(decoded, dict) and decoded.keys() == written.keys() and \
            all(same(decoded[k], v) for k, v in written.items())
    if isinstance(written, list):
        return isinstance(decoded, list) and len(decoded) == len(written) and all(map(same, decoded, written))
    if isinstance(written, float):
        return isinstance(decoded, float) and (decoded == written or math.isinf(written) and decoded == written)
    return decoded == written and type(decoded) is type(written)


@pytest.mark.parametrize("record_type", RECORD_TYPES)
def test_every_generated_record_of_a_schema_round_trips(record_type):
    schema = REGISTRY.current[record_type]

    @SETTINGS
    @given(record=values(schema, {}))
    def round_trip(record):
        decoded = CODEC.decode(CODEC.encode(schema, record), record_type)
        assert same(decoded, record), (decoded, record)

    round_trip()


def assert_corrupt(data: bytes, reader: str | None = None) -> None:
    """Decoding `data` raises CorruptRecord (naming where) or returns a record: never another exception."""
    try:
        CODEC.decode(data, reader, topic="fuzz", partition=3, offset=42)
    except CorruptRecord as e:
        assert "fuzz" in str(e) and "42" in str(e), f"the error does not say where: {e}"


@SETTINGS
@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_are_a_corrupt_record(data):
    assert_corrupt(data)


FINGERPRINTS = sorted(REGISTRY.by_fingerprint)


@SETTINGS
@given(fingerprint=st.sampled_from(FINGERPRINTS), body=st.binary(max_size=96),
       reader=st.sampled_from([None, *RECORD_TYPES]))
def test_a_known_header_over_arbitrary_bytes_is_a_corrupt_record_or_a_record(fingerprint, body, reader):
    assert_corrupt(MAGIC + fingerprint + body, reader)


@SETTINGS
@given(data=st.data(), record_type=st.sampled_from(RECORD_TYPES))
def test_a_record_cut_short_is_a_corrupt_record(data, record_type):
    schema = REGISTRY.current[record_type]
    encoded = CODEC.encode(schema, data.draw(values(schema, {}), label="record"))
    with pytest.raises(CorruptRecord):
        CODEC.decode(encoded[:data.draw(st.integers(0, len(encoded) - 1), label="keep")], record_type)


@SETTINGS
@given(data=st.data(), record_type=st.sampled_from(RECORD_TYPES))
def test_a_record_with_a_byte_changed_is_a_corrupt_record_or_a_record(data, record_type):
    schema = REGISTRY.current[record_type]
    encoded = CODEC.encode(schema, data.draw(values(schema, {}), label="record"))
    at = data.draw(st.integers(0, len(encoded) - 1), label="at")
    damaged = encoded[:at] + bytes([encoded[at] ^ data.draw(st.integers(1, 255), label="xor")]) + encoded[at + 1:]
    assert_corrupt(damaged, record_type)
