"""The click aggregator's pure rules: deduplication, invalid traffic, billing windows and the batch recount."""
from __future__ import annotations

from core import clicks
from jobs.click_aggregator.state import bill_from_row, bill_to_row

T0 = 1_767_614_400_000  # 2026-01-05 12:00 UTC
DOLLAR = 1_000_000


def _round_trip(bill: clicks.CampaignBill) -> clicks.CampaignBill:
    """The bill as the click aggregator keeps it in Flink state, and back."""
    return bill_from_row(bill_to_row(bill))


def _event(event_id: str, impression: str, event_type: str, at_ms: int, *, campaign: int = 1,
           price: int = DOLLAR, billing: str = "CLICK", served_ms: int | None = None, ip: str | None = "10.0.0.1",
           user: str | None = None, agent: str | None = "Mozilla/5.0") -> dict:
    return {"event_id": event_id, "impression_id": impression, "event_type": event_type, "event_time": at_ms,
            "served_time": served_ms if served_ms is not None else at_ms - 5_000, "campaign_id": campaign,
            "price_micros": price, "billing_type": billing, "user_id": user, "ip_address": ip, "user_agent": agent}


def _campaign(campaign_id: int, budget: int, at_ms: int = T0 - 60_000, tz: str = "UTC") -> dict:
    return {"campaign_id": campaign_id, "daily_budget_micros": budget, "timezone": tz, "event_time": at_ms}


def test_the_first_copy_of_a_beacon_counts_and_later_copies_do_not():
    a = _event("b", "imp-1", "CLICK", T0 + 900)
    b = _event("a", "imp-1", "CLICK", T0 + 100)
    c = _event("c", "imp-1", "CLICK", T0 + 100)
    assert clicks.first_of([a, b, c]) is b  # earliest, then the smallest event id
    totals = clicks.recount([a, b, c], [_campaign(1, 100 * DOLLAR)])
    assert totals[(1, "2026-01-05")]["billed_clicks"] == 1


def test_each_invalid_traffic_rule_names_its_reason():
    assert clicks.invalid_reason(_event("1", "i", "CLICK", T0, agent="Googlebot/2.1")) == "bot_agent"
    assert clicks.invalid_reason(_event("1", "i", "IMPRESSION", T0, agent="curl/8.0")) == "bot_agent"
    assert clicks.invalid_reason(_event("1", "i", "CLICK", T0, served_ms=T0 - 999)) == "too_soon"
    assert clicks.invalid_reason(_event("1", "i", "CLICK", T0, served_ms=T0 - 1000)) is None
    assert clicks.invalid_reason(_event("1", "i", "CLICK", T0, served_ms=T0 + 5_000)) == "too_soon"  # before serving
    lifetime = clicks.TOKEN_LIFETIME_MS
    assert clicks.invalid_reason(_event("1", "i", "CLICK", T0, served_ms=T0 - lifetime - 1)) == "expired"
    assert clicks.invalid_reason(_event("1", "i", "CLICK", T0, served_ms=T0 - lifetime)) is None
    assert clicks.invalid_reason(_event("1", "i", "CLICK", T0, user="u1"), user_clicks_in_minute=6) == "user_burst"
    assert clicks.invalid_reason(_event("1", "i", "CLICK", T0, user="u1"), user_clicks_in_minute=5) is None
    assert clicks.invalid_reason(_event("1", "i", "CLICK", T0), ip_clicks_in_minute=6) == "ip_burst"
    assert clicks.invalid_reason(_event("1", "i", "CLICK", T0, ip=None), ip_clicks_in_minute=6) is None
    assert clicks.invalid_reason(_event("1", "i", "IMPRESSION", T0, served_ms=T0)) is None  # fast renders are fine


