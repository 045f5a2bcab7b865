"""Flink job `archiver`: Kafka topics -> hourly Avro container files, the input of every Beam backfill.

Each record is archived as it was on the topic, in an envelope: topic,
partition, offset, event_time (the record's timestamp, UTC), key and value
bytes. The value keeps its Avro single-object header, so a backfill decodes it
with schemas.codec and whatever contract version wrote it. Files land in

    {archive}/{topic}/dt=YYYY-MM-DD/hr=HH/part-*        (hidden .part-*.inprogress until committed)

written by Flink's filesystem sink in the Avro format (deflate), rolled and
committed at each checkpoint: a record is in exactly one committed file, also
across a restart from a checkpoint. An hour's folder gets its `_SUCCESS` file
once the watermark (event time, per topic) has passed the end of the hour
plus --commit-delay-s, so a backfill of a day can check that all 24 are
complete. Pure Flink SQL: no Python operator on the path.

    adserve jobs deploy archiver -- --archive-dir /data/archive
    (any Flink file system URI works: file://, s3://, gs://, hdfs://)

Deploy: adserve jobs deploy archiver"""
from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Sequence

from jobs.flink_io import (KafkaJobSettings, add_common_arguments, create_environment, kafka_source_table, parse,
                           settings_from_args)

JOB_NAME = "archiver"
LOG = logging.getLogger(f"adserve.jobs.{JOB_NAME}")
DEFAULT_TOPICS = ("ad.served", "ad.events", "ad.conversions", "billing.billed_spend", "serving.campaigns",
                  "training.examples")


def folder_name(topic: str) -> str:
    """A topic's folder under the archive (topic names are already safe path segments)."""
    if not topic or "/" in topic or topic.startswith("."):
        raise ValueError(f"not an archivable topic name: {topic!r}")
    return topic


def build(t_env, settings: KafkaJobSettings, archive_uri: str, topics: Sequence[str], *,
          out_of_orderness_ms: int = 2000, idle_timeout_ms: int = 2000, commit_delay_s: int = 60) -> None:
    t_env.get_config().set("table.local-time-zone", "UTC")  # dt / hr folders are UTC
    statements = t_env.create_statement_set()
    for i, topic in enumerate(topics):
        source, sink = f"archive_in_{i}", f"archive_out_{i}"
        kafka_source_table(t_env, source, topic, settings, out_of_orderness_ms=out_of_orderness_ms,
                           idle_timeout_ms=idle_timeout_ms)
        path = f"{archive_uri.rstrip('/')}/{folder_name(topic)}"
        t_env.execute_sql(f"""
            CREATE TEMPORARY TABLE `{sink}` (
              `topic` STRING, `partition` INT, `offset` BIGINT, event_time TIMESTAMP(3), k BYTES, v BYTES,
              dt STRING, hr STRING
            ) PARTITIONED BY (dt, hr) WITH (
              'connector' = 'filesystem',
              'path' = '{path}',
              'format' = 'avro',
              'avro.codec' = 'deflate',
              'sink.partition-commit.trigger' = 'partition-time',
              'partition.time-extractor.timestamp-pattern' = '$dt $hr:00:00',
              'sink.partition-commit.delay' = '{3600 + commit_delay_s} s',
              'sink.partition-commit.watermark-time-zone' = 'UTC',
              'sink.partition-commit.policy.kind' = 'success-file'
            )""")
        statements.add_insert_sql(f"""
            INSERT INTO `{sink}`
            SELECT `topic`, `partition`, `offset`, CAST(ts AS TIMESTAMP(3)), k, v,
                   DATE_FORMAT(ts, 'yyyy-MM-dd'), DATE_FORMAT(ts, 'HH')
            FROM `{source}`""")
    statements.attach_as_datastream()


def main(argv: Sequence[str] | None = None) -> None:
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
    settings = settings_from_args(args, JOB_NAME)
    logging.basicConfig(level=logging.INFO)
    from infra.platform import PlatformSettings
    from infra.platform.jars import flink_avro_jar

    platform = PlatformSettings.from_env()
    archive = args.archive_dir or str(platform.home / "archive")
    archive_uri = archive if "://" in archive else Path(archive).resolve().as_uri()
    topics = [t.strip() for t in args.topics.split(",") if t.strip()]
    LOG.info("starting %s: %s -> %s (%s)", JOB_NAME, ", ".join(topics), archive_uri, settings.describe())
    env, t_env = create_environment(settings, extra_jars=[Path(args.avro_jar or flink_avro_jar(platform))])
    build(t_env, settings, archive_uri, topics, out_of_orderness_ms=args.out_of_orderness_ms,
          idle_timeout_ms=args.idle_timeout_ms, commit_delay_s=args.commit_delay_s)
    env.execute(JOB_NAME)


if __name__ == "__main__":
    main()
