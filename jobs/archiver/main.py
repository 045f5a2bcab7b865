"""Entry point of `archiver`: flags and environment -> ArchiverSettings, printed, then the job runs.

    adserve jobs deploy archiver -- --archive-dir /data/archive
    (any Flink file system URI works: file://, s3://, gs://, hdfs://)"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from jobs.archiver.settings import ArchiverSettings
from jobs.archiver.topology import build
from jobs.common.jars import fetched_jar, platform_home
from jobs.common.job import Job
from schemas import topics

JOB_NAME = "archiver"
DEFAULT_TOPICS = (topics.AD_SERVED, topics.AD_EVENTS, topics.AD_CONVERSIONS, topics.BILLED_SPEND,
                  topics.SERVING_CAMPAIGNS, topics.TRAINING_EXAMPLES, topics.PRIVACY_DELETIONS)


def archive_uri(archive: str) -> str:
    """A Flink file system URI as it is, a local folder as its file:// URI."""
    return archive if "://" in archive else Path(archive).resolve().as_uri()


def archive_flags(parser: argparse.ArgumentParser) -> None:
    """What to archive, where, and the Avro format's jar."""
    parser.add_argument("--archive-dir", default=os.environ.get("ADSERVE_ARCHIVE_DIR", ""),
                        help="where the files go: a local folder or a Flink file system URI "
                             "(default: ADSERVE_ARCHIVE_DIR or the local platform's archive folder)")
    parser.add_argument("--topics", default=",".join(DEFAULT_TOPICS),
                        help=f"comma-separated topics to archive (default {','.join(DEFAULT_TOPICS)})")
    parser.add_argument("--avro-jar", default=os.environ.get("ADSERVE_FLINK_AVRO_JAR", ""),
                        help="path of flink-sql-avro (default: ADSERVE_FLINK_AVRO_JAR or the one `adserve up` "
                             "fetched)")


def archive_settings(args: argparse.Namespace) -> dict:
    return {"archive_uri": archive_uri(args.archive_dir or str(platform_home() / "archive")),
            "topics": tuple(t.strip() for t in args.topics.split(",") if t.strip()),
            "avro_jar": args.avro_jar or fetched_jar("avro")}


def avro_jar(settings: ArchiverSettings) -> list[Path]:
    return [Path(settings.avro_jar)]


JOB = Job(JOB_NAME, ArchiverSettings, build, __doc__, flags=archive_flags, derive=archive_settings,
          extra_jars=avro_jar)
parser, parse_settings, main = JOB.parser, JOB.parse_settings, JOB.main

if __name__ == "__main__":
    main()
