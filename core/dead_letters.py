"""The dead-letter record: what a job could not process, why, and the bytes to replay it."""
from __future__ import annotations

from typing import Any

from core.errors import CorruptRecord


def dead_letter(job: str, *, topic: str, partition: int | None, offset: int | None, timestamp_ms: int | None,
                key: bytes | None, value: bytes | None, reason: str, error_type: str) -> dict[str, Any]:
    """A DeadLetter record (schemas/dead_letter.avsc)."""
    return {
        "job": job,
        "source_topic": topic,
        "source_partition": -1 if partition is None else int(partition),
        "source_offset": -1 if offset is None else int(offset),
        "event_time": 0 if timestamp_ms is None else int(timestamp_ms),
        "reason": reason,
        "error_type": error_type,
        "key": None if key is None else bytes(key),
        "value": None if value is None else bytes(value),
    }


def from_corrupt(job: str, error: CorruptRecord, *, timestamp_ms: int | None, key: bytes | None,
                 value: bytes | None) -> dict[str, Any]:
    return dead_letter(job, topic=error.topic or "?", partition=error.partition, offset=error.offset,
                       timestamp_ms=timestamp_ms, key=key, value=value, reason=error.reason,
                       error_type=type(error).__name__)