def test_burst_counts_tie_clicks_of_the_same_millisecond_and_reset_each_minute():
    burst = [_event(f"e{i}", f"imp-{i}", "CLICK", T0 + (0 if i < 2 else i * 1000)) for i in range(7)]
    burst.append(_event("next-minute", "imp-x", "CLICK", T0 + 60_000))
    counts = clicks.burst_counts(burst, "ip_address")
    assert counts["e0"] == counts["e1"] == 2  # a tie counts together, whatever the arrival order
    assert counts["e6"] == 7
    assert counts["next-minute"] == 1
    assert clicks.burst_counts([_event("n", "i", "CLICK", T0, ip=None)], "ip_address") == {"n": 0}


def test_the_bot_rule_in_sql_names_every_marker():
    sql = clicks.bot_agent_sql("ua")
    assert all(f"'%{m}%'" in sql for m in clicks.BOT_AGENT_MARKERS)
    case = clicks.invalid_reason_sql()
    for reason in clicks.REASONS:
        assert f"'{reason}'" in case
    assert str(clicks.MIN_CLICK_DELAY_MS) in case and f"> {clicks.MAX_CLICKS_PER_MINUTE}" in case


def test_the_join_rule_in_sql_uses_the_same_bounds():
    sql = clicks.joins_sql("c", "i")
    assert sql == f"i BETWEEN c - {clicks.TOKEN_LIFETIME_MS} AND c + {clicks.ALLOWED_LATENESS_MS}"


def test_a_window_billed_after_a_later_one_is_stamped_at_the_later_window():
    bill = clicks.CampaignBill(7)
    bill.on_campaign({"timezone": "UTC", "daily_budget_micros": 10 * DOLLAR})
    bill.add(clicks.WindowTotals(T0 + 20_000, billable_micros=DOLLAR, impressions=1))
    first = bill.record(T0 + 20_000)
    bill.add(clicks.WindowTotals(T0 + 10_000, billable_micros=2 * DOLLAR, clicks=1))  # a trailing partial window
    later = bill.record(T0 + 10_000)
    assert later["event_time"] == T0 + 20_000 and later["billed_spend_micros"] == 3 * DOLLAR
    assert clicks.progress_key(later) > clicks.progress_key(first)


def test_the_bot_rule_on_a_lowered_agent_column_reads_it_as_is():
    sql = clicks.bot_agent_sql("agent_lower", lowered=True)
    assert "LOWER" not in sql and all(f"agent_lower LIKE '%{m}%'" in sql for m in clicks.BOT_AGENT_MARKERS)
    case = clicks.invalid_reason_sql(lowered_agent="agent_lower")
    assert "user_agent" not in case and "agent_lower LIKE" in case and "'too_soon'" in case


def test_billing_stops_at_the_budget_and_absorbs_the_rest():
    bill = clicks.CampaignBill(1)
    bill.on_campaign(_campaign(1, 5 * DOLLAR))
    for second in (10, 20, 30):
        window = clicks.WindowTotals(T0 + second * 1000 + 10_000)
        window.add(_event(str(second), f"imp-{second}", "CLICK", T0 + second * 1000, price=2 * DOLLAR), None)
        bill.add(window)
    record = bill.record(T0 + 40_000)
    assert record["billed_spend_micros"] == 5 * DOLLAR
    assert record["absorbed_overspend_micros"] == DOLLAR
    assert record["billed_clicks"] == 3
    assert bill.bill.billed_above_micros == 0


def test_invalid_events_are_credited_not_billed_and_non_billable_events_cost_nothing():
    window = clicks.WindowTotals(T0 + 10_000)
    window.add(_event("1", "i1", "CLICK", T0, price=3 * DOLLAR), "bot_agent")
    window.add(_event("2", "i2", "IMPRESSION", T0, price=3 * DOLLAR), None)  # CPC: the impression is free
    window.add(_event("3", "i3", "IMPRESSION", T0, price=DOLLAR, billing="IMPRESSION"), None)
    assert (window.billable_micros, window.impressions, window.clicks, window.invalid_micros) == \
        (DOLLAR, 1, 0, 3 * DOLLAR)


