"""Filters, pre-ranker, prediction fallback and the whole decision on a small index."""
from __future__ import annotations

import random
from datetime import datetime, timezone

import numpy as np
import pytest

from core.frequency import day_number
from core.reserves import ReserveBook, ReserveRule
from core.targeting import compile_targeting, request_terms
from serving.decision.campaigns import CampaignRecord, CampaignTable
from serving.decision.engine import DecisionEngine, EngineConfig, RequestContext
from serving.decision.filters import FREQUENCY_RECORD_UNAVAILABLE, FilterContext, apply_filters
from serving.decision.index import AdRecord, TargetingIndex
from serving.decision.prediction import PredictionTimeout
from serving.decision.prerank import RequestSignals, prerank

NOW = int(datetime(2027, 1, 19, 15, 30, tzinfo=timezone.utc).timestamp() * 1000)  # a Tuesday
US_FEED = compile_targeting({"location": ["US"], "placement": ["feed"]})


def ad(ad_id, campaign_id, bid_type="CPC", bid=1_000_000, ctr=0.02, score=None, targeting=US_FEED, quality=0):
    return AdRecord(ad_id=ad_id, campaign_id=campaign_id, version=1, bid_type=bid_type, bid_micros=bid,
                    quality_micros=quality, static_score=score if score is not None else bid * ctr,
                    targeting=targeting, creative_ref=f"cr-{ad_id}", landing_url=f"https://example.com/{ad_id}",
                    ctr_prior=ctr, embedding=[0.0] * 8)


def world(campaign_overrides=None, ads=None):
    campaigns = CampaignTable()
    for cid in range(1, 7):
        fields = {"campaign_id": cid, "advertiser_id": 100 + cid, "version": 1}
        fields.update((campaign_overrides or {}).get(cid, {}))
        campaigns.upsert(CampaignRecord(**fields))
    index = TargetingIndex.build(ads or [ad(10 + c, c, bid=1_000_000 + c * 1000) for c in range(1, 7)])
    return index, campaigns


def survivors(index, campaigns, context=None, seed=0):
    rows = index.retrieve(request_terms(location=["US/CA"], placement=["feed"]))
    filtered = apply_filters(rows, index, campaigns, context or FilterContext(now_ms=NOW),
                             np.random.default_rng(seed))
    return {int(index.campaign_id.data[r]) for r in filtered.rows}, filtered


def test_paused_ended_and_out_of_flight_campaigns_are_filtered():
    index, campaigns = world({1: {"status": "PAUSED"}, 2: {"status": "ENDED"},
                              3: {"flight_start": NOW + 1}, 4: {"flight_end": NOW}})
    assert survivors(index, campaigns)[0] == {5, 6}


def test_dayparting_is_read_in_the_advertisers_time_zone():
    # 15:30 UTC on Tuesday is 07:30 in Los Angeles and 16:30 in Berlin
    morning = [{"day_of_week": 2, "start_minute": 7 * 60, "end_minute": 8 * 60}]
    index, campaigns = world({1: {"timezone": "America/Los_Angeles", "dayparts": morning},
                              2: {"timezone": "Europe/Berlin", "dayparts": morning}})
    assert survivors(index, campaigns)[0] == {1, 3, 4, 5, 6}


def test_budget_state_open_metered_with_a_slice_only_and_never_stopped():
    index, campaigns = world()
    campaigns.set_budget(1, "METERED", 1.0, slice_held=True)
    campaigns.set_budget(2, "METERED", 1.0, slice_held=False)
    campaigns.set_budget(3, "STOPPED", 1.0)
    assert survivors(index, campaigns)[0] == {1, 4, 5, 6}


def test_the_pacing_coin_enters_with_probability_p_and_logs_p():
    index, campaigns = world()
    campaigns.set_budget(1, "OPEN", 0.0)
    campaigns.set_budget(2, "OPEN", 0.3)
    entered = 0
    for seed in range(400):
        kept, filtered = survivors(index, campaigns, seed=seed)
        assert 1 not in kept
        entered += 2 in kept
        assert all(p in (np.float32(0.3), 1.0) for p in filtered.participation)
    assert 90 <= entered <= 150  # ~120 of 400


