"""The fault matrix's short version on the real platform (`adserve bench faults --short`): the Kafka broker, the
Flink TaskManager, Redis, an ad server holding slices and the tracker, each killed with SIGKILL under live
traffic and restarted, one at a time, after a baseline phase with no fault; and an exception injected into both
jobs' stateful operators (`task_failure`, jobs.tripwire), from which each job restarts in place, inside the same
TaskManager and Python worker. One run of the matrix serves the
whole module: a test per phase checks what the phase shows at once (traffic measured, recovery within its
bound, no paused campaign served past the freshness bound, no capped campaign without Redis, no server error),
and the last test closes the day's billing and checks every row's every count, billing included.

The phases are short (a few seconds of traffic around each fault). The broker's outage outlasts the run's
producer delivery timeout (10 s here, 30 s by default), so only the tracker's spool and the spend reporter's
resends keep what the producers held, as in the full matrix."""
from __future__ import annotations

import pytest

from bench import faults
from bench.fault_checks import COUNTS, row

PHASES = ("baseline", *faults.SHORT_FAULTS)
# counts a phase can be judged on before the day's billing windows close
AT_ONCE = ("paused_served_after_bound", "capped_served_without_redis", "server_errors")
TIMING = faults.Timing(settle_s=4.0, pause_lead_s=2.0, outage_s=6.0, after_s=3.0, broker_outage_s=12.0,
                       delivery_timeout_ms=10_000)


@pytest.fixture(scope="module")
def matrix(platform):
    with faults.Matrix(faults.SHORT_FAULTS, rate=10.0, timing=TIMING,
                       log=lambda line: print(f"[faults] {line}", flush=True)) as run:
        yield run


@pytest.mark.parametrize("fault", PHASES)
def test_each_phase_of_the_short_matrix_recovers_within_its_bound_and_keeps_its_serving_rules(matrix, fault):
    record = matrix.phase(fault)
    judged = row(record, faults.FRESHNESS_BOUND_S)
    assert judged["beacons_acknowledged"] > 0, f"{fault}: no beacon acknowledged: the phase measured nothing"
    broken = {name: judged[name] for name in AT_ONCE if judged[name] != 0}
    assert not broken, f"{fault}: {broken} ({judged})"
    assert record.recovery_s is not None and record.recovery_s < record.recovery_bound_s, judged


def test_the_short_fault_matrix_loses_nothing_bills_nothing_twice_and_recovers_within_its_bounds(matrix):
    figures = matrix.finish()
    rows = {r["fault"]: r for r in figures["rows"]}
    assert list(rows) == list(PHASES)
    for fault, r in rows.items():
        assert r["beacons_acknowledged"] > 0, f"{fault}: no beacon acknowledged: the phase measured nothing"
        broken = {name: r[name] for name in COUNTS if r[name] != 0}
        assert not broken, f"{fault}: {broken} ({r})"
        assert r["recovery_s"] is not None and r["recovery_s"] < r["recovery_bound_s"], r
    assert rows["redis"]["uncapped_served_without_redis"] > 0, rows["redis"]
    # the rules had something to bite on: the paused and capped campaigns served while they could, and the
    # metered ones spent from slices
    assert sum(r["paused_served_before_pause"] for r in rows.values()) > 0
    assert sum(r["capped_served"] for r in rows.values()) > 0
    assert sum(r["metered_spend_micros"] for r in rows.values()) > 0
    # every request id went out twice, and both requests of a pair had their impressions billed (no shared ids)
    assert sum(r["request_ids_served_twice"] for r in rows.values()) > 0
    assert figures["all_held"]
