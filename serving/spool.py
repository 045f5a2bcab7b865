"""The tracker's local append-only spool: every accepted beacon is written here before the tracker answers, and
sent to Kafka from here; a record is done only when the broker acknowledges it (a delivery report without an
error). The format and the bookkeeping are core.spool's; this module does the files and the producer.

Durability: an append is one write(2) of the whole frame to the open segment before the tracker answers, so a
process crash (SIGKILL, an OOM kill) loses no answered beacon: the kernel holds the bytes. Segments are fsynced
every `fsync_interval_ms` (200 ms by default) in a worker thread, and at each segment change; a machine crash
(power loss, kernel panic) can lose the beacons answered in the last interval. `fsync_interval_ms=0` fsyncs
every append before the answer instead (no loss on a machine crash, a disk flush per beacon). Acknowledgements
are written without an fsync: one lost on a crash only sends its record again.

After a restart every record without an acknowledgement is sent again, lowest sequence first, with the same
bytes (its event id is inside the Avro value) and the same Kafka timestamp; the click aggregator keeps the
first of every (impression id, event type), so a record the broker took just before the crash is not billed
twice. A record the broker refuses (it is down: the delivery times out) is sent again after `retry_backoff_s`,
for as long as it takes. The spool never drops an accepted record: when it holds `max_bytes`, `append` raises
SpoolFull and the tracker answers 503.

One process owns a spool folder at a time (an exclusive lock on `spool.lock`): a second one refuses to start."""
from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from core.errors import InvalidSettings
from core.spool import (SpoolFull, SpoolLedger, SpoolRecord, acks_name, decode_acks, decode_frame, encode_acks,
                        encode_record, scan_segment, segment_first_sequence, segment_name)

LOG = logging.getLogger("adserve.spool")
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_FSYNC_INTERVAL_MS = 200
LOCK_NAME = "spool.lock"
ROUND_RECORDS = 1_000  # records one round hands to the producer: the event loop is never held long
LOG_EVERY_S = 10.0  # failed deliveries are logged as one line at most this often

__all__ = ["DEFAULT_FSYNC_INTERVAL_MS", "DEFAULT_MAX_BYTES", "Spool", "SpoolFull", "SpoolLocked", "SpoolSender",
           "SpoolSettings", "default_spool_dir"]


class SpoolLocked(InvalidSettings):
    """Another process holds the spool folder: two trackers must never share one."""

    def __init__(self, directory: Path) -> None:
        super().__init__(f"the spool folder {directory} is held by another tracker: give this one its own "
                         f"--spool-dir")


@dataclass(frozen=True)
class SpoolSettings:
    """Where the spool lives, its bound and its fsync policy."""

    directory: Path
    max_bytes: int = DEFAULT_MAX_BYTES
    fsync_interval_ms: int = DEFAULT_FSYNC_INTERVAL_MS

    def __post_init__(self) -> None:
        if self.max_bytes < 64 * 1024:
            raise InvalidSettings(f"--spool-max-bytes must be at least 65536, got {self.max_bytes}")
        if self.fsync_interval_ms < 0:
            raise InvalidSettings(f"--spool-fsync-ms must be 0 or more, got {self.fsync_interval_ms}")


def default_spool_dir(environ: Mapping[str, str], port: int) -> Path:
    """The platform's state folder (`$ADSERVE_HOME/state/tracker-spool/port-<port>`), or the temp folder's when
    ADSERVE_HOME is not set: one folder per port, so trackers on one machine never share one."""
    home = environ.get("ADSERVE_HOME")
    root = Path(home) / "state" if home else Path(tempfile.gettempdir())
    return root / "tracker-spool" / f"port-{port}"


