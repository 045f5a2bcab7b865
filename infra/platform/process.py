"""Child processes of the platform: started in their own session with a pid
file, logs to a file, stopped by process group so no grandchild is left.

A pid file holds the pid and the process's start time, and is trusted only
while a process with that pid *and* that start time is alive, so a recycled
pid is never killed."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from infra.platform.errors import PlatformError


@dataclass(frozen=True)
class ManagedProcess:
    """One long-running platform process identified by name."""

    name: str
    run_dir: Path
    log_path: Path

    @property
    def pid_path(self) -> Path:
        return self.run_dir / f"{self.name}.pid"

    def pid(self) -> int | None:
        """The live pid of this process, or None (a stale pid file is removed)."""
        try:
            pid_text, ticks_text = self.pid_path.read_text().split()
            pid, ticks = int(pid_text), int(ticks_text)
        except (FileNotFoundError, ValueError):
            return None
        if _start_ticks(pid) == ticks:
            return pid
        self.pid_path.unlink(missing_ok=True)
        return None

    def start(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        user: str | None = None,
    ) -> int:
        """Start argv detached in a new session; returns its pid."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        child_env = dict(os.environ)
        if env:
            child_env.update(env)
        with open(self.log_path, "ab") as log:
            try:
                proc = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=child_env,
                    cwd=str(cwd) if cwd else None,
                    start_new_session=True,
                    user=user,
                    group=user,
                    extra_groups=[] if user else None,
                )
            except FileNotFoundError as exc:
                raise PlatformError(f"{self.name}: cannot start {argv[0]!r}: {exc}") from exc
        self.pid_path.write_text(f"{proc.pid} {_start_ticks(proc.pid)}")
        return proc.pid

    def exited_early(self) -> bool:
        return self.pid() is None

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the process group (TERM, then KILL); True if something was stopped."""
        pid = self.pid()
        if pid is None:
            return False
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not group_alive(pid):
                break
            time.sleep(0.2)
        else:
            _signal_group(pid, signal.SIGKILL)
            time.sleep(0.5)
        reap(pid)
        self.pid_path.unlink(missing_ok=True)
        return True

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text[-lines:])


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        reap(pid)
        return None
    return int(fields[19])


def group_alive(pgid: int) -> bool:
    """True while any live (non-zombie) process belongs to the process group."""
    reap(pgid)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state, fields[2] the process group id
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def reap(pid: int) -> None:
    """Collect a child that has exited (no-op for another process's child)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def port_in_use(host: str, port: int) -> bool:
    """True when something already accepts connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_until(check: Callable[[], bool], *, timeout_s: float, what: str,
               failed: Callable[[], str | None] = lambda: None, interval_s: float = 0.5) -> float:
    """Poll check() until it is true; returns seconds waited or raises PlatformError.

    failed() may return a reason to stop waiting early (e.g. the process died)."""
    start = time.monotonic()
    while True:
        try:
            if check():
                return time.monotonic() - start
        except Exception:  # noqa: BLE001 - a health check failing just means "not yet"
            pass
        reason = failed()
        if reason:
            raise PlatformError(f"{what}: {reason}")
        if time.monotonic() - start > timeout_s:
            raise PlatformError(f"{what}: not healthy after {timeout_s:.0f} s")
        time.sleep(interval_s)
