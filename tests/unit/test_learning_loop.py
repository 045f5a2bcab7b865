"""The learning loop end to end without servers: a simulated day served by the priors baseline, its examples
(core.training.join, down-sampled to 10 %), the click model trained on them, evaluated on another day of the
same world against the priors-only baseline and the simulator's true click probabilities."""
from __future__ import annotations

import pytest

from adserve.learning_day import DAY, day_start_ms, make_world, simulate_day
from core import training
from serving.model.predictor import ModelPredictor
from serving.model.trainer import evaluate_click_model, train_click_model


@pytest.fixture(scope="module")
def trained():
    world = make_world(seed=7)
    train_day = simulate_day(world, requests=60_000, seed=1)
    held_day = simulate_day(world, requests=30_000, seed=2)
    examples = training.join(train_day.served, train_day.events, keep_rate=0.1)
    held = training.join(held_day.served, held_day.events, keep_rate=1.0)
    model = train_click_model(examples, {train_day.snapshot.version: train_day.snapshot}, keep_rate=0.1,
                              log=lambda line: None)
    return model, evaluate_click_model(model, held, {held_day.snapshot.version: held_day.snapshot}, held_day.truth)


@pytest.fixture(scope="module")
def evaluation(trained):
    return trained[1]


def test_the_model_beats_the_priors_only_baseline_on_normalised_entropy(evaluation):
    assert evaluation["ne_model"] < evaluation["ne_baseline"] - 0.08
    assert evaluation["ne_model"] > evaluation["ne_oracle"] - 0.01  # nothing beats the true probabilities
    assert evaluation["auc"] > evaluation["auc_baseline"] + 0.1


def test_the_model_is_calibrated_overall_against_the_true_click_probabilities(evaluation):
    # predicted clicks over the sum of the true probabilities: the model's own error, without the counts' noise
    assert 0.95 <= evaluation["calibration_expected"] <= 1.05


def test_every_segment_with_enough_clicks_is_calibrated_within_a_quarter(evaluation):
    # The design's alert band is 0.95-1.05 per segment. Fitted on the validation share of a 60,000-request
    # day (a few hundred clicks per segment) the calibration layer leaves segments 0.78-1.15 off the true
    # rates (benchmarks/RESULTS.md: the target is missed); this asserts what holds at this size. Without the
    # layer the down-sampling correction alone over-predicts every segment by 15-33 %.
    assert evaluation["calibration_expected_min"] >= 0.75
    assert evaluation["calibration_expected_max"] <= 1.25


def test_the_pre_ranker_keeps_the_models_winner_over_95_percent_of_the_time(trained):
    # A world of 6,000 ads, so the filters leave ~3,000 candidates for the pre-ranker's 200, served by the
    # model in process; the recall monitor scores every candidate of half the requests after the response.
    # With the model's student as the pre-ranker's feature recall measured 98.9 % (271 of 274, RESULTS.md);
    # without it, on the pre-ranker's other features refitted to the model, 86-89 %.
    model, _ = trained
    world = make_world(seed=7, campaigns=1_500)
    predictor = ModelPredictor(model, world.snapshot(day_start_ms(DAY)))
    day = simulate_day(world, requests=400, seed=3, predictor=predictor, recall_share=0.5)
    checked, hits = day.counts["recall_checked"], day.counts["recall_hits"]
    assert checked >= 150
    assert hits / checked > 0.95
