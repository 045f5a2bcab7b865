"""Reading and writing the archive's Avro container files in Beam pipelines.

Archived topics are Avro object container files whose header carries the
writer schema. Timestamps may come back as datetimes (timestamp-millis logical
type); the pipelines work in int epoch milliseconds like the jobs, so records
are normalised on read."""
from __future__ import annotations

import datetime as dt
import json
from typing import Any

from core.errors import InvalidSettings
from schemas import SCHEMA_DIR, topics


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


def matching_files(patterns: list[str]) -> list[str]:
    """Every file matching the patterns (any Beam file system), sorted; a pattern matching nothing adds none."""
    from apache_beam.io.filesystems import FileSystems

    found = []
    for result in FileSystems.match(patterns):
        found.extend(m.path for m in result.metadata_list)
    return sorted(found)


def day_range(first: str, last: str) -> list[str]:
    """The UTC days from first to last inclusive (YYYY-MM-DD); ValueError when last is before first."""
    start, end = dt.date.fromisoformat(first), dt.date.fromisoformat(last)
    if end < start:
        raise InvalidSettings(f"--to-day {last} is before --from-day {first}")
    return [(start + dt.timedelta(days=d)).isoformat() for d in range((end - start).days + 1)]


def utc_day(ms: int) -> str:
    """The UTC day of an epoch-ms instant, YYYY-MM-DD (archive folders and day ranges are UTC)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).date().isoformat()


def count_of(label: str, pcoll):
    """The element count of a PCollection as a singleton side input."""
    import apache_beam as beam

    return beam.pvalue.AsSingleton(pcoll | f"Count{label}" >> beam.combiners.Count.Globally())


def add_served_log_arguments(parser) -> None:
    """The flags of a pipeline over the served log: the archive and a range of days, or files."""
    parser.add_argument("--archive", help="the archiver's root (a folder or file system URI)")
    parser.add_argument("--from-day", help="first UTC day of served records, YYYY-MM-DD (with --archive)")
    parser.add_argument("--to-day", help="last UTC day, inclusive (default: --from-day)")
    parser.add_argument("--served", action="append", default=[],
                        help="instead of --archive: Avro files (glob) of served records; repeatable")
    parser.add_argument("--served-topic", default=topics.AD_SERVED, help="archive folder of the served log")


def served_log_files(parser, known) -> tuple[list[str], list[str]]:
    """(days, served files) from add_served_log_arguments' flags: the archive's files of the days asked, or
    the files given (days then only label the output); a usage error through the parser otherwise."""
    if known.archive:
        if not known.from_day:
            parser.error("--archive needs --from-day")
        days = day_range(known.from_day, known.to_day or known.from_day)
        return days, matching_files([archive_pattern(known.archive, known.served_topic, d) for d in days])
    if not known.served:
        parser.error("give --archive with --from-day, or --served files")
    return [known.from_day or "", known.to_day or known.from_day or ""], matching_files(known.served)


def of_days(records, days: list[str]):
    """The records whose event time falls on one of the UTC days (archive files hold whole UTC hours)."""
    import apache_beam as beam

    wanted = set(days)
    return records | "InRange" >> beam.Filter(lambda r: utc_day(int(r["event_time"])) in wanted)


def output_folder(output: str) -> str:
    """The output location without a trailing slash, created when it is a local folder."""
    from pathlib import Path

    out = output.rstrip("/")
    if "://" not in out:
        Path(out).mkdir(parents=True, exist_ok=True)
    return out
