"""The features job's rows and Flink state, declared once, named and typed, with their conversions to and from
core's types, and the views (`MapView`) through which core's rules read and write a key's map states. Never
decides anything.

Rows between operators:
  AD_INPUT       decode -> per-ad window (core.feature_inputs.AdInput, plus where the record came from)
  PUBLISH_INPUT  per-ad window -> publisher: an ad's window totals by cell at a tick (and its attributes when
                 they changed); or, straight from decode, a campaign's advertiser
  USER_INPUT     decode -> per-user window (core.feature_inputs.UserInput)
State per ad: its attributes, a status row, its buckets (bucket start -> counts by cell), the served slots of
its impressions and the beacons that wait for theirs. Per user: the same with cells by ad category. The
publisher (one key): every known ad's latest window and attributes, rows staged for a tick, campaign ->
advertiser, the fingerprint of each ad's last published row and the last published version."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Mapping, MutableMapping

from pyflink.common import Row, Types
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from core import feature_inputs
from core.ad_stats import AdAttributes, KnownAd
from core.ad_window_events import AdStatus
from core.errors import MissingKey
from core.feature_events import PublisherState, TickWindow
from core.feature_windows import Counts, KeyWindow, ServedSlot, WaitingBeacon, WindowRules

ATTRIBUTES = Types.ROW_NAMED(
    ["campaign_id", "advertiser_id", "version", "bid_type", "bid_micros", "category", "removed", "embedding"],
    [Types.LONG(), Types.LONG(), Types.LONG(), Types.STRING(), Types.LONG(), Types.INT(), Types.BOOLEAN(),
     Types.PRIMITIVE_ARRAY(Types.FLOAT())])
COUNT_FIELDS = ["impressions", "clicks", "conversions", "hides", "reports"]
CELL = Types.ROW_NAMED(["placement", "position"] + COUNT_FIELDS,
                       [Types.STRING(), Types.INT()] + [Types.LONG()] * len(COUNT_FIELDS))
USER_CELL = Types.ROW_NAMED(["category"] + COUNT_FIELDS, [Types.LONG()] + [Types.LONG()] * len(COUNT_FIELDS))
AD_INPUT = Types.ROW_NAMED(
    ["kind", "ad_id", "campaign_id", "event_ms", "impression_id", "served_ms", "placement", "position", "attributes",
     "topic", "partition", "offset"],
    [Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG(), Types.STRING(), Types.LONG(), Types.STRING(),
     Types.INT(), ATTRIBUTES, Types.STRING(), Types.INT(), Types.LONG()])
WINDOW, CAMPAIGN = "window", "campaign"  # the kinds of PUBLISH_INPUT rows
PUBLISH_INPUT = Types.ROW_NAMED(
    ["kind", "ad_id", "tick", "campaign_id", "advertiser_id", "attributes", "cells"],
    [Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG(), Types.LONG(), ATTRIBUTES, Types.LIST(CELL)])
USER_INPUT = Types.ROW_NAMED(["kind", "user_id", "impression_id", "event_ms", "category"],
                             [Types.STRING(), Types.STRING(), Types.STRING(), Types.LONG(), Types.LONG()])
DELETION = "DELETION"  # the USER_INPUT kind of a deletion request (event_ms: the request's time)

SLOT = Types.ROW_NAMED(["placement", "position", "served_ms", "counted"],
                       [Types.STRING(), Types.INT(), Types.LONG(), Types.INT()])
USER_SLOT = Types.ROW_NAMED(["category", "served_ms", "counted"], [Types.LONG(), Types.LONG(), Types.INT()])
WAITING = Types.ROW_NAMED(["impression_id", "kind", "event_ms"], [Types.STRING(), Types.STRING(), Types.LONG()])
AD_STATUS = Types.ROW_NAMED(["campaign_id", "attributes_changed", "sent_traffic"],
                            [Types.LONG(), Types.BOOLEAN(), Types.BOOLEAN()])
AD_ENTRY = Types.ROW_NAMED(["campaign_id", "attributes", "cells"], [Types.LONG(), ATTRIBUTES, Types.LIST(CELL)])


def ad_descriptors() -> dict[str, Any]:
    """The per-ad window's state, by name."""
    return {"attributes": ValueStateDescriptor("ad_attributes", ATTRIBUTES),
            "status": ValueStateDescriptor("ad_status", AD_STATUS),
            "buckets": MapStateDescriptor("ad_buckets", Types.LONG(), Types.LIST(CELL)),
            "slots": MapStateDescriptor("ad_slots", Types.STRING(), SLOT),
            "waiting": MapStateDescriptor("ad_waiting", Types.STRING(), WAITING)}


def user_descriptors() -> dict[str, Any]:
    """The per-user window's state, by name; `wrote`: the user's last write had features."""
    return {"wrote": ValueStateDescriptor("user_wrote", Types.BOOLEAN()),
            "buckets": MapStateDescriptor("user_buckets", Types.LONG(), Types.LIST(USER_CELL)),
            "slots": MapStateDescriptor("user_slots", Types.STRING(), USER_SLOT),
            "waiting": MapStateDescriptor("user_waiting", Types.STRING(), WAITING)}


