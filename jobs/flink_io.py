"""Plumbing every PyFlink job shares: the execution environment, Kafka
sources and sinks as raw-bytes tables (the JVM does the Kafka I/O, exactly-once
transactions included), and the settings every job takes.

Kafka records cross into Python as rows (topic, partition, offset, timestamp,
key, value) so a job can name exactly where a corrupt record came from; Avro
decoding happens in Python with schemas.codec. No host, port or jar path is
baked in here: they come from the job's flags or the environment."""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from core.dead_letters import from_corrupt, time_out_of_range
from core.endpoints import Endpoints, KafkaEndpoint, setting_name
from core.errors import AdserveError, CorruptRecord, InvalidSettings, ShardCountChanged
from core.settings import describe
from streams.endpoints import SETTINGS_FILE_ENV, ca_pem, check_kafka
from streams.endpoints import load as load_endpoints
from jobs.uids import assign_stable_uids

BYTES_ROW_FIELDS = ["k", "v"]
REPO_ROOT = Path(__file__).resolve().parents[1]
# The folder under jars_dir and the file name prefix of each jar `adserve up` fetches (infra/platform/jars.py
# fetches them there; tests/unit/test_job_settings.py holds the two to the same layout).
FETCHED_JARS = {"kafka": ("flink", "flink-sql-connector-kafka-"), "avro": ("flink-formats", "flink-sql-avro-")}


class MissingJar(AdserveError):
    """A jar a job needs was neither passed as a flag nor fetched by `adserve up`."""


TOLERABLE_CHECKPOINT_FAILURES = 3
RESTART_STRATEGIES = ("fixed-delay", "exponential-delay")  # the --restart-strategy choices (restart_options)


@dataclass(frozen=True)
class KafkaJobSettings:
    """Settings every Kafka-to-Kafka job takes (flags override ADSERVE_* environment)."""

    job_name: str
    bootstrap: str
    group_id: str
    connector_jar: str
    startup_mode: str = "group-offsets"  # earliest-offset | latest-offset | group-offsets | specific-offsets
    start_offsets: str = ""  # with specific-offsets: "0:42,1:300" (partition:offset)
    start_timestamp_ms: int = 0  # with timestamp: the first record read is the first at or after this time
    bounded: bool = False  # stop at the offsets that were latest at start (tests, backfills)
    checkpoint_interval_ms: int = 5000
    parallelism: int = 1
    transaction_timeout_ms: int = 600_000
    restart_attempts: int = 3
    restart_strategy: str = "fixed-delay"  # RESTART_STRATEGIES: fixed-delay (then FAILED) or exponential-delay
    bundle_time_ms: int = 1000  # how long a Python operator may buffer records before it processes them
    watermark_interval_ms: int = 200  # how often sources emit watermarks
    buffer_timeout_ms: int = 100  # longest a network buffer waits to fill before it is sent downstream
    state_changelog: bool = False  # incremental checkpoints: state changes logged, the state written rarely
    # The brokers' security (SASL, TLS) from --settings-file and ADSERVE_KAFKA_* (core.endpoints); None: plain
    endpoint: KafkaEndpoint | None = None
    # storage.checkpoints / storage.savepoints of the settings: where this job's checkpoints and savepoints go
    # (empty: the cluster's execution.checkpointing.dir and savepoint-dir)
    checkpoints_dir: str = ""
    savepoints_dir: str = ""
    tripwire_file: str = ""  # jobs.tripwire: an injected task failure, for restart tests; empty (off) in deployments

    def kafka_client_options(self) -> dict[str, str]:
        """The `properties.*` options of the Kafka connector for the endpoint's security: the CA inline as PEM
        (read here, on the submitting host), so no TaskManager needs the file."""
        if self.endpoint is None:
            return {}
        ca = ca_pem(self.endpoint.ssl_ca_file, setting_name("kafka", "ssl_ca_file")) \
            if self.endpoint.ssl_ca_file else None
        return self.endpoint.flink_options(ca)


