"""`adserve bench faults`: the fault matrix. A short day of live traffic runs through the real servers and jobs,
and at set times one part of the platform is killed with SIGKILL, held down, and restarted; after each, the
design's invariants are checked (bench.fault_checks) and the fault gets one row.

What runs for real, for the whole matrix: the platform (Kafka, Redis, PostgreSQL, Kafka Connect with the
campaign store's Debezium connector, Flink), the Flink jobs `budget_pacing` and `click_aggregator` (deployed for
the run: the aggregator reads the platform's ad.events from the run's start, the budget job the platform's
budget.spend and writes budget.state and budget.leases, which the ad servers follow; both read the run's
campaigns from a topic of the run, so they decide only about the run's campaigns), two ad servers, the tracker
and the prediction service (each an `adserve serve` process of its own, so a kill is a real SIGKILL of a
process). The day is real time: the servers stamp wall-clock time, the budget job steps every 10 s of it.

The traffic: --rate ad requests a second for 3 slots on the run's own placement (so no other ad competes),
alternating between the two ad servers; every filled slot's impression beacon goes to the tracker over HTTP, and
each beacon the tracker acknowledges (204) is kept with its token's impression, campaign and price: the recount.

Each fault's phase has four campaigns of its own (CPM, so every acknowledged impression is billable): a capped
one (a daily cap per user far above what a user sees: only Redis's absence can exclude it), one paused a few
seconds before the fault, a metered one whose small budget the budget job hands out in slices and which runs out
during the phase, and an open one. The phase: launch its campaigns (their ads reach the servers once the budget
job has stated each), wait until the one to be paused has served (at most 60 s: pacing starts a new campaign
metered, at a low participation probability, so it serves once a server holds a slice of it), let them serve
(--settle-s), pause one, kill the part, hold it down (--outage-s; the broker --broker-outage-s, 40 s, longer
than the servers' and tracker's producer delivery timeout, --delivery-timeout-ms, 30 s), restart it, wait until
every job runs and every server is ready (the recovery time, from the restart), serve a while longer
(--after-s), pause the phase's campaigns. At
the end the click aggregator's windows are closed (tick events past the last beacon) and its billed totals are
compared with the recount.

The restart story of each part (docs/faults.md): the broker, Redis, PostgreSQL, Kafka Connect and the
TaskManager restart in place (`adserve up`'s own launch); the local Flink cluster has no high availability, so a
killed JobManager restarts empty and the run's jobs are submitted again from their latest retained checkpoint
(`flink run -s`: the checkpoint files outlive the JobManager); a killed ad server is replaced by a new one with a
new server id (its spend sequence starts again at 1 and must not collide with the dead server's); the tracker
and the prediction service restart on their ports. Two faults fail the jobs in place, the TaskManager left up:
`python_worker` SIGKILLs the TaskManager's Python workers (every job's), `task_failure` arms each job's tripwire
(jobs.tripwire: its stateful operator raises on its next record); Flink restarts each job from its latest
checkpoint in the same TaskManager, and the phase waits until every job's exception history shows the failure
before it measures the recovery (from the fault, with nothing held down).

Figures (--json names): one row per fault in `rows`, each with fault, recovery_s, recovery_bound_s,
lost_events, double_billed_events, billed_above_budget_micros, overspend_beyond_slices_micros,
paused_served_after_bound, capped_served_without_redis, server_errors, shared_impression_ids (every request id is
sent twice; an impression id served for two requests would leave one unbilled), uncapped_served_without_redis
(the Redis row), requests, answered_200, beacons_acknowledged, beacons_refused, slices_at_fault_micros,
billed_micros, error_answers, held, and the evidence that the phase exercised its rules:
paused_served_before_pause, capped_served, request_ids_served_twice, metered_spend_micros against
metered_budget_micros; then all_held, faults, rate, settle_s, outage_s, broker_outage_s, delivery_timeout_ms,
after_s, freshness_bound_s, wall_s, and machine (with the load average at the start and the end). Same-run
baseline: the `baseline` row, a phase with no fault, checked the same way.

Modules: bench.fault_plan (the faults, their bounds, each phase's campaigns), bench.fault_load (the traffic and
the feed of what the jobs publish), bench.fault_world (the run's jobs, servers and campaigns, and each part's
kill and restart), bench.fault_checks (the invariants); this module runs the phases and the matrix."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from bench.fault_checks import PhaseRecord, row
from bench.fault_load import Feed, Traffic
from bench.fault_plan import (BIDS_MICROS, BUDGETS_MICROS, FAULTS, FRESHNESS_BOUND_S, IN_PLACE, RECOVERY_BOUND_S,
                              SHORT_FAULTS, Log, now_ms)
from bench.fault_world import Child, World, latest_checkpoint
from core.errors import RunFailed
from infra.platform import PlatformSettings
from infra.platform.errors import PlatformError
from infra.platform.process import wait_until

__all__ = ["BIDS_MICROS", "BUDGETS_MICROS", "FAULTS", "FRESHNESS_BOUND_S", "IN_PLACE", "RECOVERY_BOUND_S",
           "SHORT_FAULTS", "Child", "Feed", "Matrix", "Timing", "Traffic", "World", "latest_checkpoint", "render",
           "run"]


@dataclass(frozen=True)
class Timing:
    settle_s: float = 15.0
    pause_lead_s: float = 3.0
    outage_s: float = 8.0
    # The broker stays down longer than the producers' 30 s delivery timeout: an outage their in-memory retries
    # cannot cover, so only the tracker's spool and the spend reporter's resends keep the acknowledged events.
    broker_outage_s: float = 40.0
    after_s: float = 12.0
    # The run's servers' and tracker's producer delivery timeout (librdkafka message.timeout.ms): the broker's
    # outage must outlast it. A shorter one lets a shorter outage prove the same (the CI test's 10 s and 12 s).
    delivery_timeout_ms: int = 30_000


def _phase(world: World, traffic: Traffic, index: int, fault: str, timing: Timing, log: Log) -> PhaseRecord:
    ids = world.phase_ids[index]
    campaigns = {cid: {"role": role, "budget_micros": BUDGETS_MICROS[role], "capped": role == "capped"}
                 for role, cid in ids.items()}
    record = PhaseRecord(fault, campaigns, recovery_bound_s=RECOVERY_BOUND_S[fault])
    first_answer, first_beacon = len(traffic.answers), len(traffic.beacons)
    log(f"[{fault}] launching campaigns {sorted(campaigns)} ...")
    launch = [(cid, role, "ACTIVE", 1) for role, cid in ids.items()]
    world.publish(launch, ads=True)
    # The ads reach the servers once the budget job has stated every campaign of the phase: before its first
    # state a server meters a new campaign and it gets no slice (docs/faults.md), so a phase would spend its first
    # seconds waiting for the budget job's next step instead of serving around its fault.
    wait_until(lambda: set(campaigns) <= set(world.feed.states), timeout_s=120,
               what="the budget job's first state for the phase's campaigns")
    world.publish(launch, serving_ads=True)
    waited = _until_served(traffic, first_answer, ids["paused"], timeout_s=60.0)
    log(f"[{fault}] the campaign to pause served after {waited:.1f} s" if waited is not None else
        f"[{fault}] the campaign to pause did not serve within 60 s: the phase goes on without that evidence")
    time.sleep(timing.settle_s)
    record.paused_at_s[ids["paused"]] = time.time()
    world.publish([(ids["paused"], "paused", "PAUSED", 2)])
    time.sleep(timing.pause_lead_s)
    killed_s = time.time()
    record.slices_at_fault_micros = world.feed.outstanding_micros(set(campaigns), int(killed_s * 1000))
    log(f"[{fault}] {'failing the jobs in place' if fault in IN_PLACE else 'SIGKILL'} "
        f"({record.slices_at_fault_micros} micros of slices outstanding)")
    world.kill(fault)
    time.sleep(0 if fault in IN_PLACE else timing.broker_outage_s if fault == "kafka" else timing.outage_s)
    restarting_s = time.time()
    if fault == "redis":
        record.redis_down = (killed_s + 0.5, restarting_s)
    world.restart(fault)
    back = world.wait_ready(2 * RECOVERY_BOUND_S[fault], what=fault)
    record.recovery_s = None if back is None else round(time.time() - restarting_s, 1)
    world.routable |= {n for n in world.children if n.startswith("ads-")}  # a replacement, once ready
    log(f"[{fault}] back after {record.recovery_s} s (bound {RECOVERY_BOUND_S[fault]:g} s)")
    time.sleep(timing.after_s)
    ended = time.time()
    world.publish([(cid, role, "PAUSED", 3) for role, cid in ids.items() if role != "paused"])
    for role, cid in ids.items():
        record.paused_at_s.setdefault(cid, ended)
    time.sleep(2.0)  # the answers sent before the phase's campaigns were paused
    record.answers = traffic.answers[first_answer:]
    record.beacons = [b for b in traffic.beacons[first_beacon:] if b.campaign_id in campaigns]
    return record


def _until_served(traffic: "Traffic", first_answer: int, campaign_id: int, timeout_s: float) -> float | None:
    """Seconds until an answer after `first_answer` served the campaign; None when none did within `timeout_s`."""
    try:
        return wait_until(lambda: any(campaign_id in a.campaigns for a in traffic.answers[first_answer:]),
                          timeout_s=timeout_s, interval_s=0.2, what=f"campaign {campaign_id} served")
    except PlatformError:
        return None


class Matrix:
    """One run of the matrix, a phase at a time: `start` brings up the run's jobs, servers and traffic; `phase`
    runs one fault's phase (the baseline first, then in the order asked; a fault asked again returns its record);
    `finish` runs the phases not yet run, stops the traffic, closes the day's billing windows and judges every
    row; `stop` cancels the run's jobs and stops its servers. `run` drives it whole; the CI test drives one phase
    per test, so each test's time stays bounded and a failed phase names its fault."""

    def __init__(self, faults: tuple[str, ...] = FAULTS, rate: float = 8.0, timing: Timing = Timing(),
                 log: Log = print):
        unknown = [f for f in faults if f not in FAULTS]
        if unknown:
            raise RunFailed(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}")
        self.faults, self.rate, self.timing, self.log = tuple(faults), rate, timing, log
        self.plan = ("baseline", *faults)
        self.records: dict[str, PhaseRecord] = {}
        self.world: World | None = None
        self.traffic: Traffic | None = None
        self.figures: dict[str, Any] | None = None

    def start(self) -> "Matrix":
        from bench.common import machine
        from infra.platform import control

        settings = PlatformSettings.from_env()
        control.up(settings, log=self.log)
        self.began = time.monotonic()
        self.machine = {**machine(), "load_average_start": os.getloadavg()}
        self.world = World(settings, phases=len(self.plan), rate=self.rate, log=self.log,
                           delivery_timeout_ms=self.timing.delivery_timeout_ms)
        self.traffic = Traffic(self.world.ad_server_urls, self.world.placement, self.rate, self.world.keys)
        self.log(f"starting the run's jobs and servers (run {self.world.run_id}) ...")
        self.world.start()
        self.traffic.start()
        return self

    def phase(self, fault: str) -> PhaseRecord:
        if fault not in self.plan:
            raise RunFailed(f"{fault!r} is not a phase of this run ({', '.join(self.plan)})")
        if fault not in self.records:
            if fault != "baseline" and "baseline" not in self.records:
                self.phase("baseline")
            self.records[fault] = _phase(self.world, self.traffic, len(self.records), fault, self.timing,
                                         self.log)
        return self.records[fault]

    def finish(self) -> dict[str, Any]:
        if self.figures is not None:
            return self.figures
        for fault in self.plan:
            self.phase(fault)
        world, traffic = self.world, self.traffic
        traffic.halt.set()
        traffic.join(30)
        self.log("closing the day's billing windows ...")
        began = time.monotonic()
        closed = world.close_billing(now_ms())
        self.log(f"the day's last window billed after {time.monotonic() - began:.1f} s" if closed else
                 "the click aggregator did not bill the last window in time: counts compare what it billed")
        self.stop()
        phases = [self.records[f] for f in self.plan]
        for phase in phases:
            phase.billed = [r for r in world.feed.billed if int(r["campaign_id"]) in phase.campaigns]
        rows = [row(p, FRESHNESS_BOUND_S) for p in phases]
        timing = self.timing
        self.figures = {"machine": {**self.machine, "load_average_end": os.getloadavg()},
                        "rows": rows, "all_held": all(r["held"] for r in rows), "faults": list(self.faults),
                        "rate": self.rate, "settle_s": timing.settle_s, "outage_s": timing.outage_s,
                        "broker_outage_s": timing.broker_outage_s, "delivery_timeout_ms": timing.delivery_timeout_ms,
                        "after_s": timing.after_s, "freshness_bound_s": FRESHNESS_BOUND_S,
                        "wall_s": round(time.monotonic() - self.began, 1), "run": world.run_id}
        return self.figures

    def stop(self) -> None:
        if self.traffic is not None:
            self.traffic.halt.set()
        if self.world is not None and not self.world.stopped:
            self.world.stop()

    def __enter__(self) -> "Matrix":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run(*, faults: tuple[str, ...] = FAULTS, rate: float = 8.0, timing: Timing = Timing(),
        log: Log = print) -> dict[str, Any]:
    with Matrix(faults, rate, timing, log) as matrix:
        return matrix.finish()


def render(f: dict[str, Any]) -> str:
    m = f["machine"]
    head = ("fault", "recovery_s", "bound_s", "lost", "double", "above_budget", "beyond_slices", "paused_served",
            "capped_no_redis", "5xx", "shared_ids", "held")
    lines = [f"machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB; load "
             f"{m['load_average_start'][0]:.1f} at the start, {m['load_average_end'][0]:.1f} at the end",
             f"{f['rate']:g} requests/s; per fault {f['settle_s']:g} s serving, kill, {f['outage_s']:g} s down, "
             f"restart, {f['after_s']:g} s after recovery; whole run {f['wall_s']} s",
             " | ".join(head)]
    for r in f["rows"]:
        lines.append(" | ".join(str(v) for v in (
            r["fault"], r["recovery_s"], r["recovery_bound_s"], r["lost_events"], r["double_billed_events"],
            r["billed_above_budget_micros"], r["overspend_beyond_slices_micros"], r["paused_served_after_bound"],
            r["capped_served_without_redis"], r["server_errors"], r["shared_impression_ids"],
            "yes" if r["held"] else "NO")))
    lines.append("every invariant held under every fault" if f["all_held"] else "AN INVARIANT BROKE (rows above)")
    return "\n".join(lines)
