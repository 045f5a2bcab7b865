"""The process's endpoints (core.endpoints) loaded from where they live, and checked before a process serves.

`load(kind)` reads the TOML file ADSERVE_SETTINGS_FILE names (none: the local platform's endpoints), overlays
the ADSERVE_* environment and reads the secret files the settings name. `check(endpoints, ...)` reaches each
endpoint a process needs (a Kafka metadata request, a Redis PING, a PostgreSQL `SELECT 1`) within a short
deadline and raises InvalidSettings naming the setting when one does not answer, refuses the certificate or
the credentials: a wrong setting stops a process at start, never later and never silently.

`process_endpoints()` is the process's own, loaded once: every Kafka client streams.kafka builds takes its
security properties from it."""
from __future__ import annotations

import logging
import os
import ssl
import tomllib
from pathlib import Path
from typing import Any, Mapping

from core.endpoints import (Endpoints, KafkaEndpoint, PostgresEndpoint, RedisEndpoint, env_name, parse,
                            secret_files, setting_name, layered)
from core.errors import InvalidSettings

SETTINGS_FILE_ENV = "ADSERVE_SETTINGS_FILE"
PROCESS_KIND_ENV = "ADSERVE_PROCESS_KIND"
CHECK_TIMEOUT_S = 10.0


