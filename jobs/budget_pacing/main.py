"""The budget job's entry point: flags and environment into one typed settings object, printed at start (secrets
masked), then the topology built and run. `flink run -pym jobs.budget_pacing` (or `python -m`) starts here."""
from __future__ import annotations

import argparse
import logging
import os
from typing import Sequence

from core import budget
from core.settings import describe
from jobs.budget_pacing.functions import JOB_NAME, SHARDS, load_curves
from jobs.budget_pacing.settings import BudgetPacingSettings, PacingTopics, default_redis_url, settings_from
from jobs.budget_pacing.topology import build
from jobs.flink_io import add_common_arguments, add_shards_argument, create_environment, parse
from jobs.uids import assign_stable_uids

LOG = logging.getLogger(f"adserve.jobs.{JOB_NAME}")


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
                     help="traffic shapes and values to beat from pipelines.traffic_curves (JSON): a local path, "
                          "file:// or object-storage URL (gs://, s3://: Beam's filesystems); one given but missing "
                          "or unreadable fails the job at start; empty: flat curves and no forecast")
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


def run(settings: BudgetPacingSettings) -> None:
    from jobs.jvm import udf_jar

    env, t_env = create_environment(settings.kafka, extra_jars=[udf_jar()])
    t_env.create_java_temporary_system_function("campaign_of", "io.adserve.flink.LeadingCampaignId")
    build(t_env, settings)
    assign_stable_uids(env)  # a savepoint of this job restores into its next build (jobs/uids.py)
    env.execute(JOB_NAME)


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
    settings = settings_from(parse(parser(), argv))
    logging.basicConfig(level=logging.INFO)
    LOG.info("starting %s: %s", JOB_NAME, describe(settings))
    check_curves(settings)
    run(settings)


if __name__ == "__main__":
    main()
