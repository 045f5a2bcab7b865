"""The typed settings `index_builder` runs with: the Kafka plumbing and where each kind of serving record goes.
Plain data: each setting is declared once here with its flag (jobs.common.settings.option); main.py parses
them, topology.py wires the job from them."""
from __future__ import annotations

from dataclasses import dataclass

from jobs.common.settings import JobSettings, option
from schemas import topics


@dataclass(frozen=True, kw_only=True)
class IndexBuilderSettings(JobSettings):
    """Everything the job takes: the Kafka plumbing and where each kind of serving record goes."""

    ads_topic: str = option(topics.SERVING_ADS, "where ad records go (tests, benchmarks)")
    campaigns_topic: str = option(topics.SERVING_CAMPAIGNS, "where campaign records go")
    reserves_topic: str = option(topics.SERVING_RESERVES, "where reserve rules go")
