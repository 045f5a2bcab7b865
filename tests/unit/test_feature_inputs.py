"""What the features job takes from each record (core.feature_inputs) and a user's features (core.user_activity)."""
from __future__ import annotations

from core import feature_inputs, user_activity
from core.feature_windows import Counts
from schemas import topics
from tests.features_records import T0, beacon, conversion, feedback, served, serving_ad, winner


def test_a_served_record_gives_each_winner_its_placement_and_position():
    record = served("r1", T0, [winner("r1:1", 11, 1, 1), winner("r1:2", 12, 2, 3)], placement="article")
    assert [(i.ad_id, i.impression_id, i.placement, i.position, i.served_ms) for i in
            feature_inputs.served_inputs(record)] == [(11, "r1:1", "article", 1, T0), (12, "r1:2", "article", 3, T0)]


def test_beacons_conversions_and_feedback_become_their_kinds():
    event_type, conversion_type, feedback_type = (topics.record_type(topic) for topic in
                                                  (topics.AD_EVENTS, topics.AD_CONVERSIONS, topics.AD_FEEDBACK))
    assert feature_inputs.beacon_input(event_type, beacon("i", 11, 1, T0, "CLICK")).kind == "CLICK"
    assert feature_inputs.beacon_input(conversion_type, conversion("i", 11, 1, T0)).kind == "CONVERSION"
    assert feature_inputs.beacon_input(feedback_type, feedback("i", 11, 1, T0, "REPORT")).kind == "REPORT"


def test_an_ads_category_is_its_exclusion_category_and_zero_without_one():
    ad = serving_ad(11, 1, 100, T0)
    assert feature_inputs.attributes_input(ad).attributes.category == 0
    assert feature_inputs.attributes_input({**ad, "exclusion_category": 6}).attributes.category == 6


def test_a_request_counts_for_its_user_only_when_it_logged_user_features():
    consented = served("r1", T0, [winner("r1:1", 11, 1, category=5)], user_id="u1", consented=True)
    assert [(u.user_id, u.category) for u in feature_inputs.user_served_inputs(consented)] == [("u1", 5)]
    assert feature_inputs.user_served_inputs(served("r2", T0, [winner("r2:1", 11, 1)], user_id="u1")) == []
    assert feature_inputs.user_served_inputs(served("r3", T0, [winner("r3:1", 11, 1)], consented=True)) == []


def test_only_impressions_and_clicks_of_known_users_reach_a_users_window():
    assert feature_inputs.user_beacon_input(beacon("i", 11, 1, T0, "CLICK", user_id="u1")).kind == "CLICK"
    assert feature_inputs.user_beacon_input(beacon("i", 11, 1, T0, "CLICK")) is None


def test_user_features_count_clicks_by_nonzero_category():
    features = user_activity.user_features({4: Counts(impressions=10, clicks=2), 0: Counts(impressions=5, clicks=1),
                                            7: Counts(impressions=3)})
    assert features == {"impressions_window": 18.0, "clicks_window": 3.0, "clicks_cat_4": 2.0}
    assert user_activity.user_features({}) == {}


def test_the_job_owns_its_names_and_no_others():
    assert user_activity.owned("clicks_cat_12") and user_activity.owned("impressions_window")
    assert not user_activity.owned("age") and not user_activity.owned("emb_3")