def publisher_descriptors() -> dict[str, Any]:
    """The publisher's state, by name (one key holds the whole platform)."""
    return {"ads": MapStateDescriptor("known_ads", Types.LONG(), AD_ENTRY),
            "staged": MapStateDescriptor("staged_windows", Types.STRING(), PUBLISH_INPUT),
            "advertisers": MapStateDescriptor("advertiser_of_campaign", Types.LONG(), Types.LONG()),
            "published_rows": MapStateDescriptor("published_row_fingerprints", Types.LONG(), Types.LONG()),
            "version": ValueStateDescriptor("published_version", Types.LONG())}


# ------------------------------------------------------------------ conversions

def _named(row_type, *values) -> Row:
    """A row of a named row type, its fields readable by name before it crosses a Flink coder too."""
    row = Row(*values)
    row.set_field_names(list(row_type.get_field_names()))
    return row


def attributes_to_row(attributes: AdAttributes | None) -> Row | None:
    if attributes is None:
        return None
    return Row(attributes.campaign_id, attributes.advertiser_id, attributes.version, attributes.bid_type,
               attributes.bid_micros, attributes.category, attributes.removed, list(attributes.embedding))


def attributes_from_row(row) -> AdAttributes | None:
    if row is None:
        return None
    campaign_id, advertiser_id, version, bid_type, bid_micros, category, removed, embedding = row
    return AdAttributes(int(campaign_id), int(advertiser_id), int(version), bid_type, int(bid_micros),
                        int(category), bool(removed), tuple(float(v) for v in embedding))


def ad_input_from_row(row) -> feature_inputs.AdInput:
    """An AD_INPUT row as core's AdInput."""
    return feature_inputs.AdInput(row.kind, int(row.ad_id), int(row.campaign_id), int(row.event_ms),
                                  row.impression_id, int(row.served_ms), row.placement, int(row.position),
                                  attributes_from_row(row.attributes))


def ad_status_from_row(row) -> AdStatus | None:
    if row is None:
        return None
    campaign_id, attributes_changed, sent_traffic = row
    return AdStatus(int(campaign_id), bool(attributes_changed), bool(sent_traffic))


def ad_status_to_row(status: AdStatus) -> Row:
    return Row(status.campaign_id, status.attributes_changed, status.sent_traffic)


def ad_input_row(found: feature_inputs.AdInput, topic: str, partition: int, offset: int) -> Row:
    return _named(AD_INPUT, found.kind, found.ad_id, found.campaign_id, found.event_ms, found.impression_id,
                  found.served_ms, found.placement, found.position, attributes_to_row(found.attributes), topic,
                  partition, offset)


def user_input_from_row(row) -> feature_inputs.UserInput:
    """A USER_INPUT row (not a deletion) as core's UserInput."""
    return feature_inputs.UserInput(row.kind, row.user_id, row.impression_id, int(row.event_ms), int(row.category))


def user_input_row(found: feature_inputs.UserInput) -> Row:
    return _named(USER_INPUT, found.kind, found.user_id, found.impression_id, found.event_ms, found.category)


def user_deletion_row(user_id: str, requested_at_ms: int) -> Row:
    """A deletion request as the user's window input: the window forgets the user."""
    return _named(USER_INPUT, DELETION, user_id, "", requested_at_ms, 0)


def campaign_row(campaign_id: int, advertiser_id: int, event_ms: int) -> Row:
    return _named(PUBLISH_INPUT, CAMPAIGN, 0, event_ms, campaign_id, advertiser_id, None, [])


def window_row(ad_id: int, tick_ms: int, campaign_id: int, attributes: AdAttributes | None,
               cells: Mapping[tuple[str, int], Counts]) -> Row:
    return _named(PUBLISH_INPUT, WINDOW, ad_id, tick_ms, campaign_id, 0, attributes_to_row(attributes),
                  cells_to_rows(cells))


def cells_to_rows(cells: Mapping[tuple[str, int], Counts]) -> list[Row]:
    return [Row(placement, position, *counts.as_tuple()) for (placement, position), counts in sorted(cells.items())]


def cells_from_rows(rows: Iterable | None) -> dict[tuple[str, int], Counts]:
    return {(row[0], int(row[1])): Counts(*(int(v) for v in row[2:])) for row in rows or ()}


def user_cells_to_rows(cells: Mapping[int, Counts]) -> list[Row]:
    return [Row(category, *counts.as_tuple()) for category, counts in sorted(cells.items())]


def user_cells_from_rows(rows: Iterable | None) -> dict[int, Counts]:
    return {int(row[0]): Counts(*(int(v) for v in row[1:])) for row in rows or ()}


def slot_to_row(slot: ServedSlot) -> Row:
    placement, position = slot.cell
    return Row(placement, position, slot.served_ms, slot.counted)


def slot_from_row(row) -> ServedSlot | None:
    return None if row is None else ServedSlot((row[0], int(row[1])), int(row[2]), int(row[3]))


