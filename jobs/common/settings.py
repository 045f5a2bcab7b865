"""The settings every Kafka job takes (KafkaJobSettings), how parsed flags and the environment become them, and
`option`: how a job declares one of its own settings once, with the flag that sets it (jobs.common.args builds
the flags from these declarations). Plain data: nothing here opens a connection."""
from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from core.endpoints import Endpoints, KafkaEndpoint, local_defaults, setting_name
from jobs.common.jars import fetched_jar
from schemas import topics
from streams.endpoints import SETTINGS_FILE_ENV, ca_pem
from streams.endpoints import load as load_endpoints

RESTART_STRATEGIES = ("fixed-delay", "exponential-delay")  # the --restart-strategy choices (restart_options)
# The KafkaJobSettings fields that a flag of jobs.common.args.add_common_arguments sets as it is
FLAG_FIELDS = ("group_id", "startup_mode", "start_offsets", "start_timestamp_ms", "bounded", "checkpoint_interval_ms",
               "parallelism", "restart_attempts", "restart_strategy", "bundle_time_ms", "watermark_interval_ms",
               "buffer_timeout_ms", "state_changelog", "tripwire_file")


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


def option(default: Any, help: str = "", *, flag: str = "", default_from: Callable[[], Any] | None = None) -> Any:
    """A job setting declared once: a dataclass field whose default is `default` and whose flag (`--` and the
    field's name with dashes, or `flag`) jobs.common.args.add_settings_arguments declares with that default's
    type. `default_from` computes the flag's default when the parser is built (one read from the environment)."""
    metadata = {"help": help, "flag": flag, "default_from": default_from}
    return dataclasses.field(default=default, metadata=metadata)


def is_option(field: dataclasses.Field) -> bool:
    return "default_from" in field.metadata


@dataclass(frozen=True, kw_only=True)
class JobSettings:
    """What the settings of a job with one dead-letter topic start with: the Kafka plumbing and that topic.
    A job's own settings subclass it (keyword-only), each declared with `option`."""

    kafka: KafkaJobSettings
    dead_letter_topic: str = option(topics.DEAD_LETTERS)


def default_redis_url(environ: Mapping[str, str] = os.environ, variable: str = "") -> str:
    """The environment variable `variable` when set, else the local platform's Redis (core.endpoints'
    local_defaults: ADSERVE_HOST, ADSERVE_REDIS_PORT)."""
    return (environ.get(variable) if variable else "") or local_defaults(environ)["redis"]["url"]


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
    """The Kafka plumbing's settings from the flags jobs.common.args.add_common_arguments declares."""
    jar = args.connector_jar or fetched_jar("kafka")
    endpoint, storage = kafka_endpoint(args), job_endpoints(args).storage
    common = {name: getattr(args, name) for name in FLAG_FIELDS}
    return KafkaJobSettings(job_name=job_name, bootstrap=endpoint.bootstrap_servers, endpoint=endpoint,
                            checkpoints_dir=storage.checkpoints, savepoints_dir=storage.savepoints,
                            connector_jar=jar, **common)
