"""Entry point of `click_aggregator`: flags and environment -> ClickAggregatorSettings, printed, then the job
runs (with the project's JVM functions registered and the SQL state's time-to-live set).

Deploy: adserve jobs deploy click_aggregator"""
from __future__ import annotations

from core import clicks
from jobs.click_aggregator.settings import ClickAggregatorSettings
from jobs.click_aggregator.topology import build
from jobs.common.jars import project_functions
from jobs.common.job import Job

JOB_NAME = "click_aggregator"


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


# Billed spend feeds the budget loop (short bundles); the deduplication state holds every impression id of the
# last 70 minutes, too much to write whole at every checkpoint (the changelog writes each id once).
JOB = Job(JOB_NAME, ClickAggregatorSettings, build, __doc__, bundle_time_ms=100, state_changelog=True,
          extra_jars=project_functions, configure=configure)
parser, parse_settings, main = JOB.parser, JOB.parse_settings, JOB.main

if __name__ == "__main__":
    main()
