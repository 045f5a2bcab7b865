"""The typed settings `training_join` runs with: the Kafka plumbing, its topics, the join's rules and its
clock. Plain data: main.py builds them from flags and environment, topology.py wires the job from them."""
from __future__ import annotations

from dataclasses import dataclass, field

from core import training
from jobs.flink_io import KafkaJobSettings
from schemas import topics


@dataclass(frozen=True)
class TrainingJoinSettings:
    """Everything the job takes: the Kafka plumbing, its topics, the join's rules and its clock."""

    kafka: KafkaJobSettings
    served_topic: str = topics.AD_SERVED
    events_topic: str = topics.AD_EVENTS
    conversions_topic: str = topics.AD_CONVERSIONS
    examples_topic: str = topics.TRAINING_EXAMPLES
    dead_letter_topic: str = topics.DEAD_LETTERS
    deletions_topic: str = topics.PRIVACY_DELETIONS
    rules: training.JoinRules = field(default_factory=training.JoinRules)
    out_of_orderness_ms: int = 5000
    idle_timeout_ms: int = 2000
