"""Expected spend per campaign, reported once a second, counted once downstream. Pure.

An ad server adds the expected cost of each winner (the price for impression
billing; price x pCTR for click billing) and, once a second, cuts the totals
into SpendReport records (schemas/spend_report.avsc) that share one sequence
number: one record per partition of budget.spend, carrying that partition's
campaigns as packed columns (`batch_records`), so a second costs a handful of
records however many campaigns it touched. A campaign's entries go to the
partition a record keyed by its id would (`partition_of`: librdkafka's default
partitioner), so every report of a campaign reaches the same budget-job source.
Readers expand either form into one report per campaign with `spend_items`.
A report that must be re-sent (the broker was unavailable) keeps its
(server id, sequence), so the consumer's `SpendDedupe` counts it once."""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from core.errors import SchemaMismatch


class SpendAccumulator:
    def __init__(self, server_id: str):
        self.server_id = server_id
        self.sequence = 0
        self._spend: dict[int, int] = {}
        self._served: dict[int, int] = {}
        self._eligible: dict[int, int] = {}
        self._price: dict[int, int] = {}
        self._wants: set[int] = set()
        self._released: set[int] = set()
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

    def release(self, campaign_ids: Iterable[int], now_ms: int) -> None:
        """A draining server's last interval hands back its budget slices of these campaigns: the next cut
        names each of them in `released`, spend or not, and the budget job drops this server's slices of them."""
        self._start(now_ms)
        self._released.update(int(c) for c in campaign_ids)

    def _start(self, now_ms: int) -> None:
        if self._interval_start is None:
            self._interval_start = now_ms

    def take(self, now_ms: int) -> "SpendTake | None":
        """What was added since the last take, under the next sequence number, and a fresh interval (None if
        nothing was). Constant time: the server's event loop calls it; `SpendTake.columns` does the work."""
        if not (self._spend or self._eligible or self._wants or self._released or self._eligible_batches):
            return None
        self.sequence += 1
        taken = SpendTake(self.server_id, self.sequence,
                          self._interval_start if self._interval_start is not None else now_ms, now_ms,
                          self._spend, self._served, self._eligible, self._price, self._wants,
                          self._eligible_batches, self._released)
        self._spend, self._served, self._eligible, self._interval_start = {}, {}, {}, None
        self._price, self._wants, self._eligible_batches, self._released = {}, set(), [], set()
        return taken

    def cut(self, now_ms: int, lease_of: dict[int, str] | None = None) -> "SpendCut | None":
        """`take` and `SpendTake.columns` in one step (None if nothing was added)."""
        taken = self.take(now_ms)
        return taken.columns(lease_of) if taken is not None else None


@dataclass
class SpendTake:
    """One interval's raw accumulation, handed from the event loop to the reporter (`SpendAccumulator.take`)."""

    server_id: str
    sequence: int
    interval_start: int
    event_time: int
    spend: dict[int, int]
    served: dict[int, int]
    eligible: dict[int, int]
    price: dict[int, int]
    wants: set[int]
    eligible_batches: list[np.ndarray]
    released: set[int] = field(default_factory=set)

    def columns(self, lease_of: dict[int, str] | None = None) -> "SpendCut":
        """The interval as columns sorted by campaign id; `lease_of` names the lease of each metered campaign."""
        if self.eligible_batches:
            ids, counts = np.unique(np.concatenate(self.eligible_batches), return_counts=True)
        else:
            ids, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
        others = np.fromiter(set(self.spend) | set(self.eligible) | self.wants | self.released, np.int64)
        campaigns = np.union1d(ids, others).astype(np.int64)
        eligible = np.zeros(len(campaigns), np.int32)
        eligible[np.searchsorted(campaigns, ids)] = counts
        spend, served, price = (np.zeros(len(campaigns), np.int64) for _ in range(3))
        for source, column in ((self.spend, spend), (self.served, served), (self.price, price)):
            if source:
                keys = np.fromiter(source.keys(), np.int64, len(source))
                column[np.searchsorted(campaigns, keys)] = np.fromiter(source.values(), np.int64, len(source))
        for campaign_id, count in self.eligible.items():  # single `eligible` calls
            eligible[np.searchsorted(campaigns, campaign_id)] += count
        leases: dict[int, str] = {}
        if lease_of:
            held = np.fromiter(lease_of, np.int64, len(lease_of))
            leases = {c: lease_of[c] for c in held[np.isin(held, campaigns)].tolist()}
        return SpendCut(self.server_id, self.sequence, self.interval_start, self.event_time, campaigns, spend,
                        served.astype(np.int32), eligible, price, leases, set(self.wants), set(self.released))


