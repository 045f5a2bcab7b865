"""The tracker's spool on paper: how a record is framed on disk, how a segment is read back (a torn tail found
and cut off), and the ledger of which records wait for the broker's acknowledgement. Pure: bytes in, bytes and
decisions out; serving.spool does the files and the Kafka producer.

A spool is a folder of segments `<first sequence>.log`, each beside `<first sequence>.acks`. A segment holds
frames, one per accepted beacon:

    magic b"SP" | payload length (u32) | CRC-32 of the payload (u32) | payload
    payload: sequence (u64) | timestamp ms (u64) | topic length (u16) | topic (UTF-8) | key length (u32) | key
             | value

all big-endian. Its acks file holds the 8-byte sequences the broker acknowledged (a torn last one is ignored).
A segment is deleted once it is closed (a newer one took the appends) and every record in it was acknowledged,
so the spool's size is what still waits, plus at most one open segment's worth of sent records. Reading a
segment stops at the first frame that is cut short, fails its CRC or lacks the magic (what a crash mid-write
leaves): the frames before it are kept, the rest is counted as torn bytes and cut off.

The bound: a record is accepted only while the spool's bytes plus its frame stay within `max_bytes`; once
accepted it is never dropped, so a full spool refuses new beacons and keeps every old one."""
from __future__ import annotations

import heapq
import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterable

from core.errors import CapacityExceeded, CorruptRecord, InvalidArgument

MAGIC = b"SP"
HEADER = struct.Struct(">2sII")  # magic, payload length, CRC-32
SEQUENCE = struct.Struct(">Q")
TOPIC_LENGTH = struct.Struct(">H")
KEY_LENGTH = struct.Struct(">I")
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024  # a larger length field is a torn or garbage header, not a beacon
SEGMENT_SUFFIX, ACKS_SUFFIX = ".log", ".acks"


class SpoolFull(CapacityExceeded):
    """The spool holds its maximum bytes: the beacon is refused (503) and every accepted one is kept."""

    def __init__(self, spool_bytes: int, max_bytes: int) -> None:
        super().__init__(f"the tracker's spool holds {spool_bytes:,} of its {max_bytes:,} bytes: the broker has "
                         f"not acknowledged enough records to take this one")


@dataclass(frozen=True)
class SpoolRecord:
    """One accepted beacon as it goes to Kafka: the value is the Avro record with its event id inside, the
    timestamp the Kafka record's (when the tracker accepted it), so a resend carries the same bytes and time."""

    sequence: int
    timestamp_ms: int
    topic: str
    key: bytes
    value: bytes


def encode_record(record: SpoolRecord) -> bytes:
    """The record's frame (header and payload)."""
    topic = record.topic.encode()
    payload = b"".join((SEQUENCE.pack(record.sequence), SEQUENCE.pack(record.timestamp_ms),
                        TOPIC_LENGTH.pack(len(topic)), topic, KEY_LENGTH.pack(len(record.key)), record.key, record.value))
    return HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def decode_payload(payload: bytes) -> SpoolRecord:
    """The record inside a frame's payload (CorruptRecord if the payload's own lengths do not fit)."""
    try:
        (sequence,) = SEQUENCE.unpack_from(payload, 0)
        (timestamp_ms,) = SEQUENCE.unpack_from(payload, SEQUENCE.size)
        at = 2 * SEQUENCE.size
        (topic_length,) = TOPIC_LENGTH.unpack_from(payload, at)
        at += TOPIC_LENGTH.size
        topic = payload[at:at + topic_length].decode()
        at += topic_length
        (key_length,) = KEY_LENGTH.unpack_from(payload, at)
        at += KEY_LENGTH.size
        if at + key_length > len(payload) or len(topic) == 0:
            raise CorruptRecord("a spool record's key runs past its frame")
        return SpoolRecord(sequence, timestamp_ms, topic, payload[at:at + key_length], payload[at + key_length:])
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecord(f"a spool record does not decode: {exc}") from None


def decode_frame(frame: bytes) -> SpoolRecord:
    """The record of one whole frame, as encode_record wrote it (CorruptRecord otherwise)."""
    scan = scan_segment(frame)
    if len(scan.records) != 1 or scan.torn_bytes:
        raise CorruptRecord("not one whole spool frame")
    return scan.records[0].record


