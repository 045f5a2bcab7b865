"""The deletion requests' topic (`privacy.deletions`) and the Redis applier.

`request_deletion` produces a request keyed by user id (what `adserve users delete` does). `PendingDeletions`
reads the requests its consumer group has not applied yet, so each request is applied once; `all_requests`
reads the compacted topic from the start (the set of requests in force, for the archive's erasure).
`erase_from_redis` removes every per-user key (docs/storage.md: `user:{id}` and `fc:{id}`) of the requests in
one pipelined round trip. Which records a request covers is core.privacy's rule; this module only moves them."""
from __future__ import annotations

import time
from typing import Iterable

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from core import privacy
from core.errors import CorruptRecord
from schemas import topics
from schemas.codec import AvroCodec
from streams import kafka, redis_keys
from streams.endpoints import redis_from_url

RECORD_TYPE = topics.record_type(topics.PRIVACY_DELETIONS)
APPLIER_GROUP = "adserve-user-deletions"


def request_deletion(bootstrap: str, request: privacy.DeletionRequest, topic: str = topics.PRIVACY_DELETIONS) -> None:
    """Produce one request (key: the user id, timestamp: its time) and wait for the broker's acknowledgement."""
    value = AvroCodec().encode(RECORD_TYPE, request.as_record())
    kafka.produce_all(bootstrap, topic, [(request.user_id.encode(), value, request.requested_at_ms)])


def decode_requests(messages: Iterable, topic: str) -> tuple[list[privacy.DeletionRequest], int]:
    """(requests, undecodable count) from consumed messages; a corrupt record is counted, never applied."""
    codec, requests, corrupt = AvroCodec(), [], 0
    for msg in messages:
        try:
            requests.append(privacy.request_of(codec.decode(msg.value(), RECORD_TYPE, topic=topic,
                                                            partition=msg.partition(), offset=msg.offset())))
        except CorruptRecord:
            corrupt += 1
    return requests, corrupt


def all_requests(bootstrap: str, topic: str = topics.PRIVACY_DELETIONS) -> list[privacy.DeletionRequest]:
    """Every request on the topic (compaction keeps the newest per user)."""
    requests, _ = decode_requests(kafka.read_all(bootstrap, topic, timeout_s=120, idle_s=1.0), topic)
    return requests


class PendingDeletions:
    """The requests past its consumer group's stored offsets. `commit()` stores the new offsets once the requests
    were applied: a run that fails before that applies them again next time (deleting a key twice is harmless)."""

    def __init__(self, bootstrap: str, topic: str = topics.PRIVACY_DELETIONS, group_id: str = APPLIER_GROUP,
                 timeout_s: float = 60.0):
        self.topic = topic
        self.consumer = kafka.consumer(bootstrap, group_id, **{"enable.partition.eof": True})
        self.timeout_s = timeout_s
        self.next_offsets: dict[int, int] = {}
        self.corrupt = 0

    def read(self) -> list[privacy.DeletionRequest]:
        """The requests past the stored offsets, up to the end of every partition."""
        metadata = self.consumer.list_topics(self.topic, timeout=kafka.DEFAULT_TIMEOUT_S)
        if self.topic not in metadata.topics or metadata.topics[self.topic].error is not None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"no topic {self.topic}"))
        partitions = list(metadata.topics[self.topic].partitions)
        self.consumer.subscribe([self.topic])
        messages, at_end = [], set()
        deadline = time.monotonic() + self.timeout_s
        while len(at_end) < len(partitions):
            if time.monotonic() > deadline:
                raise kafka.KafkaCallTimeout(f"{self.topic}: not at the end of every partition within "
                                             f"{self.timeout_s:.0f} s")
            msg = self.consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            at_end.discard(msg.partition())
            messages.append(msg)
            self.next_offsets[msg.partition()] = msg.offset() + 1
        requests, self.corrupt = decode_requests(messages, self.topic)
        return requests

    def commit(self) -> None:
        if self.next_offsets:
            self.consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in self.next_offsets.items()],
                                 asynchronous=False)

    def close(self) -> None:
        self.consumer.close()


def user_keys(user_id: str) -> list[str]:
    """Every Redis key that holds one user's data (docs/storage.md)."""
    return [redis_keys.user_profile(user_id), redis_keys.frequency_record(user_id)]


def erase_from_redis(redis_url: str, requests: Iterable[privacy.DeletionRequest]) -> int:
    """Delete every key of the requests' users in one round trip; returns how many keys existed."""
    keys = [key for request in requests for key in user_keys(request.user_id)]
    if not keys:
        return 0
    client = redis_from_url(redis_url, socket_timeout=5.0, socket_connect_timeout=5.0)
    try:
        return int(client.delete(*keys))
    finally:
        client.close()
