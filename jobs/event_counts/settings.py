"""The typed settings `event_counts` runs with: the Kafka plumbing, its topics and its window. Plain data:
each setting is declared once here with its flag (jobs.common.settings.option); main.py parses them,
topology.py wires the job from them."""
from __future__ import annotations

from dataclasses import dataclass

from core import event_counts as rules
from jobs.common.settings import JobSettings, option
from schemas import topics


@dataclass(frozen=True, kw_only=True)
class EventCountsSettings(JobSettings):
    """Everything the job takes: the Kafka plumbing, its topics and its window."""

    input_topic: str = option(topics.AD_EVENTS, "the ad events counted")
    output_topic: str = option(topics.EVENT_COUNTS, "where each campaign window's counts go")
    window_ms: int = option(rules.DEFAULT_WINDOW_MS)
    out_of_orderness_ms: int = option(5000, "how far behind the newest event time an event may arrive and still count")
