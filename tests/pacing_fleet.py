"""A second-by-second model of the pacing loop for unit tests: servers, slices, reports, the budget job's
pure rules (core.budget) and billing, with scripted traffic. No I/O, seeded, deterministic.

It exercises the loop exactly as the job wires it (a 10 s spend window reaches the job before the step at its
end, as in the job, where SpendWindows emits a window before the watermark that fires that step; metered
servers ask for slices in their per-second report, states and slices reach servers a second
later, billing reports every 10 s) so the design's cases can be checked in seconds."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from core import budget
from core.leases import LeaseBook
from sim.synthetic import diurnal

DAY0_MS = 1_767_225_600_000  # 2026-01-01 00:00 UTC
HOUR_S = 3600


@dataclass
class Campaign:
    campaign_id: int
    budget_micros: int
    price_micros: int  # per click (CPC)
    true_ctr: float
    opportunities_per_s: float  # eligible requests per second at the diurnal peak (1.0)
    win_rate: float = 1.0
    changes: dict[int, int] = field(default_factory=dict)  # second of day -> new budget
    predicted_ctr: float | None = None  # what the servers' expected cost assumes (default: the true ctr)


@dataclass
class DayResult:
    billed_micros: int
    absorbed_micros: int
    served_by_second: np.ndarray  # ads served per second (from start_s)
    states: list[tuple[int, str, float]]  # (second, state, p) as servers saw them
    spend_by_second: np.ndarray  # billed value (incl. absorbed) per second (from start_s)
    target_by_second: np.ndarray  # the plan's cumulative target at each second
    stopped_at_s: int | None
    killed_holding_micros: int  # unspent slice the killed server took with it


def run_day(c: Campaign, *, servers: int = 4, seed: int = 7, traffic: Callable[[int], float] = diurnal,
            kill_server_at_s: int | None = None,  # kill server 0 once it holds a slice after this second
            start_s: int = 0, end_s: int = 86_400, shape: list[float] | None = None,
            state_delay_s: int = 1) -> DayResult:
    """One campaign's day. `state_delay_s`: how long the job's states and slices take to reach the servers
    (1 s on a live fleet; a compressed simulation lets servers run ahead of the job, which delays the loop)."""
    rng = np.random.default_rng(seed)
    state = budget.PacerState(c.campaign_id, shape=shape or [float(traffic(h * HOUR_S + 1800)) for h in range(24)])
    campaign_record = {"timezone": "UTC", "bid_type": "CPC", "status": "ACTIVE", "daily_budget_micros": c.budget_micros}
    inbox: list[tuple[int, str, dict]] = []  # (deliver at second, kind, record) to servers
    for kind, rec in budget.on_campaign(state, campaign_record, DAY0_MS + start_s * 1000):
        inbox.append((0, kind, rec))
    books = [LeaseBook(f"s{i}") for i in range(servers)]
    view = {"state": "OPEN", "p": 1.0, "seen": False}
    expected_cost = int(c.price_micros * (c.true_ctr if c.predicted_ctr is None else c.predicted_ctr))
    window_spend, window_served, window_eligible = 0, 0, 0
    pending_windows: list[tuple[int, budget.Window]] = []  # (deliver at second, window)
    billed = absorbed = 0
    seconds = end_s - start_s
    served_by_second = np.zeros(seconds)
    clicks_due: list[tuple[int, int]] = []  # (second, count)
    spend_by_second = np.zeros(seconds)
    target_by_second = np.zeros(seconds)
    states: list[tuple[int, str, float]] = []
    stopped_at = None
    alive = [True] * servers
    killed_holding = 0
    for sec in range(start_s, end_s):
        now = DAY0_MS + sec * 1000
        if sec in c.changes:
            campaign_record = dict(campaign_record, daily_budget_micros=c.changes[sec])
            for kind, rec in budget.on_campaign(state, campaign_record, now):
                inbox.append((sec + 1, kind, rec))
        if kill_server_at_s is not None and sec >= kill_server_at_s and alive[0] and books[0].held(c.campaign_id, now):
            alive[0] = False  # dies holding a slice, with this second's spend unreported
            killed_holding = books[0].remaining(c.campaign_id, now)
        for item in [i for i in inbox if i[0] <= sec]:
            inbox.remove(item)
            _, kind, rec = item
            if kind == "state":
                view.update(state=rec["state"], p=rec["participation_probability"])
                states.append((sec, rec["state"], rec["participation_probability"]))
                if rec["state"] == "STOPPED" and stopped_at is None:
                    stopped_at = sec
            elif kind == "lease":
                books[int(rec["server_id"][1:])].grant(rec)
        opportunities = rng.poisson(c.opportunities_per_s * traffic(sec))
        per_server = rng.multinomial(opportunities, [1 / servers] * servers)
        second_reports = []
        for i, book in enumerate(books):
            if not alive[i]:
                continue
            n = int(per_server[i])
            spent = served = 0
            wants = False
            if view["state"] != "STOPPED" and n:
                entered = rng.binomial(n, view["p"])
                wins = rng.binomial(entered, c.win_rate)
                if view["state"] == "OPEN":
                    served, spent = wins, wins * expected_cost
                for _ in range(wins if view["state"] == "METERED" else 0):
                    if not book.held(c.campaign_id, now):
                        wants = True
                        break
                    book.charge(c.campaign_id, expected_cost, now)
                    spent += expected_cost
                    served += 1
                if view["state"] == "METERED" and not book.held(c.campaign_id, now):
                    wants = True
                window_eligible += n
            clicks = rng.binomial(served, c.true_ctr)
            if clicks:
                clicks_due.append((sec + int(rng.integers(1, 30)), clicks))
            window_spend += spent
            window_served += served
            served_by_second[sec - start_s] += served
            lease = book.lease_ids(now).get(c.campaign_id)
            if lease or wants:
                second_reports.append((book.server_id, lease, spent, wants))
            book.expire(now)
        for server_id, lease, spent, wants in second_reports:  # 1 s windows reach the job ~2 s later
            report = budget.ServerSpend(server_id, lease, spent, wants, c.price_micros, now + 2000)
            for kind, rec in budget.on_server_spend(state, report, spent):
                inbox.append((sec + 2 + state_delay_s, kind, rec))
        if (sec + 1) % 10 == 0:  # the window ending at sec + 1 is there for the step at sec + 1
            pending_windows.append((sec + 1, budget.Window(now + 1000, window_spend, window_served,
                                                           window_eligible, sum(alive))))
            window_spend = window_served = window_eligible = 0
        for due in [w for w in pending_windows if w[0] <= sec]:
            pending_windows.remove(due)
            budget.on_spend(state, due[1], c.price_micros)
        for due in [c_ for c_ in clicks_due if c_[0] <= sec]:
            clicks_due.remove(due)
            for _ in range(due[1]):
                if billed + c.price_micros <= state.budget_micros:
                    billed += c.price_micros
                else:
                    absorbed += c.price_micros
                spend_by_second[sec - start_s] += c.price_micros
        if sec % 10 == 0 and sec:
            budget.on_billed(state, {"budget_day": state.budget_day, "event_time": now - 5000,
                                     "billed_spend_micros": billed})
            for kind, rec in budget.step(state, now):
                if kind != "pacing":
                    inbox.append((sec + state_delay_s, kind, rec))
        target_by_second[sec - start_s] = state.plan().target_micros(sec / 60)
    return DayResult(billed, absorbed, served_by_second, states, spend_by_second, target_by_second, stopped_at, killed_holding)
