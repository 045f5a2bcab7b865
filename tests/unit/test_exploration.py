"""New-ad exploration: Thompson sampling's pieces and how many impressions an estimate needs to learn a rate."""
from __future__ import annotations

import math

import numpy as np
import pytest

from core.errors import InvalidArgument
from core.exploration import (CtrPosterior, ctr_multipliers, impressions_to_within, impressions_to_within_observed,
                              placement_probabilities, sampled_totals, settled_after, thompson_fill, weak_posterior)


def test_an_ad_with_fewer_pseudo_impressions_than_the_threshold_is_uncertain():
    posterior = CtrPosterior(np.array([20.0, 30.0, 0.0, 5.0, np.nan]), np.array([1_980.0, 2_970.0, 10.0, 0.0, 1.0]),
                             certain_at=3_000)
    # 2,000 pseudo-impressions: uncertain; 3,000: certain; a zero alpha or beta, or no value: no draw to rescale
    assert posterior.uncertain().tolist() == [True, False, False, False, False]


def test_a_certain_ad_ranks_on_exactly_its_model_pctr_and_an_uncertain_ones_factor_has_mean_one():
    posterior = CtrPosterior(np.array([2.0, 300.0]), np.array([98.0, 9_700.0]))
    factors = ctr_multipliers(posterior, 40_000, np.random.default_rng(1))
    assert factors.shape == (40_000, 2)
    assert (factors[:, 1] == 1.0).all()
    assert factors[:, 0].mean() == pytest.approx(1.0, abs=0.03)  # sd of the mean ~0.005
    assert factors[:, 0].std() == pytest.approx(math.sqrt(98 / (2 * 101)), rel=0.05)  # Beta(2, 98)'s sd / mean


def test_a_sampled_click_bid_follows_its_draw_and_an_impression_bid_or_quality_does_not():
    totals = np.array([[12_000.0], [20_500.0]])  # a CPC bid value 10,000 + quality 2,000; a CPM 20,000 + 500
    bid_values = np.array([[10_000.0], [20_000.0]])
    pctr = np.array([[0.01], [0.01]])
    sampled = sampled_totals(totals, bid_values, pctr, np.array([True, False]), np.array([[1.5, 1.5], [300.0, 0.5]]))
    assert sampled[0, 0, :].tolist() == pytest.approx([17_000.0, 20_500.0])
    # a draw beyond a click rate of 1 is taken at 1 (bid value 10,000 / 0.01 x 1); the impression bid's does
    # not move down either
    assert sampled[1, 0, :].tolist() == pytest.approx([1_002_000.0, 20_500.0])


def test_every_draws_page_takes_one_ad_per_campaign_and_category_and_stops_at_an_empty_slot():
    sampled = np.array([[[9.0, 8.0, 7.0, 1.0]] * 2, [[1.0, 2.0, 3.0, 4.0]] * 2])  # (draws, slots, candidates)
    allowed = np.array([[True, True], [True, True], [True, True], [True, False]])
    campaigns = np.array([0, 0, 1, 2])
    categories = np.array([0, 0, 5, 5])
    chosen = thompson_fill(sampled, allowed, campaigns, categories)
    # draw 0: candidate 0, then 1 shares its campaign: 2. Draw 1: 3 (category 5), then 2 shares the category,
    # 0 and 1 remain: 1
    assert chosen.tolist() == [[0, 2], [3, 1]]
    nobody = thompson_fill(sampled[:1], np.zeros((4, 2), dtype=bool), campaigns, categories)
    assert nobody.tolist() == [[-1, -1]]


def test_the_logged_probability_is_the_share_of_other_draws_agreeing_floored():
    chosen = np.array([[4, 7], [4, 1], [4, 7], [3, 1], [4, 1]])
    assert placement_probabilities(chosen, 0.1).tolist() == [0.75, 0.25]
    assert placement_probabilities(np.array([[4], [3], [3]]), 0.1).tolist() == [0.1]  # never seen again: floor
    assert CtrPosterior(np.ones(1), np.ones(1), draws=100).propensity_floor == 0.005


