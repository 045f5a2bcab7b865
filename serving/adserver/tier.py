"""One ad server process per core over one copy of the index.

A serving tier is a parent process and N forked workers. The parent loads the
index (the newest snapshot, or a prepared state), moves every object it built
out of the cyclic collector's reach (`gc.freeze`) and forks; the workers then
read the index's columns, postings and tables from the parent's pages, shared
copy-on-write, instead of each building a private copy. A worker that applies a
change from the state topics (each follows them itself, from the snapshot's
offsets) copies only the pages that change writes.

Each worker is a complete ad server with its own server id (`{server_id}-w{i}`),
Kafka producers, spend reports and leases. Two ways to put them behind one
address: the gateway in front (infra.gateway) hashes each user to one worker on
a port of its own, so a worker's in-memory "just served" notes see every
request of the users it serves; or every worker binds the same port with
SO_REUSEPORT and the kernel spreads connections over them (a Kubernetes pod
behind a Service), with the `Supervisor` restarting a worker that dies and
forwarding SIGTERM to all.

Nothing threaded may run in the parent before the fork: Kafka clients, the
topic follower and the reporter threads start inside each worker."""
from __future__ import annotations

import gc
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

LOG = logging.getLogger("adserve.adserver.tier")


def worker_server_id(server_id: str, worker: int) -> str:
    """The server id worker `worker` reports spend and holds leases under."""
    return f"{server_id}-w{worker}"


