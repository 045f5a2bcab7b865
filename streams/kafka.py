"""Kafka clients with bounded calls and the project's logging.

librdkafka retries a dead broker forever and prints each attempt to stderr;
here every blocking call takes a timeout, and its log goes to the
`adserve.kafka` logger (WARNING and up), so a stopped broker fails a call
instead of hanging it or flooding a terminal."""
from __future__ import annotations

import logging
import time
from typing import Any, Iterable, Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from core.errors import AdserveError

LOG = logging.getLogger("adserve.kafka")
DEFAULT_TIMEOUT_S = 10.0


class KafkaCallTimeout(AdserveError, TimeoutError):
    """A Kafka call did not finish within its deadline (is the broker up?)."""


def client_config(bootstrap: str) -> dict[str, Any]:
    """The configuration every client starts from: the brokers, the project's logger, and the security
    properties of this process's Kafka (SASL, TLS: streams.endpoints, from the settings file and ADSERVE_KAFKA_*
    variables; none for the local platform)."""
    from streams.endpoints import kafka_client_properties

    return {"bootstrap.servers": bootstrap, "logger": LOG, "socket.timeout.ms": 5000} | kafka_client_properties()



def admin(bootstrap: str) -> AdminClient:
    return AdminClient(client_config(bootstrap))


PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    # how long a record may wait for the broker before its delivery fails (then a spool or a resend keeps it)
    "message.timeout.ms": 30000,
}


def producer(bootstrap: str, **overrides: Any) -> Producer:
    """An idempotent producer: PRODUCER_DEFAULTS, under the process's client properties (an operator's
    [kafka.properties] / ADSERVE_KAFKA_PROPERTIES win over a default, e.g. message.timeout.ms), under the
    caller's `overrides`."""
    return Producer(producer_config(bootstrap, **overrides))


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """The configuration `producer` builds a client from."""
    return PRODUCER_DEFAULTS | client_config(bootstrap) | overrides


def consumer(bootstrap: str, group_id: str, **overrides: Any) -> Consumer:
    config = client_config(bootstrap) | {
        "group.id": group_id,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "session.timeout.ms": 10000,
    }
    config.update(overrides)
    return Consumer(config)


def flush(prod: Producer, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Wait until every produced record is acknowledged, or raise."""
    remaining = prod.flush(timeout_s)
    if remaining:
        raise KafkaCallTimeout(f"{remaining} records not acknowledged within {timeout_s:.0f} s")


def end_offsets(bootstrap: str, topic: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[int, int]:
    """The next offset of every partition of a topic (where a reader starting now begins)."""
    cons = consumer(bootstrap, group_id=f"adserve-offsets-{time.monotonic_ns()}")
    try:
        metadata = cons.list_topics(topic, timeout=timeout_s)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"no topic {topic}"))
        return {p: cons.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
                for p in metadata.topics[topic].partitions}
    finally:
        cons.close()


def read_all(bootstrap: str, topic: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
             expected: int | None = None, idle_s: float = 2.0,
             start_offsets: dict[int, int] | None = None) -> list[Any]:
    """Every committed record of a topic from the beginning, as confluent Message objects.

    Stops once `expected` records arrived, or after `idle_s` without a new one
    once the end of every partition was reached; raises past `timeout_s`."""
    return list(iter_all(bootstrap, topic, timeout_s=timeout_s, expected=expected, idle_s=idle_s,
                         start_offsets=start_offsets))


def iter_all(bootstrap: str, topic: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
             expected: int | None = None, idle_s: float = 2.0,
             start_offsets: dict[int, int] | None = None) -> Iterator[Any]:
    """read_all one message at a time, none kept: for topics too large to hold."""
    cons = consumer(bootstrap, group_id=f"adserve-reader-{time.monotonic_ns()}",
                    **{"enable.partition.eof": True})
    try:
        metadata = cons.list_topics(topic, timeout=timeout_s)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"no topic {topic}"))
        partitions = list(metadata.topics[topic].partitions)
        starts = start_offsets or {}
        cons.assign([TopicPartition(topic, p, starts.get(p, 0)) for p in partitions])
        count = 0
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout_s
        last_new = time.monotonic()
        while time.monotonic() < deadline:
            if expected is not None and count >= expected:
                return
            if expected is None and len(at_eof) == len(partitions) and time.monotonic() - last_new > idle_s:
                return
            msg = cons.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_eof.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            at_eof.discard(msg.partition())
            count += 1
            last_new = time.monotonic()
            yield msg
        if expected is not None:
            raise KafkaCallTimeout(f"read {count} of {expected} records from {topic} in {timeout_s:.0f} s")
    finally:
        cons.close()


def produce_all(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes, int | None]],
                timeout_s: float = DEFAULT_TIMEOUT_S) -> int:
    """Produce (key, value, timestamp_ms) records and wait for every acknowledgement.

    Raises KafkaException naming the first failed delivery: nothing is lost silently."""
    prod = producer(bootstrap)
    failures: list[Any] = []

    def delivered(err, msg) -> None:
        if err is not None:
            failures.append(err)

    count = 0
    for key, value, timestamp_ms in records:
        while True:
            try:
                prod.produce(topic, value=value, key=key, timestamp=timestamp_ms or 0, on_delivery=delivered)
                break
            except BufferError:
                prod.poll(0.1)
        count += 1
        if count % 10000 == 0:
            prod.poll(0)
    flush(prod, timeout_s)
    if failures:
        raise KafkaException(failures[0])
    return count


def read_records(bootstrap: str, topic: str, record_type: str, since_ms: int = 0,
                 log=LOG.warning) -> list[dict[str, Any]]:
    """The records of a topic whose Kafka timestamp (their event time) is at or after `since_ms`, decoded as
    `record_type`; undecodable ones are skipped and counted in one log line (the jobs that write the project's
    topics dead-letter their own)."""
    return list(iter_records(bootstrap, topic, record_type, since_ms, log))


def iter_records(bootstrap: str, topic: str, record_type: str, since_ms: int = 0,
                 log=LOG.warning) -> Iterator[dict[str, Any]]:
    """read_records one record at a time, none kept: for topics too large to hold."""
    from core.errors import CorruptRecord
    from schemas.codec import AvroCodec

    start = None
    if since_ms > 0:
        cons = consumer(bootstrap, group_id=f"adserve-reader-offsets-{time.monotonic_ns()}")
        try:
            partitions = cons.list_topics(topic, timeout=DEFAULT_TIMEOUT_S).topics[topic].partitions
            found = cons.offsets_for_times([TopicPartition(topic, p, since_ms) for p in partitions],
                                           timeout=DEFAULT_TIMEOUT_S)
            start = {tp.partition: tp.offset for tp in found if tp.offset >= 0}
            start.update({p: 1 << 62 for p in partitions if p not in start})  # nothing that recent there
        finally:
            cons.close()
    codec, corrupt = AvroCodec(), 0
    for msg in iter_all(bootstrap, topic, timeout_s=600, idle_s=1.0, start_offsets=start):
        try:
            yield codec.decode(msg.value(), record_type, topic=topic, partition=msg.partition(), offset=msg.offset())
        except CorruptRecord:
            corrupt += 1
    if corrupt:
        log(f"{corrupt:,} undecodable records of {topic} skipped")
