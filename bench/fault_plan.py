"""The fault matrix's plan: the faults it knows, the recovery bound stated for each, and the four campaigns of
every phase (their bids, budgets and cap). Constants and the matrix's clock only: bench.fault_world and
bench.faults act on them."""
from __future__ import annotations

import time
from typing import Callable

FAULTS = ("kafka", "taskmanager", "python_worker", "task_failure", "jobmanager", "redis", "postgres", "connect",
          "ad_server", "tracker", "prediction")
SHORT_FAULTS = ("kafka", "taskmanager", "task_failure", "redis", "ad_server", "tracker")
# Faults a job recovers from inside the TaskManager that stays up (a restart in place): nothing is held down
# or restarted by the matrix; Flink restarts the jobs from their latest checkpoint.
IN_PLACE = ("python_worker", "task_failure")
# The stated bound per fault: kill to every job RUNNING and every server ready again. Each is the part's own
# restart plus what must follow it, with room for a loaded 2-core machine (docs/faults.md gives the reasons).
RECOVERY_BOUND_S = {"baseline": 30.0, "kafka": 90.0, "taskmanager": 120.0, "python_worker": 60.0,
                    "task_failure": 60.0, "jobmanager": 180.0, "redis": 30.0,
                    "postgres": 60.0, "connect": 120.0, "ad_server": 60.0, "tracker": 30.0, "prediction": 60.0}
FRESHNESS_BOUND_S = 10.0  # an advertiser change on every ad server (the design's SLO)
DOLLAR = 1_000_000
BIDS_MICROS = {"capped": 9_000_000, "paused": 8_000_000, "metered": 7_000_000, "open": 5_000_000}  # CPM
# A day's budget far above the run's demand (pacing still starts each new campaign metered, at a low
# participation probability);
# the metered campaign's $0.02 is within the open margin from the start (it spends only from slices) and runs
# out within a phase.
BUDGETS_MICROS = {"capped": 50_000 * DOLLAR, "paused": 50_000 * DOLLAR, "metered": 20_000, "open": 50_000 * DOLLAR}
CAP_PER_DAY = 1_000
Log = Callable[[str], None]


def now_ms() -> int:
    """Wall-clock milliseconds: the fault matrix runs in real time (the servers stamp the same clock)."""
    return int(time.time() * 1000)
