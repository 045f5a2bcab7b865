"""The typed settings `click_aggregator` runs with: the Kafka plumbing, its topics, its clock and the bill's
shard count. Plain data: main.py builds them from flags and environment, topology.py wires the job from them."""
from __future__ import annotations

from dataclasses import dataclass

from jobs.click_aggregator.functions import SHARDS
from jobs.flink_io import KafkaJobSettings
from schemas import topics


@dataclass(frozen=True)
class ClickAggregatorSettings:
    """Everything the job takes: the Kafka plumbing, its topics, its clock and the bill's shard count."""

    kafka: KafkaJobSettings
    events_topic: str = topics.AD_EVENTS
    campaigns_topic: str = topics.SERVING_CAMPAIGNS
    billed_topic: str = topics.BILLED_SPEND
    dead_letter_topic: str = topics.DEAD_LETTERS
    out_of_orderness_ms: int = 2000
    idle_timeout_ms: int = 2000
    shards: int = SHARDS