def user_slot_to_row(slot: ServedSlot) -> Row:
    return Row(slot.cell, slot.served_ms, slot.counted)


def user_slot_from_row(row) -> ServedSlot | None:
    return None if row is None else ServedSlot(int(row[0]), int(row[1]), int(row[2]))


def tick_window_from_row(row) -> TickWindow:
    """A PUBLISH_INPUT window row as core's TickWindow."""
    return TickWindow(int(row.ad_id), int(row.tick), int(row.campaign_id), attributes_from_row(row.attributes),
                      cells_from_rows(row.cells))


def tick_window_to_row(window: TickWindow) -> Row:
    return window_row(window.ad_id, window.tick_ms, window.campaign_id, window.attributes, window.cells)


def known_ad_from_row(row) -> KnownAd:
    campaign_id, attributes, cells = row
    return KnownAd(int(campaign_id), attributes_from_row(attributes), cells_from_rows(cells))


def known_ad_to_row(ad: KnownAd) -> Row:
    return Row(ad.campaign_id, attributes_to_row(ad.attributes), cells_to_rows(ad.cells))


def staged_key(tick_ms: int, ad_id: int) -> str:
    """A staged window's key: its tick first, so the publisher can tell which tick a row is for."""
    return f"{tick_ms}:{ad_id}"


def staged_key_of(key: str) -> tuple[int, int]:
    """A staged window's key as core's (tick, ad id)."""
    tick, ad_id = key.split(":", 1)
    return int(tick), int(ad_id)


def _same(value):
    return value


class MapView(MutableMapping):
    """A Flink MapState seen as a mapping of core's types: keys and values converted on the way in and out.
    Reads and writes go straight to the state; `items` reads every entry once."""

    def __init__(self, map_state, from_row: Callable, to_row: Callable, from_key: Callable = _same,
                 to_key: Callable = _same):
        self.map_state, self.from_row, self.to_row = map_state, from_row, to_row
        self.from_key, self.to_key = from_key, to_key

    def __getitem__(self, key):
        row = self.map_state.get(self.to_key(key))
        if row is None:
            raise MissingKey(key)
        return self.from_row(row)

    def __setitem__(self, key, value) -> None:
        self.map_state.put(self.to_key(key), self.to_row(value))

    def __delitem__(self, key) -> None:
        self.map_state.remove(self.to_key(key))

    def __iter__(self) -> Iterator:
        return iter([self.from_key(key) for key, _ in self.map_state.items()])

    def __len__(self) -> int:
        return sum(1 for _ in self.map_state.items())

    def clear(self) -> None:
        self.map_state.clear()

    def items(self) -> list[tuple[Any, Any]]:  # type: ignore[override]
        return [(self.from_key(key), self.from_row(row)) for key, row in self.map_state.items()]


def publisher_state(map_states: Mapping[str, Any], version_ms: int | None) -> PublisherState:
    """The publisher's Flink state (its map states by publisher_descriptors' names) as core's PublisherState."""
    return PublisherState(
        known=MapView(map_states["ads"], known_ad_from_row, known_ad_to_row, int),
        staged=MapView(map_states["staged"], tick_window_from_row, tick_window_to_row, staged_key_of,
                       lambda key: staged_key(*key)),
        advertisers=MapView(map_states["advertisers"], int, _same, int),
        fingerprints=MapView(map_states["published_rows"], int, _same, int),
        version_ms=version_ms)


def waiting_key(key: tuple[str, str]) -> str:
    """A waiting beacon's key in the state: its impression id and kind."""
    impression_id, kind = key
    return f"{impression_id}|{kind}"


def waiting_key_of(key: str) -> tuple[str, str]:
    impression_id, kind = key.rsplit("|", 1)
    return impression_id, kind


def waiting_to_row(beacon: WaitingBeacon) -> Row:
    return Row(beacon.impression_id, beacon.kind, beacon.event_ms)


def waiting_from_row(row) -> WaitingBeacon:
    impression_id, kind, event_ms = row
    return WaitingBeacon(impression_id, kind, int(event_ms))


def ad_window(map_states: Mapping[str, Any], rules: WindowRules) -> KeyWindow:
    """One ad's window over its Flink state (its map states by ad_descriptors' names)."""
    return KeyWindow(MapView(map_states["buckets"], cells_from_rows, cells_to_rows, int),
                     MapView(map_states["slots"], slot_from_row, slot_to_row),
                     MapView(map_states["waiting"], waiting_from_row, waiting_to_row, waiting_key_of, waiting_key),
                     rules)


def user_window(map_states: Mapping[str, Any], rules: WindowRules) -> KeyWindow:
    """One user's window over its Flink state (its map states by user_descriptors' names)."""
    return KeyWindow(MapView(map_states["buckets"], user_cells_from_rows, user_cells_to_rows, int),
                     MapView(map_states["slots"], user_slot_from_row, user_slot_to_row),
                     MapView(map_states["waiting"], waiting_from_row, waiting_to_row, waiting_key_of, waiting_key),
                     rules)
