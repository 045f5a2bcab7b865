"""Entry point of `click_aggregator`: flags and environment -> ClickAggregatorSettings, printed, then the job
runs (with the project's JVM functions registered and the SQL state's time-to-live set).

Deploy: adserve jobs deploy click_aggregator"""
from __future__ import annotations

import argparse
from typing import Sequence

from core import clicks
from jobs.click_aggregator.functions import SHARDS
from jobs.click_aggregator.settings import ClickAggregatorSettings
from jobs.click_aggregator.topology import build
from jobs.flink_io import add_common_arguments, add_shards_argument, parse, run_job, settings_from_args
from schemas import topics

JOB_NAME = "click_aggregator"


def parse_settings(argv: Sequence[str] | None = None) -> ClickAggregatorSettings:
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    # Billed spend feeds the budget loop (short bundles); the deduplication state holds every impression id of
    # the last 70 minutes, too much to write whole at every checkpoint (the changelog writes each id once).
    add_common_arguments(parser, JOB_NAME, bundle_time_ms=100, state_changelog=True)
    parser.add_argument("--events-topic", default=topics.AD_EVENTS)
    parser.add_argument("--campaigns-topic", default=topics.SERVING_CAMPAIGNS)
    parser.add_argument("--billed-topic", default=topics.BILLED_SPEND)
    parser.add_argument("--dead-letter-topic", default=topics.DEAD_LETTERS)
    parser.add_argument("--out-of-orderness-ms", type=int, default=2000,
                        help="how far an event may trail the newest one and still make its window")
    parser.add_argument("--idle-timeout-ms", type=int, default=2000,
                        help="after this long without records, a partition of the event or campaign topics "
                             "stops holding event time back")
    add_shards_argument(parser, SHARDS, "bill")
    args = parse(parser, argv)
    return ClickAggregatorSettings(
        settings_from_args(args, JOB_NAME), events_topic=args.events_topic, campaigns_topic=args.campaigns_topic,
        billed_topic=args.billed_topic, dead_letter_topic=args.dead_letter_topic,
        out_of_orderness_ms=args.out_of_orderness_ms, idle_timeout_ms=args.idle_timeout_ms, shards=args.shards)


def main(argv: Sequence[str] | None = None) -> None:
    from jobs.jvm import udf_jar

    run_job(JOB_NAME, parse_settings(argv), build, extra_jars=[udf_jar()], configure=configure)


def configure(env, t_env) -> None:
    """The project's JVM functions, the SQL state's lifetime and object reuse."""
    # Deduplication and burst-count state lives as long as a beacon can still verify, plus the lateness.
    t_env.get_config().set("table.exec.state.ttl", f"{clicks.DEDUPE_HORIZON_MS} ms")
    t_env.create_java_temporary_system_function("decode_event", "io.adserve.flink.DecodeAdEvent")
    t_env.create_java_temporary_system_function("campaign_of", "io.adserve.flink.LeadingCampaignId")
    # Records pass between chained operators by reference, not as copies (a third of the source chain's time
    # went to copying): safe, as the SQL operators are written for reuse, FirstSeen builds new rows, and Python
    # operators get serialized copies.
    env.get_config().enable_object_reuse()


if __name__ == "__main__":
    main()
