"""The click model's offline metrics and calibration layer, with numbers checked by hand, and the
down-sampling correction q = p / (p + (1 - p) / w) restoring the mean prediction."""
from __future__ import annotations

import math

import numpy as np
import pytest

from core.training import recalibrate
from learning.calibration import SegmentFitRules, fit_platt, fit_segment_calibration
from learning.metrics import auc, base_rate, calibration_by_segment, entropy, log_loss, normalised_entropy
from serving.model.calibration import LEVELS, Platt, SegmentCalibration, logit, sigmoid


def test_log_loss_of_two_predictions_by_hand():
    # -(ln 0.8 + ln 0.6) / 2 = (0.22314 + 0.51083) / 2
    assert log_loss([1, 0], [0.8, 0.4]) == pytest.approx(0.366985, abs=1e-6)


def test_a_weight_counts_as_that_many_copies_in_log_loss():
    assert log_loss([1, 0], [0.8, 0.4], [1, 3]) == pytest.approx(log_loss([1, 0, 0, 0], [0.8, 0.4, 0.4, 0.4]))


def test_entropy_of_a_fair_coin_is_ln_2():
    assert entropy(0.5) == pytest.approx(math.log(2))


def test_ne_of_the_base_rate_predictor_is_one():
    labels = np.array([1, 0, 0, 0, 1, 0, 0, 0, 0, 0])
    assert normalised_entropy(labels, np.full(10, 0.2)) == pytest.approx(1.0)


def test_ne_of_the_weighted_base_rate_predictor_is_one():
    # one click and 2 non-clicks of weight 10: the population's rate is 1 / 21
    labels, weights = np.array([1, 0, 0]), np.array([1.0, 10.0, 10.0])
    assert base_rate(labels, weights) == pytest.approx(1 / 21)
    assert normalised_entropy(labels, np.full(3, 1 / 21), weights) == pytest.approx(1.0)


def test_ne_is_below_one_for_an_informative_predictor_and_above_for_a_wrong_one():
    labels = np.array([1, 1, 0, 0, 0, 0])
    assert normalised_entropy(labels, [0.9, 0.8, 0.1, 0.1, 0.2, 0.1]) < 0.5
    assert normalised_entropy(labels, [0.1, 0.1, 0.9, 0.9, 0.9, 0.9]) > 1.0


def test_auc_of_a_perfect_predictor_is_one_and_of_a_reversed_one_zero():
    labels = np.array([0, 0, 1, 1])
    assert auc(labels, [0.1, 0.2, 0.7, 0.9]) == 1.0
    assert auc(labels, [0.9, 0.7, 0.2, 0.1]) == 0.0


def test_auc_counts_a_tie_as_half():
    # positives 0.4 and 0.8, negatives 0.1 and 0.4: 1 + 0.5 + 1 + 1 of 4 pairs
    assert auc([0, 0, 1, 1], [0.1, 0.4, 0.4, 0.8]) == pytest.approx(0.875)
    assert auc([0, 1, 0, 1], [0.3, 0.3, 0.3, 0.3]) == pytest.approx(0.5)


def test_weighted_auc_equals_the_auc_of_repeated_rows():
    assert auc([1, 0, 0], [0.5, 0.6, 0.2], [1, 2, 3]) == pytest.approx(
        auc([1, 0, 0, 0, 0, 0], [0.5, 0.6, 0.6, 0.2, 0.2, 0.2]))


def test_auc_without_one_of_the_classes_is_undefined():
    assert math.isnan(auc([0, 0], [0.1, 0.2]))


def test_calibration_ratio_per_segment_by_hand():
    rows = calibration_by_segment(
        labels=[1, 0, 0, 1, 0], predictions=[0.5, 0.25, 0.25, 0.2, 0.2], weights=[1, 2, 2, 1, 1],
        segments={"placement": np.array(["feed", "feed", "feed", "video", "video"])})
    by = {r["segment"]["placement"]: r for r in rows}
    # feed: predicted 0.5 + 2 x 0.25 + 2 x 0.25 = 1.5 clicks, observed 1; video: 0.4 over 1
    assert by["feed"]["ratio"] == pytest.approx(1.5)
    assert by["video"]["ratio"] == pytest.approx(0.4)
    assert by["feed"]["impressions"] == 5 and by["feed"]["clicks"] == 1


def _down_sampled(n: int, keep_rate: float, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, n)
    p = sigmoid(-3.5 + 1.2 * x)
    y = (rng.random(n) < p).astype(np.int8)
    kept = (y == 1) | (rng.random(n) < keep_rate)
    return x, p, y, kept


def test_recalibration_restores_the_mean_prediction_after_down_sampling():
    """A model fitted without weights on every click and 10 % of the non-clicks predicts for that skewed
    population; q = p / (p + (1 - p) / w) brings its mean back to the true mean click rate."""
    keep_rate = 0.1
    x, p, y, kept = _down_sampled(400_000, keep_rate, seed=3)
    fitted = fit_platt(x[kept], y[kept])  # a logistic regression on the down-sampled examples, unweighted
    on_down_sampled_scale = sigmoid(fitted.a * x + fitted.b)
    corrected = recalibrate(on_down_sampled_scale, keep_rate)
    assert on_down_sampled_scale.mean() > 4 * p.mean()  # uncorrected: far off
    assert corrected.mean() == pytest.approx(p.mean(), rel=0.03)
    assert corrected.mean() == pytest.approx(y.mean(), rel=0.03)


