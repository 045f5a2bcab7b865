"""The auction: the design's worked examples as literals, and its invariants as properties."""
from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.auction import (CPA, CPC, CPM, AuctionRules, Candidate, cpa_bids, exact_bid_value, exact_total,
                          run_auction)
from core.errors import InvalidArgument
from core.exploration import CtrPosterior


def cpc(ad, campaign, bid, pctr, quality=0, slots=1, **kw):
    return Candidate(ad, campaign, "cpc", bid, [pctr] * slots, quality_micros=quality, **kw)


def test_the_designs_example_a_pays_one_forty_per_click():
    a = cpc("A", "a", 2_000_000, 0.015, quality=2_000)
    b = cpc("B", "b", 3_000_000, 0.008, quality=-1_000)
    result = run_auction([a, b], [1], exploration_share=0)
    [winner] = result.winners
    assert winner.candidate.ad_id == "A"
    assert winner.total_value_micros == 32_000
    assert winner.explanation["runner_up_total_value_micros"] == 23_000
    assert winner.price_micros == 1_400_000


def test_a_two_dollar_click_bid_at_one_and_a_half_percent_beats_a_twenty_dollar_cpm():
    click = cpc("click", "c1", 2_000_000, 0.015)
    cpm = Candidate("cpm", "c2", "cpm", 20_000_000, [0.01])
    assert exact_total(click, 0) == 30_000  # $0.030 per impression
    assert exact_total(cpm, 0) == 20_000  # $0.020 per impression
    assert run_auction([cpm, click], [1], exploration_share=0).winners[0].candidate.ad_id == "click"


def test_cpa_value_is_target_times_pctr_times_pcvr():
    cpa = Candidate("x", "c", "cpa", 40_000_000, [0.02], pcvr=0.05)
    assert exact_total(cpa, 0) == 40_000


def test_a_lone_winner_pays_the_reserve():
    a = cpc("A", "a", 2_000_000, 0.015)
    [winner] = run_auction([a], [1], rules=AuctionRules(reserve_micros=15_000), exploration_share=0).winners
    assert winner.price_micros == 1_000_000  # 15,000 / 0.015
    assert winner.explanation["price_set_by"] == "reserve"


def test_a_lone_winner_with_a_positive_quality_still_pays_the_whole_reserve():
    a = cpc("A", "a", 2_000_000, 0.015, quality=5_000)  # total 35,000
    [winner] = run_auction([a], [1], rules=AuctionRules(reserve_micros=15_000), exploration_share=0).winners
    assert winner.price_micros == 1_000_000  # 15,000 / 0.015, not (15,000 - 5,000) / 0.015
    assert winner.explanation["price_set_by"] == "reserve"


def test_quality_cannot_take_a_price_under_the_reserve_when_a_runner_up_sets_it():
    a = cpc("A", "a", 2_000_000, 0.015, quality=2_000)  # bid value 30,000, total 32,000
    b = cpc("B", "b", 3_000_000, 0.008, quality=-1_000)  # total 23,000
    [winner] = run_auction([a, b], [1], rules=AuctionRules(reserve_micros=25_000), exploration_share=0).winners
    # (23,000 - 2,000) / 0.015 = $1.40 would pay 21,000 an impression, under the reserve: it pays 25,000
    assert winner.price_micros == 1_666_667 and winner.explanation["price_set_by"] == "reserve"


def test_the_reserve_floors_each_slots_price_at_that_slots_click_rate():
    a = Candidate("A", "a", "cpc", 2_000_000, [0.02, 0.01])
    b = Candidate("B", "b", "cpc", 1_000_000, [0.02, 0.01])
    winners = run_auction([a, b], [1, 2], rules=AuctionRules(reserve_micros=5_000), exploration_share=0).winners
    assert [(w.candidate.ad_id, w.price_micros) for w in winners] == [("A", 1_000_000), ("B", 500_000)]
    for w in winners:  # what each pays per impression at its own slot reaches the reserve
        assert exact_bid_value(replace(w.candidate, bid_micros=w.price_micros), w.slot - 1) >= 5_000


