"""Entry point of `archiver`: flags and environment -> ArchiverSettings, printed, then the job runs.

    adserve jobs deploy archiver -- --archive-dir /data/archive
    (any Flink file system URI works: file://, s3://, gs://, hdfs://)"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Sequence

from jobs.archiver.settings import ArchiverSettings
from jobs.archiver.topology import build
from jobs.flink_io import (add_common_arguments, fetched_jar, parse, platform_home, run_job,
                           settings_from_args)
from schemas import topics

JOB_NAME = "archiver"
DEFAULT_TOPICS = (topics.AD_SERVED, topics.AD_EVENTS, topics.AD_CONVERSIONS, topics.BILLED_SPEND,
                  topics.SERVING_CAMPAIGNS, topics.TRAINING_EXAMPLES, topics.PRIVACY_DELETIONS)


def archive_uri(archive: str) -> str:
    """A Flink file system URI as it is, a local folder as its file:// URI."""
    return archive if "://" in archive else Path(archive).resolve().as_uri()


def parse_settings(argv: Sequence[str] | None = None) -> ArchiverSettings:
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, JOB_NAME)
    parser.add_argument("--archive-dir", default=os.environ.get("ADSERVE_ARCHIVE_DIR", ""),
                        help="where the files go: a local folder or a Flink file system URI "
                             "(default: ADSERVE_ARCHIVE_DIR or the local platform's archive folder)")
    parser.add_argument("--topics", default=",".join(DEFAULT_TOPICS),
                        help=f"comma-separated topics to archive (default {','.join(DEFAULT_TOPICS)})")
    parser.add_argument("--avro-jar", default=os.environ.get("ADSERVE_FLINK_AVRO_JAR", ""),
                        help="path of flink-sql-avro (default: ADSERVE_FLINK_AVRO_JAR or the one `adserve up` "
                             "fetched)")
    parser.add_argument("--out-of-orderness-ms", type=int, default=2000)
    parser.add_argument("--idle-timeout-ms", type=int, default=2000,
                        help="a partition quiet this long stops holding the hour's commit back")
    parser.add_argument("--commit-delay-s", type=int, default=60,
                        help="an hour's _SUCCESS file waits this long past the hour's end in event time")
    args = parse(parser, argv)
    return ArchiverSettings(
        settings_from_args(args, JOB_NAME), archive_uri(args.archive_dir or str(platform_home() / "archive")),
        tuple(t.strip() for t in args.topics.split(",") if t.strip()), args.avro_jar or fetched_jar("avro"),
        out_of_orderness_ms=args.out_of_orderness_ms, idle_timeout_ms=args.idle_timeout_ms,
        commit_delay_s=args.commit_delay_s)


def main(argv: Sequence[str] | None = None) -> None:
    settings = parse_settings(argv)
    run_job(JOB_NAME, settings, build, extra_jars=[Path(settings.avro_jar)])


if __name__ == "__main__":
    main()
