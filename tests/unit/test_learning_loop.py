"""The learning loop end to end without servers: a simulated day served by the priors baseline, its examples
(core.training.join, down-sampled to 10 %, with the conversion examples of its clicks), the click and
conversion models trained on them, evaluated on another day of the same world against the priors-only
baseline, the constant pCVR prior and the simulator's true click and conversion probabilities."""
from __future__ import annotations

import numpy as np
import pytest

from sim.learning_day import DAY, EngineOptions, day_start_ms, make_world, simulate_day
from core import training
from serving.model.predictor import ModelPredictor
from learning.trainer import evaluate_click_model, train_click_model


@pytest.fixture(scope="module")
def trained():
    world = make_world(seed=7)
    train_day = simulate_day(world, requests=60_000, seed=1)
    held_day = simulate_day(world, requests=30_000, seed=2)
    examples = training.join(train_day.served, train_day.events, 0.1, train_day.conversions)
    held = training.join(held_day.served, held_day.events, 1.0, held_day.conversions)
    model = train_click_model(examples, {train_day.snapshot.version: train_day.snapshot}, keep_rate=0.1,
                              log=lambda line: None)
    return model, evaluate_click_model(model, held, {held_day.snapshot.version: held_day.snapshot}, held_day.truth,
                                       conversion_truth=held_day.conversion_truth)


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


def test_each_segment_of_the_evaluation_says_what_calibrates_it(evaluation):
    by = [s["calibrated_by"] for s in evaluation["segments"]]
    assert set(by) <= {"segment", "placement, billing_type", "global", "identity"}
    assert "segment" in by  # a 60,000-request day fits some segments of its own
    assert evaluation["segments_on_parent_calibration"] == sum(b != "segment" for b in by)
    assert all(s["judged"] == (s["clicks"] >= evaluation["min_segment_clicks"]) for s in evaluation["segments"])


def test_the_pre_ranker_keeps_the_models_winner_over_95_percent_of_the_time(trained):
    # A world of 6,000 ads, so the filters leave ~3,000 candidates for the pre-ranker's 200, served by the
    # model in process; the recall monitor scores every candidate of half the requests after the response.
    # With the model's student as the pre-ranker's feature recall measured 98.9 % (271 of 274, RESULTS.md);
    # without it, on the pre-ranker's other features refitted to the model, 86-89 %.
    model, _ = trained
    world = make_world(seed=7, campaigns=1_500)
    predictor = ModelPredictor(model, world.snapshot(day_start_ms(DAY)))
    day = simulate_day(world, requests=400, seed=3, predictor=predictor, options=EngineOptions(recall_share=0.5))
    checked, hits = day.counts["recall_checked"], day.counts["recall_hits"]
    assert checked >= 150
    assert hits / checked > 0.95


def test_the_conversion_model_beats_the_constant_prior_and_is_calibrated_overall(evaluation):
    converted = evaluation["conversion"]
    assert converted["conversions"] > 200
    assert converted["ne_cvr_model"] < converted["ne_cvr_baseline"] - 0.1
    assert converted["ne_cvr_model"] > converted["ne_cvr_oracle"] - 0.01
    # predicted conversions over the sum of the true probabilities, on ~1,000 training conversions
    assert 0.85 <= converted["cvr_calibration_expected"] <= 1.15


