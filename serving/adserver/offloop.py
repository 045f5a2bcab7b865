"""The ad server's Kafka output, off the event loop: spend reports and the served log.

The event loop answers requests and nothing else. What goes to Kafka is handed
to a thread through a bounded queue, and the thread does the encoding, the
producing and the broker's callbacks:

- `SpendReporter`: once a second the loop takes the interval's raw spend from
  the accumulator (constant time) and queues it; the thread turns it into
  columns, one SpendReport per budget.spend partition (core.spend.batch_records;
  an empty one is that partition's heartbeat), and keeps a record pending until
  the broker acknowledges it. A record that failed (the broker was unavailable
  past the producer's timeout) is produced again, at most once a second, with the
  same (server id, sequence), so the budget job counts it once. When the queue
  is full the loop leaves the spend in the accumulator: the next interval is
  longer, nothing is lost.
- `ServedLog`: ad.served records, queued as dicts and encoded and produced by
  the thread. `backlog()` is what the admission check reads: a server whose
  log falls behind refuses new requests with a 503 instead of dropping records.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable

from confluent_kafka import KafkaException

from core.spend import Partitioner, SpendAccumulator, SpendTake, batch_records, heartbeat_record
from schemas import topics
from schemas.codec import AvroCodec
from streams import kafka

LOG = logging.getLogger("adserve.adserver")
RESEND_EVERY_S = 1.0
SPEND_REPORT, SERVED_RECORD = (topics.record_type(topic) for topic in (topics.BUDGET_SPEND, topics.AD_SERVED))


class SpendReporter:
    """Spend reports to budget.spend from a thread of their own (see the module's docstring)."""

    def __init__(self, accumulator: SpendAccumulator, bootstrap: str | None = None,
                 lease_ids: Callable[[int], dict[int, str]] = lambda now_ms: {},
                 producer_overrides: dict[str, Any] | None = None, topic: str = topics.BUDGET_SPEND,
                 queue_depth: int = 30, producer: Any = None):
        """Produces through `producer` when given (tests), else a new Kafka producer on `bootstrap`."""
        self.accumulator, self.lease_ids, self.topic = accumulator, lease_ids, topic
        self.codec = AvroCodec()
        self.producer = producer if producer is not None else \
            kafka.producer(str(bootstrap), **(producer_overrides or {}))
        # (sequence, partition, record number) -> (encoded record, event time)
        self.pending: dict[tuple[int, int, int], tuple[bytes, int]] = {}
        self.in_transit: set[tuple[int, int, int]] = set()
        self.sent = 0  # records the broker acknowledged
        self.resent = 0
        self.skipped_ticks = 0  # ticks that found the queue full (their spend stayed for the next one)
        self.partitions: int | None = None
        self._partitioner: Partitioner | None = None
        self._queue: queue.Queue[tuple[SpendTake | None, dict[int, str], int] | None] = queue.Queue(queue_depth)
        self._last_resend = 0.0
        self._thread = threading.Thread(target=self._run, name="spend-reporter", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------- the loop's side
    def tick(self, now_ms: int) -> None:
        """Hand this interval's spend to the thread; constant time, never blocks."""
        if self._queue.full():
            self.skipped_ticks += 1
            return
        self._queue.put_nowait((self.accumulator.take(now_ms), dict(self.lease_ids(now_ms)), now_ms))

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Until everything queued is produced and acknowledged (or failed), at most `timeout_s`; True when
        nothing is left in the queue or in transit."""
        deadline = time.monotonic() + timeout_s
        while (self._queue.unfinished_tasks or self.in_transit) and time.monotonic() < deadline:
            time.sleep(0.01)
        return not (self._queue.unfinished_tasks or self.in_transit)

    def close(self, timeout_s: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout_s)
        self.producer.flush(timeout_s)

    # ------------------------------------------------------------- the thread's side
    def _run(self) -> None:
        while True:
            try:
                job = self._queue.get(timeout=0.05)
            except queue.Empty:
                job = ()  # type: ignore[assignment]
            try:
                if job is None:
                    self._queue.task_done()
                    self.producer.poll(0)
                    return
                if job:
                    try:
                        self._send(*job)
                    finally:
                        self._queue.task_done()
                self._resend_failed()
                self.producer.poll(0)
            except Exception:  # noqa: BLE001 - the reporter must outlive one bad interval; it is logged
                LOG.exception("spend reporting failed")

    def _partition_count(self) -> int:
        if self.partitions is None:
            try:
                self.partitions = len(self.producer.list_topics(self.topic, timeout=5).topics[self.topic].partitions)
                self._partitioner = Partitioner(self.partitions)
            except Exception:  # noqa: BLE001 - the broker is unreachable: try again next interval
                return 0
        return self.partitions

    def _send(self, taken: SpendTake | None, leases: dict[int, str], now_ms: int) -> None:
        partitions = self._partition_count()
        if taken is None:  # nothing spent or seen: a heartbeat to every partition
            value = self.codec.encode(SPEND_REPORT, heartbeat_record(
                self.accumulator.server_id, self.accumulator.sequence, now_ms))
            for partition in range(partitions):
                self._produce(None, partition, value, now_ms)
            return
        if not partitions:  # unknown yet: keep the interval as one record for partition 0 until it is known
            partitions = 1
        for number, (partition, record) in enumerate(batch_records(taken.columns(leases), partitions,
                                                                   self._partitioner)):
            key = (taken.sequence, partition, number)
            self.pending[key] = (self.codec.encode(SPEND_REPORT, record), now_ms)
            self._produce(key, partition, self.pending[key][0], now_ms)

    def _produce(self, key: tuple[int, int, int] | None, partition: int, value: bytes, now_ms: int) -> None:
        try:
            self.producer.produce(self.topic, key=str(partition).encode(), value=value, partition=partition,
                                  timestamp=now_ms, on_delivery=self._delivered(key) if key else None)
            if key:
                self.in_transit.add(key)
        except BufferError:
            self.producer.poll(0.1)  # a full local queue: pending records go again at the next resend
        except KafkaException as error:  # refused at once (the broker unknown yet, ...): it goes again
            LOG.warning("spend report %s not produced (%s); it will be sent again", key, error)

    def _resend_failed(self) -> None:
        if time.monotonic() - self._last_resend < RESEND_EVERY_S:
            return
        self._last_resend = time.monotonic()
        for key, (value, event_ms) in list(self.pending.items()):
            if key not in self.in_transit:  # the same record at the same event time: counted once downstream
                self.resent += 1
                self._produce(key, key[1], value, event_ms)

    def _delivered(self, key: tuple[int, int, int]):
        def callback(err, msg) -> None:
            self.in_transit.discard(key)
            if err is None:
                self.pending.pop(key, None)
                self.sent += 1
            else:
                LOG.warning("spend report %s not delivered (%s); it will be sent again", key, err)
        return callback


class ServedLog:
    """ad.served from a thread: `put` queues a record (a dict) without blocking; the thread encodes it and
    produces it keyed by its request id."""

    def __init__(self, producer: Any, topic: str = topics.AD_SERVED, capacity: int = 20_000,
                 on_error: Callable[[str], None] = lambda what: None):
        self.producer, self.topic, self.on_error = producer, topic, on_error
        self.codec = AvroCodec()
        self._queue: queue.Queue[tuple[bytes, dict[str, Any]] | None] = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._run, name="served-log", daemon=True)
        self._thread.start()

    def backlog(self) -> int:
        return self._queue.qsize()

    def full(self) -> bool:
        return self._queue.full()

    def put(self, key: bytes, record: dict[str, Any]) -> None:
        """Queue one record; raises queue.Full when the log is `capacity` records behind (admission refuses
        requests before that happens)."""
        self._queue.put_nowait((key, record))

    def flush(self, timeout_s: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.producer.flush(max(0.0, deadline - time.monotonic())) == 0 and not self._queue.unfinished_tasks

    def close(self, timeout_s: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout_s)
        self.producer.flush(timeout_s)

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                self.producer.poll(0)
                continue
            try:
                if item is None:
                    return
                key, record = item
                value = self.codec.encode(SERVED_RECORD, record)
                while True:
                    try:
                        self.producer.produce(self.topic, key=key, value=value)
                        break
                    except BufferError:
                        self.producer.poll(0.05)
                self.producer.poll(0)
            except Exception:  # noqa: BLE001 - counted and logged; the response went out long ago
                self.on_error("served_log")
                LOG.exception("could not produce an ad.served record")
            finally:
                self._queue.task_done()
