"""The pre-ranker's recall check (serving.decision.recall): it judges the candidates the request saw, also
when the index takes an update between the response and the check (the ad server checks in a worker
thread)."""
from __future__ import annotations

import random
from dataclasses import replace

import numpy as np

from core.targeting import compile_targeting, request_terms
from serving.decision.campaigns import CampaignRecord, CampaignTable
from serving.decision.engine import DecisionEngine, EngineConfig, RequestContext
from serving.decision.filters import FilterContext
from serving.decision.index import AdRecord, TargetingIndex
from serving.decision.prediction import PriorPredictor
from serving.decision.recall import check

FEED = compile_targeting({"placement": ["feed"]})


def _ad(ad_id: int, bid: int, version: int = 1) -> AdRecord:
    return AdRecord(ad_id=ad_id, campaign_id=ad_id, version=version, bid_type="CPC", bid_micros=bid,
                    quality_micros=0, static_score=bid * 0.02, targeting=FEED, creative_ref=f"cr-{ad_id}",
                    landing_url=f"https://example.com/{ad_id}", ctr_prior=0.02, embedding=[0.0] * 8)


def _recall_sample(keep: int):
    ads = [_ad(1_000 + i, 1_000_000 + 1_000 * i) for i in range(60)]
    campaigns = CampaignTable()
    for a in ads:
        campaigns.upsert(CampaignRecord(campaign_id=a.campaign_id, advertiser_id=a.campaign_id, version=1))
    index = TargetingIndex.build(ads)
    engine = DecisionEngine(index, campaigns, PriorPredictor(),
                            EngineConfig(keep=keep, exploration_share=0.0, recall_sample_share=1.0))
    decision = engine.decide(RequestContext("r1", "feed", [1], request_terms(placement=["feed"]),
                                            FilterContext(now_ms=0)),
                             clock=lambda: 0.0, deadline=1.0, rng=random.Random(1), np_rng=np.random.default_rng(1))
    assert decision.recall_sample is not None
    return index, engine, decision.recall_sample


def test_the_check_finds_the_full_set_winner_among_the_kept_rows():
    index, engine, sample = _recall_sample(keep=10)
    assert len(sample.filtered_rows) == 60 and len(sample.kept_rows) == 10
    assert check(index, sample, engine.predictor) is True  # the highest bid is kept (equal priors)


def test_an_update_after_the_response_does_not_change_what_the_check_judges():
    index, engine, sample = _recall_sample(keep=10)
    # The cheapest ad, not kept, now bids 100x: read from the index it would be the full-set winner
    cheapest = int(index.ad_id.data[sample.filtered_rows].min())
    assert index.upsert(replace(_ad(cheapest, 100_000_000, version=2)))
    assert check(index, sample, engine.predictor) is True
    # a sample without its captured columns reads the index as it is now, and misses
    assert check(index, replace(sample, ads=None), engine.predictor) is False


def test_the_checks_model_calls_carry_the_request_id_so_a_canary_scores_them_on_the_requests_arm():
    index, engine, sample = _recall_sample(keep=10)
    asked = []

    class Recording(PriorPredictor):
        def predict(self, request, deadline, clock):
            asked.append(request.request_id)
            return super().predict(request, deadline, clock)

    check(index, sample, Recording())
    assert sample.request_id == "r1" and asked and set(asked) == {"r1"}
