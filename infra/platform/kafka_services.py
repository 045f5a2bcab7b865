"""The platform's Kafka servers: a single Kafka 4.x broker in KRaft mode and a Kafka Connect worker with the
Debezium PostgreSQL plugin, both from the jars the platform fetches (infra.platform.jars), listening on the
settings' loopback host only."""
from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path
from typing import Mapping

import yaml

from infra.platform.errors import PlatformError
from infra.platform.jars import DEBEZIUM, KAFKA, connect_metrics_agent
from infra.platform.service_base import Service, http_json, java_binary
from infra.platform.settings import PlatformSettings


def kafka_cluster_id(random_bytes=None) -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64 without padding. One that starts with "-" is
    drawn again: the storage tool reads it as an option and fails ("--cluster-id: expected one argument"),
    which happened to one clean-clone CI run in about 64."""
    draw = random_bytes or (lambda: uuid.uuid4().bytes)
    while True:
        cluster_id = base64.urlsafe_b64encode(draw()).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def write_properties(folder: Path, name: str, props: Mapping[str, str]) -> Path:
    """A JVM server's `name` properties file in its folder, with the console-only log4j2.properties beside it."""
    path = folder / name
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    (folder / "log4j2.properties").write_text(_LOG4J2_CONSOLE)
    return path