@dataclass
class SpendCut:
    """One interval's spend of one server as columns, sorted by campaign id (`SpendAccumulator.cut`)."""

    server_id: str
    sequence: int
    interval_start: int
    event_time: int
    campaign_id: np.ndarray  # int64, sorted, distinct
    expected_spend_micros: np.ndarray  # int64
    served_ads: np.ndarray  # int32
    eligible_requests: np.ndarray  # int32
    max_price_micros: np.ndarray  # int64
    lease_id: dict[int, str] = field(default_factory=dict)  # metered campaigns only
    wants_slice: set[int] = field(default_factory=set)
    released: set[int] = field(default_factory=set)  # campaigns whose slices the server hands back

    def items(self) -> list[dict[str, Any]]:
        """The cut as one report per campaign (tests and tools; the server sends `batch_records`)."""
        return [item for _, record in batch_records(self, 1) for item in spend_items(record)]


class Partitioner:
    """The budget.spend partition of a campaign: what librdkafka's default partitioner (CRC-32 of the key)
    picks for a record keyed by the campaign id in decimal, so a batched entry and a keyed record of the
    same campaign land together. Memoised: a server meets the same campaigns every second."""

    def __init__(self, partitions: int):
        self.partitions = partitions
        self._ids = np.zeros(0, np.int64)  # campaigns met so far, sorted
        self._parts = np.zeros(0, np.int64)  # their partitions

    def __call__(self, campaign_ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(campaign_ids, dtype=np.int64)
        at = np.searchsorted(self._ids, ids)
        known = at < len(self._ids)
        known[known] = self._ids[at[known]] == ids[known]
        if not known.all():  # CRC-32 only for campaigns never met before
            new = np.unique(ids[~known])
            merged = np.concatenate((self._ids, new))
            order = np.argsort(merged, kind="stable")
            new_parts = np.fromiter((partition_of(c, self.partitions) for c in new.tolist()), np.int64, len(new))
            self._ids, self._parts = merged[order], np.concatenate((self._parts, new_parts))[order]
            at = np.searchsorted(self._ids, ids)
        return self._parts[at]


def partition_of(campaign_id: int, partitions: int) -> int:
    """librdkafka's consistent partition of the key str(campaign_id): CRC-32 modulo the partition count."""
    return zlib.crc32(str(int(campaign_id)).encode()) % partitions


MAX_CAMPAIGNS_PER_RECORD = 20_000  # 32 bytes each: ~640 kB, under Kafka's default 1 MB record limit


def batch_records(cut: SpendCut, partitions: int, partitioner: Partitioner | None = None,
                  max_campaigns: int = MAX_CAMPAIGNS_PER_RECORD) -> list[tuple[int, dict[str, Any]]]:
    """(partition, SpendReport record) for every partition, each carrying that partition's campaigns as
    packed columns, at most `max_campaigns` to a record (a partition with more gets several records under the
    same sequence: each campaign is in one of them); a partition with none gets an empty one, which is its
    heartbeat for the interval."""
    part = (partitioner or Partitioner(partitions))(cut.campaign_id) if len(cut.campaign_id) else \
        np.zeros(0, np.int64)
    out = []
    for p in range(partitions):
        rows_of_partition = np.flatnonzero(part == p)
        for begin in range(0, max(1, len(rows_of_partition)), max_campaigns):
            rows = rows_of_partition[begin:begin + max_campaigns]
            ids = cut.campaign_id[rows]
            mine = set(ids.tolist()) if cut.lease_id or cut.wants_slice or cut.released else set()
            columns = {
                "campaign_id": ids.astype("<i8").tobytes(),
                "expected_spend_micros": cut.expected_spend_micros[rows].astype("<i8").tobytes(),
                "served_ads": cut.served_ads[rows].astype("<i4").tobytes(),
                "eligible_requests": cut.eligible_requests[rows].astype("<i4").tobytes(),
                "max_price_micros": cut.max_price_micros[rows].astype("<i8").tobytes(),
                "lease_id": {str(c): lease for c, lease in cut.lease_id.items() if c in mine},
                "wants_slice": sorted(c for c in cut.wants_slice if c in mine),
                "released": sorted(c for c in cut.released if c in mine)}
            out.append((p, {**heartbeat_record(cut.server_id, cut.sequence, cut.event_time, cut.interval_start),
                            "campaigns": columns}))
    return out


def heartbeat_record(server_id: str, sequence: int, event_time: int, interval_start: int | None = None) \
        -> dict[str, Any]:
    """A SpendReport that carries no campaign (campaign_id 0): it only moves event time."""
    return {"server_id": server_id, "sequence": sequence, "campaign_id": 0, "event_time": event_time,
            "interval_start": event_time if interval_start is None else interval_start,
            "expected_spend_micros": 0, "served_ads": 0, "eligible_requests": 0, "lease_id": None,
            "max_price_micros": 0, "wants_slice": False, "campaigns": None}


COLUMN_WIDTHS = {"campaign_id": 8, "expected_spend_micros": 8, "served_ads": 4, "eligible_requests": 4,
                 "max_price_micros": 8}  # bytes per entry of each packed column


def spend_items(record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One single-campaign report (the top-level fields' shape, `campaigns` left out) per campaign a SpendReport
    carries, in either form: its top-level campaign when campaign_id > 0, then each column entry. A heartbeat
    carries none. An entry whose slices the server hands back (`released`, a field of the columns only) also
    carries `released: True`."""
    head = {k: v for k, v in record.items() if k != "campaigns"}
    if int(record["campaign_id"]) > 0:
        yield head
    columns = record.get("campaigns")
    if not columns:
        return
    for name, width in COLUMN_WIDTHS.items():
        if len(columns[name]) % width:
            raise SchemaMismatch(f"SpendReport column {name}: {len(columns[name])} bytes is not whole {width}-byte "
                                 "entries")
    ids = np.frombuffer(columns["campaign_id"], "<i8")
    n = len(ids)
    spend = np.frombuffer(columns["expected_spend_micros"], "<i8")
    served = np.frombuffer(columns["served_ads"], "<i4")
    eligible = np.frombuffer(columns["eligible_requests"], "<i4")
    price = np.frombuffer(columns["max_price_micros"], "<i8")
    if not (len(spend) == len(price) == n and len(served) == len(eligible) == n):
        raise SchemaMismatch(f"SpendReport columns of unequal length ({n} campaign ids)")
    leases, wants = columns.get("lease_id") or {}, set(columns.get("wants_slice") or ())
    released = set(columns.get("released") or ())
    for i, c in enumerate(ids.tolist()):
        item = {**head, "campaign_id": c, "expected_spend_micros": int(spend[i]), "served_ads": int(served[i]),
                "eligible_requests": int(eligible[i]), "lease_id": leases.get(str(c)),
                "max_price_micros": int(price[i]), "wants_slice": c in wants}
        if c in released:
            item["released"] = True
        yield item


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
