"""The budget job's entry point: flags and environment into one typed settings object, printed at start (secrets
masked), then the topology built and run. `flink run -pym jobs.budget_pacing` (or `python -m`) starts here."""
from __future__ import annotations

import argparse
import logging
import os
import re
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

from core import budget
from jobs.budget_pacing.functions import JOB_NAME, SHARDS
from jobs.flink_io import (KafkaJobSettings, add_common_arguments, add_shards_argument, create_environment, parse,
                           settings_from_args)
from schemas import topics as topic_names

LOG = logging.getLogger(f"adserve.jobs.{JOB_NAME}")


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

    def describe(self) -> str:
        values = {k: v for k, v in asdict(self).items() if k != "kafka"}
        values["redis_url"] = re.sub(r"//([^@/]*)@", "//***@", self.redis_url)  # a password in the URL
        return f"{self.kafka.describe()}, " + ", ".join(f"{k}={v}" for k, v in values.items())


def default_redis_url(environ: Mapping[str, str] = os.environ) -> str:
    """ADSERVE_PACING_REDIS_URL, else the local platform's Redis (ADSERVE_HOST, ADSERVE_REDIS_PORT)."""
    return environ.get("ADSERVE_PACING_REDIS_URL") or \
        f"redis://{environ.get('ADSERVE_HOST', '127.0.0.1')}:{environ.get('ADSERVE_REDIS_PORT', '16379')}/0"


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__)
    add_common_arguments(out, JOB_NAME, bundle_time_ms=100)  # the control loop: freshness first
    defaults = PacingTopics()
    for name in ("spend", "campaigns", "ads", "billed", "state", "leases"):
        out.add_argument(f"--{name}-topic", default=getattr(defaults, name))
    out.add_argument("--dead-letter-topic", default=defaults.dead_letters)
    out.add_argument("--redis-url", default=default_redis_url(),
                     help="where pacing:{campaign} goes (default: the local platform's Redis; '' for none)")
    out.add_argument("--curves", default=os.environ.get("ADSERVE_CURVES", ""),
                     help="traffic shapes and values to beat from pipelines.traffic_curves (JSON); default: "
                          "flat curves and no forecast until one exists")
    out.add_argument("--out-of-orderness-ms", type=int, default=2000,
                     help="how far a spend report may trail the newest one and still make its window")
    out.add_argument("--idle-timeout-ms", type=int, default=2000,
                     help="after this long without records, the campaign and billing topics stop holding "
                          "event time back")
    add_shards_argument(out, SHARDS, "pacer")
    out.add_argument("--heartbeat-ms", type=int, default=budget.HEARTBEAT_MS,
                     help="a campaign's state is re-sent at least this often even when unchanged "
                          f"(default {budget.HEARTBEAT_MS}; 10000 sends one every step)")
    return out


def settings_from(args: argparse.Namespace) -> BudgetPacingSettings:
    topics = PacingTopics(args.spend_topic, args.campaigns_topic, args.ads_topic, args.billed_topic,
                          args.state_topic, args.leases_topic, args.dead_letter_topic)
    return BudgetPacingSettings(settings_from_args(args, JOB_NAME), topics, args.redis_url, args.curves,
                                args.out_of_orderness_ms, args.idle_timeout_ms, args.heartbeat_ms, args.shards)


def run(settings: BudgetPacingSettings) -> None:
    from jobs.budget_pacing.topology import build
    from jobs.jvm import udf_jar

    env, t_env = create_environment(settings.kafka, extra_jars=[udf_jar()])
    t_env.create_java_temporary_system_function("campaign_of", "io.adserve.flink.LeadingCampaignId")
    build(t_env, settings)
    env.execute(JOB_NAME)


def main(argv: Sequence[str] | None = None) -> None:
    settings = settings_from(parse(parser(), argv))
    logging.basicConfig(level=logging.INFO)
    LOG.info("starting %s: %s", JOB_NAME, settings.describe())
    run(settings)


if __name__ == "__main__":
    main()