def test_a_big_quality_term_cannot_buy_a_slot_whose_reserve_the_bid_does_not_pay():
    # an advertiser claiming its own quality term (the platform owns it): a $0.01 click bid with +$1 of "quality"
    cheat = cpc("CHEAT", "a", 10_000, 0.01, quality=1_000_000)  # bid value 100, total 1,000,100
    honest = cpc("HONEST", "b", 5_000_000, 0.02)  # bid value 100,000
    [winner] = run_auction([cheat, honest], [1], rules=AuctionRules(reserve_micros=1_000), exploration_share=0).winners
    assert winner.candidate.ad_id == "HONEST" and winner.price_micros == 50_000  # 1,000 / 0.02


def test_an_ad_under_the_quality_floor_cannot_win_at_any_price():
    disliked = cpc("D", "a", 50_000_000, 0.05, quality=-600)  # total 2,499,400
    fine = cpc("F", "b", 1_000_000, 0.01)  # total 10,000
    floor = AuctionRules(quality_floor_micros=-500)
    [winner] = run_auction([disliked, fine], [1], rules=floor, exploration_share=0).winners
    assert winner.candidate.ad_id == "F" and winner.explanation["quality_floor_micros"] == -500
    assert run_auction([disliked], [1], rules=floor, exploration_share=0).winners == []


def test_a_conversion_bid_is_charged_per_click_at_its_price_times_pcvr():
    a = Candidate("A", "a", "cpa", 40_000_000, [0.02], pcvr=0.05)  # total 40,000
    b = Candidate("B", "b", "cpa", 20_000_000, [0.02], pcvr=0.05)  # total 20,000
    [winner] = run_auction([a, b], [1], exploration_share=0).winners
    assert winner.price_micros == 20_000_000 and winner.billing == "cpa"
    assert winner.charge_per_event_micros == 1_000_000  # $20 a conversion x 5 % = $1 a click
    assert winner.expected_cost_micros() == 20_000  # the click's charge x pCTR


def test_a_candidate_under_the_reserve_is_dropped_and_the_slot_may_stay_empty():
    a = cpc("A", "a", 1_000_000, 0.01)  # total 10,000
    assert run_auction([a], [1], rules=AuctionRules(reserve_micros=10_001), exploration_share=0).winners == []


def test_a_campaign_wins_at_most_once_per_page():
    ads = [cpc("A1", "a", 3_000_000, 0.02, slots=3), cpc("A2", "a", 2_900_000, 0.02, slots=3),
           cpc("B", "b", 1_000_000, 0.02, slots=3)]
    result = run_auction(ads, [1, 2, 3], exploration_share=0)
    assert [w.candidate.ad_id for w in result.winners] == ["A1", "B"]


def test_competitive_exclusion_keeps_rival_categories_off_one_page():
    ads = [cpc("car1", "a", 3_000_000, 0.02, slots=2, exclusion_category=7),
           cpc("car2", "b", 2_900_000, 0.02, slots=2, exclusion_category=7),
           cpc("shoes", "c", 1_000_000, 0.02, slots=2)]
    assert [w.candidate.ad_id for w in run_auction(ads, [1, 2], exploration_share=0).winners] == ["car1", "shoes"]


def test_each_slot_ranks_with_its_own_position_pctr():
    # B clicks far better in the second position than A does
    a = Candidate("A", "a", "cpc", 1_000_000, [0.030, 0.010])
    b = Candidate("B", "b", "cpc", 1_000_000, [0.020, 0.018])
    c = Candidate("C", "c", "cpc", 1_000_000, [0.025, 0.005])
    result = run_auction([a, b, c], [1, 4], exploration_share=0)
    assert [(w.slot, w.position, w.candidate.ad_id) for w in result.winners] == [(1, 1, "A"), (2, 4, "B")]


def test_every_result_explains_its_price():
    a = cpc("A", "a", 2_000_000, 0.015, quality=2_000, participation_probability=0.42)
    b = cpc("B", "b", 3_000_000, 0.008, quality=-1_000)
    result = run_auction([a, b] + [cpc(f"L{i}", f"l{i}", 10_000, 0.001) for i in range(30)], [1],
                         rules=AuctionRules(reserve_micros=100), exploration_share=0, scores_from_fallback=True)
    e = result.winners[0].explanation
    assert (e["runner_up_total_value_micros"], e["pctr"], e["runner_up_pctr"]) == (23_000, 0.015, 0.008)
    assert (e["quality_micros"], e["runner_up_quality_micros"], e["reserve_micros"]) == (2_000, -1_000, 100)
    assert e["participation_probability"] == 0.42 and e["scored_by_fallback"] is True
    assert len(result.sampled_losers) == 20