def test_frequency_caps_missing_record_caps_nothing_unavailable_excludes_capped():
    index, campaigns = world({1: {"cap_per_day": 3}, 2: {"cap_per_week": 10}})
    today = day_number(NOW)
    record = {(1, today): 3, (2, today): 4, (2, today - 3): 6}
    assert survivors(index, campaigns, FilterContext(NOW, record))[0] == {3, 4, 5, 6}
    assert survivors(index, campaigns, FilterContext(NOW, {(1, today): 2}))[0] == {1, 2, 3, 4, 5, 6}
    assert survivors(index, campaigns, FilterContext(NOW, None))[0] == {1, 2, 3, 4, 5, 6}
    assert survivors(index, campaigns, FilterContext(NOW, FREQUENCY_RECORD_UNAVAILABLE))[0] == {3, 4, 5, 6}


def test_advertisers_the_user_hid_are_filtered():
    index, campaigns = world()
    assert survivors(index, campaigns, FilterContext(NOW, hidden_advertisers=frozenset({101, 102})))[0] == \
        {3, 4, 5, 6}


def test_prerank_keeps_a_high_bid_with_a_modest_click_rate():
    ads = [ad(1, 1, bid=10_000_000, ctr=0.004), ad(2, 2, bid=500_000, ctr=0.05), ad(3, 3, bid=200_000, ctr=0.05)]
    index, _ = world(ads=ads)
    rows = index.retrieve(request_terms(location=["US"], placement=["feed"]))
    kept = prerank(index, rows, np.ones(len(rows)), RequestSignals(user_embedding=np.zeros(8)), keep=2)
    assert {int(index.ad_id.data[r]) for r in kept.rows} == {1, 2}  # 40,000 and 25,000 per impression


class SlowModel:
    def predict(self, request, deadline, clock):
        raise PredictionTimeout("model did not answer")


def decide(engine, slots=(1, 2)):
    request = RequestContext("req-1", "feed", list(slots), request_terms(location=["US/NY"], placement=["feed"]),
                             FilterContext(NOW))
    return engine.decide(request, clock=lambda: 0.0, deadline=0.1, rng=random.Random(3),
                         np_rng=np.random.default_rng(3))


def test_a_decision_fills_slots_with_signed_prices_and_explanations():
    index, campaigns = world()
    decision = decide(DecisionEngine(index, campaigns, config=EngineConfig(exploration_share=0)))
    assert [w.campaign_id for w in decision.winners] == [6, 5]
    first = decision.winners[0]
    assert first.creative_ref == "cr-16" and first.landing_url == "https://example.com/16"
    assert first.price_micros <= 1_006_000 and first.billing == "cpc"
    assert first.explanation["runner_up_ad_id"] == 15
    assert decision.scored_by_fallback is False and decision.model_version == "prior-baseline-1"
    assert decision.funnel == {"retrieved": 6, "filtered": 6, "preranked": 6, "winners": 2}


def test_a_cpa_campaign_bids_at_the_budget_jobs_multiplier():
    index, campaigns = world(ads=[ad(11, 1, "CPA", bid=2_000_000), ad(12, 2, "CPA", bid=1_500_000)])
    engine = DecisionEngine(index, campaigns, config=EngineConfig(exploration_share=0))
    assert decide(engine, slots=(1,)).winners[0].campaign_id == 1
    campaigns.set_budget(1, "OPEN", 1.0, bid_multiplier=0.45)  # the controller holds campaign 1 back
    winner = decide(engine, slots=(1,)).winners[0]
    assert winner.campaign_id == 2
    assert winner.explanation["bid_micros"] == 1_500_000
    assert winner.explanation["runner_up_bid_micros"] == 900_000  # 2,000,000 x 0.45, rounded down


def test_a_model_timeout_falls_back_to_the_prerankers_scores_and_says_so():
    index, campaigns = world()
    decision = decide(DecisionEngine(index, campaigns, predictor=SlowModel(),
                                     config=EngineConfig(exploration_share=0)))
    assert decision.scored_by_fallback is True
    assert decision.winners and all(w.explanation["scored_by_fallback"] for w in decision.winners)


