"""One request's served records in the archive's ad.served files (a local folder or any Beam file system),
for `adserve explain --archive`: envelopes with another key are skipped undecoded.

It owns reading those files for one request; finding the impression among the records is
streams.served_lookup's, and it never writes to the archive."""
from __future__ import annotations

import glob
from pathlib import Path
from typing import Any, BinaryIO, Generator, Mapping

from core.errors import CorruptRecord
from pipelines.avro_files import archive_pattern, is_envelope, matching_files, unwrap
from schemas import topics
from streams.served_lookup import ServedLogUnavailable


def archive_files(archive: str, topic: str, days: list[str]) -> list[str]:
    """The archived files of the topic on those UTC days (every day when none is given), sorted."""
    patterns = [archive_pattern(archive, topic, day) for day in (days or ["*"])]
    if "://" in archive:
        return matching_files(patterns)
    if not Path(archive).is_dir():
        raise ServedLogUnavailable(f"no archive folder {archive}")
    return sorted(path for pattern in patterns for path in glob.glob(pattern))


def _open(path: str) -> BinaryIO:
    if "://" in path:
        from apache_beam.io.filesystems import FileSystems

        return FileSystems.open(path)
    return open(path, "rb")


def archived_records(archive: str, request_id: str, *, topic: str = topics.AD_SERVED,
                     days: list[str] | None = None) -> Generator[Mapping[str, Any], None, None]:
    """The archived served records of one request (envelopes with another key are skipped undecoded)."""
    import fastavro

    from schemas.codec import AvroCodec

    codec, key = AvroCodec(), request_id.encode()
    for path in archive_files(archive, topic, days or []):
        with _open(path) as stream:
            for row in fastavro.reader(stream):
                if is_envelope(row) and row.get("k") is not None and bytes(row["k"]) != key:
                    continue
                try:
                    yield unwrap(row, codec)
                except CorruptRecord:
                    continue  # another request's corrupt value cannot hold this impression