def test_exploration_shuffles_near_ties_with_logged_propensities():
    ads = [cpc("A", "a", 1_000_000, 0.0200, slots=2), cpc("B", "b", 1_000_000, 0.0199, slots=2),
           cpc("C", "c", 1_000_000, 0.0100, slots=2)]
    seen = set()
    for seed in range(40):
        result = run_auction(ads, [1, 2], rng=random.Random(seed), exploration_share=1.0)
        assert result.explored
        seen.add(result.winners[0].candidate.ad_id)
        assert all(w.explanation["exploration_probability"] == 0.5 for w in result.winners[:2])
        assert all(w.price_micros <= w.candidate.bid_micros for w in result.winners)
    assert seen == {"A", "B"}  # C is outside the 5 % margin


candidate_strategy = st.builds(
    lambda ad, campaign, bid_type, bid, pctrs, pcvr, quality: Candidate(
        ad, campaign, bid_type, bid, pctrs, pcvr=pcvr, quality_micros=quality),
    ad=st.integers(0, 10**6), campaign=st.integers(0, 8), bid_type=st.sampled_from(["cpm", "cpc", "cpa"]),
    bid=st.integers(1, 50_000_000),
    pctrs=st.lists(st.floats(0.0005, 0.2).map(lambda x: round(x, 5)), min_size=3, max_size=3),
    pcvr=st.floats(0.001, 0.3).map(lambda x: round(x, 4)), quality=st.integers(-5_000, 5_000))


@settings(max_examples=300, deadline=None)
@given(candidates=st.lists(candidate_strategy, min_size=1, max_size=12, unique_by=lambda c: c.ad_id),
       reserve=st.integers(0, 20_000), slots=st.integers(1, 3),
       quality_floor=st.one_of(st.none(), st.integers(-5_000, 5_000)), explore=st.booleans())
def test_auction_invariants(candidates, reserve, slots, quality_floor, explore):
    result = run_auction(candidates, list(range(1, slots + 1)), rules=AuctionRules(reserve, quality_floor),
                         exploration_share=1.0 if explore else 0.0)
    campaigns = [w.candidate.campaign_id for w in result.winners]
    assert len(campaigns) == len(set(campaigns))  # a campaign at most once
    for w in result.winners:
        c, slot = w.candidate, w.slot - 1
        assert 0 <= w.price_micros <= c.bid_micros  # price <= bid
        assert exact_total(c, slot) >= reserve  # only candidates clearing the reserve win
        assert quality_floor is None or c.quality_micros >= quality_floor  # none under the quality floor
        # no price is ever below the reserve for the winner's slot: what it pays per impression there, bid x
        # action rate at its price, reaches the reserve, whatever its quality
        assert exact_bid_value(replace(c, bid_micros=w.price_micros), slot) >= reserve
    # winners in total-value order when every slot has the same pCTR ordering
    values = [exact_total(w.candidate, w.slot - 1) for w in result.winners]
    if not explore and all(len(set(c.pctr)) == 1 for c in candidates):
        assert values == sorted(values, reverse=True)


@settings(max_examples=200, deadline=None)
@given(candidates=st.lists(candidate_strategy, min_size=2, max_size=10, unique_by=lambda c: c.ad_id),
       pick=st.integers(0, 9), raise_by=st.integers(1, 20_000_000), slots=st.integers(1, 3))
def test_raising_a_bid_never_lowers_a_position(candidates, pick, raise_by, slots):
    target = candidates[pick % len(candidates)]
    positions = list(range(1, slots + 1))

    def slot_of(cands):
        for w in run_auction(cands, positions, exploration_share=0).winners:
            if w.candidate.ad_id == target.ad_id:
                return w.slot
        return slots + 1  # not shown

    before = slot_of(candidates)
    raised = [replace(c, bid_micros=c.bid_micros + raise_by) if c is target else c for c in candidates]
    assert slot_of(raised) <= before


