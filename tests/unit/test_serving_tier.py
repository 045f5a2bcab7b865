"""The serving tier's plumbing: forked workers share the parent's pages, take their own server ids, and read
the gateway's deadline header."""
from __future__ import annotations

import os
import time

import numpy as np

from serving.adserver.request import REQUEST_START_HEADER, gateway_wait_s
from serving.adserver.state import ServingState
from serving.adserver.tier import cpu_seconds, fork_workers, private_memory_bytes, worker_server_id

MB = 1024 * 1024


def test_the_server_reads_the_header_the_gateway_writes():
    from infra.gateway import REQUEST_START_HEADER as written

    assert REQUEST_START_HEADER == written
    now = 1_700_000_000.5
    assert gateway_wait_s(f"t={int((now - 0.012) * 1_000_000)}", now) == \
        now - int((now - 0.012) * 1_000_000) / 1_000_000
    assert gateway_wait_s(None, now) == 0.0  # a direct call
    assert gateway_wait_s("t=abc", now) == 0.0 and gateway_wait_s("12345", now) == 0.0  # unreadable
    assert gateway_wait_s(f"t={int((now + 5) * 1_000_000)}", now) == 0.0  # a clock ahead counts as no wait
    assert gateway_wait_s("t=0", now) == 10.0  # capped


def test_a_worker_serves_under_its_own_id_with_no_slice_of_its_parent():
    state = ServingState("adserver-1")
    state.leases.grant({"lease_id": "L", "server_id": "adserver-1", "campaign_id": 5, "event_time": 1_000,
                        "amount_micros": 100, "expires_at": 60_000})
    assert state.leases.held(5, 2_000)
    state.serve_as(worker_server_id("adserver-1", 1))
    assert state.server_id == "adserver-1-w1" and not state.leases.held(5, 2_000)
    assert not state.leases.grant({"lease_id": "M", "server_id": "adserver-1-w0", "campaign_id": 5,
                                   "event_time": 1_000, "amount_micros": 100, "expires_at": 60_000})


def test_a_tier_stops_its_workers():
    def run_worker(worker: int) -> None:
        while True:
            time.sleep(1)

    tier = fork_workers(2, run_worker)
    assert len(tier.alive()) == 2
    tier.stop(timeout_s=10)
    assert tier.alive() == []


def test_process_figures_of_this_process():
    memory = private_memory_bytes(os.getpid())
    assert memory["rss"] >= memory["pss"] > 0 and memory["rss"] >= memory["uss"] > 0
    assert cpu_seconds(os.getpid()) > 0


def test_workers_end_when_their_parent_is_killed(tmp_path):
    import signal

    pids_file = tmp_path / "pids"
    middle = os.fork()
    if middle == 0:  # a tier's parent that forks two workers and is then killed without stopping them
        tier = fork_workers(2, lambda worker: time.sleep(120))
        pids_file.write_text(" ".join(map(str, tier.pids)))
        time.sleep(120)
        os._exit(0)
    while not pids_file.exists() or len(pids_file.read_text().split()) < 2:
        time.sleep(0.05)
    workers = [int(p) for p in pids_file.read_text().split()]
    os.kill(middle, signal.SIGKILL)
    os.waitpid(middle, 0)
    deadline = time.monotonic() + 30  # a guard, not a measurement
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in workers), "a worker outlived its killed parent"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
