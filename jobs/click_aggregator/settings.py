"""The typed settings `click_aggregator` runs with: the Kafka plumbing, its topics, its clock and the bill's
shard count. Plain data: each setting is declared once here with its flag (jobs.common.settings.option);
main.py parses them, topology.py wires the job from them."""
from __future__ import annotations

from dataclasses import dataclass

from jobs.click_aggregator.functions import SHARDS
from jobs.common.settings import JobSettings, option
from jobs.common.shards import shards_option
from schemas import topics


@dataclass(frozen=True, kw_only=True)
class ClickAggregatorSettings(JobSettings):
    """Everything the job takes: the Kafka plumbing, its topics, its clock and the bill's shard count."""

    events_topic: str = option(topics.AD_EVENTS)
    campaigns_topic: str = option(topics.SERVING_CAMPAIGNS)
    billed_topic: str = option(topics.BILLED_SPEND, "where each campaign's cumulative billed totals go")
    out_of_orderness_ms: int = option(2000, "how far an event may trail the newest one and still make its window")
    idle_timeout_ms: int = option(2000, "after this long without records, a partition of the event or campaign "
                                        "topics stops holding event time back")
    shards: int = shards_option(SHARDS, "bill")
