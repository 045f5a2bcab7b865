"""The wiring of `archiver`: per topic, a Kafka source -> a partitioned filesystem sink in the Avro format.

Each record is archived in an envelope: topic, partition, offset, event_time (the record's timestamp, UTC),
key and value bytes; the value keeps its Avro single-object header, so a backfill decodes any contract
version. Files land in {archive}/{topic}/dt=YYYY-MM-DD/hr=HH/part-* (hidden .part-*.inprogress until
committed at a checkpoint: a record is in exactly one committed file, across restarts too). An hour's folder
gets `_SUCCESS` once the watermark has passed the hour's end plus the commit delay."""
from __future__ import annotations

from core.errors import InvalidArgument
from jobs.archiver.settings import ArchiverSettings
from jobs.common.kafka_tables import kafka_source_table


def folder_name(topic: str) -> str:
    """A topic's folder under the archive (topic names are already safe path segments)."""
    if not topic or "/" in topic or topic.startswith("."):
        raise InvalidArgument(f"not an archivable topic name: {topic!r}")
    return topic


def _create_sink(t_env, sink: str, path: str, commit_delay_s: int) -> None:
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


def build(t_env, settings: ArchiverSettings) -> None:
    """Wire the job graph onto t_env's environment (no execution)."""
    t_env.get_config().set("table.local-time-zone", "UTC")  # dt / hr folders are UTC
    statements = t_env.create_statement_set()
    for topic in settings.topics:
        # Named by topic, not by place in the list: a sink's uid is its table's name (jobs/uids.py), so its
        # pending files restore to the same topic's sink whatever topics come or go around it.
        source, sink = f"archive_in_{folder_name(topic)}", f"archive_out_{folder_name(topic)}"
        kafka_source_table(t_env, source, topic, settings.kafka, out_of_orderness_ms=settings.out_of_orderness_ms,
                           idle_timeout_ms=settings.idle_timeout_ms)
        _create_sink(t_env, sink, f"{settings.archive_uri.rstrip('/')}/{folder_name(topic)}", settings.commit_delay_s)
        statements.add_insert_sql(f"""
            INSERT INTO `{sink}`
            SELECT `topic`, `partition`, `offset`, CAST(ts AS TIMESTAMP(3)), k, v,
                   DATE_FORMAT(ts, 'yyyy-MM-dd'), DATE_FORMAT(ts, 'HH')
            FROM `{source}`""")
    statements.attach_as_datastream()
