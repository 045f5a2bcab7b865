"""The fault matrix's short version on the real platform (`adserve bench faults --short`): the Kafka broker, the
Flink TaskManager, Redis, an ad server holding slices and the tracker, each killed with SIGKILL under live
traffic and restarted, one at a time. Every row must show 0 in every count and recover within its bound; the
phases are short (a few seconds of traffic around each fault) so the whole run stays within a few minutes."""
from __future__ import annotations

from bench import faults
from bench.fault_checks import COUNTS


def test_the_short_fault_matrix_loses_nothing_bills_nothing_twice_and_recovers_within_its_bounds(platform):
    figures = faults.run(faults=faults.SHORT_FAULTS, rate=10.0,
                         timing=faults.Timing(settle_s=6.0, pause_lead_s=2.0, outage_s=6.0, after_s=4.0,
                                              broker_outage_s=32.0),
                         log=lambda line: print(f"[faults] {line}", flush=True))
    rows = {r["fault"]: r for r in figures["rows"]}
    assert list(rows) == ["baseline", *faults.SHORT_FAULTS]
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
    assert figures["all_held"]
