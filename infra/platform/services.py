"""The platform's real servers and how each starts, is checked and stops, in start order (`all_services`).

Every server listens on the settings' loopback host only and keeps its data under the platform's state folder.
The servers live by kind, and this module offers their public names:

  infra.platform.service_base     the Service base class, java_binary, http_json
  infra.platform.stores           Redis, Postgres
  infra.platform.kafka_services   Kafka (KRaft), KafkaConnect (Debezium), kafka_cluster_id
  infra.platform.flink            Flink (a session cluster), pyflink_home

Prometheus, which watches them all, is here."""
from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path

from infra.platform.errors import PlatformError
from infra.platform.flink import PROMETHEUS_REPORTER, Flink, pyflink_home
from infra.platform.kafka_services import CONNECT_JMX_EXPORTER, Kafka, KafkaConnect, kafka_cluster_id
from infra.platform.service_base import HTTP_TIMEOUT_S, Service, http_json, java_binary
from infra.platform.settings import PlatformSettings
from infra.platform.stores import Postgres, Redis

__all__ = ["CONNECT_JMX_EXPORTER", "Flink", "HTTP_TIMEOUT_S", "Kafka", "KafkaConnect", "PROMETHEUS_REPORTER",
           "Postgres", "Prometheus", "Redis", "Service", "all_services", "http_json", "java_binary",
           "kafka_cluster_id", "pyflink_home"]


class Prometheus(Service):
    """Prometheus with the generated configuration (infra/platform/prometheus.py): scrapes the servers that
    announce themselves in the targets folder and the Flink reporters, and evaluates the alert rules."""

    name = "prometheus"

    @property
    def ports(self) -> list[int]:
        return [self.settings.prometheus_port]

    def address(self) -> str:
        return f"{self.settings.prometheus_url} (targets folder {self.settings.prometheus_targets_dir})"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "prometheus.yml"

    def launch(self) -> None:
        from infra.platform.prometheus import write_config
        from serving.scrape_targets import remove_stale

        binary = shutil.which("prometheus")
        if binary is None:
            raise PlatformError("prometheus is not installed: run `apt-get install -y prometheus` "
                                "(bash infra/bootstrap.sh does it)")
        write_config(self.settings, self.config_path)
        remove_stale(self.settings.prometheus_targets_dir)  # servers killed before they could withdraw
        self.process().start([
            binary, f"--config.file={self.config_path}", f"--storage.tsdb.path={self.data_dir / 'data'}",
            f"--web.listen-address={self.settings.host}:{self.settings.prometheus_port}",
            "--storage.tsdb.retention.time=7d", "--web.enable-lifecycle",
        ])

    def healthy(self) -> bool:
        with urllib.request.urlopen(f"{self.settings.prometheus_url}/-/ready",  # noqa: S310 - loopback only
                                    timeout=HTTP_TIMEOUT_S) as resp:
            return resp.status == 200


def all_services(settings: PlatformSettings) -> list[Service]:
    """In start order: stores first, then the broker, then what needs the broker, then what watches them all."""
    return [Redis(settings), Postgres(settings), Kafka(settings), KafkaConnect(settings), Flink(settings),
            Prometheus(settings)]