def test_with_no_scores_at_all_the_slots_stay_empty(monkeypatch):
    index, campaigns = world()
    import serving.decision.engine as engine_module

    def broken(*args, **kwargs):
        raise RuntimeError("pre-ranker unavailable")

    monkeypatch.setattr(engine_module, "prerank", broken)
    decision = decide(DecisionEngine(index, campaigns, predictor=SlowModel()))
    assert decision.winners == [] and decision.scored_by_fallback is True


@pytest.mark.parametrize("rule, filled", [
    (ReserveRule("feed", "*", reserve_micros=0), 2),
    (ReserveRule("feed", "*", reserve_micros=10**9), 0),
    (ReserveRule("story", "*", reserve_micros=10**9), 2),  # another placement's rule does not apply
    (ReserveRule("*", "*", quality_floor_micros=1), 0),  # the default quality (0) is under the floor
    (ReserveRule("*", "*", quality_floor_micros=1, default_quality_micros=5), 2),
])
def test_the_reserve_rules_of_the_placement_apply(rule, filled):
    index, campaigns = world()
    book = ReserveBook([rule])
    decision = decide(DecisionEngine(index, campaigns, config=EngineConfig(exploration_share=0), reserves=book))
    assert len(decision.winners) == filled
    assert decision.terms == book.terms("feed", None)
    assert all(w.explanation["quality_micros"] == decision.terms.default_quality_micros for w in decision.winners)


def test_a_campaign_change_applies_once_and_an_older_record_is_ignored():
    index, campaigns = world()
    assert campaigns.upsert(CampaignRecord(campaign_id=1, advertiser_id=101, version=2, status="PAUSED"))
    assert not campaigns.upsert(CampaignRecord(campaign_id=1, advertiser_id=101, version=1, status="ACTIVE"))
    assert 1 not in survivors(index, campaigns)[0]
    assert campaigns.upsert(CampaignRecord(campaign_id=1, advertiser_id=101, version=3, status="ACTIVE"))
    assert 1 in survivors(index, campaigns)[0]


def test_the_exploration_slice_samples_the_click_rates_of_ads_the_snapshot_is_unsure_of():
    index, campaigns = world()  # six ads within 1 % of each other: all near ties
    engine = DecisionEngine(index, campaigns, config=EngineConfig(exploration_share=1.0))
    # no snapshot yet: every ad holds the weak prior, so Thompson sampling ranks the page and logs its draws' share
    probabilities = {w.explanation["exploration_probability"] for seed in range(10)
                     for w in decide_with(engine, seed).winners}
    # shares of 100 draws, or the floor 1 / 200: never the shuffle's 1 / 6
    assert probabilities and all(0 < p <= 1 and abs(p * 200 - round(p * 200)) < 1e-9 for p in probabilities)
    # the snapshot knows every ad well: nothing to sample, the slice shuffles the six near ties (1 / 6 each)
    ids = index.ad_id.data[:6]
    assert index.apply_learned(ids, np.full(6, 0.02), np.full(6, 200.0), np.full(6, 9_800.0), np.zeros(6)) == 6
    for seed in range(10):
        decision = decide_with(engine, seed)
        assert decision.explored
        assert [w.explanation["exploration_probability"] for w in decision.winners] == [1 / 6, 1 / 6]


def test_the_engine_reads_no_posterior_outside_the_exploration_slice(monkeypatch):
    index, campaigns = world()
    engine = DecisionEngine(index, campaigns, config=EngineConfig(exploration_share=0))

    def unwanted(rows):
        raise AssertionError("posterior read on a request outside the exploration slice")

    monkeypatch.setattr(engine, "_posterior", unwanted)
    assert [w.campaign_id for w in decide(engine).winners] == [6, 5]


def decide_with(engine, seed, slots=(1, 2)):
    request = RequestContext(f"req-{seed}", "feed", list(slots),
                             request_terms(location=["US/NY"], placement=["feed"]), FilterContext(NOW))
    return engine.decide(request, clock=lambda: 0.0, deadline=0.1, rng=random.Random(seed),
                         np_rng=np.random.default_rng(seed))
