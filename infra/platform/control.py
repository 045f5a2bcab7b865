"""up, down and status of the whole local platform.

`up` is idempotent: a server already running and healthy is left alone, so a
second `up` does nothing. If any part fails to come up, everything this call
started is stopped again, so nothing is left half-started."""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from typing import Callable

from infra.platform import jars
from infra.platform.errors import PlatformError
from infra.platform.process import wait_until
from infra.platform.services import Service, all_services, java_binary
from infra.platform.settings import PlatformSettings
from infra.platform.topics import ensure_topics

Log = Callable[[str], None]


@dataclass
class UpReport:
    started: list[str]
    already_running: list[str]
    topics_created: list[str]
    seconds: float


def up(settings: PlatformSettings, log: Log = print, only: list[str] | None = None) -> UpReport:
    """Fetch what is missing, start every server that is not running, create topics."""
    began = time.monotonic()
    log(f"platform settings: {settings.describe()}")
    java_binary()  # fail first and clearly when Java is missing
    jars.fetch(settings, log=log)
    services = [s for s in all_services(settings) if only is None or s.name in only]
    started: list[Service] = []
    already: list[str] = []
    topics_created: list[str] = []
    try:
        for service in services:
            if service.running() and _is_healthy(service):
                already.append(service.name)
                continue
            if service.any_running():
                log(f"{service.name}: partly running or unhealthy, restarting it")
                service.stop()
            port = service.foreign_port()
            if port is not None:
                raise PlatformError(
                    f"{service.name}: port {settings.host}:{port} is already in use by another process; "
                    f"stop it or choose other ports (ADSERVE_*_PORT, see `adserve up --help`)")
            log(f"{service.name}: starting ...")
            service.launch()
            started.append(service)
            waited = wait_until(service.healthy, timeout_s=settings.start_timeout_s,
                                what=f"{service.name} did not come up", failed=service.died)
            log(f"{service.name}: healthy after {waited:.1f} s")
            if service.name == "kafka":
                topics_created = ensure_topics(settings.kafka_bootstrap)
        if any(s.name == "kafka" for s in services) and not topics_created:
            topics_created = ensure_topics(settings.kafka_bootstrap)
        names = {s.name for s in services}
        if "postgres" in names:
            from serving.advertiser.store import migrate

            applied = migrate(settings.postgres_dsn)
            if applied:
                log(f"campaign store: applied migrations {', '.join(applied)}")
        if {"postgres", "connect", "kafka"} <= names:
            from infra.platform.cdc import connector_config, ensure_connector

            ensure_connector(settings.connect_url, connector_config(settings.postgres_dsn))
            log("campaign store CDC: Debezium connector running")
    except BaseException:
        for service in reversed(started):
            log(f"{service.name}: stopping (start-up failed)")
            service.stop()
        raise
    return UpReport([s.name for s in started], already, topics_created, time.monotonic() - began)


def _is_healthy(service: Service) -> bool:
    try:
        return service.healthy()
    except Exception:  # noqa: BLE001 - unhealthy, whatever the health check raised
        return False


def down(settings: PlatformSettings, log: Log = print, purge: bool = False) -> list[str]:
    """Stop every server this platform started, in reverse start order.

    With purge, also delete every server's data (topics, tables, checkpoints)."""
    stopped = []
    for service in reversed(all_services(settings)):
        if service.stop():
            log(f"{service.name}: stopped")
            stopped.append(service.name)
    if purge:
        for service in all_services(settings):
            target = service.data_dir.resolve()
            shutil.rmtree(target, ignore_errors=True)
            if service.data_dir.is_symlink():
                service.data_dir.unlink()
        shutil.rmtree(settings.state_dir, ignore_errors=True)
        log(f"deleted all platform data under {settings.state_dir}")
    return stopped


@dataclass
class ServiceStatus:
    name: str
    state: str  # running, unhealthy, stopped
    pids: list[int]
    address: str
    detail: str = ""  # e.g. the Debezium connector's task states on Kafka Connect


def status(settings: PlatformSettings) -> list[ServiceStatus]:
    rows = []
    for service in all_services(settings):
        pids = [p for p in (proc.pid() for proc in service.processes()) if p is not None]
        if not pids:
            state = "stopped"
        elif len(pids) < len(service.processes()) or not _is_healthy(service):
            state = "unhealthy"
        else:
            state = "running"
        detail = _detail(service) if state == "running" else ""
        if detail.startswith("FAILED"):
            state = "unhealthy"
        rows.append(ServiceStatus(service.name, state, pids, service.address(), detail))
    return rows


def _detail(service) -> str:
    try:
        return service.detail()
    except PlatformError as exc:
        return f"FAILED: {exc}"