def test_a_slot_filled_after_the_shuffle_is_logged_as_greedy():
    ads = [cpc("A", "a", 1_000_000, 0.0200, slots=3), cpc("B", "b", 1_000_000, 0.0199, slots=3),
           cpc("C", "c", 1_000_000, 0.0100, slots=3)]
    result = run_auction(ads, [1, 2, 3], rng=random.Random(1), exploration_share=1.0)
    assert [w.explanation["exploration_probability"] for w in result.winners] == [0.5, 0.5, 1.0]
    assert result.winners[2].candidate.ad_id == "C"


def test_only_cpa_bids_run_at_the_multiplier_rounded_down_and_never_above_the_target():
    bids = np.array([1_000_001, 1_000_001, 1_000_001, 1_000_001], dtype=np.int64)
    codes = np.array([CPM, CPC, CPA, CPA])
    got = cpa_bids(bids, codes, np.array([0.5, 0.5, 0.5, 1.7], dtype=np.float32))
    assert got.tolist() == [1_000_001, 1_000_001, 500_000, 1_000_001]
    assert got.dtype == np.int64


# ------------------------------------------------------------------ Thompson sampling in the exploration slice
def new_and_established():
    """An established ad at 2.0 % and a new one just below it (model 1.9 %, 20 pseudo-impressions), then a
    certain ad far below: the new ad's draws put it on top in some explored auctions."""
    ads = [cpc("OLD", "a", 1_000_000, 0.020, slots=2), cpc("NEW", "b", 1_000_000, 0.019, slots=2),
           cpc("LOW", "c", 1_000_000, 0.010, slots=2)]
    posterior = CtrPosterior(np.array([200.0, 0.4, 50.0]), np.array([9_800.0, 19.6, 4_950.0]))
    return ads, posterior


def test_a_new_ad_near_the_top_wins_explored_auctions_as_often_as_its_logged_probability_says():
    ads, posterior = new_and_established()
    wins, logged = {"OLD": 0, "NEW": 0}, {"OLD": [], "NEW": []}
    for seed in range(400):
        result = run_auction(ads, [1, 2], rng=random.Random(seed), exploration_share=1.0, ctr_posterior=posterior)
        assert result.explored and result.exploration_policy == "thompson"
        first = result.winners[0]
        wins[first.candidate.ad_id] += 1
        logged[first.candidate.ad_id].append(first.explanation["exploration_probability"])
    assert 40 <= wins["NEW"] <= 360  # it wins some auctions, not all
    for ad_id, count in wins.items():  # each logged probability estimates the ad's share of first slots
        assert np.mean(logged[ad_id]) == pytest.approx(count / 400, abs=0.08)


def test_thompson_sampling_decides_the_order_but_the_price_follows_the_model_values_below():
    ads, posterior = new_and_established()
    for seed in range(60):
        result = run_auction(ads, [1, 2], rng=random.Random(seed), exploration_share=1.0, ctr_posterior=posterior)
        if result.winners[0].candidate.ad_id == "NEW":
            break
    else:
        pytest.fail("the new ad never took the first slot")
    new, second = result.winners
    # NEW (model total 19,000) above OLD (20,000): OLD is above it in model value, so LOW (10,000) prices it
    assert new.explanation["runner_up_ad_id"] == "LOW" and new.price_micros == 526_316  # 10,000 / 0.019, up
    assert second.candidate.ad_id == "OLD" and second.price_micros == 500_000  # LOW's 10,000 / 0.020
    assert 0 < new.explanation["exploration_probability"] < 1


def test_a_page_of_certain_ads_is_explored_by_the_shuffle_as_without_posteriors():
    ads, _ = new_and_established()
    certain = CtrPosterior(np.array([200.0, 60.0, 50.0]), np.array([9_800.0, 2_940.0, 4_950.0]))
    # all three certain: no draw moves anything, the slice shuffles the near ties as without posteriors
    for seed in range(20):
        with_certain = run_auction(ads, [1, 2], rng=random.Random(seed), exploration_share=1.0,
                                   ctr_posterior=certain)
        plain = run_auction(ads, [1, 2], rng=random.Random(seed), exploration_share=1.0)
        assert with_certain.exploration_policy == plain.exploration_policy == "shuffle"
        assert [(w.candidate.ad_id, w.price_micros, w.explanation["exploration_probability"])
                for w in with_certain.winners] == \
            [(w.candidate.ad_id, w.price_micros, w.explanation["exploration_probability"]) for w in plain.winners]


