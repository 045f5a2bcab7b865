"""The typed settings `training_join` runs with: the Kafka plumbing, its topics, the join's rules and its
clock. Plain data: each setting is declared once here with its flag (jobs.common.settings.option); main.py
parses them, topology.py wires the job from them."""
from __future__ import annotations

from dataclasses import dataclass, field

from core import training
from jobs.common.settings import JobSettings, option
from schemas import topics


@dataclass(frozen=True, kw_only=True)
class TrainingJoinSettings(JobSettings):
    """Everything the job takes: the Kafka plumbing, its topics, the join's rules and its clock."""

    served_topic: str = option(topics.AD_SERVED)
    events_topic: str = option(topics.AD_EVENTS)
    conversions_topic: str = option(topics.AD_CONVERSIONS)
    examples_topic: str = option(topics.TRAINING_EXAMPLES)
    deletions_topic: str = option(topics.PRIVACY_DELETIONS,
                                  "the deletion requests: a deleted user's examples are never emitted")
    rules: training.JoinRules = field(default_factory=training.JoinRules)
    out_of_orderness_ms: int = option(5000, "how far a record may trail the newest one and still count before "
                                            "its label is final")
    idle_timeout_ms: int = option(2000, "an ad.conversions partition without records this long stops counting "
                                        "for the clock")
