"""The dead-letter record: what a job could not process, why, and the bytes to replay it."""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from core.errors import CorruptRecord

# The last instant a record's time may name: 9999-12-31T23:59:59.999Z. Jobs add windows, lateness and label
# delays to record times and register timers at the sums, which must stay inside a signed 64-bit long.
MAX_EVENT_TIME_MS = 253_402_300_799_999


class SourcePosition(NamedTuple):
    """Where a record was read: its topic, partition and offset (None where unknown)."""

    topic: str
    partition: int | None
    offset: int | None


def dead_letter(job: str, source: SourcePosition, *, timestamp_ms: int | None, key: bytes | None,
                value: bytes | None, reason: str, error_type: str) -> dict[str, Any]:
    """A DeadLetter record (schemas/dead_letter.avsc) of the record read at `source`."""
    return {
        "job": job,
        "source_topic": source.topic,
        "source_partition": -1 if source.partition is None else int(source.partition),
        "source_offset": -1 if source.offset is None else int(source.offset),
        "event_time": 0 if timestamp_ms is None else int(timestamp_ms),
        "reason": reason,
        "error_type": error_type,
        "key": None if key is None else bytes(key),
        "value": None if value is None else bytes(value),
    }


def from_corrupt(job: str, error: CorruptRecord, *, timestamp_ms: int | None, key: bytes | None,
                 value: bytes | None) -> dict[str, Any]:
    return dead_letter(job, SourcePosition(error.topic or "?", error.partition, error.offset),
                       timestamp_ms=timestamp_ms, key=key, value=value, reason=error.reason,
                       error_type=type(error).__name__)


def time_out_of_range(record: Mapping[str, Any], time_fields: Iterable[str]) -> str | None:
    """Why a decoded record is corrupt when one of its times (epoch ms) lies before 1970 or after year 9999, or
    None when every time fits. A time outside that range is no event, and a timer set from it would overflow."""
    for name in time_fields:
        value = record.get(name)
        if value is not None and not 0 <= int(value) <= MAX_EVENT_TIME_MS:
            return f"{name} {value} is outside 0..{MAX_EVENT_TIME_MS} (1970 to 9999, epoch ms)"
    return None
