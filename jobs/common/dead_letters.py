"""Corrupt records to dead letters: a value that does not decode (or whose times lie outside 1970 to 9999)
becomes a dead.letters row naming its topic, partition and offset (core.dead_letters), counted, never dropped.
PyFlink is imported only where a row is built, so the decoder's rules load without it."""
from __future__ import annotations

import functools
import json

from core.dead_letters import from_corrupt, time_out_of_range
from core.errors import CorruptRecord
from schemas import topics


def dead_letter_row(record: dict, codec=None):
    """A dead.letters row (key = the job's name, value = the DeadLetter record, core.dead_letters) for a job's
    dead-letter side output."""
    from pyflink.common import Row

    if codec is None:
        from schemas.codec import AvroCodec

        codec = AvroCodec()
    return Row(record["job"].encode(), codec.encode(topics.record_type(topics.DEAD_LETTERS), record))


@functools.cache
def time_fields(record_type: str) -> tuple[str, ...]:
    """The top-level fields of a record type's current contract (schemas/*.avsc, by short or full name) whose
    logical type is timestamp-millis, plain or nullable."""
    from schemas import SCHEMA_DIR

    for path in sorted(SCHEMA_DIR.glob("*.avsc")):
        schema = json.loads(path.read_text())
        if record_type in (schema["name"], f"{schema.get('namespace')}.{schema['name']}"):
            return tuple(f["name"] for f in schema["fields"]
                         if any(isinstance(t, dict) and t.get("logicalType") == "timestamp-millis"
                                for t in (f["type"] if isinstance(f["type"], list) else [f["type"]])))
    return ()


class DeadLetterDecoder:
    """Decodes a job's Kafka values with the project's codec; a value that does not decode becomes a
    dead.letters row instead (core.dead_letters.from_corrupt, naming its topic, partition and offset) and is
    counted in the job's `corrupt_records` metric. Made in a Flink function's `open`; its use there:

        record, dead = self.decoder.decode(row.v, record_type, topic=..., partition=..., offset=..., key=row.k)
        if dead is not None:
            yield dead_letters, dead
            return
    """

    def __init__(self, job_name: str, codec, corrupt_counter) -> None:
        self.job_name, self.codec, self.corrupt = job_name, codec, corrupt_counter

    def decode(self, value: bytes, record_type: str, *, topic: str | None, partition: int | None,
               offset: int | None, key: bytes | None, timestamp_ms: int | None = None):
        """(record, None), or (None, a dead-letter row) for a corrupt value: one that does not decode, or whose
        times lie outside 1970 to 9999 (core.dead_letters.time_out_of_range)."""
        try:
            record = self.codec.decode(value, record_type, topic=topic, partition=partition, offset=offset)
            reason = time_out_of_range(record, time_fields(record_type))
            if reason is not None:
                raise CorruptRecord(reason, topic=topic, partition=partition, offset=offset)
            return record, None
        except CorruptRecord as error:
            self.corrupt.inc()
            return None, dead_letter_row(from_corrupt(self.job_name, error, timestamp_ms=timestamp_ms, key=key,
                                                      value=value), self.codec)