def test_every_explored_winner_logs_the_models_pctr_not_its_draw():
    ads, posterior = new_and_established()
    model = {c.ad_id: c.pctr for c in ads}
    for seed in range(50):
        result = run_auction(ads, [1, 2], rng=random.Random(seed), exploration_share=1.0, ctr_posterior=posterior)
        for w in result.winners:
            assert w.explanation["pctr"] == model[w.candidate.ad_id][w.slot - 1]
            assert w.explanation["pctr_by_slot"] == model[w.candidate.ad_id]


def test_the_posterior_is_read_only_on_an_explored_request():
    ads, posterior = new_and_established()
    asked = []

    def posterior_of_candidates():
        asked.append(1)
        return posterior

    run_auction(ads, [1], rng=random.Random(0), exploration_share=0.0, ctr_posterior=posterior_of_candidates)
    assert asked == []
    run_auction(ads, [1], rng=random.Random(0), exploration_share=1.0, ctr_posterior=posterior_of_candidates)
    assert asked == [1]


def test_a_posterior_for_another_candidate_list_is_refused():
    ads, _ = new_and_established()
    with pytest.raises(InvalidArgument, match="ctr_posterior"):
        run_auction(ads, [1], exploration_share=1.0, ctr_posterior=CtrPosterior(np.ones(2), np.ones(2)))


def test_a_winner_logs_at_least_the_propensity_floor():
    # two ads whose draws almost never cross: a lucky draw that puts the lower one on top still logs 1 / (2 K)
    ads = [cpc("TOP", "a", 1_000_000, 0.030), cpc("LONGSHOT", "b", 1_000_000, 0.010)]
    posterior = CtrPosterior(np.array([1.0, 1.0]), np.array([32.0, 99.0]), draws=10)
    probabilities = {run_auction(ads, [1], rng=random.Random(seed), exploration_share=1.0,
                                 ctr_posterior=posterior).winners[0].explanation["exploration_probability"]
                     for seed in range(200)}
    assert min(probabilities) >= 0.05 and all(p <= 1.0 for p in probabilities)


@settings(max_examples=200, deadline=None)
@given(candidates=st.lists(candidate_strategy, min_size=1, max_size=12, unique_by=lambda c: c.ad_id),
       reserve=st.integers(0, 20_000), slots=st.integers(1, 3),
       quality_floor=st.one_of(st.none(), st.integers(-5_000, 5_000)), seed=st.integers(0, 2**32 - 1),
       strength=st.sampled_from([2.0, 50.0, 2_000.0, 10_000.0]))
def test_auction_invariants_hold_under_thompson_sampling(candidates, reserve, slots, quality_floor, seed, strength):
    prior = np.array([c.pctr[0] for c in candidates])
    posterior = CtrPosterior(prior * strength, (1 - prior) * strength)
    result = run_auction(candidates, list(range(1, slots + 1)), rules=AuctionRules(reserve, quality_floor),
                         rng=random.Random(seed), exploration_share=1.0,
                         ctr_posterior=posterior)
    campaigns = [w.candidate.campaign_id for w in result.winners]
    assert len(campaigns) == len(set(campaigns))
    for w in result.winners:
        c, slot = w.candidate, w.slot - 1
        assert 0 <= w.price_micros <= c.bid_micros
        assert exact_total(c, slot) >= reserve and exact_bid_value(c, slot) >= reserve
        assert quality_floor is None or c.quality_micros >= quality_floor
        assert exact_bid_value(replace(c, bid_micros=w.price_micros), slot) >= reserve
        assert 0 < w.explanation["exploration_probability"] <= 1
        # second price on the model's values: the runner-up never has a higher model total than the winner
        runner_up = w.explanation["runner_up_total_value_micros"]
        assert runner_up is None or runner_up <= w.total_value_micros
