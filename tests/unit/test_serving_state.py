"""The ad server's state: duplicated and reordered serving records leave it exactly as the newest versions."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import topics
from serving.adserver.state import ServingState


def ad(ad_id: int, version: int, bid: int, removed: bool = False) -> dict:
    return {"ad_id": ad_id, "campaign_id": 1, "advertiser_id": 1, "version": version, "event_time": 1_000,
            "removed": removed, "bid_type": "CPM", "bid_micros": bid, "quality_prior": 0.0, "creative_ref": "c",
            "landing_url": "https://x.example/", "static_score": 1.0,
            "targeting": [{"attribute": "placement", "values": [f"p{version % 3}"], "excluded": False}]}


def campaign(version: int, status: str) -> dict:
    return {"campaign_id": 1, "advertiser_id": 1, "version": version, "event_time": 1_000, "status": status,
            "bid_type": "CPM", "daily_budget_micros": 1, "currency": "USD", "timezone": "UTC", "flight_start": None,
            "flight_end": None, "dayparts": [], "cap_per_day": None, "cap_per_week": None, "cpa_target_micros": None}


def snapshot(state: ServingState) -> tuple:
    index = state.index
    ads = sorted((int(index.ad_id.data[r]), int(index.version.data[r]), int(index.bid_micros.data[r]))
                 for r in range(index.size) if r in index.alive)
    row = state.campaigns.row_of(1)
    return ads, (int(state.campaigns.version.data[row]), int(state.campaigns.status.data[row])) if row is not None \
        else None


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_duplicates_and_reordering_leave_the_state_of_the_newest_versions(seed):
    rng = random.Random(seed)
    records = [(topics.SERVING_CAMPAIGNS, campaign(v, rng.choice(["ACTIVE", "PAUSED"]))) for v in range(1, 5)]
    for ad_id in range(1, 6):
        for v in range(1, rng.randint(2, 5)):
            records.append((topics.SERVING_ADS, ad(ad_id, v, rng.randint(1, 10**6), removed=rng.random() < 0.2)))
    in_order = ServingState("s")
    for topic, record in records:
        in_order.apply(topic, record, 2_000)
    shuffled = records + rng.sample(records, len(records) // 2)  # duplicates
    rng.shuffle(shuffled)
    messy = ServingState("s")
    for topic, record in shuffled:
        messy.apply(topic, record, 2_000)
    assert snapshot(messy) == snapshot(in_order)
    assert messy.commit_lag_s == 1.0


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_bulk_snapshot_load_serves_exactly_what_applying_the_records_one_by_one_does(seed):
    from core.targeting import request_terms

    rng = random.Random(seed)
    values = {"location": ["US", "US/CA", "DE"], "device": ["ios", "android"], "interest": ["a", "b", "c"],
              "audience": ["x", "y"]}
    records = [(topics.SERVING_CAMPAIGNS, campaign(1, "ACTIVE"))]
    for ad_id in range(1, 40):
        r = ad(ad_id, rng.randint(1, 3), rng.randint(1, 10**6), removed=rng.random() < 0.15)
        r["static_score"] = rng.random()
        r["creative_ref"] = f"creative-{ad_id}"
        r["targeting"] = [{"attribute": a, "values": rng.sample(vs, rng.randint(1, len(vs))),
                           "excluded": a == "audience" and rng.random() < 0.5}
                          for a, vs in values.items() if rng.random() < 0.6]
        records.append((topics.SERVING_ADS, r))
    one_by_one, bulk = ServingState("a"), ServingState("b")
    for topic, record in records:
        one_by_one.apply(topic, record, 2_000)
    assert bulk.load_snapshot(iter(records), 2_000) == len(records)
    for _ in range(20):
        terms = request_terms(location=[rng.choice(["US/CA/SF", "DE", "FR"])], device=rng.choice(["ios", "android"]),
                              interest=rng.sample(["a", "b", "c", "d"], 2), audience=rng.sample(["x", "y", "z"], 1))
        got = [{(int(s.index.ad_id.data[row]), s.index.creative(row)[0]) for row in s.index.retrieve(terms)}
               for s in (one_by_one, bulk)]
        assert got[0] == got[1]


def _budget_state(at_ms: int, state: str = "OPEN", p: float = 0.5) -> dict:
    return {"campaign_id": 1, "event_time": at_ms, "budget_day": "2026-01-01", "state": state,
            "participation_probability": p, "bid_multiplier": 1.0, "daily_budget_micros": 1, "billed_spend_micros": 0,
            "committed_spend_micros": 0, "remaining_micros": 1, "target_spend_micros": 0, "delivery_limit": None}


def _budget_code(state: ServingState) -> int:
    return int(state.campaigns.budget_state.data[state.campaigns.row_of(1)])


def test_sixty_seconds_without_the_budget_job_turns_open_campaigns_metered_until_it_speaks_again():
    from serving.decision.campaigns import METERED, OPEN

    state = ServingState("s1")
    state.apply(topics.SERVING_CAMPAIGNS, campaign(1, "ACTIVE"), 0)
    assert not state.check_budget_silence(10 * 60_000)  # never heard from it: nothing to miss
    state.apply(topics.BUDGET_STATE, _budget_state(100_000), 100_000)
    assert _budget_code(state) == OPEN
    assert not state.check_budget_silence(160_000)
    assert state.check_budget_silence(160_001)
    assert _budget_code(state) == METERED
    state.apply(topics.BUDGET_STATE, _budget_state(170_000), 170_500)
    assert _budget_code(state) == OPEN and not state.budget_silent


def test_a_cpa_campaigns_bid_multiplier_reaches_the_campaign_table_and_survives_a_silence():
    state = ServingState("s1")
    state.apply(topics.SERVING_CAMPAIGNS, campaign(1, "ACTIVE"), 0)
    row = state.campaigns.row_of(1)
    assert state.campaigns.bid_multiplier.data[row] == 1.0
    state.apply(topics.BUDGET_STATE, dict(_budget_state(100_000), bid_multiplier=0.4), 100_000)
    assert state.campaigns.bid_multiplier.data[row] == pytest.approx(0.4)
    assert state.check_budget_silence(160_001)  # re-applied as metered: the multiplier stays
    assert state.campaigns.bid_multiplier.data[row] == pytest.approx(0.4)


def test_spend_reports_carry_eligibility_prices_and_slice_requests():
    from core.spend import SpendAccumulator

    spend = SpendAccumulator("s1")
    spend.add(7, 40_000, 1_000, price_micros=2_000_000)
    spend.eligible_many([7, 8], 1_000)
    spend.eligible_many([7], 1_200)
    spend.want_slice(8, 1_500_000, 1_300)
    reports = {r["campaign_id"]: r for r in spend.cut(2_000).items()}
    assert reports[7]["eligible_requests"] == 2 and reports[7]["max_price_micros"] == 2_000_000
    assert not reports[7]["wants_slice"]
    assert reports[8]["wants_slice"] and reports[8]["max_price_micros"] == 1_500_000
    assert reports[8]["expected_spend_micros"] == 0
    assert spend.cut(3_000) is None


def test_a_draining_servers_last_cut_hands_back_every_campaign_it_holds_a_slice_of_spend_or_not():
    from core.spend import SpendAccumulator, batch_records, spend_items

    spend = SpendAccumulator("s1")
    spend.add(7, 40_000, 1_000, price_micros=2_000_000)
    leases = {7: "7-2026-01-05-3", 9: "9-2026-01-05-1"}  # 9 spent nothing in this last second
    spend.release(leases, 1_500)
    cut = spend.cut(2_000, leases)
    items = {r["campaign_id"]: r for _, record in batch_records(cut, 3) for r in spend_items(record)}
    assert set(items) == {7, 9} and all(items[c]["released"] and items[c]["lease_id"] == leases[c] for c in items)
    assert (items[7]["expected_spend_micros"], items[9]["expected_spend_micros"]) == (40_000, 0)
    assert spend.cut(3_000) is None  # handed back once


def test_a_campaign_the_live_budget_job_has_not_spoken_of_spends_only_from_slices_until_its_first_state():
    from serving.decision.campaigns import METERED, OPEN

    state = ServingState("s1")
    state.apply(topics.SERVING_CAMPAIGNS, campaign(1, "ACTIVE"), 0)
    state.apply(topics.SERVING_CAMPAIGNS, dict(campaign(1, "ACTIVE"), campaign_id=2), 0)
    assert _budget_code(state) == OPEN  # a platform whose budget job never spoke serves open
    state.apply(topics.BUDGET_STATE, dict(_budget_state(100_000), campaign_id=2), 100_000)  # the job is live
    assert _budget_code(state) == METERED  # campaign 1 has no state of its own yet
    row = state.campaigns.row_of(1)
    assert not state.campaigns.slice_held.data[row]
    state.apply(topics.BUDGET_LEASES, {"lease_id": "1-x-1", "server_id": "s1", "campaign_id": 1, "event_time": 100_500,
                                  "amount_micros": 10_000, "expires_at": 130_500}, 100_500)
    assert state.campaigns.slice_held.data[row]
    state.charge(1, 10_000, 101_000)  # spent from the slice, which runs out
    assert not state.campaigns.slice_held.data[row]
    # launched while the job is live
    state.apply(topics.SERVING_CAMPAIGNS, dict(campaign(1, "ACTIVE"), campaign_id=3), 102_000)
    assert int(state.campaigns.budget_state.data[state.campaigns.row_of(3)]) == METERED
    state.apply(topics.BUDGET_STATE, _budget_state(110_000), 110_000)
    assert _budget_code(state) == OPEN


def test_budget_states_replayed_from_history_do_not_arm_the_silence_rule():
    state = ServingState("s1")
    state.apply(topics.SERVING_CAMPAIGNS, campaign(1, "ACTIVE"), 0)
    state.apply(topics.BUDGET_STATE, _budget_state(100_000), 900_000)  # read at boot, long after it was decided
    assert not state.check_budget_silence(1_000_000)


def _wide(ad_id: int, terms: int) -> dict:
    record = ad(ad_id, 1, 1_000)
    record["targeting"] = [{"attribute": "interest", "values": [f"i{n}" for n in range(terms)], "excluded": False}]
    return record


def test_an_ad_wider_than_an_index_row_is_skipped_and_the_rest_of_its_batch_still_applies():
    from serving.decision.index import MAX_TERMS_PER_ROW

    state = ServingState("s")
    batch = [(topics.SERVING_CAMPAIGNS, campaign(1, "ACTIVE")), (topics.SERVING_ADS, _wide(1, MAX_TERMS_PER_ROW + 1)),
             (topics.SERVING_ADS, ad(2, 1, 500)), (topics.BUDGET_STATE, _budget_state(1_000, "METERED"))]
    for topic, record in batch:
        state.apply(topic, record, 2_000)
    assert state.refused_ads == 1
    assert snapshot(state)[0] == [(2, 1, 500)]
    assert state.budget[1][0] == "METERED"


def test_a_snapshot_holding_an_ad_wider_than_an_index_row_still_boots_without_it():
    from serving.decision.index import MAX_TERMS_PER_ROW

    state = ServingState("s")
    records = [(topics.SERVING_CAMPAIGNS, campaign(1, "ACTIVE")), (topics.SERVING_ADS, _wide(1, MAX_TERMS_PER_ROW + 1)),
               (topics.SERVING_ADS, ad(2, 1, 500))]
    assert state.load_snapshot(iter(records), 2_000) == 3
    assert state.refused_ads == 1
    assert snapshot(state)[0] == [(2, 1, 500)]
