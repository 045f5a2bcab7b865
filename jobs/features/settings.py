"""The typed settings `features` runs with: the Kafka plumbing, its topics, its windows, the estimates' priors,
where snapshots go and where user features go. Plain data: each setting a flag sets as it is is declared once
here (jobs.common.settings.option); main.py parses them, topology.py wires the job from them."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from core.ad_stats import EstimateRules
from core.feature_windows import WindowRules
from jobs.common.jars import platform_home
from jobs.common.settings import KafkaJobSettings, default_redis_url, option
from schemas import topics

DEFAULT_KEEP_SNAPSHOTS = 288  # a day of 5-minute snapshots: training rebuilds each example's ad features by version
DEFAULT_USER_TTL_MS = 7 * 86_400_000
# Each role's topic, by the role's name; its flag is --{role}-topic (dead_letters: --dead-letter-topic).
TOPIC_ROLES = {"served": topics.AD_SERVED, "events": topics.AD_EVENTS, "conversions": topics.AD_CONVERSIONS,
               "feedback": topics.AD_FEEDBACK, "ads": topics.SERVING_ADS, "campaigns": topics.SERVING_CAMPAIGNS,
               "features": topics.FEATURES_ADS, "registry": topics.MODEL_REGISTRY,
               "dead_letters": topics.DEAD_LETTERS, "deletions": topics.PRIVACY_DELETIONS}


def topic_flag(role: str) -> str:
    return "--dead-letter-topic" if role == "dead_letters" else f"--{role}-topic"


@dataclass(frozen=True)
class FeaturesTopics:
    served: str = TOPIC_ROLES["served"]
    events: str = TOPIC_ROLES["events"]
    conversions: str = TOPIC_ROLES["conversions"]
    feedback: str = TOPIC_ROLES["feedback"]
    ads: str = TOPIC_ROLES["ads"]
    campaigns: str = TOPIC_ROLES["campaigns"]
    features: str = TOPIC_ROLES["features"]
    registry: str = TOPIC_ROLES["registry"]
    dead_letters: str = TOPIC_ROLES["dead_letters"]
    deletions: str = TOPIC_ROLES["deletions"]


def default_snapshot_dir(environ: Mapping[str, str] = os.environ) -> str:
    """The platform home's features/ folder (ADSERVE_HOME, jobs.common.jars.platform_home)."""
    return str(platform_home(environ) / "features")


@dataclass(frozen=True)
class FeaturesSettings:
    """Everything the job takes."""

    kafka: KafkaJobSettings
    snapshot_dir: str = option("", "where ad-features-v{version}.npz files go (default: $ADSERVE_HOME/features)",
                               default_from=default_snapshot_dir)
    topics: FeaturesTopics = field(default_factory=FeaturesTopics)
    windows: WindowRules = field(default_factory=WindowRules)
    estimates: EstimateRules = field(default_factory=EstimateRules)
    keep_snapshots: int = option(DEFAULT_KEEP_SNAPSHOTS, "the newest snapshot files kept in the folder (default "
                                                         "%(default)s, a day)")
    redis_url: str = option("", "Redis of the user profiles that get consented users' features ('' for none)",
                            default_from=default_redis_url)
    user_ttl_ms: int = option(DEFAULT_USER_TTL_MS, "expiry of a user key only this job wrote (default 7 days)")
    out_of_orderness_ms: int = option(5000, "how far a served record or beacon may trail the newest one and still "
                                            "be on time")
    idle_timeout_ms: int = option(2000, "a side input's partition without records this long stops counting for "
                                        "the clock")


def snapshot_folder(settings: FeaturesSettings) -> Path:
    return Path(settings.snapshot_dir)
