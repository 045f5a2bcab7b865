"""The corrupt-record injector: for a topic a job reads, a bounded set of records no job may accept, one of each
way a record goes bad on the wire, with seeded random variants, interleaved with valid records.

Every Kafka record of the project is Avro single-object encoded (docs/platform.md, "Wire format"): `C3 01`,
the writer schema's 8-byte fingerprint, the body. The kinds below break each part of that frame, and the
frame's neighbours (the key, the value's presence), so a job that reads the topic must send each record to its
dead-letter topic, count it, and go on. Debezium's change topics carry JSON envelopes instead and have their own
kinds (`cdc_corrupt`). Nothing here talks to Kafka: the caller produces what `interleave` returns."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Sequence

from core.dead_letters import MAX_EVENT_TIME_MS, SourcePosition, dead_letter
from core.errors import InvalidArgument
from jobs.common.dead_letters import time_fields
from schemas import topics
from schemas.codec import AvroCodec, default_registry

HEADER_LEN = 10  # the single-object encoding's marker and fingerprint
AVRO_KINDS = ("random_bytes", "truncated", "wrong_schema", "empty", "null_value", "null_key", "wrong_magic",
              "unknown_schema", "trailing_bytes", "time_out_of_range")
# Times no event has: before 1970, just past year 9999, the end of a long (a timer set from it would overflow)
OUT_OF_RANGE_MS = (-1, MAX_EVENT_TIME_MS + 1, 2**63 - 1)
CDC_KINDS = ("random_bytes", "truncated", "not_an_envelope", "avro_value", "empty", "null_key")


@dataclass(frozen=True)
class BadRecord:
    """One corrupt record: what is wrong with it (`kind`), and its key and value as they go on the wire."""

    kind: str
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class Produced:
    """A record to produce, in order: valid or corrupt (`kind` names the corruption; None for a valid one)."""

    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    kind: str | None = None

    @property
    def corrupt(self) -> bool:
        return self.kind is not None


def _random_bytes(rng: random.Random, low: int = 1, high: int = 64) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randint(low, high)))


def _other_schema_value(rng: random.Random) -> bytes:
    """A valid record of a schema no job reads (a DeadLetter), as a record of the wrong type on a topic."""
    record = dead_letter("corrupt-records", SourcePosition("elsewhere", rng.randrange(4), rng.randrange(10**6)),
                         timestamp_ms=rng.randrange(10**12), key=None, value=_random_bytes(rng), reason="a sample",
                         error_type="CorruptRecord")
    return AvroCodec().encode(topics.record_type(topics.DEAD_LETTERS), record)


def _time_out_of_range(valid: bytes, rng: random.Random) -> bytes:
    """`valid` with one of its times (a timestamp-millis field of its contract) set to one no event has."""
    writer = default_registry().by_fingerprint[bytes(valid[2:HEADER_LEN])]
    record = AvroCodec().decode(valid)
    record[rng.choice(time_fields(writer["name"]))] = rng.choice(OUT_OF_RANGE_MS)
    return AvroCodec().encode(writer, record)


def avro_corrupt(valid: bytes, rng: random.Random, key: bytes = b"corrupt") -> list[BadRecord]:
    """One corrupt record of each AVRO_KINDS kind, made from `valid` (an encoded record of the topic's type) and
    `rng`'s draws. None is a record of the topic's type a job may accept: a truncated record misses at least its
    last byte, a wrong marker or fingerprint names no known schema, extra bytes after a record are refused, and a
    time outside 1970 to 9999 is no event's (core.dead_letters.time_out_of_range)."""
    if len(valid) <= HEADER_LEN or valid[:2] != b"\xc3\x01":
        raise InvalidArgument("valid must be an Avro single-object encoded record with a body")
    noise = _random_bytes(rng)
    if noise[:2] == b"\xc3\x01":  # random bytes that happen to start with the marker: keep them not ours
        noise = b"\x00" + noise
    cut = rng.randint(HEADER_LEN + 1, len(valid) - 1) if len(valid) > HEADER_LEN + 1 else HEADER_LEN
    magic = bytes([rng.choice([b for b in range(256) if b != 0xC3])]) + valid[1:]
    flipped = bytearray(valid)
    flipped[2 + rng.randrange(8)] ^= 1 << rng.randrange(8)
    return [
        BadRecord("random_bytes", key, noise),
        BadRecord("truncated", key, valid[:cut]),
        BadRecord("wrong_schema", key, _other_schema_value(rng)),
        BadRecord("empty", key, b""),
        BadRecord("null_value", key, None),
        BadRecord("null_key", None, valid[:cut]),
        BadRecord("wrong_magic", key, magic),
        BadRecord("unknown_schema", key, bytes(flipped)),
        BadRecord("trailing_bytes", key, valid + _random_bytes(rng, 1, 8)),
        BadRecord("time_out_of_range", key, _time_out_of_range(valid, rng)),
    ]


def cdc_corrupt(valid: bytes, rng: random.Random, key: bytes = b'{"id": 0}') -> list[BadRecord]:
    """One corrupt change of each CDC_KINDS kind, made from `valid` (a Debezium JSON envelope of the topic).
    A null value is left out: on a change topic it is a tombstone, which a reader skips by design."""
    envelope = json.loads(valid)
    text = valid.decode()
    cut = rng.randint(1, len(text) - 2)
    not_envelope = json.dumps({"schema": None, "weird": [rng.randrange(100) for _ in range(3)]}).encode()
    return [
        BadRecord("random_bytes", key, b"\xff" + _random_bytes(rng)),
        BadRecord("truncated", key, text[:cut].encode()),
        BadRecord("not_an_envelope", key, not_envelope if envelope != json.loads(not_envelope) else b"[]"),
        BadRecord("avro_value", key, _other_schema_value(rng)),
        BadRecord("empty", key, b""),
        BadRecord("null_key", None, text[:cut].encode()),
    ]


def interleave(valid: Sequence[tuple[bytes | None, bytes, int]], bad: Sequence[BadRecord],
               rng: random.Random) -> list[Produced]:
    """The valid (key, value, timestamp ms) records in their order with the corrupt ones at random places between
    them, never first or last (each has valid records around it). A corrupt record takes its predecessor's
    timestamp, so it moves no job's clock."""
    if len(valid) < 2:
        raise InvalidArgument("interleave needs at least two valid records to put corrupt ones between")
    slots = sorted(rng.randint(1, len(valid) - 1) for _ in bad)
    out: list[Produced] = []
    pending = list(zip(slots, bad))
    for index, (key, value, timestamp_ms) in enumerate(valid):
        while pending and pending[0][0] == index:
            _, record = pending.pop(0)
            out.append(Produced(record.key, record.value, out[-1].timestamp_ms, record.kind))
        out.append(Produced(key, value, timestamp_ms))
    return out
