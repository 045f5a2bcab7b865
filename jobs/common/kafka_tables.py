"""Kafka topics as Flink tables of raw records: a source's rows carry their coordinates (topic, partition,
offset, timestamp) beside the key and value bytes, so a job can name exactly where a corrupt record came from; a
sink takes (key, value) bytes, exactly-once or at-least-once. The JVM does the Kafka I/O, transactions included;
Avro decoding happens in Python with schemas.codec."""
from __future__ import annotations

from core.errors import InvalidSettings
from jobs.common.settings import KafkaJobSettings

BYTES_ROW_FIELDS = ["k", "v"]


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def kafka_source_table(t_env, name: str, topic: str, settings: KafkaJobSettings,
                       out_of_orderness_ms: int | None = None, idle_timeout_ms: int | None = None,
                       side_input: bool = False) -> None:
    """Register a Kafka topic as a table of raw records with their coordinates.

    With out_of_orderness_ms, the Kafka record timestamp (which every producer
    of the project sets to the record's event time) is the rowtime, and the
    source emits watermarks per partition, so a partition that is read ahead
    of the others does not make their records late.

    A side input (campaign records, billed totals: state updates applied on arrival beside a high-volume
    stream that drives the job's clock) must never hold that clock back: its watermark runs a day ahead of
    its records, and with idle_timeout_ms a partition that has had no record for that long stops counting
    (one that never had any would otherwise hold the job at its start)."""
    options = {
        "connector": "kafka",
        "topic": topic,
        "properties.bootstrap.servers": settings.bootstrap,
        "properties.group.id": settings.group_id,
        "properties.isolation.level": "read_committed",
        **settings.kafka_client_options(),
        "scan.startup.mode": settings.startup_mode,
        "key.format": "raw",
        "key.fields": "k",
        "value.format": "raw",
        "value.fields-include": "EXCEPT_KEY",
    }
    if settings.startup_mode == "group-offsets":
        options["properties.auto.offset.reset"] = "earliest"
    if settings.startup_mode == "specific-offsets":
        pairs = [p.split(":") for p in settings.start_offsets.split(",") if p]
        if not pairs:
            raise InvalidSettings("--startup-mode specific-offsets needs --start-offsets partition:offset,...")
        options["scan.startup.specific-offsets"] = ";".join(f"partition:{p},offset:{o}" for p, o in pairs)
    if settings.startup_mode == "timestamp":
        if settings.start_timestamp_ms <= 0:
            raise InvalidSettings("--startup-mode timestamp needs --start-timestamp-ms (epoch ms)")
        options["scan.startup.timestamp-millis"] = str(settings.start_timestamp_ms)
    if settings.bounded:
        options["scan.bounded.mode"] = "latest-offset"
    if idle_timeout_ms is not None:
        options["scan.watermark.idle-timeout"] = f"{idle_timeout_ms} ms"
    watermark = "" if out_of_orderness_ms is None else \
        f",\n          WATERMARK FOR `ts` AS `ts` - INTERVAL '{out_of_orderness_ms / 1000:.3f}' SECOND"
    if side_input:
        watermark = ",\n          WATERMARK FOR `ts` AS `ts` + INTERVAL '1' DAY"
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE `{name}` (
          `topic` STRING METADATA VIRTUAL,
          `partition` INT METADATA VIRTUAL,
          `offset` BIGINT METADATA VIRTUAL,
          `ts` TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL,
          `k` BYTES,
          `v` BYTES{watermark}
        ) WITH ({", ".join(f"{_quote(k)} = {_quote(v)}" for k, v in options.items())})""")


def kafka_sink_table(t_env, name: str, topic: str, settings: KafkaJobSettings, exactly_once: bool = True,
                     with_timestamp: bool = False) -> None:
    """Register a Kafka topic as a sink of (key, value) bytes: exactly-once (transactional, visible when
    the checkpoint completes) or, for idempotent consumers that want freshness, at-least-once (visible at
    once; a record may repeat after a restart). with_timestamp: a third column `ts` (TIMESTAMP_LTZ(3)) sets
    each record's Kafka timestamp, which must be its event time (readers and the archive go by it)."""
    options = {
        "connector": "kafka",
        "topic": topic,
        "properties.bootstrap.servers": settings.bootstrap,
        "properties.transaction.timeout.ms": str(settings.transaction_timeout_ms),
        **settings.kafka_client_options(),
        "key.format": "raw",
        "key.fields": "k",
        "value.format": "raw",
        "value.fields-include": "EXCEPT_KEY",
        "sink.delivery-guarantee": "exactly-once",
        "sink.transactional-id-prefix": f"{settings.group_id}-{name}",
    }
    if not exactly_once:
        options["sink.delivery-guarantee"] = "at-least-once"
        del options["sink.transactional-id-prefix"]
        # Sent at once: these sinks are at-least-once for freshness (kafka-clients 4 lingers 5 ms by default;
        # a batch still forms from whatever queues while a send is in flight)
        options["properties.linger.ms"] = "0"
    ts = ", `ts` TIMESTAMP_LTZ(3) METADATA FROM 'timestamp'" if with_timestamp else ""
    t_env.execute_sql(f"""
        CREATE TEMPORARY TABLE `{name}` (`k` BYTES, `v` BYTES{ts})
        WITH ({", ".join(f"{_quote(k)} = {_quote(v)}" for k, v in options.items())})""")


def single_object_header(record_type: str) -> str:
    """The hex of a record type's current Avro single-object header, which the JVM functions match values by."""
    from schemas.codec import default_registry, schema_fingerprint

    return "c301" + schema_fingerprint(default_registry().schema(record_type)).hex()


def bytes_row_type():
    from pyflink.common import Types

    return Types.ROW_NAMED(BYTES_ROW_FIELDS, [Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.PRIMITIVE_ARRAY(Types.BYTE())])


def timed_bytes_row_type():
    """(k, v, ts): ts is the record's event time in epoch ms, for a sink made with with_timestamp=True."""
    from pyflink.common import Types

    return Types.ROW_NAMED(BYTES_ROW_FIELDS + ["ts"], [Types.PRIMITIVE_ARRAY(Types.BYTE()),
                                                        Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.LONG()])


def timed_table(t_env, stream):
    """A stream of timed_bytes_row_type rows as a table of (k, v, ts TIMESTAMP_LTZ(3)), for a sink made with
    with_timestamp=True: each record's Kafka timestamp is its event time."""
    from pyflink.table.expressions import call, col

    return t_env.from_data_stream(stream).select(col("k"), col("v"), call("TO_TIMESTAMP_LTZ", col("ts"), 3))
