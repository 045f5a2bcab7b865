"""The fault matrix's invariants, as pure functions of what one fault's phase recorded (`adserve bench faults`).

A phase runs its own campaigns, so every billed total, beacon and answer below belongs to exactly one fault's
row. The rules, each the design's promise measured as a count that must be 0:

- billed totals equal a recount of every beacon the tracker acknowledged (HTTP 204): an acknowledged impression
  the click aggregator never counted is lost, one counted beyond the acknowledged ones is billed twice;
- no campaign is billed above its daily budget;
- absorbed overspend stays within the slices outstanding at the fault (what servers could spend unreported);
- no answer started more than the freshness bound after a campaign's pause serves it;
- while Redis is down, no answer serves a capped campaign (and some answer serves an uncapped one);
- no server answers 5xx except 503 under overload;
- no impression id is served for two requests: the load driver sends every request id twice, and the server
  makes each winner's impression id itself, so both requests' impressions are billed;
- the platform is back (every job RUNNING, every server ready) within the fault's stated bound.

Nothing here reads a clock or a socket: bench.faults records, this module judges."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from core.clicks import progress_key

COUNTS = ("lost_events", "double_billed_events", "billed_above_budget_micros", "overspend_beyond_slices_micros",
          "paused_served_after_bound", "capped_served_without_redis", "server_errors", "shared_impression_ids")


@dataclass(frozen=True)
class Answer:
    """One ad request as the load driver saw it: when it was sent and answered (wall seconds), by which server,
    the HTTP status, the campaigns its slots served, and whether a 503 said the server was overloaded."""

    sent_s: float
    answered_s: float
    server: str
    status: int | None  # None: no answer (connection refused or reset: the server is down)
    campaigns: tuple[int, ...] = ()
    overloaded: bool = False
    error: str = ""  # the answer's error text, when it has one


@dataclass(frozen=True)
class Beacon:
    """One impression beacon sent to the tracker: its impression, campaign and signed price, and the status."""

    impression_id: str
    campaign_id: int
    price_micros: int
    status: int | None
    request: int = -1  # the load driver's number of the request that served it


@dataclass
class PhaseRecord:
    """What one fault's phase recorded (bench.faults fills it)."""

    fault: str
    campaigns: dict[int, dict[str, Any]]  # campaign id -> {"budget_micros", "capped", "role"}
    paused_at_s: dict[int, float] = field(default_factory=dict)  # campaign id -> wall second its pause was sent
    answers: list[Answer] = field(default_factory=list)
    beacons: list[Beacon] = field(default_factory=list)
    other_errors: int = 0  # 5xx from the tracker or the prediction service outside the ad requests
    billed: list[Mapping[str, Any]] = field(default_factory=list)  # BilledSpend records of the phase's campaigns
    slices_at_fault_micros: int = 0  # slices of the phase's campaigns outstanding when the fault struck
    redis_down: tuple[float, float] | None = None  # wall seconds Redis was surely down: (killed, restarting)
    recovery_s: float | None = None  # restart to everything back; None: not back within the wait
    recovery_bound_s: float = 0.0


def acknowledged(beacons: Iterable[Beacon]) -> dict[int, dict[str, int]]:
    """Campaign id -> events and micros of the distinct impressions the tracker acknowledged (204)."""
    seen: dict[str, Beacon] = {}
    for b in beacons:
        if b.status == 204:
            seen.setdefault(b.impression_id, b)
    totals: dict[int, dict[str, int]] = {}
    for b in seen.values():
        t = totals.setdefault(b.campaign_id, {"events": 0, "micros": 0})
        t["events"] += 1
        t["micros"] += b.price_micros
    return totals


