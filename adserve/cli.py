"""`adserve`: the command line of the ad-serving platform.

Each subcommand is a thin shell over a module that owns the work; `--help` on
any of them says what it does and which settings it reads."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Sequence

from infra.platform import PlatformError, PlatformSettings
from jobs.deploy import DeployError

def _settings() -> PlatformSettings:
    return PlatformSettings.from_env()


# platform ---------------------------------------------------------------------

def cmd_up(args: argparse.Namespace) -> int:
    from infra.platform import control

    settings = _settings()
    report = control.up(settings, only=args.only)
    print(f"platform up in {report.seconds:.1f} s; started: {', '.join(report.started) or 'nothing (already running)'}")
    if report.topics_created:
        print(f"topics created: {', '.join(report.topics_created)}")
    _print_status(settings)
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from infra.platform import jars

    settings = _settings()
    from infra.platform.connect_plugin import plugin_jar

    jars.fetch(settings)
    print(f"jars present under {settings.jars_dir}")
    print(f"Kafka Connect plugin (put it in a production worker's plugin folder): {plugin_jar(settings)}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from infra.platform import control

    stopped = control.down(_settings(), purge=args.purge)
    print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    settings = _settings()
    rows = _print_status(settings, as_json=args.json)
    return 0 if all(r.state == "running" for r in rows) else 3


def _print_status(settings: PlatformSettings, as_json: bool = False):
    from infra.platform import control

    rows = control.status(settings)
    if as_json:
        print(json.dumps([r.__dict__ for r in rows]))
        return rows
    print(f"platform home: {settings.home}")
    for r in rows:
        pids = ",".join(map(str, r.pids)) or "-"
        print(f"  {r.name:<9} {r.state:<10} pid {pids:<14} {r.address}")
        if r.detail:
            print(f"  {'':<9} {'':<10} {r.detail}")
    return rows


# parser -----------------------------------------------------------------------

PORTS_HELP = ("Ports and paths come from the environment: ADSERVE_HOME (default <repo>/.platform), "
              "ADSERVE_KAFKA_PORT (19092), ADSERVE_KAFKA_CONTROLLER_PORT (19093), ADSERVE_CONNECT_PORT (18083), "
              "ADSERVE_CONNECT_METRICS_PORT (18084), "
              "ADSERVE_POSTGRES_PORT (15432), ADSERVE_REDIS_PORT (16379), ADSERVE_FLINK_REST_PORT (18081), "
              "ADSERVE_FLINK_RPC_PORT (16123), ADSERVE_FLINK_JOBMANAGER_METRICS_PORT (19249), "
              "ADSERVE_FLINK_TASKMANAGER_METRICS_PORT (19250), ADSERVE_PROMETHEUS_PORT (19090), "
              "ADSERVE_FLINK_TASK_SLOTS (8); the pacing dashboard `adserve simulate` serves: "
              "ADSERVE_DASHBOARD_PORT (18092).")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adserve",
        description="An ad-serving platform on Kafka, Flink, Beam, Redis and PostgreSQL.",
        epilog=PORTS_HELP)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("up", help="start the local platform (idempotent)",
                       description="Fetch the Java parts from Maven Central if missing, start Redis, PostgreSQL "
                                   "(wal_level=logical), Kafka (KRaft), Kafka Connect with Debezium and a Flink "
                                   "session cluster on 127.0.0.1, create every topic, wait for health and print what "
                                   "runs where. A second `up` is a no-op.", epilog=PORTS_HELP)
    p.add_argument("--only", nargs="+", choices=["redis", "postgres", "kafka", "connect", "flink"],
                   help="start only these parts (Connect needs Kafka)")
    p.set_defaults(handler=cmd_up)

    p = sub.add_parser("down", help="stop everything `up` started",
                       description="Stop every platform process (by process group), leaving none behind. "
                                   "Data under ADSERVE_HOME/state is kept unless --purge.", epilog=PORTS_HELP)
    p.add_argument("--purge", action="store_true",
                   help="also delete all platform data (topics, database, checkpoints); the jars stay")
    p.set_defaults(handler=cmd_down)

    p = sub.add_parser("status", help="show what runs where",
                       description="Print each platform part, its state, pids and address, and the Debezium "
                                   "connector's task states (a FAILED task makes Connect unhealthy). "
                                   "Exit status 0 only when every part is running and healthy.",
                       epilog=PORTS_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON array")
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser("fetch", help="fetch the platform's jars from Maven Central (idempotent)",
                       description="Fetch Kafka, Kafka Connect with Debezium and the Flink Kafka connector from "
                                   "Maven Central into ADSERVE_HOME/jars, build the project's Kafka Connect "
                                   "plugin (the connector's OversizedToDeadLetter transformation) and print "
                                   "its path; `up` does this too.", epilog=PORTS_HELP)
    p.set_defaults(handler=cmd_fetch)

    _register_optional(sub)
    return parser


def _register_optional(sub) -> None:
    """Subcommand groups that live in their own modules."""
    from adserve import commands

    commands.register(sub)
    from adserve import explain

    explain.register(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("apache_beam", "py4j", "adserve.kafka"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    try:
        return args.handler(args)
    except (PlatformError, DeployError) as exc:
        print(f"adserve: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
