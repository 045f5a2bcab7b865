"""Entry point of `index_builder`: flags and environment -> IndexBuilderSettings, printed, then the job runs.

Deploy: adserve jobs deploy index_builder"""
from __future__ import annotations

from jobs.common.job import Job
from jobs.index_builder.settings import IndexBuilderSettings
from jobs.index_builder.topology import build

JOB_NAME = "index_builder"
JOB = Job(JOB_NAME, IndexBuilderSettings, build, __doc__, bundle_time_ms=100)  # advertiser changes: freshness first
parser, parse_settings, main = JOB.parser, JOB.parse_settings, JOB.main

if __name__ == "__main__":
    main()