def add_common_arguments(parser: argparse.ArgumentParser, job_name: str, bundle_time_ms: int = 1000,
                         state_changelog: bool = False) -> None:
    env = os.environ
    parser.add_argument("--bootstrap", default=None,
                        help="Kafka bootstrap servers (default: kafka.bootstrap of --settings-file, "
                             "ADSERVE_KAFKA_BOOTSTRAP, or the local platform's)")
    parser.add_argument("--settings-file", default=env.get(SETTINGS_FILE_ENV, ""),
                        help="the settings file (TOML, docs/deploy.md) with the brokers' security (SASL, TLS) and "
                             f"secret files, read where the job is submitted (default: {SETTINGS_FILE_ENV}); "
                             "ADSERVE_KAFKA_* variables override it")
    parser.add_argument("--group-id", default=f"adserve-{job_name}", help="consumer group of the job's sources")
    parser.add_argument("--connector-jar", default=env.get("ADSERVE_FLINK_KAFKA_JAR", ""),
                        help="path of flink-sql-connector-kafka (default: ADSERVE_FLINK_KAFKA_JAR or the one "
                             "`adserve up` fetched)")
    parser.add_argument("--startup-mode", default="group-offsets",
                        choices=["earliest-offset", "latest-offset", "group-offsets", "specific-offsets",
                                 "timestamp"],
                        help="where sources start: group-offsets resumes the consumer group (earliest when it "
                             "has none); specific-offsets starts at --start-offsets; timestamp at the first record "
                             "whose time is at or after --start-timestamp-ms (a backfill of a period)")
    parser.add_argument("--start-timestamp-ms", type=int, default=0,
                        help="with --startup-mode timestamp: epoch milliseconds to start from")
    parser.add_argument("--start-offsets", default="",
                        help="with --startup-mode specific-offsets: partition:offset pairs, e.g. 0:42,1:300")
    parser.add_argument("--bounded", action="store_true",
                        help="stop at the offsets that were latest when the job started (tests, backfills)")
    parser.add_argument("--checkpoint-interval-ms", type=int, default=5000, help="checkpoint interval")
    parser.add_argument("--parallelism", type=int, default=1, help="operator parallelism")
    parser.add_argument("--restart-attempts", type=int, default=3,
                        help="with --restart-strategy fixed-delay: restarts from the latest checkpoint, 2 s apart, "
                             "before the job fails for good (default 3)")
    parser.add_argument("--restart-strategy", choices=RESTART_STRATEGIES, default="fixed-delay",
                        help="fixed-delay (default: a bug fails the job visibly after --restart-attempts) or "
                             "exponential-delay (a cluster: restarts without limit, 1 s doubling to 2 min, the "
                             "backoff reset after an hour of running; a broker roll never leaves a job dead)")
    parser.add_argument("--watermark-interval-ms", type=int, default=200,
                        help="how often sources emit watermarks: lower moves event-time results sooner")
    parser.add_argument("--buffer-timeout-ms", type=int, default=100,
                        help="longest records wait in a network buffer between operators (latency vs throughput)")
    parser.add_argument("--bundle-time-ms", type=int, default=bundle_time_ms,
                        help="longest a Python operator buffers records before processing them: lower is "
                             f"fresher, higher is faster (default {bundle_time_ms})")
    parser.add_argument("--state-changelog", action=argparse.BooleanOptionalAction, default=state_changelog,
                        help="checkpoint keyed state incrementally through Flink's changelog state backend: each "
                             "change is appended to the cluster's changelog storage as it happens and a "
                             "checkpoint only seals the log, instead of writing the whole state every "
                             "checkpoint (needs `state.changelog.storage: filesystem` on the cluster, as `adserve "
                             f"up` configures it; default {'on' if state_changelog else 'off'} for this job)")
    parser.add_argument("--tripwire-file", default="",
                        help="testing only: once this file appears, the stateful operator fails its task on the "
                             "N-th record it then processes (N: the file's content, default 1) and removes the "
                             "file, so the job restarts in place once (jobs/tripwire.py; the fault matrix's "
                             "task_failure row)")


