"""Sliding event-time windows of counts, and the join of beacons to the slot they were served in: the
bookkeeping the features job keeps per ad and per user (docs/features.md). Pure: no clock, no state store;
the job loads what a key holds, calls these, and stores what they return.

Time: records fall in buckets of `bucket_ms` (5 minutes) by event time. At every bucket boundary T (a tick)
the window is the buckets that start in [T - window_ms, T). A tick fires once the watermark passes T, so by
then the records of its buckets have arrived, up to the sources' bounded out-of-orderness. A record that comes
after its bucket's tick still counts in every later tick whose window holds its bucket (it is counted as
late); one whose bucket is not in the next tick's window any more is expired and dropped.

Join: beacons (impression, click, conversion, hide, report) do not say where the ad was shown; the served log
does (a placement and slot position per impression id). A served slot is held `served_retention_ms` after it
was served. A beacon whose slot is known counts under the slot's cell at once; one whose slot is not known yet
waits until its bucket's tick (the served record comes earlier in event time, so it has arrived by then) and
then counts under UNKNOWN_CELL if its slot is still unknown. Each impression counts each kind once (the
tracker may deliver a beacon twice), and a click, hide or report whose impression beacon is missing counts
that impression too (any of them proves the ad was rendered), so an ad's clicks never exceed its impressions
through a lost beacon."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Hashable, Iterable, Mapping, MutableMapping

from core.errors import InvalidArgument

BUCKET_MS = 300_000  # 5 minutes: the snapshot period of the design's feature store
DEFAULT_WINDOW_MS = 86_400_000  # a day of traffic behind every estimate
SERVED_RETENTION_MS = 7_200_000  # a served slot is held 2 h: beacons come within minutes, a token expires sooner
IMPRESSION, CLICK, CONVERSION, HIDE, REPORT = "IMPRESSION", "CLICK", "CONVERSION", "HIDE", "REPORT"
KINDS = (IMPRESSION, CLICK, CONVERSION, HIDE, REPORT)
RENDER_PROOFS = frozenset({CLICK, HIDE, REPORT})  # beacons that prove the ad was rendered
UNKNOWN_CELL = ("", 1)  # an ad's impression whose served record is missing: no placement, the top position
ON_TIME, LATE, EXPIRED = "on_time", "late", "expired"


@dataclass(frozen=True)
class WindowRules:
    """The windows' shape: the bucket (and tick) length, the window length and how long a served slot is
    held for its beacons."""

    bucket_ms: int = BUCKET_MS
    window_ms: int = DEFAULT_WINDOW_MS
    served_retention_ms: int = SERVED_RETENTION_MS

    def __post_init__(self) -> None:
        if self.bucket_ms <= 0:
            raise InvalidArgument(f"bucket_ms must be positive, got {self.bucket_ms}")
        if self.window_ms < self.bucket_ms or self.window_ms % self.bucket_ms:
            raise InvalidArgument(f"window_ms ({self.window_ms}) must be a whole number (at least 1) of buckets "
                                  f"of {self.bucket_ms} ms")
        if self.served_retention_ms < 0:
            raise InvalidArgument(f"served_retention_ms must not be negative, got {self.served_retention_ms}")


@dataclass(frozen=True)
class Counts:
    """What a window (or a bucket) counted under one cell."""

    impressions: int = 0
    clicks: int = 0
    conversions: int = 0
    hides: int = 0
    reports: int = 0

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(self.impressions + other.impressions, self.clicks + other.clicks,
                      self.conversions + other.conversions, self.hides + other.hides, self.reports + other.reports)

    def as_tuple(self) -> tuple[int, int, int, int, int]:
        return self.impressions, self.clicks, self.conversions, self.hides, self.reports

    @property
    def empty(self) -> bool:
        return not any(self.as_tuple())


_FIELD_OF_KIND = {IMPRESSION: "impressions", CLICK: "clicks", CONVERSION: "conversions", HIDE: "hides",
                  REPORT: "reports"}


def total(counts: Iterable[Counts]) -> Counts:
    out = Counts()
    for c in counts:
        out = out + c
    return out


def counts_of(kinds: Iterable[str]) -> Counts:
    """One of each kind."""
    tally = dict.fromkeys(_FIELD_OF_KIND.values(), 0)
    for kind in kinds:
        tally[_FIELD_OF_KIND[kind]] += 1
    return Counts(**tally)


# ------------------------------------------------------------------ time

def bucket_of(event_ms: int, rules: WindowRules) -> int:
    """The start of the bucket an event time falls in."""
    return event_ms - event_ms % rules.bucket_ms


def tick_of_bucket(bucket_start_ms: int, rules: WindowRules) -> int:
    """The first tick whose window holds the bucket: its end."""
    return bucket_start_ms + rules.bucket_ms


def next_tick(time_ms: int, rules: WindowRules) -> int:
    """The first tick strictly after time_ms (after a watermark: the next tick to fire)."""
    return bucket_of(time_ms, rules) + rules.bucket_ms


def first_tick(time_ms: int, watermark_ms: int, rules: WindowRules) -> int:
    """The tick that publishes what happened at time_ms: its bucket's, or the next one to fire if that has."""
    return max(tick_of_bucket(bucket_of(time_ms, rules), rules), next_tick(watermark_ms, rules))


