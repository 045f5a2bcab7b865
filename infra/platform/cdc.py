"""The Debezium PostgreSQL connector that streams the campaign store into cdc.* topics.

`adserve up` applies the campaign store's migrations and then registers (or
updates) the connector through Kafka Connect's REST API; both are idempotent.
`adserve cdc register --connect-url URL` does the same on a production Kafka
Connect from the PostgreSQL DSN of the process's settings (postgres.dsn): the
connector config holds the DSN's parts, the password as given or as a Kafka
Connect config provider reference, and is printed only with the password masked.
Records are plain JSON (no embedded schemas): the key is the row's primary key,
the value Debezium's envelope {before, after, op, source: {ts_ms, lsn, ...}}.
Only committed transactions are streamed (logical decoding of the WAL), in
commit order per row."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from schemas import topics

from core.endpoints import setting_name
from core.settings import MASK

from infra.platform.errors import PlatformError

CONNECTOR = "adserve-campaign-store"
TABLES = ("campaigns", "ads", "reserves")
CDC_TOPICS = (topics.CDC_CAMPAIGNS, topics.CDC_ADS, topics.CDC_RESERVES)  # Debezium's, one per table

# One row must never stop the change stream. The advertiser API refuses a body over 1 MiB and bounds
# targeting, and Debezium's JSON at most doubles a row's text (jsonb escaped once more as a string), so no row
# the API writes makes a change record over ~2.1 MB. A row made larger by other means (by hand in psql, a
# migration) goes to cdc.dead_letters as a letter naming its table, key, size and log position
# (OversizedToDeadLetter, infra/connect), and the changes behind it flow on. The producer and the cdc.* topics
# take records up to twice that limit, so the transformation's measure (the JSON converter's own bytes) always
# decides, never the producer. errors.tolerance=all is the last net: a record the producer still refuses is
# skipped and logged and counted (Connect's total-records-skipped), never a failed task that stops every change.
DEAD_LETTER_ABOVE_BYTES = 4 * 1024 * 1024
MAX_RECORD_BYTES = 2 * DEAD_LETTER_ABOVE_BYTES
TRANSFORM = "io.adserve.connect.OversizedToDeadLetter"


PASSWORD = "database.password"
# libpq's TLS parameters Debezium takes under the same names (database.sslmode, database.sslrootcert, ...); the
# files they name must be on the Kafka Connect workers.
_SSL_PARAMETERS = ("sslmode", "sslrootcert", "sslcert", "sslkey")


def connector_config(dsn: str, password_ref: str = "") -> dict[str, str]:
    """The connector's config for the campaign store the libpq DSN (key=value or postgresql:// URL) names.
    `password_ref`, when given, replaces the DSN's password: a Kafka Connect config provider reference
    (`${file:/opt/kafka/secrets/postgres.properties:password}`) that the Connect workers resolve, so the password
    is not stored in Connect's config topic. Pure (the DSN is parsed, not used)."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = {key: str(value) for key, value in conninfo_to_dict(dsn).items()}
    except ProgrammingError as exc:
        raise PlatformError(f"{setting_name('postgres', 'dsn')}: not a libpq DSN "
                            f"({str(exc).replace(dsn, MASK)})") from None
    missing = [key for key in ("host", "user", "dbname") if not parts.get(key)]
    if missing or parts["host"].startswith("/"):
        raise PlatformError(f"{setting_name('postgres', 'dsn')}: Debezium reaches PostgreSQL over the network and "
                            f"needs a host name, user and dbname in the DSN (missing: "
                            f"{', '.join(missing) or 'host is a socket folder'})")
    ssl = {f"database.{key}": parts[key] for key in _SSL_PARAMETERS if parts.get(key)}
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "plugin.name": "pgoutput",
        "database.hostname": parts["host"],
        "database.port": parts.get("port") or "5432",
        "database.user": parts["user"],
        PASSWORD: password_ref or parts.get("password", ""),
        "database.dbname": parts["dbname"],
        **ssl,
        "topic.prefix": "cdc",
        "table.include.list": ",".join(f"public.{t}" for t in TABLES),
        "publication.name": "adserve_cdc",
        "publication.autocreate.mode": "disabled",  # the migration created it
        "slot.name": "adserve_cdc",
        "snapshot.mode": "initial",
        "poll.interval.ms": "100",  # changes reach Kafka within ~0.1 s of commit (default 0.5 s)
        "tombstones.on.delete": "false",
        "decimal.handling.mode": "double",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "transforms": "oversized",
        "transforms.oversized.type": TRANSFORM,
        "transforms.oversized.max.bytes": str(DEAD_LETTER_ABOVE_BYTES),
        "transforms.oversized.topic": topics.CDC_DEAD_LETTERS,
        # needs the worker's connector.client.config.override.policy=All (the local worker sets it)
        "producer.override.max.request.size": str(MAX_RECORD_BYTES),
        "errors.tolerance": "all",
        "errors.log.enable": "true",
        "errors.log.include.messages": "false",  # a skipped record is logged by position, never its row
    }


