"""Entry point of `training_join`: flags and environment -> TrainingJoinSettings, printed, then the job runs.

Deploy: adserve jobs deploy training_join [--keep-rate 0.1] [--conversion-window-ms 604800000]"""
from __future__ import annotations

import argparse
from typing import Sequence

from core import training
from jobs.flink_io import add_common_arguments, parse, run_job, settings_from_args
from jobs.training_join.settings import TrainingJoinSettings
from jobs.training_join.topology import build
from schemas import topics

JOB_NAME = "training_join"


def parse_settings(argv: Sequence[str] | None = None) -> TrainingJoinSettings:
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, JOB_NAME)
    parser.add_argument("--served-topic", default=topics.AD_SERVED)
    parser.add_argument("--events-topic", default=topics.AD_EVENTS)
    parser.add_argument("--conversions-topic", default=topics.AD_CONVERSIONS)
    parser.add_argument("--examples-topic", default=topics.TRAINING_EXAMPLES)
    parser.add_argument("--dead-letter-topic", default=topics.DEAD_LETTERS)
    parser.add_argument("--deletions-topic", default=topics.PRIVACY_DELETIONS,
                        help="the deletion requests: a deleted user's examples are never emitted")
    parser.add_argument("--keep-rate", type=float, default=training.DEFAULT_KEEP_RATE,
                        help=f"share of negatives kept (default {training.DEFAULT_KEEP_RATE}); every click is kept")
    parser.add_argument("--conversion-window-ms", type=int, default=training.CONVERSION_WINDOW_MS,
                        help="a click's conversion label is final this long after serving (default 7 days)")
    parser.add_argument("--idle-timeout-ms", type=int, default=2000,
                        help="an ad.conversions partition without records this long stops counting for the clock")
    parser.add_argument("--out-of-orderness-ms", type=int, default=5000,
                        help="how far a record may trail the newest one and still count before its label is final")
    args = parse(parser, argv)
    return TrainingJoinSettings(
        settings_from_args(args, JOB_NAME), served_topic=args.served_topic, events_topic=args.events_topic,
        conversions_topic=args.conversions_topic, examples_topic=args.examples_topic,
        dead_letter_topic=args.dead_letter_topic, deletions_topic=args.deletions_topic,
        rules=training.JoinRules(args.keep_rate, args.conversion_window_ms),
        out_of_orderness_ms=args.out_of_orderness_ms, idle_timeout_ms=args.idle_timeout_ms)


def main(argv: Sequence[str] | None = None) -> None:
    run_job(JOB_NAME, parse_settings(argv), build)


if __name__ == "__main__":
    main()
