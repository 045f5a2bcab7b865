"""The platform's Flink: a standalone session cluster (one JobManager, one TaskManager) from PyFlink's bundled
distribution, with a project-owned conf/, lib/ and plugins/ under the state folder, the Prometheus reporter on
both processes, and the controls the fault benchmarks use (kill and restart the TaskManager, find its Python
workers)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import yaml

from infra.platform.errors import PlatformError
from infra.platform.process import ManagedProcess, port_in_use, reap, wait_until
from infra.platform.service_base import Service, http_json, java_binary

PROMETHEUS_REPORTER = "metrics.reporter.prom"  # the Flink config prefix of the Prometheus reporter


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
