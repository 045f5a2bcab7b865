"""The typed settings the budget job runs with, and how parsed flags and the environment become them. Plain
data: main.py declares the flags, topology.py wires the job from these settings; nothing here opens a
connection."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Mapping

from core import budget
from jobs.budget_pacing.functions import JOB_NAME, SHARDS
from jobs.flink_io import KafkaJobSettings, settings_from_args
from schemas import topics as topic_names


@dataclass(frozen=True)
class PacingTopics:
    spend: str = topic_names.BUDGET_SPEND
    campaigns: str = topic_names.SERVING_CAMPAIGNS
    ads: str = topic_names.SERVING_ADS
    billed: str = topic_names.BILLED_SPEND
    state: str = topic_names.BUDGET_STATE
    leases: str = topic_names.BUDGET_LEASES
    dead_letters: str = topic_names.DEAD_LETTERS


@dataclass(frozen=True)
class BudgetPacingSettings:
    """Everything the job runs with."""

    kafka: KafkaJobSettings
    topics: PacingTopics = PacingTopics()
    redis_url: str = ""  # '' writes no pacing points
    curves: str = ""  # pipelines.traffic_curves' document; '' for flat curves and no forecast
    out_of_orderness_ms: int = 2000
    idle_timeout_ms: int = 2000
    heartbeat_ms: int = budget.HEARTBEAT_MS
    shards: int = SHARDS


def default_redis_url(environ: Mapping[str, str] = os.environ) -> str:
    """ADSERVE_PACING_REDIS_URL, else the local platform's Redis (ADSERVE_HOST, ADSERVE_REDIS_PORT)."""
    return environ.get("ADSERVE_PACING_REDIS_URL") or \
        f"redis://{environ.get('ADSERVE_HOST', '127.0.0.1')}:{environ.get('ADSERVE_REDIS_PORT', '16379')}/0"


def settings_from(args: argparse.Namespace) -> BudgetPacingSettings:
    """The settings from the flags main.py's parser declares."""
    topics = PacingTopics(args.spend_topic, args.campaigns_topic, args.ads_topic, args.billed_topic,
                          args.state_topic, args.leases_topic, args.dead_letter_topic)
    return BudgetPacingSettings(settings_from_args(args, JOB_NAME), topics, args.redis_url, args.curves,
                                args.out_of_orderness_ms, args.idle_timeout_ms, args.heartbeat_ms, args.shards)
