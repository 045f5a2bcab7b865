"""The environment a service process's settings read: the platform's variables under the process's own, under
the endpoints of its process kind (streams.endpoints), which become the process's own.

It owns building that environment; it never starts a service or parses flags."""
from __future__ import annotations

import os

from infra.platform.settings import PlatformSettings

REDIS_BY_HOST = ("adserver", "advertiser_api")  # the servers that reach Redis by host and port


def platform_environ(kind: str = "tools") -> dict[str, str]:
    """The environment a service's settings read: the platform's variables (ports and the addresses derived
    from them), under whatever this process's environment sets itself, under the endpoints of process kind
    `kind` (streams.endpoints: the settings file ADSERVE_SETTINGS_FILE names, then ADSERVE_KAFKA_*, ADSERVE_REDIS_*,
    ADSERVE_POSTGRES_* variables; the local platform's without either). Those endpoints become the process's
    own, so every Kafka client it builds takes their SASL and TLS properties."""
    endpoints = process_endpoints_of(kind)
    environ = {**PlatformSettings.from_env().as_env(), **os.environ,
               "ADSERVE_KAFKA_BOOTSTRAP": endpoints.kafka.bootstrap_servers,
               "ADSERVE_POSTGRES_DSN": endpoints.postgres.dsn.value}
    host, port = redis_host_port(endpoints) if kind in REDIS_BY_HOST else (None, 0)
    if host:
        environ |= {"ADSERVE_HOST": host, "ADSERVE_REDIS_PORT": str(port)}
    return environ


def process_endpoints_of(kind: str):
    """The endpoints of process kind `kind`, made this process's own (and its children's: ADSERVE_PROCESS_KIND)."""
    from streams import endpoints as process

    os.environ[process.PROCESS_KIND_ENV] = kind
    return process.use(process.load(kind))


def redis_host_port(endpoints) -> tuple[str | None, int]:
    """The host and port of the Redis URL of `endpoints` when it is not the local platform's (None: the
    platform's ADSERVE_HOST and ADSERVE_REDIS_PORT stand). The servers that take Redis by host and port get
    the endpoint's password, TLS, Sentinel or Cluster through streams.endpoints.redis_at, which knows it by
    that address."""
    from urllib.parse import urlsplit

    from core.endpoints import local_defaults

    redis = endpoints.redis
    if redis.url == local_defaults(os.environ)["redis"]["url"] and redis.mode == "single":
        return None, 0
    where = urlsplit(redis.url)
    return where.hostname, where.port or 6379