@dataclass(frozen=True)
class FramedRecord:
    """A record read from a segment, with where its frame lies there."""

    record: SpoolRecord
    offset: int
    frame_bytes: int


@dataclass(frozen=True)
class SegmentScan:
    """A segment read back: its whole frames in order, the bytes they fill, and the bytes after them that do not
    form a frame (a write cut short by a crash)."""

    records: tuple[FramedRecord, ...]
    valid_bytes: int
    torn_bytes: int


def scan_segment(data: bytes) -> SegmentScan:
    """Every whole frame from the start of `data`, up to the first that is cut short or corrupt."""
    records: list[FramedRecord] = []
    at = 0
    while at + HEADER.size <= len(data):
        magic, length, crc = HEADER.unpack_from(data, at)
        end = at + HEADER.size + length
        if magic != MAGIC or length > MAX_PAYLOAD_BYTES or end > len(data):
            break
        payload = data[at + HEADER.size:end]
        if zlib.crc32(payload) != crc:
            break
        try:
            record = decode_payload(payload)
        except CorruptRecord:
            break
        records.append(FramedRecord(record, at, end - at))
        at = end
    return SegmentScan(tuple(records), at, len(data) - at)


def encode_acks(sequences: Iterable[int]) -> bytes:
    return b"".join(SEQUENCE.pack(s) for s in sequences)


def decode_acks(data: bytes) -> set[int]:
    """The acknowledged sequences of an acks file; a torn last entry is ignored (its record is sent again)."""
    whole = len(data) - len(data) % SEQUENCE.size
    return {SEQUENCE.unpack_from(data, at)[0] for at in range(0, whole, SEQUENCE.size)}


def segment_name(first_sequence: int) -> str:
    return f"{first_sequence:020d}{SEGMENT_SUFFIX}"


def acks_name(first_sequence: int) -> str:
    return f"{first_sequence:020d}{ACKS_SUFFIX}"


def segment_first_sequence(name: str) -> int | None:
    """The first sequence a segment's file name carries, or None for any other file."""
    stem, dot, suffix = name.partition(".")
    if "." + suffix != SEGMENT_SUFFIX or not stem.isdigit() or not dot:
        return None
    return int(stem)