def test_a_down_sampled_file_evaluates_as_the_full_population():
    keep_rate = 0.1
    x, p, y, kept = _down_sampled(400_000, keep_rate, seed=4)
    weights = np.where(y[kept] == 1, 1.0, 1 / keep_rate)
    assert normalised_entropy(y[kept], p[kept], weights) == pytest.approx(normalised_entropy(y, p), rel=0.02)
    assert base_rate(y[kept], weights) == pytest.approx(y.mean(), rel=0.02)


def test_platt_scaling_recovers_a_known_miscalibration():
    rng = np.random.default_rng(5)
    z = rng.normal(-3, 1, 200_000)  # the model's logit
    y = rng.random(len(z)) < sigmoid(0.7 * z - 0.4)  # the truth: over-confident and too high a model
    fitted = fit_platt(z, y)
    assert fitted.a == pytest.approx(0.7, abs=0.03)
    assert fitted.b == pytest.approx(-0.4, abs=0.1)


def test_platt_scaling_with_sample_weights_fits_the_full_population():
    rng = np.random.default_rng(6)
    z = rng.normal(-3, 1, 300_000)
    y = rng.random(len(z)) < sigmoid(z + 0.5)
    kept = y | (rng.random(len(z)) < 0.1)
    fitted = fit_platt(z[kept], y[kept], np.where(y[kept], 1.0, 10.0))
    assert (fitted.a, fitted.b) == (pytest.approx(1.0, abs=0.05), pytest.approx(0.5, abs=0.15))


def _segments_data(seed: int = 7, n: int = 120_000):
    """Feed/US is over-predicted x2 by the model, every other segment is right; video/DE is tiny."""
    rng = np.random.default_rng(seed)
    placement = rng.choice(["feed", "video"], n)
    country = rng.choice(["US", "GB"], n)
    placement[:300], country[:300] = "video", "DE"
    billing = np.full(n, "CLICK")
    truth = sigmoid(rng.normal(-3.5, 0.8, n))
    y = (rng.random(n) < truth).astype(np.int8)
    over = (placement == "feed") & (country == "US")
    predicted = np.where(over, sigmoid(logit(truth) + math.log(2)), truth)
    return predicted, y, placement, country, billing, truth


def test_segment_calibration_fixes_the_segment_that_is_off():
    predicted, y, placement, country, billing, truth = _segments_data()
    calibration = fit_segment_calibration(predicted, y, np.ones(len(y)), placement, country, billing)
    calibrated = calibration.apply(predicted, placement, country, billing)
    feed_us = (placement == "feed") & (country == "US")
    assert predicted[feed_us].sum() / y[feed_us].sum() > 1.8
    assert calibrated[feed_us].sum() / y[feed_us].sum() == pytest.approx(1.0, abs=0.05)
    gb = country == "GB"
    assert calibrated[gb].sum() / y[gb].sum() == pytest.approx(1.0, abs=0.08)


def test_a_segment_below_the_minimum_count_uses_the_coarser_one():
    predicted, y, placement, country, billing, _ = _segments_data()
    calibration = fit_segment_calibration(predicted, y, np.ones(len(y)), placement, country, billing,
                                          SegmentFitRules(min_positives=50))
    assert (0, ("video", "DE", "CLICK")) not in calibration.coefficients  # ~10 clicks
    assert (0, ("feed", "US", "CLICK")) in calibration.coefficients
    assert calibration.lookup("video", "DE", "CLICK") == calibration.coefficients[(1, ("video", "CLICK"))]
    # an unseen placement falls through to the global fit, an empty calibration to the identity
    assert calibration.lookup("podcast", "FR", "IMPRESSION") == calibration.coefficients[(2, ())]
    assert SegmentCalibration({}).lookup("feed", "US", "CLICK") == Platt(1.0, 0.0)
    # and says which fit it used, as the evaluation reports it per segment
    assert calibration.fitted_level({"placement": "feed", "country": "US", "billing_type": "CLICK"}) == "segment"
    assert calibration.fitted_level({"placement": "video", "country": "DE", "billing_type": "CLICK"}) == \
        "placement, billing_type"
    assert calibration.fitted_level({"placement": "podcast", "country": "FR", "billing_type": "X"}) == "global"
    assert SegmentCalibration({}).fitted_level({"placement": "feed", "country": "US", "billing_type": "CLICK"}) == \
        "identity"


def test_calibration_round_trips_through_json():
    predicted, y, placement, country, billing, _ = _segments_data()
    calibration = fit_segment_calibration(predicted, y, np.ones(len(y)), placement, country, billing)
    again = SegmentCalibration.from_json(calibration.to_json())
    assert again.coefficients == calibration.coefficients
    assert np.array_equal(again.apply(predicted[:50], placement[:50], country[:50], billing[:50]),
                          calibration.apply(predicted[:50], placement[:50], country[:50], billing[:50]))
    assert [list(level) for level in LEVELS] == [["placement", "country", "billing_type"],
                                                 ["placement", "billing_type"], []]


def test_calibration_applies_per_slot_to_a_candidates_by_slots_matrix():
    calibration = SegmentCalibration({(2, ()): Platt(1.0, math.log(2))})
    q = np.array([[0.1, 0.05], [0.2, 0.1]])
    out = calibration.apply(q, "feed", "US", "CLICK")
    assert out.shape == (2, 2)
    assert out[0, 0] == pytest.approx(sigmoid(logit(0.1) + math.log(2)))