def test_windows_before_the_campaign_record_wait_for_its_budget():
    bill = clicks.CampaignBill(1)
    window = clicks.WindowTotals(T0 + 10_000, billable_micros=4 * DOLLAR, clicks=2)
    bill.add(window)
    assert bill.record(T0 + 10_000) is None
    bill.on_campaign(_campaign(1, 3 * DOLLAR))
    assert bill.record(T0 + 10_000)["billed_spend_micros"] == 3 * DOLLAR


def test_a_new_local_day_starts_a_new_bill_in_the_campaigns_time_zone():
    bill = clicks.CampaignBill(1)
    bill.on_campaign(_campaign(1, 10 * DOLLAR, tz="America/New_York"))
    before = T0 + 16 * 3_600_000  # 2026-01-06 04:00 UTC = 23:00 in New York on the 5th
    bill.add(clicks.WindowTotals(before, billable_micros=4 * DOLLAR))
    assert bill.record(before)["budget_day"] == "2026-01-05"
    after = before + 3_600_000  # midnight in New York
    bill.add(clicks.WindowTotals(after + 10_000, billable_micros=DOLLAR))
    record = bill.record(after + 10_000)
    assert (record["budget_day"], record["billed_spend_micros"]) == ("2026-01-06", DOLLAR)


def test_the_recount_bills_under_the_budget_in_force_at_each_window():
    events = [_event(str(i), f"imp-{i}", "CLICK", T0 + i * 20_000, ip=f"10.0.0.{i}") for i in range(6)]
    versions = [_campaign(1, 2 * DOLLAR), _campaign(1, 4 * DOLLAR, at_ms=T0 + 50_000)]
    totals = clicks.recount(events, versions)[(1, "2026-01-05")]
    # $1 clicks at +0, +20 s (budget $2: both billed), +40 s (absorbed), then $4 from +50 s: +60, +80 billed
    assert totals["billed_spend_micros"] == 4 * DOLLAR
    assert totals["absorbed_overspend_micros"] == 2 * DOLLAR


def test_of_two_billed_records_of_one_instant_the_larger_totals_are_the_newer():
    base = {"event_time": T0, "billed_spend_micros": 5, "absorbed_overspend_micros": 0, "invalid_credit_micros": 0,
            "billed_impressions": 1, "billed_clicks": 0}
    later = dict(base, billed_spend_micros=10, billed_impressions=2)
    assert max([later, base], key=clicks.progress_key) is later
    assert max([base, dict(base, event_time=T0 + 10_000)], key=clicks.progress_key)["event_time"] == T0 + 10_000


def test_a_click_joins_its_impression_seen_within_the_token_lifetime_or_the_allowed_lateness():
    assert clicks.joins(T0, T0 - clicks.TOKEN_LIFETIME_MS)
    assert not clicks.joins(T0, T0 - clicks.TOKEN_LIFETIME_MS - 1)
    assert clicks.joins(T0, T0 + clicks.ALLOWED_LATENESS_MS)  # the impression beacon arrived after the click
    assert not clicks.joins(T0, T0 + clicks.ALLOWED_LATENESS_MS + 1)
    events = [_event("i1", "imp-1", "IMPRESSION", T0), _event("c1", "imp-1", "CLICK", T0 + 30_000),
              _event("c2", "imp-2", "CLICK", T0 + 30_000, ip="10.0.0.2"),  # its impression never reported
              _event("i3", "imp-3", "IMPRESSION", T0 + 40_000), _event("c3", "imp-3", "CLICK", T0 + 35_000,
                                                                      ip="10.0.0.3")]
    totals = clicks.recount(events, [_campaign(1, 100 * DOLLAR)])[(1, "2026-01-05")]
    assert (totals["billed_clicks"], totals["joined_clicks"]) == (3, 2)


