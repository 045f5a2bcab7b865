"""Reading and writing the archive's Avro container files in Beam pipelines.

Archived topics are Avro object container files whose header carries the
writer schema. Timestamps may come back as datetimes (timestamp-millis logical
type); the pipelines work in int epoch milliseconds like the jobs, so records
are normalised on read."""
from __future__ import annotations

import datetime as dt
import json
from typing import Any

from schemas import SCHEMA_DIR


def to_millis(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return int(value.timestamp() * 1000) if value.tzinfo else \
            int(value.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
    return value


def normalise(record: dict[str, Any]) -> dict[str, Any]:
    """A record with every datetime turned into int epoch milliseconds."""
    return {k: to_millis(v) for k, v in record.items()}


def schema_json(file_name: str) -> dict[str, Any]:
    """A contract from schemas/ as a dict, for WriteToAvro."""
    return json.loads((SCHEMA_DIR / file_name).read_text())


ENVELOPE_FIELDS = {"topic", "partition", "offset", "event_time", "k", "v"}


def is_envelope(record: dict[str, Any]) -> bool:
    """A record of the archiver's files (jobs/archiver): the Kafka record's coordinates, key and value bytes."""
    return ENVELOPE_FIELDS <= record.keys() and isinstance(record.get("v"), (bytes, bytearray))


def unwrap(record: dict[str, Any], codec=None) -> dict[str, Any]:
    """The domain record inside an archived envelope (decoded with its writer's contract), normalised; a plain
    record (a file written by a pipeline) is only normalised. Raises core.errors.CorruptRecord when the value
    does not decode."""
    if not is_envelope(record):
        return normalise(record)
    if codec is None:
        from schemas.codec import AvroCodec

        codec = AvroCodec()
    return normalise(codec.decode(bytes(record["v"]), topic=record["topic"], partition=record["partition"],
                                  offset=record["offset"]))


def archive_pattern(archive: str, topic: str, day: str, hour: str = "*") -> str:
    """The committed files of one topic's UTC day (hidden in-progress files do not match)."""
    return f"{archive.rstrip('/')}/{topic}/dt={day}/hr={hour}/part-*"


CORRUPT = "corrupt"


def unwrap_dofn():
    """A Beam DoFn: archived envelopes (or plain records) -> normalised domain records; a value that does not
    decode goes to the `corrupt` output as its reason, and is counted (Beam metric corrupt_records)."""
    import apache_beam as beam

    from core.errors import CorruptRecord

    class Unwrap(beam.DoFn):
        def setup(self):
            from schemas.codec import AvroCodec

            self.codec = AvroCodec()
            self.corrupt = beam.metrics.Metrics.counter("archive", "corrupt_records")

        def process(self, record):
            try:
                yield unwrap(record, self.codec)
            except CorruptRecord as error:
                self.corrupt.inc()
                yield beam.pvalue.TaggedOutput(CORRUPT, str(error))

    return Unwrap()
