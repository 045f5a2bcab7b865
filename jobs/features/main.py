"""Entry point of `features`: flags and environment -> FeaturesSettings, printed, then the job runs.

Deploy:     adserve jobs deploy features [--window-ms 86400000] [--snapshot-dir DIR]
Run locally (mini-cluster, a bounded backfill):  python -m jobs.features --bounded --startup-mode earliest-offset"""
from __future__ import annotations

import argparse
from typing import Sequence

from core.ad_stats import EstimateRules
from core.feature_windows import BUCKET_MS, DEFAULT_WINDOW_MS, SERVED_RETENTION_MS, WindowRules
from jobs.features.settings import (DEFAULT_KEEP_SNAPSHOTS, DEFAULT_USER_TTL_MS, FeaturesSettings, FeaturesTopics,
                                    default_redis_url, default_snapshot_dir)
from jobs.features.topology import build
from jobs.flink_io import add_common_arguments, parse, run_job, settings_from_args
from schemas import topics

JOB_NAME = "features"
RULES = EstimateRules()


def _topic_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("topics")
    for flag, default in (("served", topics.AD_SERVED), ("events", topics.AD_EVENTS),
                          ("conversions", topics.AD_CONVERSIONS), ("feedback", topics.AD_FEEDBACK),
                          ("ads", topics.SERVING_ADS), ("campaigns", topics.SERVING_CAMPAIGNS),
                          ("features", topics.FEATURES_ADS), ("registry", topics.MODEL_REGISTRY),
                          ("dead-letter", topics.DEAD_LETTERS), ("deletions", topics.PRIVACY_DELETIONS)):
        group.add_argument(f"--{flag}-topic", default=default)


def _estimate_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("estimates (docs/features.md)")
    group.add_argument("--default-ctr", type=float, default=RULES.default_base_rate,
                       help="top-position click rate before any traffic (default %(default)s)")
    group.add_argument("--base-rate-pseudo-impressions", type=float, default=RULES.base_rate_pseudo_impressions,
                       help="a placement and position's base rate is shrunk toward the platform's by these "
                            "(default %(default)s)")
    group.add_argument("--ad-pseudo-clicks", type=float, default=RULES.ad_pseudo_clicks,
                       help="m_ad: an ad's click ratio is shrunk toward its advertiser's by these expected clicks "
                            "(default %(default)s)")
    group.add_argument("--advertiser-pseudo-clicks", type=float, default=RULES.advertiser_pseudo_clicks,
                       help="m_adv: an advertiser's ratio is shrunk toward the platform's (default %(default)s)")
    group.add_argument("--default-cvr", type=float, default=RULES.default_cvr,
                       help="conversions per click before any conversion (default %(default)s)")
    group.add_argument("--cvr-pseudo-clicks", type=float, default=RULES.cvr_pseudo_clicks,
                       help="conversion rates shrink toward the advertiser's, then the platform's, by these clicks "
                            "(default %(default)s)")
    group.add_argument("--quality-pseudo-impressions", type=float, default=RULES.quality_pseudo_impressions,
                       help="hide and report rates shrink toward the platform's by these impressions "
                            "(default %(default)s)")
    group.add_argument("--hide-cost-micros", type=int, default=RULES.hide_cost_micros,
                       help="the money cost of one hide (default %(default)s)")
    group.add_argument("--report-cost-micros", type=int, default=RULES.report_cost_micros,
                       help="the money cost of one report (default %(default)s)")


def parse_settings(argv: Sequence[str] | None = None) -> FeaturesSettings:
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, JOB_NAME)
    _topic_arguments(parser)
    _estimate_arguments(parser)
    parser.add_argument("--window-ms", type=int, default=DEFAULT_WINDOW_MS,
                        help="the sliding window behind every estimate, a whole number of ticks (default 1 day)")
    parser.add_argument("--tick-ms", type=int, default=BUCKET_MS,
                        help="the snapshot period and bucket length (default 5 minutes)")
    parser.add_argument("--served-retention-ms", type=int, default=SERVED_RETENTION_MS,
                        help="how long a served slot waits for its beacons (default 2 h)")
    parser.add_argument("--snapshot-dir", default=default_snapshot_dir(),
                        help="where ad-features-v{version}.npz files go (default: $ADSERVE_HOME/features)")
    parser.add_argument("--keep-snapshots", type=int, default=DEFAULT_KEEP_SNAPSHOTS,
                        help="the newest snapshot files kept in the folder (default %(default)s, a day)")
    parser.add_argument("--redis-url", default=default_redis_url(),
                        help="Redis of the user profiles that get consented users' features ('' for none)")
    parser.add_argument("--user-ttl-ms", type=int, default=DEFAULT_USER_TTL_MS,
                        help="expiry of a user key only this job wrote (default 7 days)")
    parser.add_argument("--out-of-orderness-ms", type=int, default=5000,
                        help="how far a served record or beacon may trail the newest one and still be on time")
    parser.add_argument("--idle-timeout-ms", type=int, default=2000,
                        help="a side input's partition without records this long stops counting for the clock")
    args = parse(parser, argv)
    rules = EstimateRules(
        default_base_rate=args.default_ctr, base_rate_pseudo_impressions=args.base_rate_pseudo_impressions,
        ad_pseudo_clicks=args.ad_pseudo_clicks, advertiser_pseudo_clicks=args.advertiser_pseudo_clicks,
        default_cvr=args.default_cvr, cvr_pseudo_clicks=args.cvr_pseudo_clicks,
        quality_pseudo_impressions=args.quality_pseudo_impressions, hide_cost_micros=args.hide_cost_micros,
        report_cost_micros=args.report_cost_micros)
    return FeaturesSettings(
        settings_from_args(args, JOB_NAME), snapshot_dir=args.snapshot_dir,
        topics=FeaturesTopics(args.served_topic, args.events_topic, args.conversions_topic, args.feedback_topic,
                              args.ads_topic, args.campaigns_topic, args.features_topic, args.registry_topic,
                              args.dead_letter_topic, args.deletions_topic),
        windows=WindowRules(args.tick_ms, args.window_ms, args.served_retention_ms), estimates=rules,
        keep_snapshots=args.keep_snapshots, redis_url=args.redis_url, user_ttl_ms=args.user_ttl_ms,
        out_of_orderness_ms=args.out_of_orderness_ms, idle_timeout_ms=args.idle_timeout_ms)


def main(argv: Sequence[str] | None = None) -> None:
    run_job(JOB_NAME, parse_settings(argv), build)


if __name__ == "__main__":
    main()
