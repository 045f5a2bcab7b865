"""Entry point of `features`: flags and environment -> FeaturesSettings, printed, then the job runs.

Deploy:     adserve jobs deploy features [--window-ms 86400000] [--snapshot-dir DIR]
Run locally (mini-cluster, a bounded backfill):  python -m jobs.features --bounded --startup-mode earliest-offset"""
from __future__ import annotations

import argparse
from core.ad_stats import EstimateRules
from core.feature_windows import BUCKET_MS, DEFAULT_WINDOW_MS, SERVED_RETENTION_MS, WindowRules
from jobs.common.job import Job
from jobs.features.settings import TOPIC_ROLES, FeaturesSettings, FeaturesTopics, topic_flag
from jobs.features.topology import build

JOB_NAME = "features"
RULES = EstimateRules()
# The estimates' flags (docs/features.md): each EstimateRules field's flag and what it means; the default is
# the field's own.
ESTIMATE_FLAGS = {
    "default_base_rate": ("--default-ctr", "top-position click rate before any traffic"),
    "base_rate_pseudo_impressions": ("--base-rate-pseudo-impressions", "a placement and position's base rate is "
                                     "shrunk toward the platform's by these"),
    "ad_pseudo_clicks": ("--ad-pseudo-clicks", "m_ad: an ad's click ratio is shrunk toward its advertiser's by "
                         "these expected clicks"),
    "advertiser_pseudo_clicks": ("--advertiser-pseudo-clicks", "m_adv: an advertiser's ratio is shrunk toward "
                                 "the platform's"),
    "default_cvr": ("--default-cvr", "conversions per click before any conversion"),
    "cvr_pseudo_clicks": ("--cvr-pseudo-clicks", "conversion rates shrink toward the advertiser's, then the "
                          "platform's, by these clicks"),
    "quality_pseudo_impressions": ("--quality-pseudo-impressions", "hide and report rates shrink toward the "
                                   "platform's by these impressions"),
    "hide_cost_micros": ("--hide-cost-micros", "the money cost of one hide"),
    "report_cost_micros": ("--report-cost-micros", "the money cost of one report"),
}


def _topic_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("topics")
    for role, default in TOPIC_ROLES.items():
        group.add_argument(topic_flag(role), dest=f"{role}_topic", default=default)


def _estimate_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("estimates (docs/features.md)")
    for name, (flag, meaning) in ESTIMATE_FLAGS.items():
        default = getattr(RULES, name)
        group.add_argument(flag, dest=name, type=type(default), default=default,
                           help=f"{meaning} (default %(default)s)")


def _window_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--window-ms", type=int, default=DEFAULT_WINDOW_MS,
                        help="the sliding window behind every estimate, a whole number of ticks (default 1 day)")
    parser.add_argument("--tick-ms", type=int, default=BUCKET_MS,
                        help="the snapshot period and bucket length (default 5 minutes)")
    parser.add_argument("--served-retention-ms", type=int, default=SERVED_RETENTION_MS,
                        help="how long a served slot waits for its beacons (default 2 h)")


def feature_flags(parser: argparse.ArgumentParser) -> None:
    _topic_arguments(parser)
    _estimate_arguments(parser)
    _window_arguments(parser)


def feature_rules(args: argparse.Namespace) -> dict:
    """The topics, windows and estimates' rules from their flags."""
    return {"topics": FeaturesTopics(**{role: getattr(args, f"{role}_topic") for role in TOPIC_ROLES}),
            "windows": WindowRules(args.tick_ms, args.window_ms, args.served_retention_ms),
            "estimates": EstimateRules(**{name: getattr(args, name) for name in ESTIMATE_FLAGS})}


JOB = Job(JOB_NAME, FeaturesSettings, build, __doc__, flags=feature_flags, derive=feature_rules)
parser, parse_settings, main = JOB.parser, JOB.parse_settings, JOB.main

if __name__ == "__main__":
    main()