@dataclass
class Tier:
    """The forked workers: their pids (worker i is pids[i])."""

    pids: list[int]

    def alive(self) -> list[int]:
        """Pids of the workers still running (reaps those that exited)."""
        out = []
        for pid in self.pids:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if done == 0:
                out.append(pid)
        return out

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM to every worker (each flushes its spend and served log), SIGKILL to any left after
        `timeout_s`."""
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in self.alive():
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def fork_workers(count: int, run_worker: Callable[[int], None]) -> Tier:
    """Fork `count` workers, worker i running `run_worker(i)` until it returns (exit status 0) or raises (1).
    Everything the parent built so far is frozen first, so neither the parent's nor a worker's collector
    writes to the shared pages."""
    gc.collect()
    gc.freeze()
    parent = os.getpid()
    return Tier([_fork_worker(worker, run_worker, parent) for worker in range(count)])


def _fork_worker(worker: int, run_worker: Callable[[int], None], parent: int) -> int:
    """Fork one worker running `run_worker(worker)`; returns its pid (in the parent)."""
    pid = os.fork()
    if pid == 0:  # the worker
        status = 1
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):  # not the parent's handlers: the worker sets its own
                signal.signal(sig, signal.SIG_DFL)
            _end_with_parent(parent)
            run_worker(worker)
            status = 0
        except BaseException:  # noqa: BLE001 - reported, then the worker exits with status 1
            LOG.exception("ad server worker %d failed", worker)
        finally:
            os._exit(status)
    return pid


def usable_cpus() -> int:
    """The cores this process may use: its CPU affinity mask, capped by its cgroup's CPU quota (a Kubernetes
    container's CPU limit; cgroup v2 cpu.max, or v1 cpu.cfs_quota_us) rounded up; at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_cpu_limit()
    return max(1, min(cores, quota) if quota is not None else cores)


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The cgroup's CPU quota in whole cores (rounded up), or None where there is none."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]  # v2: "max 100000" or "200000 100000"
        return None if quota == "max" else -(-int(quota) // int(period))
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())  # v1: -1 for none
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 else -(-quota_us // period_us)
    except (OSError, ValueError):
        return None


FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
HEALTHY_AFTER_S = 60.0  # a worker that ran this long before dying restarts after the first backoff again


def next_backoff_s(previous_s: float, lived_s: float) -> float:
    """How long to wait before restarting a worker that died after `lived_s` of running, when the wait before
    its last restart was `previous_s` (0: never restarted): doubling for a worker that keeps dying soon after
    its start, up to MAX_BACKOFF_S, back to FIRST_BACKOFF_S once one ran HEALTHY_AFTER_S."""
    if previous_s <= 0 or lived_s >= HEALTHY_AFTER_S:
        return FIRST_BACKOFF_S
    return min(MAX_BACKOFF_S, previous_s * 2)


class Supervisor:
    """The parent of a tier whose workers share one port: forks `count` workers, restarts one that exits
    unasked (after `next_backoff_s`, logged and counted in `restarts`), and on SIGTERM or SIGINT forwards
    SIGTERM to every worker (each drains: serving.adserver.main.RunningAdServer.drain) and waits for them,
    SIGKILL to those left after `grace_s`.

    A restarted worker is forked from this parent, so it starts from the index the parent loaded, shared like
    the others', and catches up from the snapshot's offsets."""

    def __init__(self, count: int, run_worker: Callable[[int], None], *, grace_s: float = 25.0,
                 log: Callable[[str], None] = LOG.info) -> None:
        self.count, self.run_worker, self.grace_s, self.log = count, run_worker, grace_s, log
        self.parent = os.getpid()
        self.pids: dict[int, int] = {}  # worker -> pid
        self.started_at: dict[int, float] = {}
        self.backoff_s: dict[int, float] = {}
        self.restart_at: dict[int, float] = {}  # worker -> when it is forked again
        self.restarts = 0
        self.stopping = False

    def start(self) -> None:
        """Freeze what the parent built (see `fork_workers`) and fork every worker."""
        gc.collect()
        gc.freeze()
        for worker in range(self.count):
            self._fork(worker)

    def _fork(self, worker: int) -> None:
        self.pids[worker] = _fork_worker(worker, self.run_worker, self.parent)
        self.started_at[worker] = time.monotonic()

    def run(self) -> int:
        """Start the workers and keep them running until SIGTERM or SIGINT; then stop them. Returns 0 when
        every worker exited 0 on the way out, 1 otherwise."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        self.start()
        while not self.stopping:
            self.poll()
            time.sleep(0.1)
        return self.stop()

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def poll(self) -> None:
        """Reap workers that exited (scheduling their restart) and fork those whose backoff is over."""
        now = time.monotonic()
        for worker, pid in list(self.pids.items()):
            status = _reap(pid)
            if status is None:
                continue
            del self.pids[worker]
            lived_s = now - self.started_at[worker]
            wait_s = next_backoff_s(self.backoff_s.get(worker, 0.0), lived_s)
            self.backoff_s[worker] = wait_s
            self.restart_at[worker] = now + wait_s
            self.log(f"ad-server worker {worker} (pid {pid}) exited with status {status} after {lived_s:.1f} s: "
                     f"restarting it in {wait_s:.1f} s")
        for worker, at in list(self.restart_at.items()):
            if now >= at and not self.stopping:
                del self.restart_at[worker]
                self._fork(worker)
                self.restarts += 1
                self.log(f"ad-server worker {worker} restarted as pid {self.pids[worker]} "
                         f"({self.restarts} restarts so far)")

    def stop(self) -> int:
        """SIGTERM to every worker, wait up to `grace_s` for them to drain, SIGKILL the rest. 0 when all exited 0."""
        self.stopping = True
        self.restart_at.clear()
        for pid in self.pids.values():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + self.grace_s
        clean = True
        while self.pids and time.monotonic() < deadline:
            for worker, pid in list(self.pids.items()):
                status = _reap(pid)
                if status is not None:
                    del self.pids[worker]
                    clean = clean and status == 0
            time.sleep(0.05)
        for worker, pid in self.pids.items():
            self.log(f"ad-server worker {worker} (pid {pid}) still running after {self.grace_s:.0f} s: killed")
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            clean = False
        self.pids.clear()
        self.log(f"ad-server tier stopped ({self.restarts} worker restarts while it ran)")
        return 0 if clean else 1


def _reap(pid: int) -> int | None:
    """The exit status of child `pid` if it has exited (reaping it), else None; -N when a signal N ended it."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return -1
    if done == 0:
        return None
    return os.waitstatus_to_exitcode(status)


def _end_with_parent(parent: int) -> None:
    """Ask Linux to send this process SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG), so a tier whose
    parent was killed leaves no worker behind; exit at once if the parent is already gone."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: the parent's Tier.stop is the only way out
        pass
    if os.getppid() != parent:
        os._exit(0)


def private_memory_bytes(pid: int) -> dict[str, int]:
    """A process's resident memory from /proc/PID/smaps_rollup: rss (every page it maps, shared or not),
    pss (shared pages divided among their sharers) and uss (pages only it holds: Private_Clean +
    Private_Dirty), in bytes."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return {"rss": fields.get("Rss", 0), "pss": fields.get("Pss", 0),
            "uss": fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/PID/stat), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
