"""Entry point of `event_counts`: flags and environment -> EventCountsSettings, printed, then the job runs.

Run locally (mini-cluster):  python -m jobs.event_counts --bounded
Deploy to a cluster:         adserve jobs deploy event_counts   (wraps `flink run`)"""
from __future__ import annotations

from jobs.common.job import Job
from jobs.event_counts.settings import EventCountsSettings
from jobs.event_counts.topology import build

JOB_NAME = "event_counts"
JOB = Job(JOB_NAME, EventCountsSettings, build, __doc__)
parser, parse_settings, main = JOB.parser, JOB.parse_settings, JOB.main

if __name__ == "__main__":
    main()