def read_document(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings file ADSERVE_SETTINGS_FILE names, parsed; {} when the variable is unset."""
    name = environ.get(SETTINGS_FILE_ENV, "").strip()
    if not name:
        return {}
    try:
        return tomllib.loads(Path(name).read_text())
    except OSError as exc:
        raise InvalidSettings(f"{SETTINGS_FILE_ENV}={name}: cannot read it ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidSettings(f"{SETTINGS_FILE_ENV}={name}: not valid TOML ({exc})") from None


def load(kind: str, environ: Mapping[str, str] = os.environ) -> Endpoints:
    """The endpoints of process kind `kind`: file, then environment, secrets read from their files."""
    document = read_document(environ)
    secrets: dict[tuple[str, str], str] = {}
    for (section, key), name in secret_files(layered(document, kind, environ)).items():
        try:
            secrets[(section, key)] = Path(name).read_text()
        except OSError as exc:
            raise InvalidSettings(f"{section}.{key}_file ({env_name(section, key)}_FILE)={name}: cannot read the "
                                  f"secret ({exc.strerror})") from None
    endpoints = parse(document, kind, environ, secrets)
    if endpoints.schemas.contracts_dir:
        check_contracts(endpoints.schemas.contracts_dir)
    for name, ca_file in (("kafka", endpoints.kafka.ssl_ca_file), ("redis", endpoints.redis.ssl_ca_file)):
        if ca_file:
            ca_pem(ca_file, setting_name(name, "ssl_ca_file"))
    return endpoints


_PROCESS: list[Endpoints] = []  # this process's endpoints, once loaded or chosen


def process_endpoints() -> Endpoints:
    """This process's endpoints: those `use` chose, else those of kind ADSERVE_PROCESS_KIND (default "tools")
    loaded from the settings file and the environment once."""
    if not _PROCESS:
        _PROCESS.append(current())
    return _PROCESS[0]


def current() -> Endpoints:
    """The endpoints of kind ADSERVE_PROCESS_KIND (default "tools") as the settings file and the environment say
    now: for a command's addresses, read afresh on every call (process_endpoints keeps the first it loaded)."""
    return load(os.environ.get(PROCESS_KIND_ENV, "tools") or "tools")


def use(endpoints: Endpoints) -> Endpoints:
    """Make `endpoints` this process's (a server's entry point, after loading its kind's)."""
    _PROCESS[:] = [endpoints]
    return endpoints


def forget() -> None:
    """Load the endpoints again on next use (tests that change the environment)."""
    _PROCESS.clear()


def kafka_client_properties() -> dict[str, str]:
    """The librdkafka security properties of this process's Kafka ({} for the local platform's PLAINTEXT)."""
    return process_endpoints().kafka.librdkafka_config()


def check_contracts(folder: str) -> None:
    """The environment's published contracts (schemas.contracts_dir: a folder of .avsc files, e.g. a mounted
    ConfigMap) are the ones this code was built with: each .avsc there parses to the same schema as this
    package's file of that name, and none of this package's is missing. A process whose code and environment
    disagree on a record's layout stops at start, naming the setting and the files."""
    import json

    from schemas import SCHEMA_DIR

    setting = setting_name("schemas", "contracts_dir")
    published = Path(folder)
    if not published.is_dir():
        raise InvalidSettings(f"{setting}={folder}: not a folder")
    differ, missing = [], []
    for own in sorted(SCHEMA_DIR.glob("*.avsc")):
        theirs = published / own.name
        if not theirs.exists():
            missing.append(own.name)
            continue
        try:
            if json.loads(theirs.read_text()) != json.loads(own.read_text()):
                differ.append(own.name)
        except (OSError, ValueError) as exc:
            raise InvalidSettings(f"{setting}={folder}: {own.name} cannot be read as JSON ({exc})") from None
    if differ or missing:
        raise InvalidSettings(f"{setting}={folder}: the published contracts are not this code's: "
                              + "; ".join(part for part in (f"different: {', '.join(differ)}" if differ else "",
                                                            f"missing: {', '.join(missing)}" if missing else "")
                                          if part))


def ca_pem(path: str, setting: str) -> str:
    """The CA certificates of a *_ssl_ca_file as PEM text; InvalidSettings naming the setting when the file is
    missing or holds no certificate."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidSettings(f"{setting}={path}: cannot read the CA file "
                              f"({getattr(exc, 'strerror', None) or exc})") from None
    try:
        ssl.create_default_context(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        raise InvalidSettings(f"{setting}={path}: not a PEM CA certificate ({exc})") from None
    return text


# Clients ---------------------------------------------------------------------------------------------------
def redis_client(redis: RedisEndpoint, *, asyncio: bool = False, socket_timeout_s: float = 5.0, **options: Any):
    """A redis-py client (asyncio or not) for a single Redis, the primary a Sentinel group watches, or a
    Cluster, with the endpoint's password and TLS CA."""
    if asyncio:
        from redis import asyncio as module
        from redis.asyncio.cluster import ClusterNode, RedisCluster
        from redis.asyncio.sentinel import Sentinel
    else:
        import redis as module
        from redis.cluster import ClusterNode, RedisCluster
        from redis.sentinel import Sentinel
    common: dict[str, Any] = {"socket_timeout": socket_timeout_s, "socket_connect_timeout": socket_timeout_s}
    common.update(options)
    if redis.password.value:
        common["password"] = redis.password.value
    tls = {"ssl": True, "ssl_ca_certs": redis.ssl_ca_file or None} if redis.tls else {}
    if redis.mode == "sentinel":
        sentinel = Sentinel(list(redis.sentinels), sentinel_kwargs={"socket_timeout": common["socket_timeout"]},
                            **common, **tls)
        return sentinel.master_for(redis.sentinel_master)
    if redis.mode == "cluster":
        return RedisCluster(startup_nodes=[ClusterNode(host, port) for host, port in redis.cluster_nodes],
                            **common, **tls)
    url_options = {"ssl_ca_certs": redis.ssl_ca_file} if redis.ssl_ca_file else {}
    return module.Redis.from_url(redis.url, **common, **url_options)


def redis_at(host: str, port: int, *, asyncio: bool = False, **options: Any):
    """A client for the Redis at host:port: when that is the address of this process's Redis endpoint (its URL's
    host and port), with the endpoint's password, TLS CA, Sentinel or Cluster; else a plain connection."""
    redis = process_endpoints().redis
    if _address(redis.url) == (host, int(port)):
        return redis_client(redis, asyncio=asyncio, **options)
    if asyncio:
        from redis import asyncio as module
    else:
        import redis as module
    return module.Redis(host=host, port=port, **options)


def redis_from_url(url: str, **options: Any):
    """A (blocking) client for the Redis at `url`: this process's Redis endpoint, with its password, TLS CA,
    Sentinel or Cluster, when `url` is the endpoint's URL; else redis-py's own client for the URL."""
    redis = process_endpoints().redis
    if url == redis.url:
        return redis_client(redis, **options)
    import redis as module

    return module.Redis.from_url(url, **options)


def _address(url: str) -> tuple[str | None, int]:
    from urllib.parse import urlsplit

    where = urlsplit(url)
    return where.hostname, where.port or 6379


# Start-up checks -------------------------------------------------------------------------------------------
def check_kafka(kafka: KafkaEndpoint, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """A metadata request to the brokers with the endpoint's security settings; InvalidSettings naming the
    setting the failure points at (the CA for a refused certificate, the password for refused credentials,
    the bootstrap list when no broker answers)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if kafka.ssl_ca_file:
        ca_pem(kafka.ssl_ca_file, setting_name("kafka", "ssl_ca_file"))
    errors: list[str] = []
    heard = _Collected()
    config = {"bootstrap.servers": kafka.bootstrap_servers, "socket.timeout.ms": int(timeout_s * 1000),
              "error_cb": lambda error: errors.append(str(error)), "logger": heard.logger,
              **kafka.librdkafka_config()}
    client = AdminClient(config)
    try:
        client.list_topics(timeout=timeout_s)
        return
    except KafkaException as exc:
        client.poll(0.5)  # serves the error and log callbacks: they say why (handshake, authentication)
        errors.extend([*heard.lines, str(exc)])
    raise InvalidSettings(kafka_failure(kafka, errors, timeout_s))


class _Collected(logging.Handler):
    """The log lines of one client, kept for the failure message instead of printed."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.logger = logging.Logger(f"adserve.kafka.check.{id(self)}", logging.INFO)
        self.logger.propagate = False
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def kafka_failure(kafka: KafkaEndpoint, errors: list[str], timeout_s: float) -> str:
    """The message for a failed Kafka check: the setting the client's errors point at, and what it said."""
    lines = list(dict.fromkeys(errors))
    certificate = [line for line in lines if "certificate" in line.lower() or "ssl handshake" in line.lower()]
    refused = [line for line in lines if "authentication" in line.lower()]
    said = (certificate or refused or lines or ["no answer"])[0][-400:]
    if certificate:
        setting = setting_name("kafka", "ssl_ca_file")
        return f"{setting}={kafka.ssl_ca_file or '(system CAs)'}: the broker's certificate was refused: {said}"
    if refused:
        return (f"{setting_name('kafka', 'password')} / {setting_name('kafka', 'username')}: the brokers refused "
                f"{kafka.sasl_mechanism} credentials for {kafka.username!r}: {said}")
    return (f"{setting_name('kafka', 'bootstrap')}={kafka.bootstrap_servers}: no broker answered in "
            f"{timeout_s:.0f} s ({kafka.security_protocol}): {said}")


def check_redis(redis: RedisEndpoint, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """A PING; InvalidSettings naming the setting when Redis does not answer or refuses the password."""
    import redis as redis_py

    if redis.ssl_ca_file:
        ca_pem(redis.ssl_ca_file, setting_name("redis", "ssl_ca_file"))
    client = redis_client(redis, socket_timeout_s=timeout_s)
    where = {"sentinel": "sentinels", "cluster": "cluster_nodes"}.get(redis.mode, "url")
    try:
        client.ping()
    except redis_py.AuthenticationError as exc:
        raise InvalidSettings(f"{setting_name('redis', 'password')}: Redis refused it ({exc})") from None
    except (redis_py.ConnectionError, redis_py.TimeoutError, redis_py.exceptions.RedisClusterException) as exc:
        setting = setting_name("redis", "ssl_ca_file") if "certificate" in str(exc).lower() else \
            setting_name("redis", where)
        raise InvalidSettings(f"{setting}: Redis did not answer a PING in {timeout_s:.0f} s ({exc})") from None
    except redis_py.ResponseError as exc:  # NOAUTH: a password is needed
        raise InvalidSettings(f"{setting_name('redis', 'password')}: Redis answered {exc}") from None
    finally:
        client.close()


def check_postgres(postgres: PostgresEndpoint, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """`SELECT 1`; InvalidSettings naming postgres.dsn (never printing it) when it fails."""
    import psycopg

    try:
        with psycopg.connect(postgres.dsn.value, connect_timeout=max(1, int(timeout_s))) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        reason = str(exc).replace(postgres.dsn.value, "***").strip().splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidSettings(f"{setting_name('postgres', 'dsn')} (from {postgres.dsn.source or 'the platform'}): "
                              f"PostgreSQL refused or did not answer: {reason}") from None


def check(endpoints: Endpoints, *, kafka: bool = False, redis: bool = False, postgres: bool = False,
          timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """The start-up checks of the endpoints a process uses, in that order; the first failure raises."""
    if kafka:
        check_kafka(endpoints.kafka, timeout_s)
    if redis:
        check_redis(endpoints.redis, timeout_s)
    if postgres:
        check_postgres(endpoints.postgres, timeout_s)
