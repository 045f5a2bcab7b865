"""Advertiser input validation and the compilation of store rows / CDC changes into serving records."""
from __future__ import annotations

import json

import pytest

from core.campaigns import BadChange, InvalidField, ad_serving_record, static_score, validate_ad, validate_campaign
from schemas import topics
from schemas.cdc import serving_record_from_change

CAMPAIGN = {"name": "Winter", "bid_type": "CPC", "daily_budget_micros": 50_000_000, "timezone": "America/New_York"}
AD = {"creative_ref": "cdn://a.png", "landing_url": "https://shop.example/", "bid_micros": 2_000_000,
      "targeting": {"location": ["US", "CA"], "interest": ["hiking"], "exclude": {"audience": ["customers"]}}}


def test_a_valid_campaign_gets_defaults_and_epoch_ms_times():
    out = validate_campaign({**CAMPAIGN, "flight_start": "2027-01-01T00:00:00Z", "cap_per_day": 3})
    assert out["status"] == "ACTIVE" and out["currency"] == "USD" and out["flight_start"] == 1_798_761_600_000


@pytest.mark.parametrize("change, field", [
    ({"daily_budget_micros": -1}, "daily_budget_micros"),
    ({"daily_budget_micros": 1.5}, "daily_budget_micros"),
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"flight_start": "2027-01-02T00:00:00Z", "flight_end": "2027-01-01T00:00:00Z"}, "flight_end"),
    ({"flight_start": "2027-01-02"}, "flight_start"),
    ({"cap_per_day": 0}, "cap_per_day"),
    ({"bid_type": "CPA"}, "cpa_target_micros"),
    ({"dayparts": [{"day_of_week": 8, "start_minute": 0, "end_minute": 60}]}, "dayparts[0].day_of_week"),
    ({"colour": "red"}, "colour"),
])
def test_a_bad_campaign_names_its_field(change, field):
    with pytest.raises(InvalidField) as e:
        validate_campaign({**CAMPAIGN, **change})
    assert e.value.field == field


def test_a_change_may_not_switch_the_bid_type_and_is_checked_against_the_stored_flight():
    existing = {**validate_campaign(CAMPAIGN), "flight_start": 2_000, "flight_end": None}
    with pytest.raises(InvalidField) as e:
        validate_campaign({"bid_type": "CPM"}, existing=existing)
    assert e.value.field == "bid_type"
    with pytest.raises(InvalidField) as e:
        validate_campaign({"flight_end": "1970-01-01T00:00:01Z"}, existing=existing)
    assert e.value.field == "flight_end"
    assert validate_campaign({"status": "paused"}, existing=existing) == {"status": "PAUSED"}


@pytest.mark.parametrize("change, field", [
    ({"bid_micros": 0}, "bid_micros"),
    ({"landing_url": "javascript:alert(1)"}, "landing_url"),
    ({"targeting": {"religion": ["x"]}}, "targeting.religion"),
    ({"targeting": {"location": []}}, "targeting.location"),
    ({"targeting": {"interest": ["politics"]}}, "targeting.interest"),
    ({"quality_prior": 0.0}, "quality_prior"),
    ({"review_status": "APPROVED"}, "review_status"),
])
def test_a_bad_ad_names_its_field(change, field):
    with pytest.raises(InvalidField) as e:
        validate_ad({**AD, **change}, creating=True)
    assert e.value.field == field


def _row(**over):
    """An ads row as the store holds it once an operator approved it."""
    return {"ad_id": 7, "campaign_id": 3, "advertiser_id": 1, "bid_type": "CPC", "version": 4, "quality_prior": 0.0,
            **validate_ad(AD, creating=True), "review_status": "APPROVED", **over}


def test_an_ad_row_compiles_to_a_serving_record_with_clauses_and_a_static_score():
    record = ad_serving_record({**_row(), "targeting": json.dumps(AD["targeting"])}, commit_ms=123)
    assert record["event_time"] == 123 and record["version"] == 4 and not record["removed"]
    assert {"attribute": "audience", "values": ["customers"], "excluded": True} in record["targeting"]
    assert record["static_score"] == static_score("CPC", 2_000_000, 0.0) == 20_000.0


@pytest.mark.parametrize("over", [{"status": "PAUSED"}, {"review_status": "PENDING"}, {"review_status": "REJECTED"}])
def test_paused_or_unapproved_ads_compile_as_removed(over):
    assert ad_serving_record(_row(**over), commit_ms=1)["removed"]


def test_a_debezium_change_becomes_a_serving_record_and_a_delete_or_garbage_does_not():
    envelope = {"before": None, "after": {**_row(), "targeting": json.dumps(AD["targeting"])}, "op": "c",
                "source": {"ts_ms": 1_795_000_000_000}}
    topic, key, record_type, record = serving_record_from_change(topics.CDC_ADS, json.dumps(envelope))
    assert (topic, key, record_type, record["event_time"]) == (
        topics.SERVING_ADS, "7", topics.record_type(topics.SERVING_ADS), 1_795_000_000_000)
    assert serving_record_from_change(topics.CDC_ADS, json.dumps({**envelope, "after": None})) is None
    with pytest.raises(BadChange):
        serving_record_from_change(topics.CDC_ADS, b"{not json")
    with pytest.raises(BadChange):
        serving_record_from_change(topics.CDC_ADS, json.dumps({**envelope, "after": {"ad_id": 1}}))