def test_a_joined_click_reported_before_its_window_counts_in_the_day():
    bill = clicks.CampaignBill(1)
    bill.on_campaign(_campaign(1, 200 * DOLLAR))
    bill.add(clicks.WindowTotals(T0 + 10_000, joined_clicks=1))  # the join reports first...
    bill.add(clicks.WindowTotals(T0 + 10_000, billable_micros=DOLLAR, clicks=1))  # ...then the window closes
    assert bill.record(T0 + 10_000)["joined_clicks"] == 1


def test_a_bill_survives_its_flink_state_round_trip():
    bill = clicks.CampaignBill(7)
    bill.add(clicks.WindowTotals(T0 + 10_000, billable_micros=DOLLAR, clicks=1))  # pending: no budget yet
    again = _round_trip(bill)
    assert again == bill
    again.on_campaign(_campaign(7, 5 * DOLLAR))
    again.add(clicks.WindowTotals(T0 + 20_000, billable_micros=DOLLAR, impressions=1, joined_clicks=1))
    assert _round_trip(again) == again


def test_a_budget_cut_bills_what_was_served_before_it_and_takes_full_effect_one_promise_span_later():
    # Cut from $10 to $2 at +60 s, with $3 billed. Windows ending within PROMISE_MS of the cut may hold events
    # served under $10 and bill up to it; a window ending later bills up to $2 (here: nothing more).
    bill = clicks.CampaignBill(1)
    bill.on_campaign(_campaign(1, 10 * DOLLAR))
    bill.add(clicks.WindowTotals(T0 + 40_000, billable_micros=3 * DOLLAR, impressions=3))
    bill.on_campaign(_campaign(1, 2 * DOLLAR, at_ms=T0 + 60_000))
    bill.add(clicks.WindowTotals(T0 + 50_000, billable_micros=DOLLAR, impressions=1))
    bill.add(clicks.WindowTotals(T0 + 70_000, billable_micros=DOLLAR, impressions=1))
    assert (bill.bill.billed_micros, bill.bill.absorbed_micros) == (5 * DOLLAR, 0)
    late = T0 + 60_000 + clicks.PROMISE_MS + 10_000
    bill.add(clicks.WindowTotals(late, billable_micros=DOLLAR, impressions=1))
    assert (bill.bill.billed_micros, bill.bill.absorbed_micros) == (5 * DOLLAR, DOLLAR)
    assert bill.bill.billed_above_micros == 0
    events = [_event(str(i), f"imp-{i}", "IMPRESSION", at, ip=f"10.0.0.{i}")
              for i, at in enumerate([T0 + 31_000, T0 + 32_000, T0 + 33_000, T0 + 45_000, T0 + 65_000, late - 5_000])]
    recount = clicks.recount([dict(e, billing_type="IMPRESSION", price_micros=DOLLAR) for e in events],
                             [_campaign(1, 10 * DOLLAR), _campaign(1, 2 * DOLLAR, at_ms=T0 + 60_000)])
    assert (recount[(1, "2026-01-05")]["billed_spend_micros"],
            recount[(1, "2026-01-05")]["absorbed_overspend_micros"]) == (5 * DOLLAR, DOLLAR)
    assert _round_trip(bill) == bill


def test_the_billing_limit_is_the_highest_budget_in_force_in_the_promise_span_before_a_window_end():
    versions = [(T0, 10 * DOLLAR), (T0 + 100_000, 0), (T0 + 200_000, 3 * DOLLAR)]
    assert clicks.billing_limit(versions, T0 - 5_000) == 10 * DOLLAR  # before the first version: the first
    assert clicks.billing_limit(versions, T0 + 250_000) == 10 * DOLLAR  # $10 was in force within the span
    assert clicks.billing_limit(versions, T0 + 99_999 + clicks.PROMISE_MS) == 10 * DOLLAR  # its last instant
    assert clicks.billing_limit(versions, T0 + 100_000 + clicks.PROMISE_MS) == 3 * DOLLAR
    assert clicks.billing_limit(versions, T0 + 200_001 + clicks.PROMISE_MS) == 3 * DOLLAR


