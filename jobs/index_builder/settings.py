"""The typed settings `index_builder` runs with: the Kafka plumbing and where each kind of serving record goes.
Plain data: main.py builds them from flags and environment, topology.py wires the job from them."""
from __future__ import annotations

from dataclasses import dataclass

from jobs.flink_io import KafkaJobSettings
from schemas import topics


@dataclass(frozen=True)
class IndexBuilderSettings:
    """Everything the job takes: the Kafka plumbing and where each kind of serving record goes."""

    kafka: KafkaJobSettings
    ads_topic: str = topics.SERVING_ADS
    campaigns_topic: str = topics.SERVING_CAMPAIGNS
    reserves_topic: str = topics.SERVING_RESERVES
    dead_letter_topic: str = topics.DEAD_LETTERS
