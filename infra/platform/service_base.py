"""What every server of the platform shares: the Service base class (start, health, stop, its processes
and ports), the Java binary the JVM servers run on, and the JSON GET their health checks make. It knows no
particular server."""
from __future__ import annotations

import json
import os
import shutil
import urllib.request
from abc import ABC, abstractmethod
from pathlib import Path

from infra.platform.errors import PlatformError
from infra.platform.process import ManagedProcess, port_in_use
from infra.platform.settings import PlatformSettings

HTTP_TIMEOUT_S = 3.0


def http_json(url: str, timeout_s: float = HTTP_TIMEOUT_S) -> object:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback only
        return json.loads(resp.read().decode())


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
