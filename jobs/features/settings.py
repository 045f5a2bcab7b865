"""The typed settings `features` runs with: the Kafka plumbing, its topics, its windows, the estimates' priors,
where snapshots go and where user features go. Plain data: main.py builds them from flags and environment,
topology.py wires the job from them."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from core.ad_stats import EstimateRules
from core.feature_windows import WindowRules
from jobs.flink_io import KafkaJobSettings, platform_home
from schemas import topics

DEFAULT_KEEP_SNAPSHOTS = 288  # a day of 5-minute snapshots: training rebuilds each example's ad features by version
DEFAULT_USER_TTL_MS = 7 * 86_400_000


@dataclass(frozen=True)
class FeaturesTopics:
    served: str = topics.AD_SERVED
    events: str = topics.AD_EVENTS
    conversions: str = topics.AD_CONVERSIONS
    feedback: str = topics.AD_FEEDBACK
    ads: str = topics.SERVING_ADS
    campaigns: str = topics.SERVING_CAMPAIGNS
    features: str = topics.FEATURES_ADS
    registry: str = topics.MODEL_REGISTRY
    dead_letters: str = topics.DEAD_LETTERS
    deletions: str = topics.PRIVACY_DELETIONS


@dataclass(frozen=True)
class FeaturesSettings:
    """Everything the job takes."""

    kafka: KafkaJobSettings
    snapshot_dir: str
    topics: FeaturesTopics = field(default_factory=FeaturesTopics)
    windows: WindowRules = field(default_factory=WindowRules)
    estimates: EstimateRules = field(default_factory=EstimateRules)
    keep_snapshots: int = DEFAULT_KEEP_SNAPSHOTS
    redis_url: str = ""  # '' writes no user features
    user_ttl_ms: int = DEFAULT_USER_TTL_MS
    out_of_orderness_ms: int = 5000
    idle_timeout_ms: int = 2000


def default_snapshot_dir(environ: Mapping[str, str] = os.environ) -> str:
    """The platform home's features/ folder (ADSERVE_HOME, jobs.flink_io.platform_home)."""
    return str(platform_home(environ) / "features")


def default_redis_url(environ: Mapping[str, str] = os.environ) -> str:
    """The local platform's Redis (ADSERVE_HOST, ADSERVE_REDIS_PORT)."""
    return f"redis://{environ.get('ADSERVE_HOST', '127.0.0.1')}:{environ.get('ADSERVE_REDIS_PORT', '16379')}/0"


def snapshot_folder(settings: FeaturesSettings) -> Path:
    return Path(settings.snapshot_dir)
