"""Every Kafka topic of the platform: its name, record key, value schema and config.

This module owns the topic names. Code anywhere in the project refers to a topic
through the constants below, never through a string literal; `adserve up`
creates the missing topics from `TOPICS` (infra.platform.topics). It must never
talk to Kafka itself."""
from __future__ import annotations

from dataclasses import dataclass, field

SERVING_ADS = "serving.ads"
SERVING_CAMPAIGNS = "serving.campaigns"
SERVING_RESERVES = "serving.reserves"
AD_SERVED = "ad.served"
AD_EVENTS = "ad.events"
AD_CONVERSIONS = "ad.conversions"
AD_FEEDBACK = "ad.feedback"
BUDGET_SPEND = "budget.spend"
BUDGET_STATE = "budget.state"
BUDGET_LEASES = "budget.leases"
BILLED_SPEND = "billing.billed_spend"
TRAINING_EXAMPLES = "training.examples"
FEATURES_ADS = "features.ads"
MODEL_REGISTRY = "model.registry"
DEAD_LETTERS = "dead.letters"
EVENT_COUNTS = "ops.event_counts"
PRIVACY_DELETIONS = "privacy.deletions"
CDC_CAMPAIGNS = "cdc.public.campaigns"
CDC_ADS = "cdc.public.ads"
CDC_RESERVES = "cdc.public.reserves"
CDC_DEAD_LETTERS = "cdc.dead_letters"


@dataclass(frozen=True)
class TopicSpec:
    """One topic: its name, record key, value schema file, the Avro record type of its values, and config."""

    name: str
    key: str
    schema: str  # file under schemas/; empty for Debezium's JSON change streams
    record_type: str = ""  # the schema's record name, which schemas.codec decodes by; empty without a schema
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


# The cdc.* change streams take records up to 8 MiB (infra/platform/cdc.py MAX_RECORD_BYTES).
CDC_RECORD_LIMIT = {"max.message.bytes": str(8 * 1024 * 1024)}

TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(SERVING_ADS, key="ad id", schema="serving_ad.avsc", record_type="ServingAd", compacted=True),
    TopicSpec(SERVING_CAMPAIGNS, key="campaign id", schema="serving_campaign.avsc", record_type="ServingCampaign",
              compacted=True),
    TopicSpec(SERVING_RESERVES, key="placement|country", schema="serving_reserve.avsc", record_type="ServingReserve",
              partitions=1, compacted=True),
    TopicSpec(AD_SERVED, key="request id", schema="ad_served.avsc", record_type="ServedRecord"),
    TopicSpec(AD_EVENTS, key="campaign id", schema="ad_event.avsc", record_type="AdEvent"),
    TopicSpec(AD_CONVERSIONS, key="impression id", schema="ad_conversion.avsc", record_type="AdConversion"),
    TopicSpec(AD_FEEDBACK, key="impression id", schema="ad_feedback.avsc", record_type="AdFeedback"),
    TopicSpec(BUDGET_SPEND, key="campaign id", schema="spend_report.avsc", record_type="SpendReport"),
    TopicSpec(BUDGET_STATE, key="campaign id", schema="budget_state.avsc", record_type="BudgetState", compacted=True),
    TopicSpec(BUDGET_LEASES, key="server id", schema="budget_lease.avsc", record_type="BudgetLease"),
    TopicSpec(BILLED_SPEND, key="campaign id", schema="billed_spend.avsc", record_type="BilledSpend"),
    TopicSpec(TRAINING_EXAMPLES, key="impression id", schema="training_example.avsc", record_type="TrainingExample"),
    TopicSpec(FEATURES_ADS, key="ad id", schema="ad_features.avsc", record_type="AdFeatures", compacted=True),
    TopicSpec(MODEL_REGISTRY, key="role", schema="registry_entry.avsc", record_type="RegistryEntry",
              partitions=1, compacted=True),
    TopicSpec(DEAD_LETTERS, key="job name", schema="dead_letter.avsc", record_type="DeadLetter", partitions=1),
    TopicSpec(EVENT_COUNTS, key="campaign id", schema="event_count.avsc", record_type="EventCount"),
    # Compacted: the newest request per user is the set of deletions in force, which every consumer
    # (core.privacy) reads from the beginning.
    TopicSpec(PRIVACY_DELETIONS, key="user id", schema="user_deletion.avsc", record_type="UserDeletion",
              partitions=1, compacted=True),
    # Debezium's change streams of the campaign store (JSON envelopes, see infra/platform/cdc.py); created
    # here so they are compacted (the latest row per key survives, so the index builder can start over).
    # They take records up to 8 MiB, twice the size above which the connector dead-letters a change.
    TopicSpec(CDC_CAMPAIGNS, key="campaign_id (JSON)", schema="", compacted=True, config=CDC_RECORD_LIMIT),
    TopicSpec(CDC_ADS, key="ad_id (JSON)", schema="", compacted=True, config=CDC_RECORD_LIMIT),
    TopicSpec(CDC_RESERVES, key="placement, country (JSON)", schema="", partitions=1, compacted=True,
              config=CDC_RECORD_LIMIT),
    # A letter for each change too large to stream (infra/connect OversizedToDeadLetter): the source topic,
    # key, size and log position of the row, for an operator to find and fix it. JSON.
    TopicSpec(CDC_DEAD_LETTERS, key="the row's key (JSON)", schema="", partitions=1),
)

TOPICS_BY_NAME = {t.name: t for t in TOPICS}


def record_type(topic: str) -> str:
    """The Avro record type of `topic`'s values, as its TopicSpec names it."""
    return TOPICS_BY_NAME[topic].record_type
