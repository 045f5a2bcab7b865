"""Every field an advertiser can write, one test each: what it does in the auction, the pacing or the billing,
and the guard that keeps it the advertiser's own business (docs/campaign-changes.md has the table)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from core.auction import CPA, cpa_bids
from core.campaigns import (AD_FIELDS, CAMPAIGN_FIELDS, MAX_BID_MICROS, MAX_EXCLUSION_CATEGORY, PLATFORM_FIELDS,
                            STORE_FIELDS, InvalidField, ReviewConflict, ad_serving_record, review_after_change,
                            review_decision, validate_ad, validate_campaign)
from schemas import topics
from schemas.cdc import serving_record_from_change

CAMPAIGN = {"name": "Winter", "bid_type": "CPC", "daily_budget_micros": 50_000_000, "timezone": "America/New_York"}
AD = {"creative_ref": "cdn://a.png", "landing_url": "https://shop.example/", "bid_micros": 2_000_000,
      "targeting": {"location": ["US", "CA"], "interest": ["hiking"]}}


def refused(field_name, payload, **kwargs):
    validate = validate_ad if "creating" in kwargs else validate_campaign
    with pytest.raises(InvalidField) as e:
        validate(payload, **kwargs)
    assert e.value.field == field_name
    return str(e.value)


def stored_ad(**over):
    return {"ad_id": 9, "campaign_id": 3, "advertiser_id": 1, "bid_type": "CPC", "version": 5, "quality_prior": 0.0,
            **validate_ad(AD, creating=True), "review_status": "APPROVED", "reviewed_by": "ops",
            "reviewed_at": None, "review_note": None, **over}


# ------------------------------------------------------------------------------------------------ the platform's

@pytest.mark.parametrize("name", sorted(PLATFORM_FIELDS))
@pytest.mark.parametrize("creating", [True, False])
def test_the_platforms_fields_are_refused_on_create_and_on_change(name, creating):
    message = refused(name, {**AD, name: "APPROVED" if "status" in name else 1_000_000}, creating=creating)
    assert "set by the platform" in message


@pytest.mark.parametrize("name", STORE_FIELDS)
def test_ids_versions_and_times_are_the_stores(name):
    refused(name, {**AD, name: 1}, creating=False)
    refused(name, {**CAMPAIGN, name: 1})


# ------------------------------------------------------------------------------------------------ campaigns

def test_campaign_name_is_a_label_with_no_effect_on_the_auction():
    assert validate_campaign({**CAMPAIGN, "name": " Winter "})["name"] == "Winter"
    refused("name", {**CAMPAIGN, "name": "x" * 201})


def test_campaign_bid_type_is_fixed_after_creation_as_it_sets_how_the_campaign_is_billed():
    existing = validate_campaign(CAMPAIGN)
    assert "billed" in refused("bid_type", {"bid_type": "CPM"}, existing=existing)
    refused("bid_type", {**CAMPAIGN, "bid_type": "CPX"})


def test_campaign_daily_budget_micros_is_whole_non_negative_micros():
    for bad in (-1, 1.5, True, 10**15 + 1):
        refused("daily_budget_micros", {**CAMPAIGN, "daily_budget_micros": bad})


def test_campaign_currency_is_the_platforms_as_bids_are_compared_and_billed_without_conversion():
    assert validate_campaign({**CAMPAIGN, "currency": "usd"})["currency"] == "USD"
    for other in ("JPY", "VND", "EUR", 1):
        refused("currency", {**CAMPAIGN, "currency": other})


def test_campaign_timezone_is_fixed_after_creation_as_it_sets_the_budgets_day():
    existing = validate_campaign(CAMPAIGN)
    assert validate_campaign({"timezone": "America/New_York"}, existing=existing) == \
        {"timezone": "America/New_York"}
    assert "daily budget" in refused("timezone", {"timezone": "Pacific/Kiritimati"}, existing=existing)
    refused("timezone", {**CAMPAIGN, "timezone": "Mars/Olympus"})


def test_campaign_flight_start_and_flight_end_bound_the_schedule_in_order():
    refused("flight_end", {**CAMPAIGN, "flight_start": "2027-01-02T00:00:00Z", "flight_end": "2027-01-01T00:00:00Z"})
    refused("flight_start", {**CAMPAIGN, "flight_start": "2027-01-02"})


def test_campaign_dayparts_are_whole_days_and_minutes():
    refused("dayparts[0].end_minute", {**CAMPAIGN, "dayparts": [{"day_of_week": 1, "start_minute": 60,
                                                                  "end_minute": 60}]})


def test_campaign_cap_per_day_and_cap_per_week_only_limit_the_campaign_itself():
    refused("cap_per_day", {**CAMPAIGN, "cap_per_day": 0})
    refused("cap_per_week", {**CAMPAIGN, "cap_per_week": 1001})


def test_campaign_cpa_target_micros_is_positive_and_required_for_conversion_bids():
    refused("cpa_target_micros", {**CAMPAIGN, "bid_type": "CPA"})
    refused("cpa_target_micros", {**CAMPAIGN, "bid_type": "CPA", "cpa_target_micros": 0})


def test_campaign_exclusion_category_is_the_advertisers_declaration_and_its_ads_only_carry_it():
    assert validate_campaign(CAMPAIGN)["exclusion_category"] == 0  # none unless declared
    assert validate_campaign({**CAMPAIGN, "exclusion_category": 7})["exclusion_category"] == 7
    existing = validate_campaign(CAMPAIGN)
    assert validate_campaign({"exclusion_category": MAX_EXCLUSION_CATEGORY}, existing=existing) == \
        {"exclusion_category": MAX_EXCLUSION_CATEGORY}
    assert validate_campaign({"exclusion_category": 0}, existing=existing) == {"exclusion_category": 0}
    for bad in (-1, MAX_EXCLUSION_CATEGORY + 1, 1.5, True, "7", None):
        refused("exclusion_category", {**CAMPAIGN, "exclusion_category": bad})
        refused("exclusion_category", {"exclusion_category": bad}, existing=existing)
    for creating in (True, False):
        assert "the campaign's" in refused("exclusion_category", {**AD, "exclusion_category": 7}, creating=creating)


def test_campaign_status_only_takes_the_known_states():
    refused("status", {**CAMPAIGN, "status": "APPROVED"})


# ------------------------------------------------------------------------------------------------ ads

def test_ad_bid_micros_is_capped_so_a_conversion_bid_times_the_pacing_multiplier_stays_exact():
    refused("bid_micros", {**AD, "bid_micros": MAX_BID_MICROS + 1}, creating=True)
    refused("bid_micros", {**AD, "bid_micros": 0}, creating=True)
    top = np.array([MAX_BID_MICROS], dtype=np.int64)
    # at the cap, the highest multiplier (1.0) and the lowest step (0.0001) are exact integer money
    assert cpa_bids(top, np.array([CPA]), np.array([1.0]))[0] == MAX_BID_MICROS
    assert cpa_bids(top, np.array([CPA]), np.array([0.0001]))[0] == MAX_BID_MICROS // 10_000


@pytest.mark.parametrize("name, value", [
    ("creative_ref", "cdn://b.png"), ("landing_url", "https://elsewhere.example/"),
    ("targeting", {"location": ["US"], "interest": ["hiking", "camping"]})])
def test_ad_creative_ref_and_landing_url_and_targeting_changes_send_the_ad_back_to_review(name, value):
    change = validate_ad({name: value}, creating=False)
    assert review_after_change(stored_ad(), change) == {"review_status": "PENDING", "reviewed_by": None,
                                                        "reviewed_at": None, "review_note": None}
    assert review_after_change(stored_ad(), {name: stored_ad()[name]}) == {}  # the same value: no change


def test_the_same_targeting_in_another_order_is_not_a_change():
    reordered = {"interest": ["hiking"], "location": ["CA", "US"]}
    assert review_after_change(stored_ad(targeting=json.dumps(AD["targeting"])), {"targeting": reordered}) == {}


def test_a_bid_or_status_change_keeps_the_review():
    assert review_after_change(stored_ad(), validate_ad({"bid_micros": 3_000_000, "status": "PAUSED"},
                                                        creating=False)) == {}


def test_ad_status_cannot_make_an_unreviewed_ad_servable():
    assert validate_ad(AD, creating=True)["review_status"] == "PENDING"
    for review in ("PENDING", "REJECTED"):
        assert ad_serving_record(stored_ad(status="ACTIVE", review_status=review), commit_ms=1)["removed"]
    assert not ad_serving_record(stored_ad(status="ACTIVE"), commit_ms=1)["removed"]
    refused("status", {**AD, "status": "APPROVED"}, creating=True)


# ------------------------------------------------------------------------------------------------ review

def test_an_operator_approves_the_version_they_saw():
    pending = stored_ad(review_status="PENDING")
    assert review_decision(pending, "approved", " alice ", seen_version=5) == \
        {"review_status": "APPROVED", "reviewed_by": "alice", "review_note": None}
    with pytest.raises(ReviewConflict, match="changed since version 4"):
        review_decision(pending, "APPROVED", "alice", seen_version=4)
    with pytest.raises(ReviewConflict, match="already APPROVED"):
        review_decision(stored_ad(), "APPROVED", "alice")


@pytest.mark.parametrize("decision, reviewer, note, field_name", [
    ("MAYBE", "alice", None, "decision"), ("APPROVED", "", None, "reviewer"),
    ("REJECTED", "alice", None, "reason"), ("REJECTED", "alice", "  ", "reason")])
def test_a_review_decision_names_what_is_missing(decision, reviewer, note, field_name):
    with pytest.raises(InvalidField) as e:
        review_decision(stored_ad(review_status="PENDING"), decision, reviewer, note=note)
    assert e.value.field == field_name


def test_a_rejection_says_why():
    assert review_decision(stored_ad(), "REJECTED", "bob", note="misleading claim") == \
        {"review_status": "REJECTED", "reviewed_by": "bob", "review_note": "misleading claim"}


def test_a_reserve_rule_change_compiles_to_its_serving_record():
    row = {"placement": "feed", "country": "US", "reserve_micros": 500, "quality_floor_micros": None,
           "default_quality_micros": -20, "removed": False, "set_by": "ops", "version": 2}
    envelope = {"before": None, "after": row, "op": "u", "source": {"ts_ms": 1_795_000_000_000}}
    topic, key, record_type, record = serving_record_from_change(topics.CDC_RESERVES, json.dumps(envelope))
    assert (topic, key, record_type) == (topics.SERVING_RESERVES, "feed|US",
                                         topics.record_type(topics.SERVING_RESERVES))
    assert (record["reserve_micros"], record["default_quality_micros"], record["version"]) == (500, -20, 2)


# ------------------------------------------------------------------------------------------------ the audit

AUDIT = {
    "name": test_campaign_name_is_a_label_with_no_effect_on_the_auction,
    "bid_type": test_campaign_bid_type_is_fixed_after_creation_as_it_sets_how_the_campaign_is_billed,
    "daily_budget_micros": test_campaign_daily_budget_micros_is_whole_non_negative_micros,
    "currency": test_campaign_currency_is_the_platforms_as_bids_are_compared_and_billed_without_conversion,
    "timezone": test_campaign_timezone_is_fixed_after_creation_as_it_sets_the_budgets_day,
    "flight_start": test_campaign_flight_start_and_flight_end_bound_the_schedule_in_order,
    "flight_end": test_campaign_flight_start_and_flight_end_bound_the_schedule_in_order,
    "dayparts": test_campaign_dayparts_are_whole_days_and_minutes,
    "cap_per_day": test_campaign_cap_per_day_and_cap_per_week_only_limit_the_campaign_itself,
    "cap_per_week": test_campaign_cap_per_day_and_cap_per_week_only_limit_the_campaign_itself,
    "cpa_target_micros": test_campaign_cpa_target_micros_is_positive_and_required_for_conversion_bids,
    "exclusion_category": test_campaign_exclusion_category_is_the_advertisers_declaration_and_its_ads_only_carry_it,
    "status": test_campaign_status_only_takes_the_known_states,
    "creative_ref": test_ad_creative_ref_and_landing_url_and_targeting_changes_send_the_ad_back_to_review,
    "landing_url": test_ad_creative_ref_and_landing_url_and_targeting_changes_send_the_ad_back_to_review,
    "targeting": test_ad_creative_ref_and_landing_url_and_targeting_changes_send_the_ad_back_to_review,
    "bid_micros": test_ad_bid_micros_is_capped_so_a_conversion_bid_times_the_pacing_multiplier_stays_exact,
    "ad status": test_ad_status_cannot_make_an_unreviewed_ad_servable,
}


def test_every_field_an_advertiser_can_write_is_audited_here():
    assert set(AUDIT) == set(CAMPAIGN_FIELDS) | {f if f != "status" else "ad status" for f in AD_FIELDS}
