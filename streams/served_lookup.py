"""Finding one impression's served record: the impression id's request, and that request's records on the
ad.served topic (the record key is the request id, so only that request's records are decoded).

It owns the look-up; it never explains or renders a price (core.replay.explain_winner does the arithmetic)."""
from __future__ import annotations

import time
from typing import Any, Generator, Iterable, Mapping

from core.errors import AdserveError, InvalidArgument
from schemas import topics


class ServedLogUnavailable(AdserveError):
    """The served log could not be read (no archive folder, no topic, broker down)."""


def request_id_of(impression_id: str) -> str:
    """The request part of an impression id ("{request_id}:{slot}"); raises ValueError for another shape."""
    request_id, sep, slot = impression_id.rpartition(":")
    if not sep or not request_id or not (slot.isascii() and slot.isdigit() and len(slot) <= 9):
        raise InvalidArgument(f"{impression_id!r} is not an impression id (expected REQUEST_ID:SLOT, e.g. 4f2a...:1)")
    return request_id


def has_impression(record: Mapping[str, Any], impression_id: str) -> bool:
    return any(w.get("impression_id") == impression_id for w in record.get("winners") or [])


def find_in_records(records: Iterable[Mapping[str, Any]], impression_id: str) -> Mapping[str, Any] | None:
    return next((r for r in records if has_impression(r, impression_id)), None)


def topic_records(bootstrap: str, request_id: str, *, topic: str = topics.AD_SERVED,
                  timeout_s: float = 30.0) -> Generator[Mapping[str, Any], None, None]:
    """The served records of one request on the topic, read from the beginning of every partition."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    from schemas.codec import AvroCodec
    from streams import kafka

    codec, key = AvroCodec(), request_id.encode()
    consumer = kafka.consumer(bootstrap, group_id=f"adserve-explain-{time.monotonic_ns()}",
                              **{"enable.partition.eof": True})
    try:
        metadata = consumer.list_topics(topic, timeout=min(timeout_s, 10.0))
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            raise ServedLogUnavailable(f"no topic {topic} at {bootstrap}")
        partitions = list(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(partitions):
            if time.monotonic() > deadline:
                raise ServedLogUnavailable(f"read {topic} for {timeout_s:.0f} s without reaching its end")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise ServedLogUnavailable(str(KafkaException(msg.error())))
            if msg.key() == key:
                yield codec.decode(msg.value(), topics.record_type(topics.AD_SERVED), topic=topic,
                                   partition=msg.partition(), offset=msg.offset())
    except KafkaException as exc:
        raise ServedLogUnavailable(f"cannot read {topic} at {bootstrap}: {exc}") from exc
    finally:
        consumer.close()
