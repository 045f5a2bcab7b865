"""Values that used to pass validation and fail later (a 500 from the store or the report query) are refused
with the field named, and a CPA bid is bounded by its campaign's target (pure rules)."""
from __future__ import annotations

import pytest

from core.campaigns import InvalidField, check_cpa_bid, validate_ad, validate_campaign
from core.reports import parse_report_query

CAMPAIGN = {"name": "c", "bid_type": "CPC", "daily_budget_micros": 5_000_000, "timezone": "UTC"}
AD = {"creative_ref": "c", "landing_url": "https://adv.example/", "bid_micros": 1_000_000,
      "targeting": {"placement": ["feed"]}}


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "1969-12-31T23:59:59Z"])
def test_a_flight_time_outside_what_the_store_holds_is_refused_by_name(when):
    with pytest.raises(InvalidField) as e:
        validate_campaign({**CAMPAIGN, "flight_start": when})
    assert e.value.field == "flight_start" and "1970-01-01 to 2199-12-31" in str(e.value)
    assert validate_campaign({**CAMPAIGN, "flight_start": "2199-12-31T23:59:59Z"})["flight_start"] > 0


@pytest.mark.parametrize("field,value", [("name", "a\x00b"), ("name", "two\nlines")])
def test_campaign_text_with_control_characters_is_refused(field, value):
    with pytest.raises(InvalidField) as e:
        validate_campaign({**CAMPAIGN, field: value})
    assert e.value.field == field


@pytest.mark.parametrize("field,value", [("creative_ref", "c\x00"), ("landing_url", "https://a.example/\x00"),
                                         ("targeting", {"interest": ["sports\x00"]})])
def test_ad_text_with_control_characters_is_refused(field, value):
    with pytest.raises(InvalidField) as e:
        validate_ad({**AD, field: value}, creating=True)
    assert e.value.field.startswith(field)


@pytest.mark.parametrize("ids", ["\u00b2", "9" * 5000, "9" * 20, "0", "1,\u0661"])
def test_a_report_campaign_id_that_is_not_a_bigint_is_refused_by_name(ids):
    with pytest.raises(InvalidField) as e:
        parse_report_query({"from": "2026-01-01", "to": "2026-01-02", "campaign_id": ids})
    assert e.value.field == "campaign_id"


def test_a_cpa_bid_is_at_most_its_campaigns_target():
    check_cpa_bid("CPA", 5_000_000, 5_000_000)
    check_cpa_bid("CPC", 100_000_000_000, 5_000_000)  # the target bounds CPA bids only
    with pytest.raises(InvalidField) as e:
        check_cpa_bid("CPA", 100_000_000_000, 5_000_000)
    assert e.value.field == "bid_micros" and "cpa_target_micros" in str(e.value)