def in_window(bucket_start_ms: int, tick_ms: int, rules: WindowRules) -> bool:
    return tick_ms - rules.window_ms <= bucket_start_ms < tick_ms


def timing(event_ms: int, watermark_ms: int, rules: WindowRules) -> str:
    """ON_TIME (its bucket's tick has not fired), LATE (it has, but the next tick's window still holds the
    bucket: it counts from then on) or EXPIRED (no tick to come will count it)."""
    bucket = bucket_of(event_ms, rules)
    if tick_of_bucket(bucket, rules) > watermark_ms:
        return ON_TIME
    return LATE if in_window(bucket, next_tick(watermark_ms, rules), rules) else EXPIRED


def late_reason(event_ms: int, watermark_ms: int, rules: WindowRules) -> str:
    return (f"event time {event_ms} is older than the window of the next tick "
            f"({next_tick(watermark_ms, rules) - rules.window_ms} .. {next_tick(watermark_ms, rules)}, watermark "
            f"{watermark_ms}): no snapshot to come counts it")


# ------------------------------------------------------------------ the join to served slots

@dataclass(frozen=True)
class ServedSlot:
    """Where one impression was served (its cell: the ad's placement and position, or whatever the caller
    groups by), when, and which beacon kinds of it were counted (a bit per KINDS entry)."""

    cell: Hashable
    served_ms: int
    counted: int = 0


def _bit(kind: str) -> int:
    return 1 << KINDS.index(kind)


def count_beacon(slot: ServedSlot | None, kind: str) -> tuple[tuple[str, ...], ServedSlot | None]:
    """The kinds one beacon adds and its slot afterwards. Without a slot: the beacon's own kind (nothing to
    check it against). With one: the kinds not counted yet, an impression added for a render proof."""
    if slot is None:
        return (kind,), None
    wanted = (IMPRESSION, kind) if kind in RENDER_PROOFS else (kind,)
    fresh = tuple(k for k in wanted if not slot.counted & _bit(k))
    if not fresh:
        return (), slot
    mask = slot.counted
    for k in fresh:
        mask |= _bit(k)
    return fresh, replace(slot, counted=mask)


def served_again(held: ServedSlot | None, new: ServedSlot) -> ServedSlot:
    """A served record seen again (the served log is at-least-once) keeps what its beacons counted."""
    return new if held is None else replace(new, counted=held.counted)


def slot_expired(slot: ServedSlot, tick_ms: int, rules: WindowRules) -> bool:
    """Whether a slot is forgotten at this tick: served more than the retention before it."""
    return slot.served_ms < tick_ms - rules.served_retention_ms


def slot_too_old(served_ms: int, watermark_ms: int, rules: WindowRules) -> bool:
    """A served record that would be forgotten at the next tick anyway: not held at all."""
    return served_ms < next_tick(watermark_ms, rules) - rules.served_retention_ms


def waiting_due(event_ms: int, tick_ms: int, rules: WindowRules) -> bool:
    """Whether a beacon that waits for its slot is resolved at this tick (its bucket's tick has come)."""
    return tick_of_bucket(bucket_of(event_ms, rules), rules) <= tick_ms


# ------------------------------------------------------------------ buckets and windows

def add(cells: Mapping[Hashable, Counts] | None, cell: Hashable, kinds: Iterable[str]) -> dict[Hashable, Counts]:
    """A bucket's counts by cell with the kinds added under `cell`."""
    out = dict(cells or {})
    out[cell] = out.get(cell, Counts()) + counts_of(kinds)
    return out


