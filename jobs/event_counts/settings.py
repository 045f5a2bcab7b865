"""The typed settings `event_counts` runs with: the Kafka plumbing, its topics and its window. Plain data:
main.py builds them from flags and environment, topology.py wires the job from them."""
from __future__ import annotations

from dataclasses import dataclass

from core import event_counts as rules
from jobs.flink_io import KafkaJobSettings
from schemas import topics


@dataclass(frozen=True)
class EventCountsSettings:
    """Everything the job takes: the Kafka plumbing, its topics and its window."""

    kafka: KafkaJobSettings
    input_topic: str = topics.AD_EVENTS
    output_topic: str = topics.EVENT_COUNTS
    dead_letter_topic: str = topics.DEAD_LETTERS
    window_ms: int = rules.DEFAULT_WINDOW_MS
    out_of_orderness_ms: int = 5000
