"""The platform's real servers and how each starts, is checked and stops.

Every server listens on the settings' loopback host only and keeps its data
under the platform's state folder. PostgreSQL refuses to run as root, so as
root it runs as the `postgres` system user that Debian's package creates."""
from __future__ import annotations

import glob
import hashlib
import stat
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import base64
import urllib.request

import yaml
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Mapping

from infra.platform.errors import PlatformError
from infra.platform.jars import DEBEZIUM, KAFKA, connect_metrics_agent
from infra.platform.process import ManagedProcess, port_in_use, reap, wait_until
from infra.platform.settings import PlatformSettings

HTTP_TIMEOUT_S = 3.0
PROMETHEUS_REPORTER = "metrics.reporter.prom"  # the Flink config prefix of the Prometheus reporter


def http_json(url: str, timeout_s: float = HTTP_TIMEOUT_S) -> object:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback only
        return json.loads(resp.read().decode())


def kafka_cluster_id(random_bytes=None) -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64 without padding. One that starts with "-" is
    drawn again: the storage tool reads it as an option and fails ("--cluster-id: expected one argument"),
    which happened to one clean-clone CI run in about 64."""
    draw = random_bytes or (lambda: uuid.uuid4().bytes)
    while True:
        cluster_id = base64.urlsafe_b64encode(draw()).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return str(Path(java_home, "bin", "java"))
    java = shutil.which("java")
    if java is None:
        raise PlatformError("Java is not installed (Kafka, Kafka Connect and Flink need Java 17): "
                            "run `apt-get install -y openjdk-17-jre-headless` or set JAVA_HOME")
    return java


class Service(ABC):
    """One server of the platform."""

    name: str

    def __init__(self, settings: PlatformSettings):
        self.settings = settings
        self.data_dir = settings.state_dir / self.name

    def processes(self) -> list[ManagedProcess]:
        return [self.process()]

    def process(self, suffix: str = "") -> ManagedProcess:
        name = self.name + suffix
        return ManagedProcess(name, self.settings.run_dir, self.settings.log_dir / f"{name}.log")

    @property
    @abstractmethod
    def ports(self) -> list[int]: ...

    @abstractmethod
    def address(self) -> str: ...

    @abstractmethod
    def launch(self) -> None:
        """Prepare the data folder (once) and start the process(es)."""

    @abstractmethod
    def healthy(self) -> bool: ...

    def detail(self) -> str:
        """What `adserve status` adds about a healthy part beyond its process (empty for most); a detail that
        starts with "FAILED" marks the part unhealthy."""
        return ""

    def running(self) -> bool:
        return all(p.pid() is not None for p in self.processes())

    def any_running(self) -> bool:
        return any(p.pid() is not None for p in self.processes())

    def died(self) -> str | None:
        """A reason if a process of this service exited while we wait for health."""
        for proc in self.processes():
            if proc.pid() is None:
                return f"process exited; last lines of {proc.log_path}:\n{proc.log_tail()}"
        return None

    def stop(self) -> bool:
        stopped = False
        for proc in reversed(self.processes()):
            stopped |= proc.stop()
        return stopped

    def foreign_port(self) -> int | None:
        """A port of ours that some other process already holds."""
        for port in self.ports:
            if port_in_use(self.settings.host, port):
                return port
        return None


class Redis(Service):
    name = "redis"

    @property
    def ports(self) -> list[int]:
        return [self.settings.redis_port]

    def address(self) -> str:
        return self.settings.redis_url

    def launch(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise PlatformError("redis-server is not installed: run `apt-get install -y redis-server` "
                                "(bash infra/bootstrap.sh does it)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process().start([
            binary, "--bind", self.settings.host, "--port", str(self.settings.redis_port),
            "--dir", str(self.data_dir), "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--protected-mode", "yes", "--logfile", "",
        ])

    def healthy(self) -> bool:
        import redis

        client = redis.Redis(host=self.settings.host, port=self.settings.redis_port,
                             socket_timeout=1, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()


def _postgres_bin(tool: str) -> str:
    found = shutil.which(tool)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"))
    if not candidates:
        raise PlatformError(f"PostgreSQL ({tool}) is not installed: run `apt-get install -y postgresql` "
                            "(bash infra/bootstrap.sh does it)")
    return candidates[-1]


def _traversable_by(user: str, folder: Path) -> bool:
    """True when `user` may enter every folder from / down to `folder`."""
    import grp
    import pwd

    account = pwd.getpwnam(user)
    groups = {g.gr_gid for g in grp.getgrall() if user in g.gr_mem} | {account.pw_gid}
    for part in [folder, *folder.parents]:
        st = part.stat()
        if st.st_uid == account.pw_uid:
            allowed = st.st_mode & stat.S_IXUSR
        elif st.st_gid in groups:
            allowed = st.st_mode & stat.S_IXGRP
        else:
            allowed = st.st_mode & stat.S_IXOTH
        if not allowed:
            return False
    return True


class Postgres(Service):
    name = "postgres"

    @property
    def ports(self) -> list[int]:
        return [self.settings.postgres_port]

    def address(self) -> str:
        return f"postgresql://adserve@{self.settings.host}:{self.settings.postgres_port}/adserve (wal_level=logical)"

    @property
    def run_as(self) -> str | None:
        return "postgres" if os.geteuid() == 0 else None

    def _own(self, path: Path) -> None:
        if self.run_as:
            shutil.chown(path, self.run_as, self.run_as)

    def _place_data_dir(self) -> None:
        """Make state/postgres reachable by the postgres user.

        As root, PostgreSQL runs as `postgres`, which cannot enter a private
        folder such as /root or a 0700 temp dir. Then the data lives in a
        folder of its own under /var/tmp and state/postgres links to it."""
        if self.data_dir.exists() or not self.run_as:
            return
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        if _traversable_by(self.run_as, self.data_dir.parent):
            return
        digest = hashlib.sha1(str(self.settings.home).encode()).hexdigest()[:12]
        outside = Path("/var/tmp") / f"adserve-postgres-{digest}"
        outside.mkdir(parents=True, exist_ok=True)
        self.data_dir.symlink_to(outside, target_is_directory=True)

    def launch(self) -> None:
        self._place_data_dir()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        root = self.data_dir.resolve()  # postgres must not walk through a private folder
        pgdata = root / "data"
        sockets = root / "sockets"
        sockets.mkdir(exist_ok=True)
        self._own(root)
        self._own(sockets)
        if not (pgdata / "PG_VERSION").exists():
            shutil.rmtree(pgdata, ignore_errors=True)
            done = subprocess.run(
                [_postgres_bin("initdb"), "-D", str(pgdata), "-U", "adserve", "--auth=trust",
                 "-E", "UTF8", "--locale=C.UTF-8"],
                capture_output=True, text=True, timeout=120,
                user=self.run_as, group=self.run_as, extra_groups=[] if self.run_as else None)
            if done.returncode != 0:
                raise PlatformError(f"initdb failed: {done.stderr[-1500:]}")
        self.process().start([
            _postgres_bin("postgres"), "-D", str(pgdata),
            "-c", f"listen_addresses={self.settings.host}", "-c", f"port={self.settings.postgres_port}",
            "-c", f"unix_socket_directories={sockets}", "-c", "wal_level=logical",
            "-c", "max_wal_senders=8", "-c", "max_replication_slots=8", "-c", "fsync=off",
        ], user=self.run_as)

    def healthy(self) -> bool:
        import psycopg

        with psycopg.connect(host=self.settings.host, port=self.settings.postgres_port, user="adserve",
                             dbname="postgres", connect_timeout=2, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = 'adserve'").fetchone()
            if not exists:
                conn.execute("CREATE DATABASE adserve")
            wal = conn.execute("SHOW wal_level").fetchone()
        if wal is None or wal[0] != "logical":
            raise PlatformError(f"PostgreSQL runs with wal_level={wal}, Debezium needs logical")
        return True


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
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = self.data_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2_CONSOLE)
        return path

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
        config = self.data_dir / "connect-distributed.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = self.data_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2_CONSOLE)
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


def _flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    """Flink's nested YAML as flat dotted keys (Flink reads both forms)."""
    flat: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value if isinstance(value, str) else json.dumps(value)
    return flat


