"""Avro encoding of every Kafka record, framed with the writer schema's identity.

Wire format (Avro's single-object encoding): two marker bytes 0xC3 0x01, the
8-byte CRC-64-AVRO fingerprint of the writer schema's canonical form, then the
Avro binary body. A reader looks the fingerprint up in its registry and
resolves the writer schema against its own reader schema, so a reader decodes
records written with an older or a newer version of a contract as long as
the registry knows that version (fields added with defaults evolve both ways).

Pure: no I/O beyond loading .avsc files when a registry is built."""
from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import fastavro
from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

from core.errors import CorruptRecord, SchemaMismatch
from schemas import HISTORY_DIR, SCHEMA_DIR

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8

Record = dict[str, Any]


def schema_fingerprint(schema: Mapping[str, Any] | str) -> bytes:
    """The 8-byte CRC-64-AVRO fingerprint (little-endian, as the Avro spec frames it)."""
    parsed = parse_schema(schema, _write_hint=False) if not isinstance(schema, str) else schema
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))


def plain_timestamps(schema: Any) -> Any:
    """A copy of a schema with timestamp logical types dropped, so times stay int milliseconds.

    Event time is int epoch milliseconds everywhere in the project (Flink's
    timestamps are too); the logical type stays in the .avsc for other tools.
    It is not part of the canonical form, so the fingerprint is unchanged."""
    if isinstance(schema, dict):
        if schema.get("logicalType") in ("timestamp-millis", "timestamp-micros") and schema.get("type") == "long":
            return "long"
        return {k: plain_timestamps(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [plain_timestamps(v) for v in schema]
    return schema


@dataclass
class SchemaRegistry:
    """Known writer schemas by fingerprint, and the current schema of each record type."""

    by_fingerprint: dict[bytes, Any] = field(default_factory=dict)
    current: dict[str, Any] = field(default_factory=dict)  # full name -> parsed current schema

    @classmethod
    def from_directory(cls, directory: Path = SCHEMA_DIR, history: Path = HISTORY_DIR) -> "SchemaRegistry":
        """Current schemas from `directory`, older versions from `history`."""
        registry = cls()
        for path in sorted(directory.glob("*.avsc")):
            registry.register(json.loads(path.read_text()), current=True)
        if history.is_dir():
            for path in sorted(history.glob("*.avsc")):
                registry.register(json.loads(path.read_text()), current=False)
        return registry

    def register(self, schema: Mapping[str, Any], *, current: bool = False) -> bytes:
        parsed = parse_schema(plain_timestamps(schema), named_schemas={})
        fp = schema_fingerprint(parsed)
        self.by_fingerprint[fp] = parsed
        if current:
            self.current[parsed["name"]] = parsed
        return fp

    def schema(self, name: str) -> Any:
        """The current schema of a record type by full name (io.adserve.events.AdEvent) or short name."""
        if name in self.current:
            return self.current[name]
        matches = [s for full, s in self.current.items() if full.rsplit(".", 1)[-1] == name]
        if len(matches) != 1:
            raise SchemaMismatch(f"unknown record type {name!r}; known: {sorted(self.current)}")
        return matches[0]


class AvroCodec:
    """Encodes records with their writer schema's fingerprint and decodes them against a reader schema."""

    def __init__(self, registry: SchemaRegistry | None = None):
        self.registry = registry or default_registry()
        self._fingerprints: dict[int, bytes] = {}

    def _fingerprint_of(self, schema: Any) -> bytes:
        key = id(schema)
        fp = self._fingerprints.get(key)
        if fp is None:
            fp = schema_fingerprint(schema)
            self._fingerprints[key] = fp
        return fp

    def encode(self, record_type: str | Any, record: Mapping[str, Any]) -> bytes:
        """Frame and encode one record with a record type's current schema (or a given parsed schema)."""
        schema = self.registry.schema(record_type) if isinstance(record_type, str) else record_type
        out = io.BytesIO()
        out.write(MAGIC)
        out.write(self._fingerprint_of(schema))
        try:
            fastavro.schemaless_writer(out, schema, record)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:  # an int past a long
            raise SchemaMismatch(f"record does not fit {schema.get('name')}: {exc}") from exc
        return out.getvalue()

    def decode(self, data: bytes | None, reader: str | Any | None = None, *, topic: str | None = None,
               partition: int | None = None, offset: int | None = None) -> Record:
        """Decode one framed record; reader is a record type name or parsed schema (default: the writer's).

        Raises CorruptRecord naming topic, partition and offset for anything that is not a valid record."""
        where = {"topic": topic, "partition": partition, "offset": offset}
        if data is None:
            raise CorruptRecord("empty value (null record)", **where)
        if len(data) < HEADER_LEN or data[:2] != MAGIC:
            raise CorruptRecord(f"not an adserve Avro record (missing the C3 01 marker; {len(data)} bytes)", **where)
        fp = bytes(data[2:HEADER_LEN])
        writer = self.registry.by_fingerprint.get(fp)
        if writer is None:
            raise CorruptRecord(f"unknown writer schema fingerprint {fp.hex()} (a schema this reader has never seen)",
                                **where)
        reader_schema = None
        if reader is not None:
            reader_schema = self.registry.schema(reader) if isinstance(reader, str) else reader
            if reader_schema is writer:
                reader_schema = None
        buf = io.BytesIO(data[HEADER_LEN:])
        try:
            record = fastavro.schemaless_reader(buf, writer, reader_schema)
        except Exception as exc:  # noqa: BLE001 - fastavro raises many types for bad bytes; all mean corrupt
            raise CorruptRecord(f"{type(exc).__name__}: {exc}", **where) from exc
        if buf.tell() != len(data) - HEADER_LEN:
            raise CorruptRecord(f"{len(data) - HEADER_LEN - buf.tell()} trailing bytes after the record", **where)
        return record  # type: ignore[return-value]


_DEFAULT: SchemaRegistry | None = None


def default_registry() -> SchemaRegistry:
    """The registry of this checkout's schemas (loaded once per process)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = SchemaRegistry.from_directory()
    return _DEFAULT
