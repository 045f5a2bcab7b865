"""Entry point of `training_join`: flags and environment -> TrainingJoinSettings, printed, then the job runs.

Deploy: adserve jobs deploy training_join [--keep-rate 0.1] [--conversion-window-ms 604800000]"""
from __future__ import annotations

import argparse

from core import training
from jobs.common.job import Job
from jobs.training_join.settings import TrainingJoinSettings
from jobs.training_join.topology import build

JOB_NAME = "training_join"


def rule_flags(parser: argparse.ArgumentParser) -> None:
    """The join's rules (core.training.JoinRules)."""
    parser.add_argument("--keep-rate", type=float, default=training.DEFAULT_KEEP_RATE,
                        help=f"share of negatives kept (default {training.DEFAULT_KEEP_RATE}); every click is kept")
    parser.add_argument("--conversion-window-ms", type=int, default=training.CONVERSION_WINDOW_MS,
                        help="a click's conversion label is final this long after serving (default 7 days)")


def rules(args: argparse.Namespace) -> dict:
    return {"rules": training.JoinRules(args.keep_rate, args.conversion_window_ms)}


JOB = Job(JOB_NAME, TrainingJoinSettings, build, __doc__, flags=rule_flags, derive=rules)
parser, parse_settings, main = JOB.parser, JOB.parse_settings, JOB.main

if __name__ == "__main__":
    main()