class Spool:
    """The folder: appends to the open segment, reads pending records back, writes acknowledgements and deletes
    segments the broker has taken in full. Opening it restores what a previous process left."""

    def __init__(self, settings: SpoolSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings, self.clock = settings, clock
        self.directory = settings.directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise SpoolLocked(self.directory) from None
        self.ledger = SpoolLedger(settings.max_bytes)
        self._write_fd: int | None = None
        self._read_fds: dict[int, int] = {}
        self._dirty = False  # appended since the last fsync
        self._write_failed = False  # the last append failed: the next one opens a new segment
        self.restored = self.torn_bytes = 0
        self._restore()

    # Opening ----------------------------------------------------------------------------------------------------
    def _restore(self) -> None:
        firsts = sorted(first for first in (segment_first_sequence(p.name) for p in self.directory.iterdir())
                        if first is not None)
        for first in firsts:
            path = self.directory / segment_name(first)
            scan = scan_segment(path.read_bytes())
            if scan.torn_bytes:
                LOG.warning("spool segment %s ends in %d bytes that are not a whole record (a write cut short by a "
                            "crash): cut off, the %d records before them kept", path.name, scan.torn_bytes,
                            len(scan.records))
                self.torn_bytes += scan.torn_bytes
                os.truncate(path, scan.valid_bytes)
            acks_path = self.directory / acks_name(first)
            acknowledged = decode_acks(acks_path.read_bytes()) if acks_path.exists() else set()
            before = self.ledger.pending_count
            self.ledger.restored_segment(first, scan.records, acknowledged, scan.valid_bytes)
            self.restored += self.ledger.pending_count - before
        self._remove_done_segments()
        if self.restored:
            LOG.warning("spool %s: %d records the broker never acknowledged, to be sent again", self.directory,
                        self.restored)

    # Appending --------------------------------------------------------------------------------------------------
    def append(self, topic: str, key: bytes, value: bytes, timestamp_ms: int | None = None) -> int:
        """Write one record (flushed to the OS, fsynced too when fsync_interval_ms is 0) and queue it to send;
        its sequence. SpoolFull when it does not fit in the bound; OSError when the disk refuses it (nothing of
        it is then kept)."""
        if timestamp_ms is None:
            timestamp_ms = int(self.clock() * 1000)
        frame = encode_record(SpoolRecord(self.ledger.next_sequence, timestamp_ms, topic, key, value))
        self.ledger.check_room(len(frame))
        if self._write_fd is None or self._write_failed or self.ledger.needs_new_segment():
            self._open_segment()
        assert self._write_fd is not None
        size_before = os.fstat(self._write_fd).st_size
        try:
            _write_all(self._write_fd, frame)
            if self.settings.fsync_interval_ms == 0:
                os.fsync(self._write_fd)
        except OSError:
            # A half-written frame would hide the ones after it: cut it off, and append to a new segment next.
            _truncate_quietly(self._write_fd, size_before)
            self._write_failed = True
            raise
        self._dirty = True
        return self.ledger.appended(len(frame))

    def _open_segment(self) -> None:
        self._close_write_segment()
        first = self.ledger.opened_segment()
        self._write_fd = os.open(self.directory / segment_name(first), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _fsync_directory(self.directory)

    def _close_write_segment(self) -> None:
        if self._write_fd is not None:
            fd, self._write_fd = self._write_fd, None
            self._dirty = self._write_failed = False
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    # Sending and acknowledging ----------------------------------------------------------------------------------
    def read(self, sequence: int) -> SpoolRecord:
        """A pending record as it was appended."""
        location = self.ledger.locations[sequence]
        fd = self._read_fds.get(location.segment)
        if fd is None:
            fd = self._read_fds[location.segment] = os.open(self.directory / segment_name(location.segment),
                                                            os.O_RDONLY)
        return decode_frame(os.pread(fd, location.frame_bytes, location.offset))

    def acknowledge(self, sequences: Iterable[int]) -> int:
        """The broker took these records: written to their segments' acks files, and every segment taken in full
        (and closed) deleted; how many were pending."""
        by_segment: dict[int, list[int]] = {}
        for sequence in sequences:
            segment = self.ledger.acknowledged(sequence)
            if segment is not None:
                by_segment.setdefault(segment, []).append(sequence)
        for segment, acked in by_segment.items():
            fd = os.open(self.directory / acks_name(segment), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                _write_all(fd, encode_acks(acked))
            finally:
                os.close(fd)
        if by_segment:
            self._remove_done_segments()
        return sum(len(acked) for acked in by_segment.values())

    def _remove_done_segments(self) -> None:
        for first in self.ledger.removable():
            fd = self._read_fds.pop(first, None)
            if fd is not None:
                os.close(fd)
            (self.directory / segment_name(first)).unlink(missing_ok=True)
            (self.directory / acks_name(first)).unlink(missing_ok=True)
            self.ledger.removed(first)

    # Durability and closing -------------------------------------------------------------------------------------
    def fsync_handle(self) -> int | None:
        """A duplicate of the open segment's descriptor when something was appended since the last fsync (the
        caller fsyncs and closes it, off the event loop); None when nothing waits."""
        if not self._dirty or self._write_fd is None:
            return None
        self._dirty = False
        return os.dup(self._write_fd)

    def close(self) -> None:
        """Close the open segment (deleted if the broker took all of it) and release the folder."""
        self._close_write_segment()
        self.ledger.close_open_segment()
        self._remove_done_segments()
        for fd in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()
        os.close(self._lock_fd)

    @property
    def spool_bytes(self) -> int:
        return self.ledger.total_bytes

    @property
    def pending(self) -> int:
        return self.ledger.pending_count


class SpoolSender:
    """Sends the spool's records to Kafka and marks them done on the broker's acknowledgement.

    Runs on the tracker's event loop (the producer's callbacks are served there, so nothing is shared across
    threads): each round serves delivery reports, writes acknowledgements, and hands queued records to the
    producer, at most `max_in_flight` at a time. A failed delivery queues its record again, sent after
    `retry_backoff_s`. A fatal producer error (the idempotent producer lost its sequence) replaces the producer
    and queues everything it held again."""

    def __init__(self, spool: Spool, make_producer: Callable[[], Any], *, max_in_flight: int = 10_000,
                 retry_backoff_s: float = 1.0, on_resent: Callable[[int], None] = lambda n: None,
                 on_failed: Callable[[int], None] = lambda n: None, clock: Callable[[], float] = time.monotonic):
        self.spool, self.make_producer = spool, make_producer
        self.max_in_flight, self.retry_backoff_s, self.clock = max_in_flight, retry_backoff_s, clock
        self.on_resent, self.on_failed = on_resent, on_failed
        self.generation = 0
        self.producer = self._new_producer()
        self._tried: set[int] = set(spool.ledger.locations)  # restored records may have reached the broker
        self._acked: list[int] = []
        self._failed_since_log = 0
        self._last_error: Any = None
        self._next_log = 0.0
        self._fatal: Any = None
        self._resume_at = 0.0
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self.closed = False
        self.resent = 0

    def _new_producer(self) -> Any:
        generation = self.generation

        def on_error(error) -> None:
            if error.fatal() and generation == self.generation:
                self._fatal = error

        return self.make_producer(on_error)

    # One round --------------------------------------------------------------------------------------------------
    def pump(self) -> None:
        """Serve delivery reports, record acknowledgements, and send what is queued (unless backing off)."""
        self.producer.poll(0)
        if self._fatal is not None:
            self._replace_producer()
        if self._acked:
            acked, self._acked = self._acked, []
            self.spool.acknowledge(acked)
        if self._failed_since_log and self.clock() >= self._next_log:
            LOG.warning("%d records not delivered (last: %s): kept in the spool, sent again every %.0f s until the "
                        "broker takes them", self._failed_since_log, self._last_error, self.retry_backoff_s)
            self._failed_since_log = 0
            self._next_log = self.clock() + LOG_EVERY_S
        if self.clock() < self._resume_at:
            return
        ledger = self.spool.ledger
        for sequence in ledger.take(min(ROUND_RECORDS, self.max_in_flight - len(ledger.in_flight))):
            if not self._send(sequence):
                ledger.failed(sequence)
                break
        self.producer.poll(0)

    def more_to_send(self) -> bool:
        """Whether records wait that the next round could send now (so the loop should not sleep)."""
        ledger = self.spool.ledger
        return bool(ledger.queued_count) and len(ledger.in_flight) < self.max_in_flight \
            and self.clock() >= self._resume_at

    def _send(self, sequence: int) -> bool:
        try:
            record = self.spool.read(sequence)
            generation = self.generation
            self.producer.produce(record.topic, key=record.key, value=record.value, timestamp=record.timestamp_ms,
                                  on_delivery=lambda err, msg: self._delivered(sequence, generation, err))
        except BufferError:  # the producer's queue is full: the rest waits for the next round
            return False
        except Exception as exc:  # noqa: BLE001 - the record stays queued; counted and logged, sent again later
            self._last_error = exc
            self._failed_since_log += 1
            self._resume_at = self.clock() + self.retry_backoff_s
            return False
        if sequence in self._tried:
            self.resent += 1
            self.on_resent(1)
        self._tried.add(sequence)
        return True

    def _delivered(self, sequence: int, generation: int, err: Any) -> None:
        if err is None:  # acknowledged, even by a producer since replaced: the record is in Kafka
            self._acked.append(sequence)
            self._tried.discard(sequence)
            return
        if generation == self.generation and self.spool.ledger.failed(sequence):
            self.on_failed(1)
            self._last_error = err
            self._failed_since_log += 1
            self._resume_at = self.clock() + self.retry_backoff_s

    def _replace_producer(self) -> None:
        LOG.warning("the spool's producer failed fatally (%s): a new one sends its records again", self._fatal)
        self._fatal = None
        self.generation += 1
        old = self.producer
        self.producer = self._new_producer()
        self.spool.ledger.all_in_flight_failed()
        try:
            old.purge()
        except Exception:  # noqa: BLE001 - a fatally failed producer may refuse even this; it is dropped anyway
            LOG.debug("could not purge the failed producer", exc_info=True)

    # On the event loop ------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def wake(self) -> None:
        """A record was appended: send it now rather than at the next round."""
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        interval_s = self.spool.settings.fsync_interval_ms / 1000
        next_fsync = self.clock() + interval_s
        while True:
            try:
                self.pump()
            except OSError:  # the disk refused an acknowledgement: those records are sent again, nothing lost
                LOG.exception("the spool could not record acknowledgements")
            if interval_s and self.clock() >= next_fsync:
                next_fsync = self.clock() + interval_s
                handle = self.spool.fsync_handle()
                if handle is not None:
                    await loop.run_in_executor(None, _fsync_and_close, handle)
            self._wake.clear()
            if self.more_to_send():
                await asyncio.sleep(0)  # a backlog (after an outage or a restart): the next round at once
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=0.05)
            except asyncio.TimeoutError:
                pass

    def flush(self, timeout_s: float = 10.0) -> int:
        """Send until nothing is pending or `timeout_s` passed (blocking); the records still pending."""
        if self.closed:
            return self.spool.pending
        deadline = time.monotonic() + timeout_s
        while self.spool.pending and time.monotonic() < deadline:
            self.pump()
            self.producer.poll(0.05)
        self.pump()
        return self.spool.pending

    def close(self, timeout_s: float = 10.0) -> int:
        """Send what it can within `timeout_s`, then stop and close the spool: what is still pending stays on disk
        for the next start. The records left."""
        if self.closed:
            return self.spool.pending
        if self._task is not None:
            self._task.cancel()
        left = self.flush(timeout_s)
        self.closed = True
        self.spool.close()
        if left:
            LOG.warning("the tracker stops with %d records not acknowledged: kept in %s for its next start", left,
                        self.spool.directory)
        return left


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _truncate_quietly(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        LOG.exception("could not cut a failed append off the spool (the next start cuts it)")


def _fsync_and_close(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
