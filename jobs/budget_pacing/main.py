"""The budget job's entry point: flags and environment into one typed settings object, printed at start (secrets
masked), then the topology built and run. `flink run -pym jobs.budget_pacing` (or `python -m`) starts here."""
from __future__ import annotations

import argparse
import logging
from typing import Sequence

from jobs.budget_pacing.functions import JOB_NAME, load_curves
from jobs.budget_pacing.settings import BudgetPacingSettings, PacingTopics
from jobs.budget_pacing.topology import build
from jobs.common.args import add_settings_arguments, option_values
from jobs.common.jars import project_functions
from jobs.common.job import Job

LOG = logging.getLogger(f"adserve.jobs.{JOB_NAME}")


def topic_flags(parser: argparse.ArgumentParser) -> None:
    add_settings_arguments(parser.add_argument_group("topics"), PacingTopics)


def pacing_topics(args: argparse.Namespace) -> dict:
    return {"topics": PacingTopics(**option_values(args, PacingTopics))}


def configure(env, t_env) -> None:
    """The JVM function that reads a record's leading campaign id, which the topology's views call."""
    t_env.create_java_temporary_system_function("campaign_of", "io.adserve.flink.LeadingCampaignId")


# The control loop: freshness first (short bundles)
JOB = Job(JOB_NAME, BudgetPacingSettings, build, __doc__, bundle_time_ms=100, flags=topic_flags,
          derive=pacing_topics, extra_jars=project_functions, configure=configure)
parser, parse_settings, run = JOB.parser, JOB.parse_settings, JOB.run


def check_curves(settings: BudgetPacingSettings) -> None:
    """Read the curves once before the job is submitted, so a wrong --curves fails here, naming the setting,
    and not later on a TaskManager (the pacer reads them again in open())."""
    curves = load_curves(settings.curves)
    if not settings.curves:
        LOG.info("no --curves / ADSERVE_CURVES given: flat traffic curves and no forecast for new campaigns")
    else:
        LOG.info("traffic curves from %s: %d campaigns, %d placements", settings.curves,
                 len(curves.campaigns or {}), len(curves.placements or {}))


def main(argv: Sequence[str] | None = None) -> None:
    settings = parse_settings(argv)
    logging.basicConfig(level=logging.INFO)
    check_curves(settings)  # before the job is built or submitted
    run(settings)


if __name__ == "__main__":
    main()
