"""The typed settings the budget job runs with. Plain data: each setting is declared once here with its flag
(jobs.common.settings.option); main.py parses them, topology.py wires the job from them; nothing here opens a
connection."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from core import budget
from jobs.budget_pacing.functions import SHARDS
from jobs.common.settings import KafkaJobSettings, default_redis_url, option
from jobs.common.shards import shards_option
from schemas import topics as topic_names


@dataclass(frozen=True)
class PacingTopics:
    spend: str = option(topic_names.BUDGET_SPEND, flag="--spend-topic")
    campaigns: str = option(topic_names.SERVING_CAMPAIGNS, flag="--campaigns-topic")
    ads: str = option(topic_names.SERVING_ADS, flag="--ads-topic")
    billed: str = option(topic_names.BILLED_SPEND, flag="--billed-topic")
    state: str = option(topic_names.BUDGET_STATE, flag="--state-topic")
    leases: str = option(topic_names.BUDGET_LEASES, flag="--leases-topic")
    dead_letters: str = option(topic_names.DEAD_LETTERS, flag="--dead-letter-topic")


@dataclass(frozen=True)
class BudgetPacingSettings:
    """Everything the job runs with."""

    kafka: KafkaJobSettings
    topics: PacingTopics = field(default_factory=PacingTopics)
    redis_url: str = option("", "where pacing:{campaign} goes (default: the local platform's Redis; '' for none)",
                            default_from=functools.partial(default_redis_url, variable="ADSERVE_PACING_REDIS_URL"))
    curves: str = option("", "traffic shapes and values to beat from pipelines.traffic_curves (JSON): a local "
                             "path, file:// or object-storage URL (gs://, s3://: Beam's filesystems); one given but "
                             "missing or unreadable fails the job at start; empty: flat curves and no forecast",
                         default_from=lambda: os.environ.get("ADSERVE_CURVES", ""))
    out_of_orderness_ms: int = option(2000, "how far a spend report may trail the newest one and still make its "
                                            "window")
    idle_timeout_ms: int = option(2000, "after this long without records, the campaign and billing topics stop "
                                        "holding event time back")
    heartbeat_ms: int = option(budget.HEARTBEAT_MS, "a campaign's state is re-sent at least this often even when "
                                                    f"unchanged (default {budget.HEARTBEAT_MS}; 10000 sends one "
                                                    "every step)")
    shards: int = shards_option(SHARDS, "pacer")
