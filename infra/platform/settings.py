"""Typed settings of the local platform: where it keeps its files and which
loopback ports each part listens on. Every port can be overridden with an
environment variable (ADSERVE_<PART>_PORT) so two checkouts, or a developer's
own Kafka on 9092, never collide."""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Mapping

from core.errors import InvalidSettings
from core.settings import describe

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class PlatformSettings:
    """Paths and ports of one local platform instance."""

    home: Path
    host: str = "127.0.0.1"
    kafka_port: int = 19092
    kafka_controller_port: int = 19093
    connect_port: int = 18083
    connect_metrics_port: int = 18084  # the Connect worker's Prometheus JMX exporter (connector task states)
    postgres_port: int = 15432
    redis_port: int = 16379
    flink_rest_port: int = 18081
    flink_rpc_port: int = 16123
    flink_task_slots: int = 8
    flink_jobmanager_metrics_port: int = 19249  # the JobManager's Prometheus reporter
    flink_taskmanager_metrics_port: int = 19250  # the TaskManager's Prometheus reporter
    prometheus_port: int = 19090
    dashboard_port: int = 18092  # the pacing dashboard `adserve simulate` serves on the day's own topics
    start_timeout_s: float = 120.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "PlatformSettings":
        """Defaults, overridden by ADSERVE_HOME and ADSERVE_<FIELD> variables."""
        home = Path(environ.get("ADSERVE_HOME", str(REPO_ROOT / ".platform"))).resolve()
        overrides: dict[str, object] = {}
        for f in fields(cls):
            if f.name == "home":
                continue
            raw = environ.get(f"ADSERVE_{f.name.upper()}")
            if raw is None:
                continue
            kind = type(getattr(cls, f.name))
            try:
                overrides[f.name] = kind(raw)
            except ValueError as exc:
                raise InvalidSettings(f"ADSERVE_{f.name.upper()}={raw!r} is not a valid {kind.__name__}") from exc
        return cls(home=home, **overrides)  # type: ignore[arg-type]

    # Folders -----------------------------------------------------------------
    @property
    def jars_dir(self) -> Path:
        return self.home / "jars"

    @property
    def state_dir(self) -> Path:
        return self.home / "state"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def prometheus_targets_dir(self) -> Path:
        """Where each running ad server, tracker and prediction service keeps one file naming its /metrics
        address (serving.scrape_targets), read by Prometheus' file-based discovery."""
        return self.state_dir / "prometheus" / "targets"

    # Addresses ---------------------------------------------------------------
    @property
    def kafka_bootstrap(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    @property
    def connect_url(self) -> str:
        return f"http://{self.host}:{self.connect_port}"

    @property
    def flink_rest_url(self) -> str:
        return f"http://{self.host}:{self.flink_rest_port}"

    @property
    def prometheus_url(self) -> str:
        return f"http://{self.host}:{self.prometheus_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://{self.host}:{self.redis_port}/0"

    @property
    def postgres_dsn(self) -> str:
        return f"host={self.host} port={self.postgres_port} user=adserve dbname=adserve"

    def as_env(self) -> dict[str, str]:
        """The settings as ADSERVE_* variables, for child processes and tests; with the addresses derived from
        them (ADSERVE_KAFKA_BOOTSTRAP, ADSERVE_POSTGRES_DSN), which the services' settings read, and the folder
        where servers announce their /metrics to Prometheus (ADSERVE_SCRAPE_TARGETS_DIR)."""
        env = {"ADSERVE_HOME": str(self.home)}
        for f in fields(self):
            if f.name != "home":
                env[f"ADSERVE_{f.name.upper()}"] = str(getattr(self, f.name))
        env["ADSERVE_KAFKA_BOOTSTRAP"] = self.kafka_bootstrap
        env["ADSERVE_POSTGRES_DSN"] = self.postgres_dsn
        env["ADSERVE_SCRAPE_TARGETS_DIR"] = str(self.prometheus_targets_dir)
        return env

    def describe(self) -> str:
        """The settings as one line, secrets masked: printed once when the platform starts."""
        return describe(self)
