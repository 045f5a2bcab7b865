"""The click aggregator's bill, step by step (core.clicks.bill_step and the late-event rules), and its Flink
functions on a fake context."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from core import clicks
from core.errors import ShardCountChanged
from jobs.click_aggregator import state as bill_state
from jobs.click_aggregator.functions import DEAD_LETTERS, REDUCED_FIELDS, Bill, Route
from schemas import topics
from schemas.codec import AvroCodec
from tests.unit.flink_fakes import FakeContext, FakeRuntimeContext, at_key, opened, through_flink_coder

CODEC = AvroCodec()
T0 = 1_767_614_400_000  # 2026-01-05 12:00 UTC, a window boundary
DOLLAR = 1_000_000


def _campaign(campaign_id: int, budget_micros: int, at_ms: int = T0 - 60_000) -> dict:
    return {"campaign_id": campaign_id, "advertiser_id": 1, "version": 1, "event_time": at_ms, "status": "ACTIVE",
            "bid_type": "CPC", "daily_budget_micros": budget_micros, "currency": "USD", "timezone": "UTC",
            "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None, "cap_per_week": None,
            "cpa_target_micros": None}


def _click(event_id: str, at_ms: int, price: int = DOLLAR) -> dict:
    return {"event_id": event_id, "impression_id": f"imp-{event_id}", "event_type": "CLICK", "event_time": at_ms,
            "served_time": at_ms - 5_000, "campaign_id": 7, "price_micros": price, "billing_type": "CLICK",
            "user_id": "u1", "ip_address": "10.0.0.1", "user_agent": "Mozilla/5.0"}


def _row(kind: str, campaign_id: int | None, **fields) -> SimpleNamespace:
    values = dict.fromkeys(REDUCED_FIELDS)
    values.update(kind=kind, campaign_id=campaign_id, **fields)
    return SimpleNamespace(**values)


def _window(billable_micros: int, clicks_: int = 1) -> SimpleNamespace:
    return _row("window", 7, billable=billable_micros, impressions=0, clicks=clicks_, invalid=0, invalid_events=0,
                joined=0)


def _campaign_row(budget_micros: int) -> SimpleNamespace:
    return _row("campaign", 7, topic=topics.SERVING_CAMPAIGNS, part=0, off=1, k=b"7",
                v=CODEC.encode(topics.record_type(topics.SERVING_CAMPAIGNS), _campaign(7, budget_micros)))


def _billed(outputs) -> list[dict]:
    billed_type = topics.record_type(topics.BILLED_SPEND)
    return [CODEC.decode(row[1], billed_type) for row in outputs if not isinstance(row[0], type(DEAD_LETTERS))]


def _bill(shards: int = 16, context: FakeRuntimeContext | None = None):
    bill, context = opened(Bill(shards), context)
    return bill, context, at_key(context, FakeContext(), 7 % shards)


def _feed(bill, ctx, row, at_ms: int) -> list:
    ctx.timestamp_ms = at_ms
    return list(bill.process_element(row, ctx))


# ------------------------------------------------------------------ core.clicks.bill_step


def test_a_window_is_billed_up_to_the_budget_and_reported_at_its_end():
    bill = clicks.CampaignBill(7)
    bill.on_campaign({"daily_budget_micros": 3 * DOLLAR, "timezone": "UTC", "event_time": 0})
    bill, record = clicks.bill_step(bill, clicks.WindowPart(clicks.WindowTotals(T0 + 10_000, 5 * DOLLAR, clicks=5)))
    assert (record["billed_spend_micros"], record["absorbed_overspend_micros"]) == (3 * DOLLAR, 2 * DOLLAR)
    assert record["event_time"] == T0 + 10_000


def test_a_window_before_the_campaign_is_known_waits_for_its_budget():
    bill, record = clicks.bill_step(clicks.CampaignBill(7), clicks.WindowPart(clicks.WindowTotals(T0, DOLLAR)))
    assert record is None and bill.pending


def test_a_joined_click_of_a_window_not_reported_yet_waits_for_that_window():
    bill = clicks.CampaignBill(7)
    bill.on_campaign({"daily_budget_micros": 3 * DOLLAR, "timezone": "UTC", "event_time": 0})
    bill, record = clicks.bill_step(bill, clicks.JoinedClicks(T0 + 1_000, 1))
    assert record is None and bill.joined_clicks == 1


def test_a_campaign_version_reports_its_totals_at_the_latest_window_billed():
    bill = clicks.CampaignBill(7)
    bill.on_campaign({"daily_budget_micros": 3 * DOLLAR, "timezone": "UTC", "event_time": 0})
    clicks.bill_step(bill, clicks.WindowPart(clicks.WindowTotals(T0 + 10_000, DOLLAR, clicks=1)))
    _, record = clicks.bill_step(bill, clicks.CampaignVersion({"daily_budget_micros": DOLLAR, "timezone": "UTC",
                                                               "event_time": T0}))
    assert record["event_time"] == T0 + 10_000


def test_a_late_event_keeps_the_reason_sql_decided():
    decided = clicks.late_event(dict(_click("a", T0), reason="ip_burst", joined=False))
    assert clicks.late_totals(decided).invalid_micros == DOLLAR


def test_a_late_event_sql_did_not_tag_gets_the_rules_that_need_no_counts():
    undecided = clicks.late_event(dict(_click("a", T0), user_agent="Googlebot/2.1"))
    assert (undecided.decided, clicks.late_totals(undecided).invalid_events) == (False, 1)


def test_late_event_keys_expire_by_flinks_state_ttl_after_the_dedupe_horizon_without_turning_the_cache_off():
    from pyflink.datastream.state import StateTtlConfig

    ttl = bill_state.late_events()._ttl_config
    assert ttl.get_ttl().to_milliseconds() == clicks.DEDUPE_HORIZON_MS
    assert ttl.get_update_type() == StateTtlConfig.UpdateType.OnCreateAndWrite
    assert ttl.get_state_visibility() == StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp


def test_a_repeat_late_event_has_the_same_state_key_and_another_event_type_does_not():
    click = _click("a", T0)
    repeat = dict(click, event_id="b", event_time=T0 + 1)
    assert bill_state.late_event_key(repeat) == bill_state.late_event_key(click)
    assert bill_state.late_event_key(dict(click, event_type="IMPRESSION")) != bill_state.late_event_key(click)


def test_a_bill_in_flink_state_is_a_typed_row_that_round_trips():
    bill = clicks.CampaignBill(7)
    bill.add(clicks.WindowTotals(T0 + 10_000, billable_micros=DOLLAR, clicks=1))  # pending: no budget yet
    row = through_flink_coder(bill_state.CAMPAIGN_BILL, bill_state.bill_to_row(bill))
    assert bill_state.bill_from_row(row) == bill and row.budget_micros is None
    bill.on_campaign(_campaign(7, 5 * DOLLAR))
    bill.add(clicks.WindowTotals(T0 + 20_000, billable_micros=DOLLAR, impressions=1, joined_clicks=1))
    row = through_flink_coder(bill_state.CAMPAIGN_BILL, bill_state.bill_to_row(bill))
    assert bill_state.bill_from_row(row) == bill and row.versions[0].budget_micros == 5 * DOLLAR
    assert list(bill_state.CAMPAIGN_BILL.get_field_names())[:4] == ["campaign_id", "timezone", "budget_micros",
                                                                   "budget_day"]


# ------------------------------------------------------------------ the Flink functions


def test_route_sends_an_undecodable_campaign_record_to_dead_letters_and_counts_it():
    route, context = opened(Route())
    (tag, dead), = route.process_element(_row("campaign", None, topic=topics.SERVING_CAMPAIGNS, part=0, off=4, k=b"7",
                                              v=b"garbage"), FakeContext())
    assert tag is DEAD_LETTERS and CODEC.decode(dead[1], topics.record_type(topics.DEAD_LETTERS))["source_offset"] == 4
    assert context.counter("corrupt_records") == 1


def test_route_gives_an_event_of_another_contract_version_its_campaign_for_the_late_path():
    route, _ = opened(Route())
    event = dict(_click("a", T0), ad_id=701, token_key_id="k1")
    (row,) = route.process_element(_row("raw", None, topic=topics.AD_EVENTS, part=0, off=9, k=b"7",
                                        v=CODEC.encode(topics.record_type(topics.AD_EVENTS), event)), FakeContext())
    assert (row[0], row[1], json.loads(row[13])["event_id"]) == ("late", 7, "a")


def test_the_bill_reports_a_window_once_the_campaign_is_known():
    bill, _, ctx = _bill()
    assert _feed(bill, ctx, _window(DOLLAR), T0 + 9_999) == []
    (record,) = _billed(_feed(bill, ctx, _campaign_row(100 * DOLLAR), T0 - 60_000))
    assert (record["billed_spend_micros"], record["event_time"]) == (DOLLAR, T0 + 10_000)


def test_the_bill_counts_a_repeated_late_event_once():
    bill, context, ctx = _bill()
    _feed(bill, ctx, _campaign_row(100 * DOLLAR), T0 - 60_000)
    late = _row("late", 7, event=json.dumps(_click("a", T0)))
    assert len(_billed(_feed(bill, ctx, late, T0))) == 1
    assert _feed(bill, ctx, late, T0) == []
    assert context.counter("late_events") == 1
    assert context.get_map_state(bill_state.late_events()).items() == [("imp-a|CLICK", True)]


def test_the_bill_counts_the_money_it_billed_and_absorbed_for_the_absorbed_overspend_alert():
    bill, context, ctx = _bill()
    _feed(bill, ctx, _campaign_row(3 * DOLLAR), T0 - 60_000)
    _feed(bill, ctx, _window(2 * DOLLAR, 2), T0 + 9_999)
    _feed(bill, ctx, _window(2 * DOLLAR, 2), T0 + 19_999)
    assert (context.counter("billed_micros"), context.counter("absorbed_micros")) == (3 * DOLLAR, DOLLAR)
    _feed(bill, ctx, _window(DOLLAR), T0 + 86_400_000 + 9_999)  # the next budget day starts from zero
    assert (context.counter("billed_micros"), context.counter("absorbed_micros")) == (4 * DOLLAR, DOLLAR)


def test_the_bill_refuses_state_written_with_another_shard_count():
    bill, context, ctx = _bill(shards=8)
    context.get_state(SimpleNamespace(name="shards")).update(16)  # the shard's state, written with 16
    with pytest.raises(ShardCountChanged):
        _feed(bill, ctx, _window(DOLLAR), T0)
