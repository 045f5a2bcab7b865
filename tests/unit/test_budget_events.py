"""core.budget_events: each event a campaign's pacer receives, applied by the one rule `apply`."""
from __future__ import annotations

from core import budget
from core.budget_events import (AdsChange, Billed, CampaignChange, LateReport, Market, ServerSpend, SpendWindow, Tick,
                                apply, apply_held, change_instant_ms, new_state, window_end_ms)
from core.pacing import ANY_PLACEMENT, Curves
from core.spend import SpendDedupe, report_key

T0 = 1_767_614_400_000  # 2026-01-05 12:00:00 UTC
DOLLAR = 1_000_000
CAMPAIGN = {"timezone": "UTC", "bid_type": "CPC", "status": "ACTIVE", "daily_budget_micros": 100 * DOLLAR}
VIDEO_SHAPE = [1.0] * 12 + [20.0] + [1.0] * 11


def _report(server="s1", sequence=1, campaign_id=7, spend=777):
    return {"server_id": server, "sequence": sequence, "campaign_id": campaign_id, "event_time": T0,
            "expected_spend_micros": spend, "served_ads": 1, "eligible_requests": 5, "max_price_micros": 2 * DOLLAR}


def _started(market=None):
    state, _ = apply(budget.PacerState(7), CampaignChange(CAMPAIGN, T0), market or Market())
    return state


def test_a_campaign_change_starts_its_day_and_sends_its_state_at_once():
    state, outputs = apply(budget.PacerState(7), CampaignChange(CAMPAIGN, T0), Market())
    assert state.budget_day == "2026-01-05" and state.budget_micros == 100 * DOLLAR
    assert [kind for kind, _ in outputs] == ["state"]


def test_a_spend_window_counts_its_spend_and_sends_nothing():
    state, outputs = apply(_started(), SpendWindow(T0 + 10_000, 3 * DOLLAR, 30, 40, 2, DOLLAR), Market())
    assert outputs == [] and state.committed_micros() == 3 * DOLLAR and state.click_price_micros == DOLLAR


def test_held_windows_applied_together_equal_windows_applied_one_by_one():
    windows = [SpendWindow(T0 + 10_000, 3, 1, 1, 1, 9), SpendWindow(T0 + 20_000, 4, 1, 1, 1, 8)]
    one_by_one = _started()
    for window in windows:
        apply(one_by_one, window, Market())
    assert apply_held(_started(), windows) == one_by_one


def test_a_late_report_counts_as_one_window_of_one_server_at_its_arrival():
    state, _ = apply(_started(), LateReport(_report(), T0 + 95_000), Market())
    assert state.committed_micros() == 777
    assert state.windows[-1] == budget.Window(T0 + 95_000, 777, 1, 5, 1)


def test_a_resend_has_the_same_report_key_and_the_dedupe_counts_it_once():
    dedupe = SpendDedupe()
    assert report_key(_report()) == report_key(dict(_report(), event_time=T0 + 5)) == ("s1", 1, 7)
    assert [dedupe.first_time(_report()), dedupe.first_time(_report())] == [True, False]


def test_a_metered_campaign_grants_a_slice_to_the_server_that_asks():
    state = _started()
    assert state.last_state == "METERED"  # no price seen yet: fail closed
    _, outputs = apply(state, ServerSpend("s1", None, 0, True, 2 * DOLLAR, T0 + 1000), Market())
    assert [(kind, record["server_id"]) for kind, record in outputs] == [("lease", "s1")]


def test_billed_totals_replace_estimates_and_move_the_billing_clock():
    market = Market()
    state, _ = apply(_started(market), SpendWindow(T0 + 10_000, 5 * DOLLAR, 10, 10, 1, DOLLAR), market)
    apply(state, Billed({"budget_day": "2026-01-05", "event_time": T0 + 700_000, "billed_spend_micros": DOLLAR}),
          market)
    assert state.billed_micros == DOLLAR and market.billing_clock_ms == T0 + 700_000


def test_an_ads_change_takes_the_live_ads_placements_and_replans_along_their_shape():
    market = Market(Curves(placements={"video": VIDEO_SHAPE}))
    ads = {1: (1, 40_000, ("video",), False), 2: (1, 90_000, (ANY_PLACEMENT,), True)}
    state, _ = apply(_started(market), AdsChange.of_ads(ads, T0 + 3000), market)
    assert (state.placements, state.ad_bid_micros) == (["video"], 40_000)
    assert state.shape == VIDEO_SHAPE


def test_a_tick_steps_the_controller_and_sends_a_pacing_point():
    state, outputs = apply(_started(), Tick(T0 + 10_000), Market())
    assert state.last_step_ms == T0 + 10_000
    assert outputs[-1][0] == "pacing" and outputs[-1][1]["event_time"] == T0 + 10_000


def test_a_new_campaign_starts_with_its_own_traffic_shape_when_the_curves_have_one():
    market = Market(Curves(campaigns={7: VIDEO_SHAPE}))
    assert new_state(7, market).shape == VIDEO_SHAPE
    assert new_state(8, market).shape == [1.0] * 24


def test_a_change_applies_at_the_jobs_clock_when_that_has_passed_its_event_time():
    assert change_instant_ms(T0, T0 + 5) == T0 + 5
    assert change_instant_ms(T0, T0 - 5) == T0
    assert change_instant_ms(T0, None) == change_instant_ms(T0, -2**63) == T0


def test_a_window_ends_a_millisecond_after_the_instant_flink_stamps_it_with():
    assert window_end_ms(T0 + 9_999) == T0 + 10_000
