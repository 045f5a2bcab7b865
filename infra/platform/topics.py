"""Creates the platform's Kafka topics (schemas.topics) that are missing, the cdc.* topics
included (Debezium writes them through Kafka Connect)."""
from __future__ import annotations

from schemas.topics import TOPICS, TopicSpec

from infra.platform.errors import PlatformError

ADMIN_TIMEOUT_S = 15.0


def ensure_topics(bootstrap: str, topics: tuple[TopicSpec, ...] = TOPICS) -> list[str]:
    """Create every missing topic; returns the names created (empty on a second run)."""
    from confluent_kafka.admin import NewTopic

    from streams import kafka

    admin = kafka.admin(bootstrap)
    existing = set(admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics)
    wanted = [t for t in topics if t.name not in existing]
    if not wanted:
        return []
    futures = admin.create_topics(
        [NewTopic(t.name, num_partitions=t.partitions, replication_factor=1, config=t.kafka_config())
         for t in wanted],
        request_timeout=ADMIN_TIMEOUT_S, operation_timeout=ADMIN_TIMEOUT_S)
    created = []
    for name, future in futures.items():
        try:
            future.result(timeout=ADMIN_TIMEOUT_S)
            created.append(name)
        except Exception as exc:  # noqa: BLE001 - re-raised as our error with the topic named
            if "TOPIC_ALREADY_EXISTS" in str(exc):
                continue
            raise PlatformError(f"creating topic {name} failed: {exc}") from exc
    return created