def job_endpoints(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Endpoints:
    """The endpoints of kind "jobs": --settings-file (shared sections, then [jobs.*]) under the ADSERVE_*
    variables."""
    settings_file = getattr(args, "settings_file", "") or ""
    return load_endpoints("jobs", {**environ, SETTINGS_FILE_ENV: settings_file})


def kafka_endpoint(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> KafkaEndpoint:
    """The job's Kafka: --settings-file (section [kafka], then [jobs.kafka]) under the ADSERVE_KAFKA_* variables,
    with --bootstrap over both."""
    endpoint = job_endpoints(args, environ).kafka
    if getattr(args, "bootstrap", None):
        endpoint = dataclasses.replace(endpoint, bootstrap=tuple(b.strip() for b in args.bootstrap.split(",")))
    return endpoint


def settings_from_args(args: argparse.Namespace, job_name: str) -> KafkaJobSettings:
    jar = args.connector_jar or fetched_jar("kafka")
    endpoint, storage = kafka_endpoint(args), job_endpoints(args).storage
    return KafkaJobSettings(job_name=job_name, bootstrap=endpoint.bootstrap_servers, endpoint=endpoint,
                            checkpoints_dir=storage.checkpoints, savepoints_dir=storage.savepoints,
                            group_id=args.group_id,
                            connector_jar=jar, startup_mode=args.startup_mode, start_offsets=args.start_offsets,
                            start_timestamp_ms=args.start_timestamp_ms,
                            bounded=args.bounded,
                            checkpoint_interval_ms=args.checkpoint_interval_ms, parallelism=args.parallelism,
                            restart_attempts=args.restart_attempts, restart_strategy=args.restart_strategy,
                            bundle_time_ms=args.bundle_time_ms, watermark_interval_ms=args.watermark_interval_ms,
                            buffer_timeout_ms=args.buffer_timeout_ms, state_changelog=args.state_changelog,
                            tripwire_file=args.tripwire_file)


def platform_home(environ: Mapping[str, str] = os.environ) -> Path:
    """The platform's folder: ADSERVE_HOME (as PlatformSettings.as_env exports it), else the checkout's."""
    return Path(environ.get("ADSERVE_HOME") or REPO_ROOT / ".platform").resolve()


def jars_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """Where `adserve up` keeps the jars it fetched and the project's compiled JVM functions."""
    return platform_home(environ) / "jars"


def fetched_jar(kind: str, environ: Mapping[str, str] = os.environ) -> str:
    """The newest fetched jar of `kind` (a FETCHED_JARS key) under jars_dir; raises MissingJar if none."""
    folder, prefix = FETCHED_JARS[kind]
    found = sorted((jars_dir(environ) / folder).glob(f"{prefix}*.jar"))
    if not found:
        raise MissingJar(f"no {prefix}*.jar under {jars_dir(environ) / folder}: run `adserve up` (which fetches "
                         f"it) or pass the jar's path as a flag")
    return str(found[-1])


def add_shards_argument(parser: argparse.ArgumentParser, default: int, operator: str) -> None:
    """--shards: how many keys a job's Python `operator` groups its campaigns into (see by_campaign_shard)."""
    parser.add_argument("--shards", type=int, default=default,
                        help=f"the {operator}'s keys: campaigns are grouped by campaign id modulo this (default "
                             f"{default}); bounds the {operator}'s parallelism, and is fixed for the life of the "
                             "job's state (a restore with another count fails)")


def check_shards(job: str, stored: int | None, configured: int) -> None:
    """Raise ShardCountChanged when a shard's state was written with another shard count than `configured`
    (None: a fresh shard). The count is fixed for the life of a job's state, like its max parallelism."""
    if stored is not None and stored != configured:
        raise ShardCountChanged(job, stored, configured)


def by_campaign_shard(rows, row_type, shards: int, route, route_name: str):
    """(routed, keyed): `rows` (a DataStream of the reduced view's rows) keyed by campaign shard in the JVM
    (jobs/jvm/io/adserve/flink/ByCampaign), as rows of `row_type` (a Types.ROW_NAMED whose fields the view
    has, with a `campaign_id`). `keyed` is a KeyedStream for a Python KeyedProcessFunction whose key is the
    shard: PyFlink's own key_by would run a Python function per row.

    Rows with a campaign id are keyed where they stand. `route` is a Python ProcessFunction that decodes the
    rest (campaign id NULL: records the JVM could not read) into rows of `row_type` with their campaign, or
    sends them to a side output; those come back a bundle or so later, so they may be overtaken by rows that
    came after them. A record whose order matters (a campaign's budget before the spend behind it) must
    therefore get its campaign id in the JVM (jobs/jvm/LeadingCampaignId)."""
    from pyflink.common import Types
    from pyflink.datastream import DataStream
    from pyflink.datastream.data_stream import KeyedStream
    from pyflink.java_gateway import get_gateway
    from pyflink.util.java_utils import invoke_method

    by_campaign, row_info = "io.adserve.flink.ByCampaign", row_type.get_java_type_info()
    stream = "org.apache.flink.streaming.api.datastream.DataStream"
    operator = "org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator"
    row_class, text, number = "org.apache.flink.api.java.typeutils.RowTypeInfo", "java.lang.String", "java.lang.Integer"
    split = invoke_method(None, by_campaign, "split", [rows._j_data_stream, row_info, "campaign_id", shards],
                          [stream, row_class, text, number])
    others = invoke_method(None, by_campaign, "others", [split, row_info], [operator, row_class])
    routed = DataStream(others).process(route, output_type=row_type).name(route_name)
    keyed_rows = invoke_method(None, by_campaign, "union",
                               [split, routed._j_data_stream, row_info, "campaign_id", shards],
                               [stream, stream, row_class, text, number])
    key_type = Types.ROW([Types.LONG()]).get_java_type_info()
    return routed, KeyedStream(keyed_rows.keyBy(get_gateway().jvm.KeyByKeySelector(), key_type), row_type, routed)


def restart_options(settings: KafkaJobSettings) -> dict[str, str]:
    """The job's restart strategy as Flink configuration. Pure.

    fixed-delay (the default, and what tests and a laptop want): a bug fails the job visibly after
    `restart_attempts` restarts 2 s apart. exponential-delay (a cluster's, deploy/k8s): restarts without limit,
    the delay doubling from 1 s to 2 minutes with 10 % jitter and reset once the job has run an hour, so an outage
    of any length (a broker roll, an object store down) ends with the job running again."""
    if settings.restart_strategy == "exponential-delay":
        return {"restart-strategy.type": "exponential-delay",
                "restart-strategy.exponential-delay.initial-backoff": "1 s",
                "restart-strategy.exponential-delay.max-backoff": "2 min",
                "restart-strategy.exponential-delay.backoff-multiplier": "2.0",
                "restart-strategy.exponential-delay.reset-backoff-threshold": "1 h",
                "restart-strategy.exponential-delay.jitter-factor": "0.1",
                "restart-strategy.exponential-delay.attempts-before-reset-backoff": str(2**31 - 1)}
    if settings.restart_strategy != "fixed-delay":
        raise InvalidSettings(f"restart strategy {settings.restart_strategy!r}: one of {', '.join(RESTART_STRATEGIES)}")
    return {"restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": str(settings.restart_attempts),
            "restart-strategy.fixed-delay.delay": "2 s"}


def create_environment(settings: KafkaJobSettings, extra_jars: Sequence[Path] = ()):
    """A StreamExecutionEnvironment and its table environment, checkpointed exactly-once; `extra_jars`
    (the project's own JVM functions) are shipped with the job beside the Kafka connector."""
    from pyflink.common import Configuration
    from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    config = Configuration()
    config.set_string("python.executable", sys.executable)
    config.set_string("python.client.executable", sys.executable)
    config.set_string("python.state.cache-size", "100000")
    config.set_string("python.fn-execution.bundle.time", str(settings.bundle_time_ms))
    config.set_string("pipeline.name", settings.job_name)
    config.set_string("pipeline.auto-watermark-interval", f"{settings.watermark_interval_ms} ms")
    config.set_string("execution.buffer-timeout.interval", f"{settings.buffer_timeout_ms} ms")
    for key, value in restart_options(settings).items():
        config.set_string(key, value)
    if settings.state_changelog:
        config.set_string("state.changelog.enabled", "true")
    if settings.checkpoints_dir:
        config.set_string("execution.checkpointing.dir", settings.checkpoints_dir)
    if settings.savepoints_dir:
        config.set_string("execution.checkpointing.savepoint-dir", settings.savepoints_dir)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(settings.parallelism)
    env.enable_checkpointing(settings.checkpoint_interval_ms, CheckpointingMode.EXACTLY_ONCE)
    # A checkpoint that fails (a slow machine, a timeout) is skipped, not fatal: nothing is committed until the
    # next one completes, so exactly-once holds; three in a row fail the job into its restart strategy.
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(TOLERABLE_CHECKPOINT_FAILURES)
    jar = Path(settings.connector_jar)
    if not jar.exists():
        raise FileNotFoundError(f"Flink Kafka connector jar not found: {jar}")
    env.add_jars(jar.resolve().as_uri(), *[Path(j).resolve().as_uri() for j in extra_jars])
    t_env = StreamTableEnvironment.create(env)
    # No source idle timeout: under backpressure (a slow Python operator) a partition that waits its turn
    # would be marked idle, the watermark would run ahead on the others, and its records would turn late.
    t_env.get_config().set("table.exec.source.idle-timeout", "0 ms")
    return env, t_env


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


def bytes_row_type():
    from pyflink.common import Types

    return Types.ROW_NAMED(BYTES_ROW_FIELDS, [Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.PRIMITIVE_ARRAY(Types.BYTE())])


def dead_letter_row(record: dict, codec=None):
    """A dead.letters row (key = the job's name, value = the DeadLetter record, core.dead_letters) for a job's
    dead-letter side output."""
    from pyflink.common import Row

    if codec is None:
        from schemas.codec import AvroCodec

        codec = AvroCodec()
    return Row(record["job"].encode(), codec.encode("DeadLetter", record))


@functools.cache
def time_fields(record_type: str) -> tuple[str, ...]:
    """The top-level fields of a record type's current contract (schemas/*.avsc, by short or full name) whose
    logical type is timestamp-millis, plain or nullable."""
    from schemas import SCHEMA_DIR

    for path in sorted(SCHEMA_DIR.glob("*.avsc")):
        schema = json.loads(path.read_text())
        if record_type in (schema["name"], f"{schema.get('namespace')}.{schema['name']}"):
            return tuple(f["name"] for f in schema["fields"]
                         if any(isinstance(t, dict) and t.get("logicalType") == "timestamp-millis"
                                for t in (f["type"] if isinstance(f["type"], list) else [f["type"]])))
    return ()


class DeadLetterDecoder:
    """Decodes a job's Kafka values with the project's codec; a value that does not decode becomes a
    dead.letters row instead (core.dead_letters.from_corrupt, naming its topic, partition and offset) and is
    counted in the job's `corrupt_records` metric. Made in a Flink function's `open`; its use there:

        record, dead = self.decoder.decode(row.v, "AdEvent", topic=..., partition=..., offset=..., key=row.k)
        if dead is not None:
            yield dead_letters, dead
            return
    """

    def __init__(self, job_name: str, codec, corrupt_counter) -> None:
        self.job_name, self.codec, self.corrupt = job_name, codec, corrupt_counter

    def decode(self, value: bytes, record_type: str, *, topic: str | None, partition: int | None,
               offset: int | None, key: bytes | None, timestamp_ms: int | None = None):
        """(record, None), or (None, a dead-letter row) for a corrupt value: one that does not decode, or whose
        times lie outside 1970 to 9999 (core.dead_letters.time_out_of_range)."""
        try:
            record = self.codec.decode(value, record_type, topic=topic, partition=partition, offset=offset)
            reason = time_out_of_range(record, time_fields(record_type))
            if reason is not None:
                raise CorruptRecord(reason, topic=topic, partition=partition, offset=offset)
            return record, None
        except CorruptRecord as error:
            self.corrupt.inc()
            return None, dead_letter_row(from_corrupt(self.job_name, error, timestamp_ms=timestamp_ms, key=key,
                                                      value=value), self.codec)


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


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    # `flink run -pym MODULE ARGS...` hands ARGS to the module as sys.argv[1:], as a local run does.
    return parser.parse_args(list(argv) if argv is not None else sys.argv[1:])


def run_job(job_name: str, settings: Any, build: Callable[[Any, Any], None], *, extra_jars: Sequence[Path] = (),
            configure: Callable[[Any, Any], None] | None = None) -> None:
    """A job's start: its settings logged (secrets masked), a fresh environment (`configure(env, t_env)`
    adjusts it), the topology built by `build(t_env, settings)`, then run until cancelled."""
    logging.basicConfig(level=logging.INFO)
    logging.getLogger(f"adserve.jobs.{job_name}").info("starting %s: %s", job_name, describe(settings))
    if settings.kafka.endpoint is not None:  # a wrong broker, CA or password stops the job here, named
        check_kafka(settings.kafka.endpoint)
    env, t_env = create_environment(settings.kafka, extra_jars=extra_jars)
    if configure is not None:
        configure(env, t_env)
    build(t_env, settings)
    assign_stable_uids(env)  # a savepoint of this job restores into its next build (jobs/uids.py)
    env.execute(job_name)
