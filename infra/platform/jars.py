"""Fetching the platform's Java parts from Maven Central into the project-local
jars folder with `mvn dependency:copy-dependencies`. Each group has a pom under
infra/maven/<group>/ that only names the artifacts and their versions."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from infra.platform.errors import PlatformError
from infra.platform.settings import REPO_ROOT, PlatformSettings

MAVEN_DIR = REPO_ROOT / "infra" / "maven"


@dataclass(frozen=True)
class JarGroup:
    """A set of jars fetched together, e.g. the Kafka runtime."""

    name: str
    relative_dir: str  # under the jars folder
    marker: str  # a file name prefix that must be present once fetched

    def folder(self, settings: PlatformSettings) -> Path:
        return settings.jars_dir / self.relative_dir

    def present(self, settings: PlatformSettings) -> bool:
        folder = self.folder(settings)
        return folder.is_dir() and any(p.name.startswith(self.marker) for p in folder.iterdir())


KAFKA = JarGroup("kafka", "kafka", "kafka_2.13-")
DEBEZIUM = JarGroup("debezium", "connect-plugins/debezium-postgres", "debezium-connector-postgres-")
FLINK_CONNECTORS = JarGroup("flink", "flink", "flink-sql-connector-kafka-")
FLINK_FORMATS = JarGroup("flink-formats", "flink-formats", "flink-sql-avro-")
FLINK_METRICS = JarGroup("flink-metrics", "flink-metrics", "flink-metrics-prometheus-")
# the Prometheus JMX exporter's agent, which the Kafka Connect worker loads to export its connector metrics
CONNECT_METRICS = JarGroup("connect-metrics", "connect-metrics", "jmx_prometheus_javaagent-")
ALL_GROUPS = (KAFKA, DEBEZIUM, FLINK_CONNECTORS, FLINK_FORMATS, FLINK_METRICS, CONNECT_METRICS)


def fetch(settings: PlatformSettings, groups: tuple[JarGroup, ...] = ALL_GROUPS,
          log=print) -> None:
    """Fetch every group that is not present yet (idempotent)."""
    missing = [g for g in groups if not g.present(settings)]
    if not missing:
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PlatformError("Maven (mvn) is not installed: run `apt-get install -y maven` "
                            "or `bash infra/bootstrap.sh`, which installs it")
    for group in missing:
        target = group.folder(settings)
        tmp = target.with_name(target.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        log(f"fetching {group.name} jars from Maven Central into {target} ...")
        cmd = [mvn, "-B", "-q", "-f", str(MAVEN_DIR / group.name / "pom.xml"),
               "dependency:copy-dependencies", f"-DoutputDirectory={tmp}", "-DincludeScope=runtime"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired as exc:
            raise PlatformError(f"fetching {group.name} jars timed out after 900 s") from exc
        if done.returncode != 0:
            raise PlatformError(f"fetching {group.name} jars failed (mvn exit {done.returncode}):\n"
                                f"{(done.stdout + done.stderr)[-2000:]}")
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)


def _fetched_jar(settings: PlatformSettings, group: JarGroup, what: str) -> Path:
    folder = group.folder(settings)
    jars = sorted(folder.glob(f"{group.marker}*.jar")) if folder.is_dir() else []
    if not jars:
        raise PlatformError(f"the {what} jar is missing under {folder}: run `adserve up` "
                            "(or `adserve platform fetch`) first")
    return jars[-1]


def flink_connector_jar(settings: PlatformSettings) -> Path:
    """The Flink Kafka SQL connector jar; raises if it has not been fetched."""
    return _fetched_jar(settings, FLINK_CONNECTORS, "Flink Kafka connector")


def flink_avro_jar(settings: PlatformSettings) -> Path:
    """The Flink Avro SQL format jar (the archiver's file format); raises if it has not been fetched."""
    return _fetched_jar(settings, FLINK_FORMATS, "Flink Avro format")


def flink_prometheus_reporter_jar(settings: PlatformSettings) -> Path:
    """Flink's Prometheus metrics reporter jar (a plugin of the platform's cluster); raises if it has not been
    fetched."""
    return _fetched_jar(settings, FLINK_METRICS, "Flink Prometheus reporter")


def connect_metrics_agent(settings: PlatformSettings) -> Path:
    """The Prometheus JMX exporter's agent jar; raises if it has not been fetched."""
    return _fetched_jar(settings, CONNECT_METRICS, "Prometheus JMX exporter agent")