def test_the_predictor_serves_the_conversion_models_pcvr_to_conversion_bids_only(trained):
    from serving.decision.prediction import PredictionRequest
    from serving.model.examples import ExampleTable
    from serving.model.features import ad_table

    model, _ = trained
    world = make_world(seed=7)
    snapshot = world.snapshot(day_start_ms(DAY))
    predictor = ModelPredictor(model, snapshot)
    cpa = np.flatnonzero(world.bid_type == "CPA")[:5]
    others = np.flatnonzero(world.bid_type != "CPA")[:5]
    ad_ids = world.ad_id[np.concatenate([cpa, others])].astype(np.int64)
    features = world.user_features(3)
    request = PredictionRequest(rows=np.arange(len(ad_ids)), ctr_prior=np.full(len(ad_ids), 0.01), positions=(1, 2),
                                placement="feed", user_features=features, ad_ids=ad_ids, country="US", device="ios")
    got = predictor.predict_many([request])[0].pcvr
    assert np.all(got[5:] == model.cvr_prior)
    # the same number the offline path gives for a clicked impression of those ads in that context
    records = [{"impression_id": f"i{a}", "request_id": "r", "label": 0, "sample_weight": 1.0, "ad_id": int(a),
                "slot_position": 2, "placement": "feed", "country": "US", "device": "ios", "billing_type": "CLICK",
                "user_features": features, "ad_snapshot_version": snapshot.version, "logged_pctr": 0.0}
               for a in ad_ids[:5]]
    offline = model.conversion.predict_examples(model.spec, ExampleTable.from_records(records),
                                                {snapshot.version: ad_table(model.spec, snapshot)})
    assert np.allclose(got[:5], offline, rtol=1e-4)
    assert np.ptp(got[:5]) > 0 and not np.allclose(got[:5], model.cvr_prior)


def test_the_conversion_student_tracks_the_conversion_model_and_loads_without_keras(trained, tmp_path):
    from serving.decision.prediction import PredictionRequest
    from serving.model.student import StudentConversionRates

    model, _ = trained
    assert model.conversion.student is not None
    world = make_world(seed=7)
    snapshot = world.snapshot(day_start_ms(DAY))
    predictor = ModelPredictor(model, snapshot)
    cpa = world.ad_id[world.bid_type == "CPA"].astype(np.int64)
    student, network = [], []
    for user in range(0, 400, 4):
        request = PredictionRequest(rows=np.arange(len(cpa)), ctr_prior=np.full(len(cpa), 0.01), positions=(1,),
                                    placement=("feed", "article", "video")[user % 3],
                                    user_features=world.user_features(user), ad_ids=cpa,
                                    country=str(world.user_country[user]), device=str(world.user_device[user]))
        student.append(predictor.conversion_rates(request))
        network.append(predictor.predict_many([request])[0].pcvr)
    student, network = np.log(np.concatenate(student)), np.log(np.concatenate(network))
    assert np.corrcoef(student, network)[0, 1] > 0.8  # 0.89 measured on a 60 k-request day: a cheap copy
    assert abs(np.mean(student - network)) < 0.15
    model.save(tmp_path / "bundle", export_saved_model=False)
    loaded = StudentConversionRates.load(tmp_path / "bundle", _snapshot_folder(snapshot, tmp_path))
    assert np.allclose(np.log(loaded(request)), np.log(predictor.conversion_rates(request)), atol=1e-5)


def _snapshot_folder(snapshot, tmp_path):
    folder = tmp_path / "ad-features"
    snapshot.write(folder)
    return folder


def test_the_hourly_update_refits_the_calibration_and_keeps_the_network(trained):
    from learning.retrain import recalibrate

    model = trained[0]
    world = make_world(seed=7)
    day = simulate_day(world, requests=20_000, seed=4)
    examples = training.join(day.served, day.events, 1.0)
    # The users of this hour click half as often as the model learned: the refit must follow them.
    rng = np.random.default_rng(0)
    shifted = [dict(e, label=0) if e["label"] == 1 and rng.random() < 0.5 else e for e in examples]
    kept, weights = model.calibration, model.network.get_weights()
    try:
        figures = recalibrate(model, shifted, {day.snapshot.version: day.snapshot})
        click_rows = sum(1 for e in shifted if e["task"] == "CLICK" and not e["scored_by_fallback"])
        assert figures["refit_rows"] + figures["validation_rows"] == click_rows
        assert figures["model_before_refit"]["calibration"] > 1.5  # predicts twice the clicks it sees
        assert 0.85 < figures["model"]["calibration"] < 1.15
        assert all(np.array_equal(a, b) for a, b in zip(weights, model.network.get_weights()))
    finally:
        model.calibration = kept