def masked_config(config: dict[str, str]) -> dict[str, str]:
    """The config as it may be printed: the password as ***, a config provider reference (`${...}`) as it is."""
    password = config.get(PASSWORD, "")
    return config | {PASSWORD: MASK} if password and not password.startswith("${") else dict(config)


def _request(url: str, method: str = "GET", body: dict | None = None) -> tuple[int, object]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=15) as resp:  # noqa: S310 - the Connect URL the user gave
            text = resp.read().decode()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except urllib.error.URLError as e:
        raise PlatformError(f"Kafka Connect at {url} did not answer: {e.reason}") from None


def _scrubbed(text: object, config: dict[str, str]) -> str:
    password = config.get(PASSWORD, "")
    return str(text).replace(password, MASK) if password else str(text)


def connector_state(connect_url: str) -> str:
    """One line on the connector and its tasks, for `adserve status`: "FAILED ..." when the connector or a task
    has failed (Kafka Connect reports a connector RUNNING while its only task is FAILED), else their states."""
    status, body = _request(f"{connect_url.rstrip('/')}/connectors/{CONNECTOR}/status")
    if status == 404:
        return f"connector {CONNECTOR} not registered"
    if status != 200 or not isinstance(body, dict):
        return f"FAILED: Kafka Connect answered {status} for the connector's status"
    tasks = body.get("tasks", [])
    states = ", ".join(f"task {t.get('id')} {t.get('state')}" for t in tasks) or "no task"
    line = f"connector {CONNECTOR} {body['connector']['state']}, {states}"
    failed = [t for t in tasks if t.get("state") == "FAILED"]
    if failed or body["connector"]["state"] == "FAILED":
        trace = (failed[0].get("trace") or "").strip().splitlines() if failed else []
        return f"FAILED: {line}" + (f" ({trace[0][:200]})" if trace else "")
    return line


def ensure_connector(connect_url: str, config: dict[str, str], timeout_s: float = 60.0) -> str:
    """Create or update the connector on the Kafka Connect at `connect_url` and wait until it and its task run;
    returns its state. No message it raises holds the password."""
    base = f"{connect_url.rstrip('/')}/connectors/{CONNECTOR}"
    status, body = _request(f"{base}/config", "PUT", config)
    if status not in (200, 201):
        raise PlatformError(f"Kafka Connect refused the Debezium connector ({status}): {_scrubbed(body, config)}")
    deadline = time.monotonic() + timeout_s
    last = "?"
    while time.monotonic() < deadline:
        status, body = _request(f"{base}/status")
        if status == 200 and isinstance(body, dict):
            tasks = body.get("tasks", [])
            last = f"connector {body['connector']['state']}, tasks {[t['state'] for t in tasks]}"
            failed = [t for t in tasks if t["state"] == "FAILED"]
            if failed:
                raise PlatformError(f"the Debezium connector failed: "
                                    f"{_scrubbed(failed[0].get('trace', ''), config)[:1500]}")
            if body["connector"]["state"] == "RUNNING" and tasks and all(t["state"] == "RUNNING" for t in tasks):
                return "RUNNING"
        time.sleep(0.5)
    raise PlatformError(f"the Debezium connector did not start within {timeout_s:.0f} s ({last})")