def window_totals(buckets: Mapping[int, Mapping[Hashable, Counts]], tick_ms: int,
                  rules: WindowRules) -> dict[Hashable, Counts]:
    """The counts by cell of the buckets in the tick's window (cells that counted nothing left out)."""
    out: dict[Hashable, Counts] = {}
    for start, cells in buckets.items():
        if in_window(start, tick_ms, rules):
            for cell, counts in cells.items():
                out[cell] = out.get(cell, Counts()) + counts
    return {cell: counts for cell, counts in out.items() if not counts.empty}


def buckets_to_drop(bucket_starts: Iterable[int], tick_ms: int, rules: WindowRules) -> list[int]:
    """The buckets no tick after this one counts: older than the next tick's window."""
    oldest_kept = tick_ms + rules.bucket_ms - rules.window_ms
    return sorted(start for start in bucket_starts if start < oldest_kept)


def keeps_ticking(has_buckets: bool, has_slots: bool, has_waiting: bool, watermark_ms: int) -> bool:
    """Whether a key sets its next tick: while it holds anything a later tick reads or cleans up, and the
    input has not ended (a watermark at the end of time: a bounded run's last ticks, no further)."""
    return (has_buckets or has_slots or has_waiting) and watermark_ms < END_OF_TIME_MS


END_OF_TIME_MS = 2 ** 63 - 1  # Flink's watermark once every source has ended


# ------------------------------------------------------------------ one key's window

@dataclass(frozen=True)
class WaitingBeacon:
    """A beacon that waits for its impression's served slot until its bucket's tick."""

    impression_id: str
    kind: str
    event_ms: int


@dataclass
class KeyWindow:
    """One key's (an ad's or a user's) buckets (bucket start -> counts by cell), the served slots of its
    impressions (impression id -> ServedSlot) and the beacons that wait for theirs ((impression id, kind) ->
    WaitingBeacon), with the rules above applied to them. The maps may be the job's own state stores behind the
    mapping interface: each call reads and writes only the entries it needs."""

    buckets: MutableMapping[int, Mapping[Hashable, Counts]]
    slots: MutableMapping[str, ServedSlot]
    waiting: MutableMapping[tuple[str, str], WaitingBeacon]
    rules: WindowRules

    def slot(self, impression_id: str) -> ServedSlot | None:
        return self.slots.get(impression_id)

    def serve(self, impression_id: str, slot: ServedSlot) -> None:
        self.slots[impression_id] = served_again(self.slot(impression_id), slot)

    def wait(self, impression_id: str, kind: str, event_ms: int) -> None:
        self.waiting[(impression_id, kind)] = WaitingBeacon(impression_id, kind, event_ms)

    def count(self, impression_id: str, slot: ServedSlot | None, kind: str, event_ms: int,
              unknown_cell: Hashable) -> None:
        """Count a beacon under its slot's cell (unknown_cell without a slot)."""
        kinds, counted = count_beacon(slot, kind)
        if counted is not None and counted != slot:
            self.slots[impression_id] = counted
        if kinds:
            start = bucket_of(event_ms, self.rules)
            self.buckets[start] = add(self.buckets.get(start), slot.cell if slot else unknown_cell, kinds)

    def resolve_waiting(self, tick_ms: int, unknown_cell: Hashable | None) -> None:
        """Count the beacons due at this tick under their slot's cell; without one, under unknown_cell (None:
        not at all)."""
        for key, beacon in list(self.waiting.items()):
            if waiting_due(beacon.event_ms, tick_ms, self.rules):
                del self.waiting[key]
                slot = self.slot(beacon.impression_id)
                if slot is not None or unknown_cell is not None:
                    self.count(beacon.impression_id, slot, beacon.kind, beacon.event_ms, unknown_cell)

    def totals(self, tick_ms: int) -> dict[Hashable, Counts]:
        return window_totals({int(start): cells for start, cells in self.buckets.items()}, tick_ms, self.rules)

    def clean(self, tick_ms: int) -> bool:
        """Forget the buckets and slots no later tick needs; whether the key still holds anything."""
        starts = [int(start) for start in self.buckets]
        dropped = buckets_to_drop(starts, tick_ms, self.rules)
        for start in dropped:
            del self.buckets[start]
        slots = list(self.slots.items())
        expired = [key for key, slot in slots if slot_expired(slot, tick_ms, self.rules)]
        for key in expired:
            del self.slots[key]
        return len(starts) > len(dropped) or len(slots) > len(expired) or len(self.waiting) > 0
