"""Expected spend per campaign, reported once a second, counted once downstream. Pure.

An ad server adds the expected cost of each winner (the price for impression
billing; price x pCTR for click billing) and, once a second, cuts the totals
into SpendReport records (schemas/spend_report.avsc) that share one sequence
number. A report that must be re-sent (the broker was unavailable) keeps its
(server id, sequence), so the consumer's `SpendDedupe` counts it once."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np


class SpendAccumulator:
    def __init__(self, server_id: str):
        self.server_id = server_id
        self.sequence = 0
        self._spend: dict[int, int] = {}
        self._served: dict[int, int] = {}
        self._eligible: dict[int, int] = {}
        self._price: dict[int, int] = {}
        self._wants: set[int] = set()
        self._eligible_batches: list[np.ndarray] = []
        self._interval_start: int | None = None

    def add(self, campaign_id: int, expected_cost_micros: int, now_ms: int, price_micros: int = 0) -> None:
        """One served ad: its expected cost, and its price per billing unit (the job's click price)."""
        self._start(now_ms)
        self._spend[campaign_id] = self._spend.get(campaign_id, 0) + int(expected_cost_micros)
        self._served[campaign_id] = self._served.get(campaign_id, 0) + 1
        self._price[campaign_id] = max(self._price.get(campaign_id, 0), int(price_micros))

    def eligible(self, campaign_id: int, now_ms: int) -> None:
        """The campaign could have entered this request's auction (before budget state and pacing)."""
        self._start(now_ms)
        self._eligible[campaign_id] = self._eligible.get(campaign_id, 0) + 1

    def eligible_many(self, campaign_ids: Sequence[int] | np.ndarray, now_ms: int) -> None:
        """`eligible` for a request's distinct eligible campaigns at once (counted at the cut)."""
        if len(campaign_ids):
            self._start(now_ms)
            self._eligible_batches.append(np.asarray(campaign_ids, dtype=np.int64))

    def want_slice(self, campaign_id: int, top_bid_micros: int, now_ms: int) -> None:
        """Metered and eligible here, but no slice with money left: ask the budget job for one."""
        self._start(now_ms)
        self._wants.add(campaign_id)
        self._price[campaign_id] = max(self._price.get(campaign_id, 0), int(top_bid_micros))

    def _start(self, now_ms: int) -> None:
        if self._interval_start is None:
            self._interval_start = now_ms

    def cut(self, now_ms: int, lease_of: dict[int, str] | None = None) -> list[dict[str, Any]]:
        """The reports for everything added since the last cut (empty if nothing was)."""
        if self._eligible_batches:
            ids, counts = np.unique(np.concatenate(self._eligible_batches), return_counts=True)
            for campaign_id, count in zip(ids.tolist(), counts.tolist()):
                self._eligible[campaign_id] = self._eligible.get(campaign_id, 0) + count
            self._eligible_batches = []
        campaigns = sorted(set(self._spend) | set(self._eligible) | self._wants)
        if not campaigns:
            return []
        self.sequence += 1
        start = self._interval_start if self._interval_start is not None else now_ms
        reports = [{"server_id": self.server_id, "sequence": self.sequence, "campaign_id": c,
                    "event_time": now_ms, "interval_start": start,
                    "expected_spend_micros": self._spend.get(c, 0), "served_ads": self._served.get(c, 0),
                    "eligible_requests": self._eligible.get(c, 0),
                    "lease_id": (lease_of or {}).get(c), "max_price_micros": self._price.get(c, 0),
                    "wants_slice": c in self._wants} for c in campaigns]
        self._spend, self._served, self._eligible, self._interval_start = {}, {}, {}, None
        self._price, self._wants = {}, set()
        return reports


def report_key(report: dict[str, Any]) -> tuple[str, int, int]:
    """What makes a report the same report however often it is sent: (server id, sequence, campaign id).
    A resend keeps all three; two servers, two cuts or two campaigns never share them."""
    return str(report["server_id"]), int(report["sequence"]), int(report["campaign_id"])


class SpendDedupe:
    """Downstream: each (server id, sequence, campaign) counts once, however often it arrives."""

    def __init__(self, horizon: int = 100_000):
        self.horizon = horizon
        self._seen: dict[str, set[tuple[int, int]]] = {}
        self._highest: dict[str, int] = {}

    def first_time(self, report: dict[str, Any]) -> bool:
        server, sequence, campaign_id = report_key(report)
        seen = self._seen.setdefault(server, set())
        key = (sequence, campaign_id)
        if key in seen or sequence <= self._highest.get(server, 0) - self.horizon:
            return False
        seen.add(key)
        if sequence > self._highest.get(server, 0):
            self._highest[server] = sequence
            if len(seen) > 4 * self.horizon:
                floor = sequence - self.horizon
                self._seen[server] = {k for k in seen if k[0] > floor}
        return True