def latest_billed(records: Iterable[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """Campaign id -> its newest BilledSpend record of the day (totals only grow)."""
    latest: dict[int, Mapping[str, Any]] = {}
    for r in records:
        cid = int(r["campaign_id"])
        if cid not in latest or progress_key(r) > progress_key(latest[cid]):
            latest[cid] = r
    return latest


def billing_counts(phase: PhaseRecord) -> dict[str, int]:
    """lost_events, double_billed_events, billed_above_budget_micros, overspend_beyond_slices_micros."""
    acked = acknowledged(phase.beacons)
    latest = latest_billed(phase.billed)
    lost = double = above = absorbed = 0
    for cid, campaign in phase.campaigns.items():
        counted = int(latest[cid]["billed_impressions"]) if cid in latest else 0
        expected = acked.get(cid, {"events": 0})["events"]
        lost += max(0, expected - counted)
        double += max(0, counted - expected)
        absorbed += int(latest[cid]["absorbed_overspend_micros"]) if cid in latest else 0
        highest = max((int(r["billed_spend_micros"]) for r in phase.billed if int(r["campaign_id"]) == cid),
                      default=0)
        above += max(0, highest - int(campaign["budget_micros"]))
    return {"lost_events": lost, "double_billed_events": double, "billed_above_budget_micros": above,
            "overspend_beyond_slices_micros": max(0, absorbed - phase.slices_at_fault_micros)}


def serving_counts(phase: PhaseRecord, freshness_bound_s: float) -> dict[str, int]:
    """paused_served_after_bound, capped_served_without_redis, uncapped_served_without_redis, server_errors."""
    paused = capped = uncapped = 0
    for a in phase.answers:
        for cid in a.campaigns:
            at = phase.paused_at_s.get(cid)
            if at is not None and a.sent_s > at + freshness_bound_s:
                paused += 1
        if phase.redis_down and a.status == 200 and phase.redis_down[0] < a.sent_s \
                and a.answered_s < phase.redis_down[1]:
            for cid in a.campaigns:
                if cid in phase.campaigns and phase.campaigns[cid].get("capped"):
                    capped += 1
                elif cid in phase.campaigns:
                    uncapped += 1
    errors = sum(1 for a in phase.answers if a.status is not None and a.status >= 500
                 and not (a.status == 503 and a.overloaded))
    errors += sum(1 for b in phase.beacons if b.status is not None and b.status >= 500 and b.status != 503)
    return {"paused_served_after_bound": paused, "capped_served_without_redis": capped,
            "uncapped_served_without_redis": uncapped, "server_errors": errors + phase.other_errors,
            "shared_impression_ids": shared_impression_ids(phase.beacons)}


def shared_impression_ids(beacons: Iterable[Beacon]) -> int:
    """Impression ids served for more than one request. Billing dedupes on the impression id, so one shared by
    two requests would leave the second serve unbilled; the load driver reuses each request id once to find it."""
    requests: dict[str, set[int]] = {}
    for b in beacons:
        requests.setdefault(b.impression_id, set()).add(b.request)
    return sum(1 for seen in requests.values() if len(seen) > 1)


def evidence(phase: PhaseRecord) -> dict[str, int]:
    """That the phase exercised its rules: slots that served the campaign paused before the fault ahead of its
    pause, slots that served the capped campaign (Redis up), and the metered campaign's billed and absorbed
    spend against its budget (it must reach the budget for the budget rules to bite)."""
    roles = {cid: c.get("role") for cid, c in phase.campaigns.items()}
    paused_before = capped = 0
    for a in phase.answers:
        for cid in a.campaigns:
            if roles.get(cid) == "paused" and a.answered_s < phase.paused_at_s.get(cid, float("inf")):
                paused_before += 1
            if roles.get(cid) == "capped":
                capped += 1
    latest = latest_billed(phase.billed)
    metered = [cid for cid, role in roles.items() if role == "metered"]
    spent = sum(int(latest[c]["billed_spend_micros"]) + int(latest[c]["absorbed_overspend_micros"])
                for c in metered if c in latest)
    served_by = {b.request for b in phase.beacons if b.status == 204}
    return {"paused_served_before_pause": paused_before, "capped_served": capped,
            # request ids sent twice whose both requests served an acknowledged impression
            "request_ids_served_twice": sum(1 for seq in served_by if seq % 2 == 0 and seq + 1 in served_by),
            "metered_spend_micros": spent,
            "metered_budget_micros": sum(int(phase.campaigns[c]["budget_micros"]) for c in metered)}


def row(phase: PhaseRecord, freshness_bound_s: float) -> dict[str, Any]:
    """The fault's row: recovery against its bound, every count, and `held` (every count 0, recovered within the
    bound, and, for Redis, uncapped campaigns still served while it was down)."""
    counts = {**billing_counts(phase), **serving_counts(phase, freshness_bound_s)}
    acked = acknowledged(phase.beacons)
    recovered = phase.recovery_s is not None and phase.recovery_s < phase.recovery_bound_s
    uncapped_ok = phase.redis_down is None or counts["uncapped_served_without_redis"] > 0
    return {"fault": phase.fault, "recovery_s": phase.recovery_s, "recovery_bound_s": phase.recovery_bound_s,
            **{name: counts[name] for name in COUNTS},
            "uncapped_served_without_redis": counts["uncapped_served_without_redis"] if phase.redis_down else None,
            "requests": len(phase.answers), "answered_200": sum(1 for a in phase.answers if a.status == 200),
            "beacons_acknowledged": sum(t["events"] for t in acked.values()),
            "beacons_refused": sum(1 for b in phase.beacons if b.status != 204),
            "slices_at_fault_micros": phase.slices_at_fault_micros,
            "billed_micros": sum(int(r["billed_spend_micros"]) for r in latest_billed(phase.billed).values()),
            **evidence(phase),
            "error_answers": sorted({f"{a.status} {a.error}" for a in phase.answers if a.status is not None
                                     and a.status >= 500})[:5],
            "held": recovered and uncapped_ok and all(counts[name] == 0 for name in COUNTS)}