def _toggled_twin_bills(toggle: bool) -> dict:
    """Two minutes of $1 clicks (one a second, served 5 s before), billed with the budget ($200) toggled to 0 just
    before every window end and back just after (toggle) or left alone."""
    events = [_event(str(i), f"imp-{i}", "CLICK", T0 + i * 1000, ip=f"10.0.{i // 250}.{i % 250}")
              for i in range(120)]
    versions = [_campaign(1, 200 * DOLLAR)]
    if toggle:
        for end in range(T0 + 10_000, T0 + 130_000, 10_000):
            versions += [_campaign(1, 0, at_ms=end - 1), _campaign(1, 200 * DOLLAR, at_ms=end + 1)]
    return clicks.recount(events, versions)[(1, "2026-01-05")]


def test_toggling_the_budget_to_zero_around_every_window_end_bills_what_the_untoggled_twin_is_billed():
    toggled, twin = _toggled_twin_bills(True), _toggled_twin_bills(False)
    assert twin["billed_spend_micros"] == 120 * DOLLAR
    assert toggled["billed_spend_micros"] == twin["billed_spend_micros"]
    assert toggled["absorbed_overspend_micros"] == 0


def test_the_streaming_bill_and_the_recount_agree_on_a_toggled_budget():
    bill = clicks.CampaignBill(1)
    bill.on_campaign(_campaign(1, 200 * DOLLAR))
    for end in range(T0 + 10_000, T0 + 130_000, 10_000):
        bill.on_campaign(_campaign(1, 0, at_ms=end - 1))  # reaches the bill before the window closes
        bill.add(clicks.WindowTotals(end, billable_micros=10 * DOLLAR, clicks=10))
        bill.on_campaign(_campaign(1, 200 * DOLLAR, at_ms=end + 1))
    assert bill.bill.billed_micros == _toggled_twin_bills(True)["billed_spend_micros"] == 120 * DOLLAR
    assert bill.bill.billed_above_micros == 0
    assert len(bill.versions) <= 25  # equal neighbours collapse; nothing older than two spans is needed yet


def test_a_bill_keeps_only_the_versions_a_later_window_can_need():
    versions = [(T0 + i * 1_000, (i % 2) * DOLLAR, "UTC") for i in range(10)] + [(T0 + 9_000, 5, "UTC")]
    kept = clicks.kept_versions(versions, billed_through_ms=T0 + 2 * clicks.PROMISE_MS + 5_500)
    assert kept == [(T0 + 5_000, DOLLAR, "UTC"), (T0 + 6_000, 0, "UTC"), (T0 + 7_000, DOLLAR, "UTC"),
                    (T0 + 8_000, 0, "UTC"), (T0 + 9_000, 5, "UTC")]  # of two at one instant, the later
    assert clicks.kept_versions([(T0, 1, "UTC"), (T0 + 1, 1, "UTC")], T0) == [(T0, 1, "UTC")]
    many = [(T0 + i, i, "UTC") for i in range(clicks.MAX_VERSIONS + 10)]
    assert len(clicks.kept_versions(many, T0)) == clicks.MAX_VERSIONS


def test_a_bill_written_before_it_kept_versions_reads_its_budget_as_in_force_from_the_start():
    old = (7, "UTC", 5_000_000, "2026-01-05", (5_000_000, 1_000_000, 0, 1, 0), 0, 1, 0, 0, [], 1_767_614_410_000, None)
    bill = bill_from_row(old)
    assert bill.versions == [(0, 5 * DOLLAR, "UTC")]
    bill.add(clicks.WindowTotals(T0 + 20_000, billable_micros=DOLLAR, clicks=1))
    assert bill.bill.billed_micros == 2 * DOLLAR