class Kafka(Service):
    """A single Kafka 4.x broker in KRaft mode (broker and controller in one)."""

    name = "kafka"

    def __init__(self, settings: PlatformSettings, *, listener: str = "PLAINTEXT",
                 broker_properties: Mapping[str, str] | None = None,
                 client_properties: Mapping[str, str] | None = None):
        """`listener`: the security protocol of the client listener on kafka_port (PLAINTEXT for the platform;
        SASL_SSL, with its key store and users in `broker_properties`, for a broker that checks TLS and SASL);
        `client_properties`: the librdkafka properties the health check connects with."""
        super().__init__(settings)
        self.listener = listener
        self.broker_properties = dict(broker_properties or {})
        self.client_properties = dict(client_properties or {})

    @property
    def ports(self) -> list[int]:
        return [self.settings.kafka_port, self.settings.kafka_controller_port]

    def address(self) -> str:
        return f"bootstrap {self.settings.kafka_bootstrap} (KRaft controller :{self.settings.kafka_controller_port})"

    def _classpath(self) -> str:
        return str(KAFKA.folder(self.settings) / "*")

    def _write_config(self) -> Path:
        s = self.settings
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{s.host}:{s.kafka_controller_port}",
            "listeners": f"{self.listener}://{s.host}:{s.kafka_port},CONTROLLER://{s.host}:{s.kafka_controller_port}",
            "advertised.listeners": f"{self.listener}://{s.host}:{s.kafka_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": self.listener,
            "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{self.listener}:{self.listener}",
            "log.dirs": str(self.data_dir / "logs"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.retention.ms": "-1",  # by size (see infra/platform/topics.py): replays carry old timestamps
            "log.retention.bytes": str(2 * 1024 ** 3),
            "log.cleaner.backoff.ms": "5000",
            "transaction.max.timeout.ms": "900000",
            # Simulated days replay event time far from the wall clock: accept any record timestamp.
            "log.message.timestamp.before.max.ms": "9223372036854775807",
            "log.message.timestamp.after.max.ms": "9223372036854775807",
            **self.broker_properties,
        }
        return write_properties(self.data_dir, "server.properties", props)

    def launch(self) -> None:
        java = java_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        if not (self.data_dir / "logs" / "meta.properties").exists():
            cluster_id = kafka_cluster_id()
            done = subprocess.run(
                [java, "-cp", self._classpath(), f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
                 "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config)],
                capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise PlatformError(f"formatting Kafka storage failed: {(done.stdout + done.stderr)[-1500:]}")
        self.process().start([
            java, "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.settings.log_dir}",
            "-cp", self._classpath(), "kafka.Kafka", str(config),
        ])

    def healthy(self) -> bool:
        from streams import kafka

        from confluent_kafka.admin import AdminClient

        config = kafka.client_config(self.settings.kafka_bootstrap) | self.client_properties
        metadata = AdminClient(config).list_topics(timeout=2)
        return len(metadata.brokers) >= 1


class KafkaConnect(Service):
    """Kafka Connect (distributed mode, one worker) with the Debezium PostgreSQL plugin."""

    name = "connect"
    POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"

    @property
    def ports(self) -> list[int]:
        return [self.settings.connect_port, self.settings.connect_metrics_port]

    def address(self) -> str:
        return (f"{self.settings.connect_url} (Debezium PostgreSQL plugin; "
                f"metrics http://{self.settings.host}:{self.settings.connect_metrics_port}/metrics)")

    def launch(self) -> None:
        from infra.platform.connect_plugin import plugin_jar

        java = java_binary()
        s = self.settings
        self.data_dir.mkdir(parents=True, exist_ok=True)
        plugin_jar(s)  # the connector's OversizedToDeadLetter transformation, on the plugin.path below
        exporter = self.data_dir / "jmx-exporter.yaml"
        exporter.write_text(yaml.safe_dump(CONNECT_JMX_EXPORTER, sort_keys=False))
        props = {
            "bootstrap.servers": s.kafka_bootstrap,
            "group.id": "adserve-connect",
            "config.storage.topic": "_connect.configs",
            "offset.storage.topic": "_connect.offsets",
            "status.storage.topic": "_connect.status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "listeners": f"http://{s.host}:{s.connect_port}",
            "rest.advertised.host.name": s.host,
            "rest.advertised.port": str(s.connect_port),
            "plugin.path": str(DEBEZIUM.folder(s).parent),
            "plugin.discovery": "hybrid_warn",
            "offset.flush.interval.ms": "1000",
            "topic.creation.enable": "true",
            # the connector raises its producer's max.request.size (infra/platform/cdc.py connector_config)
            "connector.client.config.override.policy": "All",
            # One worker: a connector whose worker left the group (a broker outage longer than its poll
            # timeout) comes back to the same worker, so there is nothing to wait for. The default (5 min)
            # holds the lost connector and task UNASSIGNED that long after the broker returns.
            "scheduled.rebalance.max.delay.ms": "0",
        }
        config = write_properties(self.data_dir, "connect-distributed.properties", props)
        log4j = self.data_dir / "log4j2.properties"
        self.process().start([
            java, "-Xms256m", "-Xmx1g", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            f"-javaagent:{connect_metrics_agent(s)}={s.host}:{s.connect_metrics_port}:{exporter}",
            "-cp", str(KAFKA.folder(s) / "*"),
            "org.apache.kafka.connect.cli.ConnectDistributed", str(config),
        ])

    def healthy(self) -> bool:
        plugins = http_json(f"{self.settings.connect_url}/connector-plugins")
        return any(p.get("class") == self.POSTGRES_CONNECTOR for p in plugins)  # type: ignore[union-attr]

    def detail(self) -> str:
        from infra.platform.cdc import connector_state

        return connector_state(self.settings.connect_url)


# What the Connect worker's Prometheus JMX exporter exports: only Connect's per-connector task counts and per-task
# error counts (kafka_connect_connect_worker_metrics_connector_failed_task_count,
# kafka_connect_task_error_metrics_total_records_skipped, ...), not the JVM's thousands of beans.
CONNECT_JMX_EXPORTER = {
    "lowercaseOutputName": True,
    "lowercaseOutputLabelNames": True,
    "includeObjectNames": ["kafka.connect:type=connect-worker-metrics,connector=*",
                           "kafka.connect:type=task-error-metrics,connector=*,task=*"],
}

_LOG4J2_CONSOLE = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
logger.kafkaserver.name = kafka
logger.kafkaserver.level = INFO
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
"""
