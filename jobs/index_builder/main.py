"""Entry point of `index_builder`: flags and environment -> IndexBuilderSettings, printed, then the job runs.

Deploy: adserve jobs deploy index_builder"""
from __future__ import annotations

import argparse
from typing import Sequence

from jobs.flink_io import add_common_arguments, parse, run_job, settings_from_args
from jobs.index_builder.settings import IndexBuilderSettings
from jobs.index_builder.topology import build
from schemas import topics

JOB_NAME = "index_builder"


def parse_settings(argv: Sequence[str] | None = None) -> IndexBuilderSettings:
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, JOB_NAME, bundle_time_ms=100)  # advertiser changes: freshness first
    parser.add_argument("--dead-letter-topic", default=topics.DEAD_LETTERS)
    parser.add_argument("--ads-topic", default=topics.SERVING_ADS, help="where ad records go (tests, benchmarks)")
    parser.add_argument("--campaigns-topic", default=topics.SERVING_CAMPAIGNS, help="where campaign records go")
    parser.add_argument("--reserves-topic", default=topics.SERVING_RESERVES, help="where reserve rules go")
    args = parse(parser, argv)
    return IndexBuilderSettings(settings_from_args(args, JOB_NAME), ads_topic=args.ads_topic,
                                campaigns_topic=args.campaigns_topic, reserves_topic=args.reserves_topic,
                                dead_letter_topic=args.dead_letter_topic)


def main(argv: Sequence[str] | None = None) -> None:
    run_job(JOB_NAME, parse_settings(argv), build)


if __name__ == "__main__":
    main()
