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
