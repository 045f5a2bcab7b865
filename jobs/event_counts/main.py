"""Entry point of `event_counts`: flags and environment -> EventCountsSettings, printed, then the job runs.

Run locally (mini-cluster):  python -m jobs.event_counts --bounded
Deploy to a cluster:         adserve jobs deploy event_counts   (wraps `flink run`)"""
from __future__ import annotations

import argparse
from typing import Sequence

from core import event_counts as rules
from jobs.event_counts.settings import EventCountsSettings
from jobs.event_counts.topology import build
from jobs.flink_io import add_common_arguments, parse, run_job, settings_from_args
from schemas import topics

JOB_NAME = "event_counts"


def parse_settings(argv: Sequence[str] | None = None) -> EventCountsSettings:
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, JOB_NAME)
    parser.add_argument("--input-topic", default=topics.AD_EVENTS)
    parser.add_argument("--output-topic", default=topics.EVENT_COUNTS)
    parser.add_argument("--dead-letter-topic", default=topics.DEAD_LETTERS)
    parser.add_argument("--window-ms", type=int, default=rules.DEFAULT_WINDOW_MS)
    parser.add_argument("--out-of-orderness-ms", type=int, default=5000,
                        help="how far behind the newest event time an event may arrive and still count")
    args = parse(parser, argv)
    return EventCountsSettings(settings_from_args(args, JOB_NAME), input_topic=args.input_topic,
                               output_topic=args.output_topic, dead_letter_topic=args.dead_letter_topic,
                               window_ms=args.window_ms, out_of_orderness_ms=args.out_of_orderness_ms)


def main(argv: Sequence[str] | None = None) -> None:
    run_job(JOB_NAME, parse_settings(argv), build)


if __name__ == "__main__":
    main()
