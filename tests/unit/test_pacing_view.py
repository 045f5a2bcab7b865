"""The pacing dashboard's rules (core.pacing_view): reasons, forecast, pace band, list query and minute series."""
from __future__ import annotations

import pytest

from core.pacing_view import (COLUMNS, BudgetWord, CampaignInfo, InvalidQuery, ListQuery, budget_word,
                              campaign_info, campaign_row, forecast_micros, minute_series, parse_query, select)
from core.errors import InvalidArgument
from streams.pacing_store import PacingPoint

DOLLAR = 1_000_000


def info(campaign_id=1, advertiser_id=10, status="ACTIVE", budget=100 * DOLLAR) -> CampaignInfo:
    return CampaignInfo(campaign_id, advertiser_id, status, budget, "America/New_York")


def word(campaign_id=1, state="OPEN", target=40 * DOLLAR, committed=40 * DOLLAR, budget=100 * DOLLAR,
         limit=None, p=0.5) -> BudgetWord:
    return BudgetWord(campaign_id, 1_773_100_000_000, "2026-03-10", state, p, budget, committed - DOLLAR,
                      committed, max(0, budget - committed), target, limit)


def test_a_campaign_on_its_curve_forecasts_its_whole_budget():
    assert forecast_micros("ACTIVE", word(target=40 * DOLLAR, committed=40 * DOLLAR)) == 100 * DOLLAR


def test_a_campaign_at_half_its_curve_forecasts_half_of_the_rest_of_the_curve():
    # $20 of a $40 target: the remaining $60 of the curve at a delivery ratio of 0.5 brings $30 more.
    assert forecast_micros("ACTIVE", word(target=40 * DOLLAR, committed=20 * DOLLAR)) == 50 * DOLLAR


def test_a_forecast_never_passes_the_budget():
    assert forecast_micros("ACTIVE", word(target=40 * DOLLAR, committed=60 * DOLLAR)) == 100 * DOLLAR


def test_a_paused_or_stopped_campaign_forecasts_what_it_spent():
    assert forecast_micros("PAUSED", word(committed=20 * DOLLAR)) == 20 * DOLLAR
    assert forecast_micros("ACTIVE", word(state="STOPPED", committed=30 * DOLLAR)) == 30 * DOLLAR


def test_before_the_curve_asks_anything_the_forecast_is_the_budget():
    assert forecast_micros("ACTIVE", word(target=0, committed=0)) == 100 * DOLLAR


@pytest.mark.parametrize("status, state, limit, committed, expected", [
    ("PAUSED", "OPEN", None, 10 * DOLLAR, "paused"),
    ("ENDED", "OPEN", None, 10 * DOLLAR, "ended"),
    ("ACTIVE", "STOPPED", None, 10 * DOLLAR, "budget"),
    ("ACTIVE", "METERED", None, 100 * DOLLAR, "budget"),  # nothing remains
    ("ACTIVE", "OPEN", "BID", 10 * DOLLAR, "bid"),
    ("ACTIVE", "OPEN", "AUDIENCE", 10 * DOLLAR, "audience"),
    ("ACTIVE", "OPEN", None, 40 * DOLLAR, None),
])
def test_the_under_delivery_reason_is_the_first_rule_that_holds(status, state, limit, committed, expected):
    row = campaign_row(1, info(status=status), word(state=state, limit=limit, committed=committed))
    assert row.under_delivery == expected


@pytest.mark.parametrize("committed, pace", [(35 * DOLLAR, "under"), (36 * DOLLAR, "on"), (44 * DOLLAR, "on"),
                                             (45 * DOLLAR, "over")])
def test_the_pace_band_is_ten_percent_around_the_target(committed, pace):
    assert campaign_row(1, info(), word(target=40 * DOLLAR, committed=committed)).pace == pace


def test_a_row_carries_the_budget_state_and_the_campaigns_advertiser():
    row = campaign_row(7, info(7, advertiser_id=3), word(7, target=40 * DOLLAR, committed=20 * DOLLAR, p=0.25))
    assert (row.advertiser_id, row.state, row.participation_probability, row.target_micros, row.committed_micros,
            row.billed_micros, row.remaining_micros, row.pace_ratio) == \
        (3, "OPEN", 0.25, 40 * DOLLAR, 20 * DOLLAR, 19 * DOLLAR, 80 * DOLLAR, 0.5)
    assert set(row.as_json()) == set(COLUMNS)


