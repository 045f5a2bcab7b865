"""The click aggregator's Flink state, declared once, named and typed: each descriptor and the conversion of its
values to and from core.clicks' types. Never decides anything: what counts as a repeat late event is
core.clicks.dedupe_key."""
from __future__ import annotations

from dataclasses import astuple, fields
from typing import Any, Mapping

from pyflink.common import Row, Time, Types
from pyflink.datastream.state import MapStateDescriptor, StateTtlConfig, ValueStateDescriptor

from core import clicks
from core.billing import DayBill

# A beacon later than the dedupe horizon no longer verifies at the tracker, so it cannot repeat after that.
LATE_EVENT_TTL = Time.milliseconds(clicks.DEDUPE_HORIZON_MS)

DAY_BILL = Types.ROW_NAMED([f.name for f in fields(DayBill)], [Types.LONG()] * len(fields(DayBill)))
WINDOW_TOTALS = Types.ROW_NAMED([f.name for f in fields(clicks.WindowTotals)],
                                [Types.LONG()] * len(fields(clicks.WindowTotals)))
VERSION = Types.ROW_NAMED(["in_force_from_ms", "budget_micros", "timezone"],
                          [Types.LONG(), Types.LONG(), Types.STRING()])
CAMPAIGN_BILL = Types.ROW_NAMED(
    ["campaign_id", "timezone", "budget_micros", "budget_day", "bill", "impressions", "clicks", "invalid_micros",
     "joined_clicks", "pending", "last_window_ms", "versions"],
    [Types.LONG(), Types.STRING(), Types.LONG(), Types.STRING(), DAY_BILL, Types.LONG(), Types.LONG(), Types.LONG(),
     Types.LONG(), Types.LIST(WINDOW_TOTALS), Types.LONG(), Types.LIST(VERSION)])


def bills() -> MapStateDescriptor:
    """Campaign id -> its core.clicks.CampaignBill (CAMPAIGN_BILL)."""
    return MapStateDescriptor("bills", Types.LONG(), CAMPAIGN_BILL)


def shard_count() -> ValueStateDescriptor:
    """The shard count the state was written with (fixed for the life of the state)."""
    return ValueStateDescriptor("shards", Types.INT())


def late_events() -> MapStateDescriptor:
    """Late or other-version events the bill has billed (core.clicks.dedupe_key as text; the SQL dedupe covers
    the rest), each kept LATE_EVENT_TTL by Flink's state TTL. An expired key not yet cleaned up still reads as
    seen (the safe direction: an event is billed at most once); PyFlink turns its state cache off for every
    state of the operator when a TTL never returns expired keys."""
    descriptor = MapStateDescriptor("late_events", Types.STRING(), Types.BOOLEAN())
    descriptor.enable_time_to_live(StateTtlConfig.new_builder(LATE_EVENT_TTL)
                                   .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
                                   .set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)
                                   .build())
    return descriptor


def late_event_key(event: Mapping[str, Any]) -> str:
    """core.clicks.dedupe_key as the state's map key."""
    return "|".join(clicks.dedupe_key(event))


def bill_to_row(bill: clicks.CampaignBill) -> Row:
    return Row(bill.campaign_id, bill.timezone, bill.budget_micros, bill.budget_day, Row(*astuple(bill.bill)),
               bill.impressions, bill.clicks, bill.invalid_micros, bill.joined_clicks,
               [Row(*astuple(window)) for window in bill.pending], bill.last_window_ms,
               [Row(*version) for version in bill.versions])


def bill_from_row(row) -> clicks.CampaignBill:
    (campaign_id, timezone, budget_micros, budget_day, day_bill, impressions, clicks_, invalid_micros, joined_clicks,
     pending, last_window_ms, versions) = row
    budget = None if budget_micros is None else int(budget_micros)
    kept = [(int(at_ms), int(version_budget), str(tz)) for at_ms, version_budget, tz in versions or []]
    if not kept and budget is not None:  # a row without versions: its budget is in force from the start
        kept = [(0, budget, str(timezone))]
    return clicks.CampaignBill(
        int(campaign_id), str(timezone), budget, str(budget_day),
        DayBill(*(int(value) for value in day_bill)), int(impressions), int(clicks_), int(invalid_micros),
        int(joined_clicks), [clicks.WindowTotals(*(int(value) for value in window)) for window in pending or []],
        int(last_window_ms), kept)
