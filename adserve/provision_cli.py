"""`adserve topics create`, `adserve cdc register` and `adserve advertisers migrate`: what a cluster needs between
"empty" and "jobs running", against the endpoints of the process's settings (ADSERVE_SETTINGS_FILE, kind
ADSERVE_PROCESS_KIND, default tools), so the same commands serve a production cluster and the local platform.

  adserve topics create [--replication-factor 3] [--dry-run]
      every missing topic of schemas.topics on the Kafka of kafka.* (SASL/TLS included); a topic that exists is
      left as it is, one with fewer partitions than specified is reported
  adserve cdc register --connect-url URL [--password-ref '${file:...}'] [--dry-run]
      the Debezium connector of the campaign store (postgres.dsn) on that Kafka Connect, created or updated;
      its config is printed with the password masked
  adserve advertisers migrate
      the campaign store's migrations not applied yet (postgres.dsn), among them the publication Debezium reads

Each is idempotent: a second run changes nothing."""
from __future__ import annotations

import argparse
import json
import os
import sys

from core.errors import InvalidSettings

CONNECT_URL_ENV = "ADSERVE_CONNECT_URL"


def _endpoints():
    from streams.endpoints import process_endpoints

    return process_endpoints()


def register(sub) -> None:
    t = sub.add_parser("topics", help="create the platform's Kafka topics on the cluster of the settings",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tsub = t.add_subparsers(dest="action", required=True)
    p = tsub.add_parser("create", help="create every missing topic; report those with too few partitions")
    p.add_argument("--replication-factor", type=int, default=3,
                   help="replicas of each topic created (default 3; 1 on a one-broker cluster such as `adserve up`'s)")
    p.add_argument("--dry-run", action="store_true", help="print what would be created and create nothing")
    p.set_defaults(handler=cmd_topics_create)

    c = sub.add_parser("cdc", help="the campaign store's Debezium connector on a Kafka Connect",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    csub = c.add_subparsers(dest="action", required=True)
    p = csub.add_parser("register", help="create or update the Debezium PostgreSQL connector and wait until it runs")
    p.add_argument("--connect-url", default=os.environ.get(CONNECT_URL_ENV, ""),
                   help=f"Kafka Connect's REST API, e.g. http://kafka-connect:8083 (default {CONNECT_URL_ENV})")
    p.add_argument("--password-ref", default="",
                   help="put this Kafka Connect config provider reference in the connector instead of the DSN's "
                        "password, e.g. '${file:/opt/kafka/secrets/postgres.properties:password}'")
    p.add_argument("--timeout-s", type=float, default=120.0, help="how long to wait for the connector to run")
    p.add_argument("--dry-run", action="store_true", help="print the config (password masked) and register nothing")
    p.set_defaults(handler=cmd_cdc_register)


def add_migrate(asub) -> None:
    """`adserve advertisers migrate`, added to the advertisers group."""
    p = asub.add_parser("migrate", help="apply the campaign store's migrations not applied yet (postgres.dsn)")
    p.set_defaults(handler=cmd_migrate)


def _failed(command: str, exc: Exception) -> int:
    print(f"adserve {command}: {exc}", file=sys.stderr)
    return 2


def cmd_topics_create(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from infra.platform.errors import PlatformError
    from infra.platform.topics import TOPICS, ensure_topics, read_plan
    from streams.endpoints import check_kafka

    if args.replication_factor < 1:
        return _failed("topics create", InvalidSettings(f"--replication-factor {args.replication_factor}: at least 1"))
    try:
        kafka = _endpoints().kafka
        check_kafka(kafka)  # an unreachable broker, a refused certificate or password: named by its setting
        plan = read_plan(kafka.bootstrap_servers, TOPICS)
        for short in plan.under_partitioned:
            print(f"topic {short.name}: {short.partitions} partitions, specified {short.wanted} (left as it is: "
                  f"adding partitions would move keys between partitions)")
        if args.dry_run:
            for spec in plan.create:
                print(f"would create {spec.name}: {spec.partitions} partitions, replication factor "
                      f"{args.replication_factor}, {spec.kafka_config()['cleanup.policy']}")
            print(f"{len(plan.create)} to create, {len(plan.present)} present on {kafka.bootstrap_servers}")
            return 0
        created = ensure_topics(kafka.bootstrap_servers, TOPICS, args.replication_factor)
    except (InvalidSettings, PlatformError) as exc:
        return _failed("topics create", exc)
    except KafkaException as exc:  # the brokers did not answer: named with the setting that points at them
        return _failed("topics create", InvalidSettings(f"kafka.bootstrap (ADSERVE_KAFKA_BOOTSTRAP): {exc}"))
    for name in created:
        print(f"created {name}")
    print(f"{len(created)} created, {len(plan.present)} present on {kafka.bootstrap_servers}")
    return 0


def cmd_cdc_register(args: argparse.Namespace) -> int:
    from infra.platform import cdc
    from infra.platform.errors import PlatformError

    try:
        config = cdc.connector_config(_endpoints().postgres.dsn.value, args.password_ref)
        print(f"connector {cdc.CONNECTOR}: {json.dumps(cdc.masked_config(config), indent=2, sort_keys=True)}")
        if args.dry_run:
            return 0
        if not args.connect_url.startswith(("http://", "https://")):
            return _failed("cdc register", InvalidSettings(f"--connect-url ({CONNECT_URL_ENV}): an http(s):// URL "
                                                           f"of Kafka Connect's REST API, got {args.connect_url!r}"))
        state = cdc.ensure_connector(args.connect_url, config, timeout_s=args.timeout_s)
    except (InvalidSettings, PlatformError) as exc:
        return _failed("cdc register", exc)
    print(f"connector {cdc.CONNECTOR} {state} on {args.connect_url}")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    import psycopg

    from core.settings import MASK
    from serving.advertiser.store import migrate

    try:
        postgres = _endpoints().postgres
        applied = migrate(postgres.dsn.value)
    except InvalidSettings as exc:
        return _failed("advertisers migrate", exc)
    except psycopg.Error as exc:
        reason = str(exc).replace(postgres.dsn.value, MASK).strip()
        return _failed("advertisers migrate", InvalidSettings(
            f"postgres.dsn (ADSERVE_POSTGRES_DSN) (from {postgres.dsn.source or 'the platform'}): {reason}"))
    print(f"campaign store: applied {', '.join(applied)}" if applied else "campaign store: every migration applied")
    return 0
