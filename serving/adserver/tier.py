"""One ad server process per core over one copy of the index.

A serving tier is a parent process and N forked workers. The parent loads the
index (the newest snapshot, or a prepared state), moves every object it built
out of the cyclic collector's reach (`gc.freeze`) and forks; the workers then
read the index's columns, postings and tables from the parent's pages, shared
copy-on-write, instead of each building a private copy. A worker that applies a
change from the state topics (each follows them itself, from the snapshot's
offsets) copies only the pages that change writes.

Each worker is a complete ad server with its own server id (`{server_id}-w{i}`),
port, Kafka producers, spend reports and leases. The gateway in front
(infra.gateway) hashes each user to one worker, so a worker's in-memory "just
served" notes see every request of the users it serves.

Nothing threaded may run in the parent before the fork: Kafka clients, the
topic follower and the reporter threads start inside each worker."""
from __future__ import annotations

import gc
import logging
import os
import signal
import time
from dataclasses import dataclass
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
    pids = []
    for worker in range(count):
        pid = os.fork()
        if pid == 0:  # the worker
            status = 1
            try:
                _end_with_parent(parent)
                run_worker(worker)
                status = 0
            except BaseException:  # noqa: BLE001 - reported, then the worker exits with status 1
                LOG.exception("ad server worker %d failed", worker)
            finally:
                os._exit(status)
        pids.append(pid)
    return Tier(pids)


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
