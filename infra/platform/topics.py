"""Creates the platform's Kafka topics (schemas.topics) that are missing, the cdc.* topics
included (Debezium writes them through Kafka Connect).

The same code serves the local platform (`adserve up`: one broker, replication factor 1) and a
production cluster (`adserve topics create`: the brokers and SASL/TLS properties of the process's
settings, which every streams.kafka client takes, replication factor 3 by default). A topic that
exists is never changed: one with fewer partitions than its spec is reported (`TopicPlan`), since
adding partitions moves keys between partitions and breaks the per-key order every job relies on."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from schemas.topics import TOPICS, TopicSpec

from infra.platform.errors import PlatformError

ADMIN_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class UnderPartitioned:
    """An existing topic with fewer partitions than its spec asks for."""

    name: str
    partitions: int
    wanted: int


@dataclass(frozen=True)
class TopicPlan:
    """What creating `topics` on a cluster would do: the specs to create, the names already present, and the
    present ones with fewer partitions than specified (reported, never changed)."""

    create: tuple[TopicSpec, ...]
    present: tuple[str, ...]
    under_partitioned: tuple[UnderPartitioned, ...]


def plan_topics(existing: Mapping[str, int], topics: tuple[TopicSpec, ...] = TOPICS) -> TopicPlan:
    """The plan for `topics` on a cluster whose topics and partition counts are `existing`. Pure."""
    return TopicPlan(
        create=tuple(t for t in topics if t.name not in existing),
        present=tuple(t.name for t in topics if t.name in existing),
        under_partitioned=tuple(UnderPartitioned(t.name, existing[t.name], t.partitions) for t in topics
                                if t.name in existing and existing[t.name] < t.partitions))


def read_plan(bootstrap: str, topics: tuple[TopicSpec, ...] = TOPICS) -> TopicPlan:
    """The plan for `topics` on the cluster at `bootstrap` (one metadata request)."""
    from streams import kafka

    metadata = kafka.admin(bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S)
    return plan_topics({name: len(topic.partitions) for name, topic in metadata.topics.items()}, topics)


def ensure_topics(bootstrap: str, topics: tuple[TopicSpec, ...] = TOPICS, replication_factor: int = 1) -> list[str]:
    """Create every missing topic with `replication_factor` replicas; returns the names created (empty on a
    second run)."""
    from confluent_kafka.admin import NewTopic

    from streams import kafka

    wanted = read_plan(bootstrap, topics).create
    if not wanted:
        return []
    admin = kafka.admin(bootstrap)  # held until every future has answered: a freed client cancels them
    futures = admin.create_topics(
        [NewTopic(t.name, num_partitions=t.partitions, replication_factor=replication_factor,
                  config=t.kafka_config()) for t in wanted],
        request_timeout=ADMIN_TIMEOUT_S, operation_timeout=ADMIN_TIMEOUT_S)
    created = []
    for name, future in futures.items():
        try:
            future.result(timeout=ADMIN_TIMEOUT_S)
            created.append(name)
        except Exception as exc:  # noqa: BLE001 - re-raised as our error with the topic named
            if "TOPIC_ALREADY_EXISTS" in str(exc):
                continue
            raise PlatformError(f"creating topic {name} (replication factor {replication_factor}) failed: "
                                f"{exc}") from exc
    return created