def pyflink_home() -> Path:
    """The Flink distribution bundled in the apache-flink wheel."""
    import pyflink

    home = Path(pyflink.__file__).parent
    if not (home / "bin" / "jobmanager.sh").exists():
        raise PlatformError(f"no Flink distribution under {home}: is apache-flink installed in this environment?")
    return home


class Flink(Service):
    """A standalone Flink session cluster (one JobManager, one TaskManager) from PyFlink's bundled distribution."""

    name = "flink"

    def processes(self) -> list[ManagedProcess]:
        return [self.process("-jobmanager"), self.process("-taskmanager")]

    @property
    def ports(self) -> list[int]:
        return [self.settings.flink_rest_port, self.settings.flink_rpc_port,
                self.settings.flink_jobmanager_metrics_port, self.settings.flink_taskmanager_metrics_port]

    def address(self) -> str:
        return (f"web UI and REST {self.settings.flink_rest_url}, "
                f"{self.settings.flink_task_slots} task slots")

    @property
    def conf_dir(self) -> Path:
        return self.data_dir / "conf"

    @property
    def lib_dir(self) -> Path:
        return self.data_dir / "lib"

    @property
    def plugins_dir(self) -> Path:
        return self.data_dir / "plugins"

    def write_plugins(self) -> Path:
        """The cluster's plugins/ (FLINK_PLUGINS_DIR): the Prometheus metrics reporter, fetched from Maven Central
        (infra/maven/flink-metrics), in a folder of its own as Flink's plugin loader wants."""
        from infra.platform.jars import flink_prometheus_reporter_jar

        if self.plugins_dir.exists():
            shutil.rmtree(self.plugins_dir)
        reporter = self.plugins_dir / "metrics-prometheus"
        reporter.mkdir(parents=True)
        jar = flink_prometheus_reporter_jar(self.settings)
        shutil.copy(jar, reporter / jar.name)
        return self.plugins_dir

    def reporter_port_args(self, component: str) -> list[str]:
        """The dynamic property that gives the JobManager or the TaskManager its own reporter port: both read
        the same config.yaml, whose port list only says which ports the reporters may take."""
        port = (self.settings.flink_jobmanager_metrics_port if component == "jobmanager"
                else self.settings.flink_taskmanager_metrics_port)
        return ["-D", f"{PROMETHEUS_REPORTER}.port={port}"]

    def write_lib(self) -> Path:
        """The cluster's lib/ (FLINK_LIB_DIR): the distribution's jars plus the Python bridge (opt/flink-python)
        and the Kafka connector. Shipped with each job instead, their classes would be loaded again by every
        job's class loader and compiled again by the JIT: a profile of a 30 s benchmark job spent ~55 % of a
        core in the JIT compilers. Jobs still ship the connector, so any cluster runs them; here the cluster's
        copy wins (parent-first: org.apache.flink. by Flink's default, org.apache.kafka. and org.apache.beam. by
        write_conf)."""
        from infra.platform.jars import flink_connector_jar

        home = pyflink_home()
        jars = [*sorted((home / "lib").glob("*.jar")), *sorted((home / "opt").glob("flink-python*.jar")),
                flink_connector_jar(self.settings)]
        if self.lib_dir.exists():
            shutil.rmtree(self.lib_dir)
        self.lib_dir.mkdir(parents=True)
        for jar in jars:
            (self.lib_dir / jar.name).symlink_to(jar.resolve())
        return self.lib_dir

    def write_conf(self) -> Path:
        """A project-owned copy of the distribution's conf/ with our settings."""
        s = self.settings
        home = pyflink_home()
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        for item in (home / "conf").iterdir():
            if item.name != "config.yaml":
                shutil.copy(item, self.conf_dir / item.name)
        checkpoints = self.data_dir / "checkpoints"
        config = {
            "jobmanager.rpc.address": s.host,
            "jobmanager.rpc.port": s.flink_rpc_port,
            "jobmanager.bind-host": s.host,
            "jobmanager.memory.process.size": "1200m",
            "taskmanager.bind-host": s.host,
            "taskmanager.host": s.host,
            "taskmanager.numberOfTaskSlots": s.flink_task_slots,
            "taskmanager.memory.process.size": "4096m",
            "taskmanager.memory.managed.fraction": 0.3,
            # Every submitted job loads its own generated and Python-bridge classes; a dev cluster that runs the
            # test suite's ~40 jobs (or a day of benchmark runs) outgrew the 256 MB default (Metaspace OOM).
            "taskmanager.memory.jvm-metaspace.size": "768m",
            "parallelism.default": 1,
            # The Kafka client and the Python bridge's Beam come from the cluster's lib/ (write_lib): loaded and
            # compiled once, not again for every job.
            "classloader.parent-first-patterns.additional": "org.apache.kafka.;org.apache.beam.",
            "rest.address": s.host,
            "rest.bind-address": s.host,
            "rest.port": s.flink_rest_port,
            "blob.server.port": "0",
            "taskmanager.rpc.port": "0",
            "taskmanager.data.port": 0,
            "execution.checkpointing.dir": f"file://{checkpoints}",
            "execution.checkpointing.savepoint-dir": f"file://{self.data_dir / 'savepoints'}",
            "state.checkpoints.dir": f"file://{checkpoints}",
            # Where jobs with --state-changelog append their state changes (a TaskManager-wide setting: the
            # default 'memory' storage would carry every change since the last materialization in each
            # checkpoint's metadata).
            "state.changelog.storage": "filesystem",
            "state.changelog.dstl.dfs.base-path": f"file://{self.data_dir / 'changelog'}",
            "python.executable": sys.executable,
            "python.client.executable": sys.executable,
            "env.pid.dir": str(s.run_dir),
            "io.tmp.dirs": str(self.data_dir / "tmp"),
            "web.tmpdir": str(self.data_dir / "web"),
            # Metrics for Prometheus (infra/platform/prometheus.py scrapes both ports); the plugin is in
            # plugins/ (write_plugins), each process gets its port with reporter_port_args.
            f"{PROMETHEUS_REPORTER}.factory.class": "org.apache.flink.metrics.prometheus.PrometheusReporterFactory",
            f"{PROMETHEUS_REPORTER}.port": f"{s.flink_jobmanager_metrics_port},{s.flink_taskmanager_metrics_port}",
        }
        (self.data_dir / "tmp").mkdir(exist_ok=True)
        # Keep the distribution's settings (its JVM --add-opens among them), override ours.
        merged = _flatten(yaml.safe_load((home / "conf" / "config.yaml").read_text()) or {})
        merged.update({k: str(v) for k, v in config.items()})
        path = self.conf_dir / "config.yaml"
        path.write_text(yaml.safe_dump(merged, default_flow_style=False, sort_keys=True))
        return path

    def env(self) -> dict[str, str]:
        java = java_binary()
        return {
            "FLINK_CONF_DIR": str(self.conf_dir),
            "FLINK_LIB_DIR": str(self.lib_dir),
            "FLINK_PLUGINS_DIR": str(self.plugins_dir),
            "FLINK_LOG_DIR": str(self.settings.log_dir / "flink"),
            "JAVA_HOME": str(Path(os.path.realpath(java)).parent.parent),
            "FLINK_PID_DIR": str(self.settings.run_dir),
        }

    def launch(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.settings.log_dir / "flink").mkdir(parents=True, exist_ok=True)
        self.write_conf()
        self.write_lib()
        self.write_plugins()
        bin_dir = pyflink_home() / "bin"
        env = self.env()
        jm, tm = self.processes()
        # The scripts read FLINK_CONF_DIR and exec java in the foreground, so the pid is the JVM's.
        jm.start(["bash", str(bin_dir / "jobmanager.sh"), "start-foreground", *self.reporter_port_args("jobmanager")],
                 env=env)
        tm.start(["bash", str(bin_dir / "taskmanager.sh"), "start-foreground",
                  *self.reporter_port_args("taskmanager")], env=env)

    def kill_taskmanager(self) -> None:
        """Kill the TaskManager at once (SIGKILL, no shutdown), as a crash would. Its jobs fail over and
        restart from their latest checkpoint once a TaskManager is back (`start_taskmanager`)."""
        tm = self.processes()[1]
        pid = tm.pid()
        if pid is not None:
            os.killpg(pid, signal.SIGKILL)
            time.sleep(0.5)
            reap(pid)  # when this process started it, collect the zombie
            tm.pid_path.unlink(missing_ok=True)

    def python_workers(self) -> list[int]:
        """The TaskManager's Python workers (PyFlink's process mode: one per running Python operator chain),
        found among the TaskManager's descendants by their `pyflink.fn_execution` command line."""
        tm = self.processes()[1].pid()
        if tm is None:
            return []
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # gone meanwhile
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
        workers, pending = [], list(children.get(tm, []))
        while pending:
            pid = pending.pop()
            pending.extend(children.get(pid, []))
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if b"pyflink.fn_execution" in command:
                workers.append(pid)
        return sorted(workers)

    def start_taskmanager(self) -> None:
        tm = self.processes()[1]
        if tm.pid() is None:
            tm.start(["bash", str(pyflink_home() / "bin" / "taskmanager.sh"), "start-foreground",
                      *self.reporter_port_args("taskmanager")], env=self.env())
        wait_until(self.healthy, timeout_s=self.settings.start_timeout_s, what="TaskManager did not register")

    def healthy(self) -> bool:
        """A TaskManager with all slots registered, and both metrics reporters listening (a cluster started
        without them is restarted by `up`)."""
        overview = http_json(f"{self.settings.flink_rest_url}/overview")
        s = self.settings
        return (overview.get("taskmanagers", 0) >= 1  # type: ignore[union-attr]
                and overview.get("slots-total", 0) >= s.flink_task_slots  # type: ignore[union-attr]
                and port_in_use(s.host, s.flink_jobmanager_metrics_port)
                and port_in_use(s.host, s.flink_taskmanager_metrics_port))


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