def test_the_weak_prior_has_ten_pseudo_impressions_at_the_prior():
    alpha, beta = weak_posterior(np.array([0.02, 0.5]))
    assert alpha.tolist() == pytest.approx([0.2, 5.0]) and beta.tolist() == pytest.approx([9.8, 5.0])
    assert alpha.dtype == np.float32


def test_a_posterior_of_the_wrong_shape_is_refused_naming_it():
    with pytest.raises(InvalidArgument, match="alpha"):
        CtrPosterior(np.ones(3), np.ones(2))
    with pytest.raises(InvalidArgument, match="draws"):
        CtrPosterior(np.ones(1), np.ones(1), draws=0)


# --------------------------------------------------------------------------------------------- learning speed
def test_a_correct_and_strong_prior_needs_no_impressions():
    rng = np.random.default_rng(3)
    assert impressions_to_within(0.02, 0.02, 5_000, rng=rng, trials=40, horizon=20_000) == 0.0


def test_a_strong_wrong_prior_needs_more_impressions_than_a_weak_one():
    strong = impressions_to_within(0.01, 0.02, 5_000, rng=np.random.default_rng(4), trials=60, horizon=60_000)
    weak = impressions_to_within(0.01, 0.02, 10, rng=np.random.default_rng(4), trials=60, horizon=60_000)
    assert weak < strong < math.inf
    # the strong prior's own pull alone: (0.02 x 5,000 + 0.01 n) / (5,000 + n) reaches 0.012 at n = 20,000
    assert strong >= 15_000


def test_an_estimate_that_never_settles_within_the_horizon_counts_as_infinite():
    assert impressions_to_within(0.01, 0.05, 100_000, rng=np.random.default_rng(5), trials=5,
                                 horizon=1_000) == math.inf


def test_the_observed_measure_reads_the_cumulative_impressions_of_the_last_step_outside():
    # prior 0.02 with 100 pseudo-impressions, truth 0.01, tolerance 20 %: estimates after each step
    # 200 imp, 2 clicks: (2 + 2) / 300 = 0.0133 (outside); 300, 3: 7 / 600 = 0.0117 (inside);
    # 100, 3: 10 / 700 = 0.0143 (outside); 900, 5: 15 / 1,600 = 0.0094 (inside); 400, 5: 20 / 2,000 = 0.01
    impressions, clicks = [200, 300, 100, 900, 400], [2, 3, 3, 5, 5]
    assert impressions_to_within_observed(impressions, clicks, 0.01, 0.02, 100) == 1_500  # 200 + 300 + 100 + 900
    assert impressions_to_within_observed(impressions[:3], clicks[:3], 0.01, 0.02, 100) == math.inf
    assert impressions_to_within_observed([10, 10], [0, 1], 0.02, 0.02, 10_000) == 0.0  # the prior is right


def test_single_impressions_with_their_clicks_give_the_simulations_measure():
    rng = np.random.default_rng(6)
    clicks = (rng.random(30_000) < 0.015).astype(float)
    served = np.arange(30_001, dtype=float)
    estimates = np.concatenate(([0.03], (0.03 * 50 + np.cumsum(clicks)) / (50 + served[1:])))
    assert impressions_to_within_observed(np.ones(30_000), clicks, 0.015, 0.03, 50, 0.25) == \
        settled_after(estimates, served, 0.015, 0.25)


@pytest.mark.parametrize("field, kwargs", [
    ("true_ctr", {"true_ctr": 0.0}), ("prior_mean", {"prior_mean": 1.5}), ("prior_strength", {"prior_strength": -1}),
    ("rel_tol", {"rel_tol": 0.0}),
])
def test_a_rate_outside_its_domain_is_refused_naming_it(field, kwargs):
    args = {"true_ctr": 0.01, "prior_mean": 0.01, "prior_strength": 10.0, "rel_tol": 0.2, **kwargs}
    with pytest.raises(InvalidArgument, match=field):
        impressions_to_within_observed([1], [0], **args)


def test_observed_steps_of_different_lengths_or_negative_counts_are_refused():
    with pytest.raises(InvalidArgument, match="length"):
        impressions_to_within_observed([1, 2], [0], 0.01, 0.01, 10)
    with pytest.raises(InvalidArgument, match="at least 0"):
        impressions_to_within_observed([1, -2], [0, 0], 0.01, 0.01, 10)
