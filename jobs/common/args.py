"""The flags of a job: the ones every Kafka job takes (add_common_arguments), the ones a job declares with
jobs.common.settings.option on its settings dataclass (add_settings_arguments), and the settings object built
back from the parsed flags (settings_of). Parsing only: nothing here opens a connection."""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any, Sequence, TypeVar

from jobs.common.settings import RESTART_STRATEGIES, is_option, settings_from_args
from streams.endpoints import SETTINGS_FILE_ENV

Settings = TypeVar("Settings")


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


def add_settings_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, settings_class: type) -> None:
    """A flag for each field of `settings_class` declared with jobs.common.settings.option: `--` and the field's
    name with dashes (or the option's own flag), of its default's type, with its default and help."""
    for field in dataclasses.fields(settings_class):
        if not is_option(field):
            continue
        meta = field.metadata
        default = meta["default_from"]() if meta["default_from"] is not None else field.default
        flag = meta["flag"] or "--" + field.name.replace("_", "-")
        parser.add_argument(flag, dest=field.name, type=type(field.default), default=default,
                            help=meta["help"] or None)


def option_values(args: argparse.Namespace, settings_class: type) -> dict[str, Any]:
    """The parsed values of `settings_class`'s option fields, by field name."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(settings_class) if is_option(f)}


def job_parser(job_name: str, description: str | None, settings_class: type, *, bundle_time_ms: int = 1000,
               state_changelog: bool = False) -> argparse.ArgumentParser:
    """A job's parser: the common flags (this job's bundle time and changelog default) and its settings' options."""
    parser = argparse.ArgumentParser(prog=job_name, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, job_name, bundle_time_ms=bundle_time_ms, state_changelog=state_changelog)
    add_settings_arguments(parser, settings_class)
    return parser


def settings_of(settings_class: type[Settings], args: argparse.Namespace, job_name: str, **others: Any) -> Settings:
    """`settings_class` from parsed flags: the Kafka plumbing as `kafka`, each option from its flag, and `others`
    (what the job computes from its other flags)."""
    return settings_class(kafka=settings_from_args(args, job_name), **option_values(args, settings_class), **others)


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    # `flink run -pym MODULE ARGS...` hands ARGS to the module as sys.argv[1:], as a local run does.
    return parser.parse_args(list(argv) if argv is not None else sys.argv[1:])