def test_a_campaign_the_budget_job_never_stepped_has_no_state_and_its_whole_budget_left():
    row = campaign_row(1, info(budget=5 * DOLLAR), None)
    assert (row.state, row.remaining_micros, row.committed_micros, row.pace) == (None, 5 * DOLLAR, 0, "on")


def test_records_decode_into_what_the_dashboard_keeps():
    campaign = {"campaign_id": 4, "advertiser_id": 2, "status": "PAUSED", "daily_budget_micros": 9, "timezone": "UTC",
                "version": 1}
    state = {"campaign_id": 4, "event_time": 5, "budget_day": "2026-03-10", "state": "METERED",
             "participation_probability": 0.1, "daily_budget_micros": 9, "billed_spend_micros": 1,
             "committed_spend_micros": 2, "remaining_micros": 7, "target_spend_micros": 3, "delivery_limit": "BID"}
    assert campaign_info(campaign) == CampaignInfo(4, 2, "PAUSED", 9, "UTC")
    assert budget_word(state) == BudgetWord(4, 5, "2026-03-10", "METERED", 0.1, 9, 1, 2, 7, 3, "BID")


def rows():
    return [campaign_row(1, info(1, 10), word(1, committed=20 * DOLLAR)),            # under
            campaign_row(2, info(2, 10), word(2, committed=40 * DOLLAR)),            # on
            campaign_row(3, info(3, 11), word(3, committed=60 * DOLLAR)),            # over
            campaign_row(4, info(4, 11), word(4, state="STOPPED", committed=100 * DOLLAR)),
            campaign_row(5, info(5, 12), None)]


def test_filters_keep_only_matching_rows_and_count_them():
    page, total = select(rows(), parse_query({"advertiser_id": "11"}))
    assert ([r.campaign_id for r in page], total) == ([3, 4], 2)
    assert [r.campaign_id for r in select(rows(), parse_query({"pace": "under"}))[0]] == [1]
    assert [r.campaign_id for r in select(rows(), parse_query({"state": "stopped"}))[0]] == [4]
    assert [r.campaign_id for r in select(rows(), parse_query({"state": "OPEN", "pace": "over"}))[0]] == [3]


def test_sorting_by_a_column_either_way_puts_rows_without_a_value_last():
    asc, _ = select(rows(), parse_query({"sort": "committed_micros"}))
    desc, _ = select(rows(), parse_query({"sort": "committed_micros", "order": "desc"}))
    assert [r.campaign_id for r in asc] == [5, 1, 2, 3, 4]  # 5 has 0 committed: a value
    assert [r.campaign_id for r in desc] == [4, 3, 2, 1, 5]
    by_state, _ = select(rows(), parse_query({"sort": "state", "order": "desc"}))
    assert by_state[-1].campaign_id == 5  # no state: last either way
    assert select(rows(), parse_query({"sort": "state"}))[0][-1].campaign_id == 5


def test_a_page_is_an_offset_and_a_limit_over_the_sorted_matches():
    page, total = select(rows(), parse_query({"sort": "campaign_id", "order": "desc", "limit": "2", "offset": "1"}))
    assert ([r.campaign_id for r in page], total) == ([4, 3], 5)


def test_an_empty_query_is_the_default_one():
    assert parse_query({}) == ListQuery()


@pytest.mark.parametrize("params, field", [
    ({"advertiser_id": "x"}, "advertiser_id"), ({"advertiser_id": "-1"}, "advertiser_id"),
    ({"state": "RUNNING"}, "state"), ({"pace": "fast"}, "pace"), ({"sort": "budget"}, "sort"),
    ({"order": "up"}, "order"), ({"limit": "0"}, "limit"), ({"limit": "1001"}, "limit"),
    ({"offset": "-3"}, "offset"), ({"colour": "red"}, "colour"),
])
def test_a_bad_parameter_is_an_invalid_argument_naming_it(params, field):
    with pytest.raises(InvalidArgument, match=f"^{field}:") as raised:
        parse_query(params)
    assert isinstance(raised.value, InvalidQuery) and raised.value.field == field


def test_a_minute_series_is_the_days_points_in_minute_order():
    points = [PacingPoint(601, 30, 28, 0.4, "OPEN"), PacingPoint(600, 20, 25, 0.5, "OPEN")]
    series = minute_series(9, "2026-03-10", points)
    assert series.as_json() == {"campaign_id": 9, "day": "2026-03-10", "minutes": [600, 601], "target": [20, 30],
                                "committed": [25, 28], "p": [0.5, 0.4], "states": ["OPEN", "OPEN"],
                                "p_moves_by_hour": [0.0] * 10 + [0.1] + [0.0] * 13}