def segment_bytes_for(max_bytes: int) -> int:
    """A segment's size: a sixteenth of the bound (so an acknowledged segment frees a small share of it), between
    64 KiB and 8 MiB."""
    return min(8 * 1024 * 1024, max(64 * 1024, max_bytes // 16))


@dataclass
class _Segment:
    size_bytes: int
    pending: set[int] = field(default_factory=set)
    closed: bool = False


@dataclass(frozen=True)
class Location:
    """Where a pending record's frame lies: its segment (by first sequence), offset and length."""

    segment: int
    offset: int
    frame_bytes: int


class SpoolLedger:
    """What the spool holds and what waits: segments and their sizes, each pending record's location, and the
    send queue (records to send, lowest sequence first; records sent and not yet acknowledged).

    A record moves: appended (queued) -> taken to send (in flight) -> acknowledged (done), or failed (queued
    again, sent again with the same bytes). Acknowledging a record twice, or one no longer pending, changes
    nothing: a resend's late acknowledgement is harmless."""

    def __init__(self, max_bytes: int, segment_bytes: int | None = None) -> None:
        if max_bytes <= 0:
            raise InvalidArgument(f"max_bytes must be positive, got {max_bytes}")
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or segment_bytes_for(max_bytes)
        self.segments: dict[int, _Segment] = {}
        self._firsts: list[int] = []  # segment first sequences, ascending
        self.locations: dict[int, Location] = {}
        self._queued: list[int] = []  # a heap of sequences to send
        self._is_queued: set[int] = set()
        self.in_flight: set[int] = set()
        self.next_sequence = 0

    # What the spool holds ---------------------------------------------------------------------------------------
    @property
    def total_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments.values())

    @property
    def pending_count(self) -> int:
        return len(self.locations)

    @property
    def open_segment(self) -> int | None:
        """The segment appends go to, if one is open."""
        if self._firsts and not self.segments[self._firsts[-1]].closed:
            return self._firsts[-1]
        return None

    def check_room(self, frame_bytes: int) -> None:
        """SpoolFull unless a frame of this size fits within the bound."""
        spool_bytes = self.total_bytes
        if spool_bytes + frame_bytes > self.max_bytes:
            raise SpoolFull(spool_bytes, self.max_bytes)

    def needs_new_segment(self) -> bool:
        """Whether the next append opens a segment: none is open, or the open one reached its size."""
        current = self.open_segment
        return current is None or self.segments[current].size_bytes >= self.segment_bytes

    # Changes ----------------------------------------------------------------------------------------------------
    def restored_segment(self, first_sequence: int, records: Iterable[FramedRecord], acknowledged: set[int],
                         size_bytes: int) -> None:
        """A closed segment found on disk at start: its unacknowledged records queued in sequence order."""
        if self._firsts and first_sequence <= self._firsts[-1]:
            raise InvalidArgument("segments are restored in ascending order of their first sequence")
        segment = _Segment(size_bytes, closed=True)
        self.segments[first_sequence] = segment
        self._firsts.append(first_sequence)
        for framed in records:
            sequence = framed.record.sequence
            self.next_sequence = max(self.next_sequence, sequence + 1)
            if sequence not in acknowledged:
                segment.pending.add(sequence)
                self.locations[sequence] = Location(first_sequence, framed.offset, framed.frame_bytes)
                self._queue(sequence)
        self.next_sequence = max(self.next_sequence, first_sequence)

    def opened_segment(self) -> int:
        """Close the open segment (if any) and open one starting at the next sequence; its first sequence. An
        open segment still empty (its first append failed) is kept open instead: it already starts there."""
        current = self.open_segment
        if current is not None and current == self.next_sequence and self.segments[current].size_bytes == 0:
            return current
        if current is not None:
            self.segments[current].closed = True
        first = self.next_sequence
        self.segments[first] = _Segment(0)
        self._firsts.append(first)
        return first

    def close_open_segment(self) -> None:
        current = self.open_segment
        if current is not None:
            self.segments[current].closed = True

    def appended(self, frame_bytes: int) -> int:
        """A frame of this size was written to the open segment: its sequence, queued to send."""
        current = self.open_segment
        if current is None:
            raise InvalidArgument("no open segment to append to")
        sequence = self.next_sequence
        self.next_sequence += 1
        segment = self.segments[current]
        self.locations[sequence] = Location(current, segment.size_bytes, frame_bytes)
        segment.size_bytes += frame_bytes
        segment.pending.add(sequence)
        self._queue(sequence)
        return sequence

    def take(self, limit: int) -> list[int]:
        """Up to `limit` queued sequences, lowest first, now in flight."""
        taken = []
        while self._queued and len(taken) < limit:
            sequence = heapq.heappop(self._queued)
            self._is_queued.discard(sequence)
            if sequence in self.locations:
                self.in_flight.add(sequence)
                taken.append(sequence)
        return taken

    def failed(self, sequence: int) -> bool:
        """The broker did not take an in-flight record: queued again; False if it was not in flight."""
        if sequence not in self.in_flight:
            return False
        self.in_flight.discard(sequence)
        self._queue(sequence)
        return True

    def all_in_flight_failed(self) -> int:
        """Every in-flight record queued again (its producer is gone); how many."""
        count = len(self.in_flight)
        for sequence in list(self.in_flight):
            self.failed(sequence)
        return count

    def acknowledged(self, sequence: int) -> int | None:
        """The broker took the record: no longer pending; the first sequence of its segment, or None if the
        record was not pending (already acknowledged)."""
        location = self.locations.pop(sequence, None)
        self.in_flight.discard(sequence)
        if location is None:
            return None
        self.segments[location.segment].pending.discard(sequence)
        return location.segment

    def removable(self) -> list[int]:
        """Segments closed with nothing pending: their files can go."""
        return [first for first in self._firsts if self.segments[first].closed and not self.segments[first].pending]

    def removed(self, first_sequence: int) -> None:
        segment = self.segments.pop(first_sequence)
        if segment.pending:
            raise InvalidArgument(f"segment {first_sequence} still holds {len(segment.pending)} pending records")
        self._firsts.remove(first_sequence)

    def _queue(self, sequence: int) -> None:
        if sequence not in self._is_queued:
            self._is_queued.add(sequence)
            heapq.heappush(self._queued, sequence)

    @property
    def queued_count(self) -> int:
        return len(self._is_queued)
