"""The pacer's Flink state, declared once, named and typed: each descriptor and the conversion of its values
to and from core's types. Never decides anything."""
from __future__ import annotations

from dataclasses import astuple, fields

from pyflink.common import Row, Time, Types
from pyflink.datastream.state import MapStateDescriptor, StateTtlConfig, ValueStateDescriptor

from core.budget import AdSummary
from core.budget_events import SpendWindow

LATE_REPORT_TTL = Time.hours(1)  # a resend of a late report comes within minutes; an hour bounds the keys kept

HELD_WINDOW = Types.ROW_NAMED([f.name for f in fields(SpendWindow)], [Types.LONG()] * len(fields(SpendWindow)))
AD_SUMMARY = Types.ROW_NAMED(["ad_id", "version", "bid_micros", "placements", "removed"],
                             [Types.LONG(), Types.LONG(), Types.LONG(), Types.LIST(Types.STRING()), Types.BOOLEAN()])


def pacer_states() -> MapStateDescriptor:
    """Campaign id -> its PacerState as the project's Avro record (schemas/pacer_state.avsc, core.budget.to_record),
    framed with its writer schema's fingerprint: a new build reads the state of an older one through
    schemas/history (tests/unit/test_state_evolution.py)."""
    return MapStateDescriptor("pacer_states", Types.LONG(), Types.PRIMITIVE_ARRAY(Types.BYTE()))


def shard_count() -> ValueStateDescriptor:
    """The shard count the state was written with (fixed for the life of the state)."""
    return ValueStateDescriptor("shards", Types.INT())


def held_windows() -> MapStateDescriptor:
    """Campaign id -> the 10 s windows that came since its last step (core.budget_events.apply_held)."""
    return MapStateDescriptor("held_windows", Types.LONG(), Types.LIST(HELD_WINDOW))


def campaign_ads() -> MapStateDescriptor:
    """Campaign id -> its ads as the pacer knows them (core.budget.AdSummary); written only when an ad changes."""
    return MapStateDescriptor("campaign_ads", Types.LONG(), Types.LIST(AD_SUMMARY))


def late_reports() -> MapStateDescriptor:
    """Late spend reports seen (core.spend.report_key as text), each kept LATE_REPORT_TTL by Flink's state TTL.
    An expired key not yet cleaned up still reads as seen (the safe direction: a report counts at most once);
    PyFlink turns its state cache off for every state of the operator when a TTL never returns expired keys."""
    descriptor = MapStateDescriptor("late_reports", Types.STRING(), Types.BOOLEAN())
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(LATE_REPORT_TTL)
                                   .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
                                   .set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)
                                   .build())
    return descriptor


def window_to_row(window: SpendWindow) -> Row:
    return Row(*astuple(window))


def window_from_row(row) -> SpendWindow:
    return SpendWindow(*(int(value) for value in row))


def ads_to_rows(ads: dict[int, AdSummary]) -> list[Row]:
    return [Row(ad_id, version, bid, list(placements), removed)
            for ad_id, (version, bid, placements, removed) in ads.items()]


def ads_from_rows(rows) -> dict[int, AdSummary]:
    return {int(r[0]): (int(r[1]), int(r[2]), tuple(r[3]), bool(r[4])) for r in rows or []}


def late_report_key(key: tuple[str, int, int]) -> str:
    """core.spend.report_key as the state's map key."""
    return "|".join(str(part) for part in key)
