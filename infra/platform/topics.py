"""Every Kafka topic of the platform, with its key, schema and config, as in
ARCHITECTURE.md's topic table. `adserve up` creates the missing ones, the
cdc.* topics included (Debezium writes them through Kafka Connect)."""
from __future__ import annotations

from dataclasses import dataclass, field

from infra.platform.errors import PlatformError

ADMIN_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class TopicSpec:
    """One topic: its name, record key, value schema file and config."""

    name: str
    key: str
    schema: str  # file under schemas/
    partitions: int = 4
    compacted: bool = False
    config: dict[str, str] = field(default_factory=dict)

    def kafka_config(self) -> dict[str, str]:
        config = {"cleanup.policy": "compact" if self.compacted else "delete"}
        if self.compacted:
            # Compact often enough that a replay from a snapshot's offset stays short.
            config.update({"min.cleanable.dirty.ratio": "0.1", "segment.ms": "600000"})
        else:
            # Retained by size, not by age: simulated days, tests and benchmarks replay event times months
            # in the past, and Kafka deletes records by their timestamps (a time limit would wipe such a
            # topic within minutes of its creation). A production deployment sets its own retention.
            config.update({"retention.ms": "-1", "retention.bytes": str(2 * 1024 ** 3)})
        config.update(self.config)
        return config


TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec("serving.ads", key="ad id", schema="serving_ad.avsc", compacted=True),
    TopicSpec("serving.campaigns", key="campaign id", schema="serving_campaign.avsc", compacted=True),
    TopicSpec("serving.reserves", key="placement|country", schema="serving_reserve.avsc", partitions=1,
              compacted=True),
    TopicSpec("ad.served", key="request id", schema="ad_served.avsc"),
    TopicSpec("ad.events", key="campaign id", schema="ad_event.avsc"),
    TopicSpec("ad.conversions", key="impression id", schema="ad_conversion.avsc"),
    TopicSpec("budget.spend", key="campaign id", schema="spend_report.avsc"),
    TopicSpec("budget.state", key="campaign id", schema="budget_state.avsc", compacted=True),
    TopicSpec("budget.leases", key="server id", schema="budget_lease.avsc"),
    TopicSpec("billing.billed_spend", key="campaign id", schema="billed_spend.avsc"),
    TopicSpec("training.examples", key="impression id", schema="training_example.avsc"),
    TopicSpec("dead.letters", key="job name", schema="dead_letter.avsc", partitions=1),
    TopicSpec("ops.event_counts", key="campaign id", schema="event_count.avsc"),
    # Debezium's change streams of the campaign store (JSON envelopes, see infra/platform/cdc.py); created
    # here so they are compacted (the latest row per key survives, so the index builder can start over).
    TopicSpec("cdc.public.campaigns", key="campaign_id (JSON)", schema="", compacted=True),
    TopicSpec("cdc.public.ads", key="ad_id (JSON)", schema="", compacted=True),
    TopicSpec("cdc.public.reserves", key="placement, country (JSON)", schema="", partitions=1, compacted=True),
)

TOPICS_BY_NAME = {t.name: t for t in TOPICS}


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
