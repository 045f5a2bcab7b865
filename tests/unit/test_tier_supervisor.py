"""The shared-port tier's supervisor, with real forked workers (no platform): a worker that dies is restarted
after its backoff and counted; SIGTERM to the parent reaches every worker, each drains and the parent exits 0.
And the worker count it defaults to: the affinity mask capped by the cgroup's CPU quota."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from infra.platform.process import wait_until
from serving.adserver.tier import (FIRST_BACKOFF_S, HEALTHY_AFTER_S, MAX_BACKOFF_S, cgroup_cpu_limit,
                                   next_backoff_s, usable_cpus)

ROOT = Path(__file__).parents[2]

TIER = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from serving.adserver.tier import Supervisor

    folder = Path(sys.argv[1])

    def run_worker(worker):
        first = folder / f"started-{worker}"
        if worker == 0 and not first.exists():
            first.write_text("")
            raise RuntimeError("worker 0 dies at its first start")
        stopping = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
        (folder / f"running-{worker}-{os.getpid()}").write_text("")
        while not stopping:
            time.sleep(0.02)
        (folder / f"drained-{worker}-{os.getpid()}").write_text("")

    sys.exit(Supervisor(2, run_worker, grace_s=20, log=lambda line: print(line, flush=True)).run())
""")


def test_a_dead_worker_is_restarted_and_sigterm_drains_every_worker_before_a_clean_exit(tmp_path):
    log = (tmp_path / "tier.log").open("w")
    parent = subprocess.Popen([sys.executable, "-c", TIER, str(tmp_path)], cwd=ROOT, stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: len(list(tmp_path.glob("running-*"))) == 2, timeout_s=60, interval_s=0.05,
                   what="both workers running, worker 0 restarted once",
                   failed=lambda: None if parent.poll() is None else (tmp_path / "tier.log").read_text())
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(60) == 0, (tmp_path / "tier.log").read_text()
    finally:
        if parent.poll() is None:
            parent.kill()
        log.close()
    output = (tmp_path / "tier.log").read_text()
    running = sorted(p.name.removeprefix("running-") for p in tmp_path.glob("running-*"))
    drained = sorted(p.name.removeprefix("drained-") for p in tmp_path.glob("drained-*"))
    assert drained == running  # every worker running got the SIGTERM and drained
    assert "worker 0" in output and "exited with status 1" in output
    assert "(1 restarts so far)" in output and "1 worker restarts while it ran" in output


def test_the_restart_backoff_doubles_for_a_worker_that_keeps_dying_and_resets_after_a_healthy_run():
    assert next_backoff_s(0.0, 0.5) == FIRST_BACKOFF_S
    assert next_backoff_s(FIRST_BACKOFF_S, 0.5) == 2 * FIRST_BACKOFF_S
    assert next_backoff_s(16.0, 0.5) == min(MAX_BACKOFF_S, 32.0)
    assert next_backoff_s(MAX_BACKOFF_S, 0.5) == MAX_BACKOFF_S
    assert next_backoff_s(MAX_BACKOFF_S, HEALTHY_AFTER_S) == FIRST_BACKOFF_S


def test_the_cgroup_cpu_quota_in_whole_cores(tmp_path):
    assert cgroup_cpu_limit(tmp_path) is None  # no cgroup files: no limit
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 2  # 1.5 cores: two workers
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("400000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) == 4
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(tmp_path) is None
    assert 1 <= usable_cpus() <= len(__import__("os").sched_getaffinity(0))
