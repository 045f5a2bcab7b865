"""Budget slices ("leases") a server holds for metered campaigns. Pure: times are parameters.

The budget job grants a server a slice of a metered campaign's remaining budget
on `budget.leases`; the server serves that campaign only while it holds an
unexpired slice with money left, and spends the slice down by the expected
cost of what it serves. A slice lives at most LEASE_LIFETIME_MS (30 s) from
its grant, or less if the grant says so."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

LEASE_LIFETIME_MS = 30_000


@dataclass
class Lease:
    lease_id: str
    campaign_id: int
    remaining_micros: int
    expires_ms: int


class LeaseBook:
    def __init__(self, server_id: str, lifetime_ms: int = LEASE_LIFETIME_MS):
        self.server_id = server_id
        self.lifetime_ms = lifetime_ms
        self._leases: dict[int, list[Lease]] = {}
        self._seen: set[str] = set()

    def grant(self, record: Mapping[str, Any]) -> bool:
        """Apply a BudgetLease record (schemas/budget_lease.avsc); False if it is for another server or
        already applied (a lease id counts once)."""
        if record["server_id"] != self.server_id or record["lease_id"] in self._seen:
            return False
        self._seen.add(record["lease_id"])
        expires = min(int(record["expires_at"]), int(record["event_time"]) + self.lifetime_ms)
        self._leases.setdefault(int(record["campaign_id"]), []).append(
            Lease(record["lease_id"], int(record["campaign_id"]), int(record["amount_micros"]), expires))
        return True

    def remaining(self, campaign_id: int, now_ms: int) -> int:
        return sum(l.remaining_micros for l in self._leases.get(campaign_id, ()) if l.expires_ms > now_ms)

    def held(self, campaign_id: int, now_ms: int) -> bool:
        return self.remaining(campaign_id, now_ms) > 0

    def charge(self, campaign_id: int, amount_micros: int, now_ms: int) -> int:
        """Spend from the campaign's slices, soonest-expiring first; returns what could not be covered."""
        left = amount_micros
        for lease in sorted(self._leases.get(campaign_id, ()), key=lambda l: l.expires_ms):
            if left <= 0:
                break
            if lease.expires_ms <= now_ms:
                continue
            take = min(left, lease.remaining_micros)
            lease.remaining_micros -= take
            left -= take
        return left

    def expire(self, now_ms: int) -> list[int]:
        """Drop expired or spent slices; returns the campaigns that no longer hold any."""
        lost = []
        for campaign_id, leases in list(self._leases.items()):
            live = [l for l in leases if l.expires_ms > now_ms and l.remaining_micros > 0]
            if live:
                self._leases[campaign_id] = live
            else:
                del self._leases[campaign_id]
                lost.append(campaign_id)
        return lost

    def lease_ids(self, now_ms: int) -> dict[int, str]:
        """The newest unexpired slice per campaign (spend reports name it)."""
        out = {}
        for campaign_id, leases in self._leases.items():
            live = [l for l in leases if l.expires_ms > now_ms]
            if live:
                out[campaign_id] = live[-1].lease_id
        return out
