"""The click model end to end on synthetic impressions with a learnable user-ad interaction: training with
the down-sampling correction, its evaluation against the priors-only baseline, the in-process
ModelPredictor behind the engine's Predictor protocol, save/load, and the `adserve model` commands.

One tiny model is trained once for the module (a few seconds on 2 cores)."""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np
import pytest

from serving.decision.prediction import PredictionRequest, PredictionTimeout
from learning import synthetic
from learning.dataset import write_examples
from learning.network import TrainConfig
from learning.trainer import evaluate_click_model, train_click_model
from serving.model.click_model import ClickModel, save_versioned
from serving.model.examples import ExampleTable
from serving.model.features import ad_table
from serving.decision.prerank import DEFAULT_MODEL_WEIGHTS, FEATURES
from serving.model.predictor import ModelPredictor, PredictionUnavailable
from serving.model.student import ad_matrix

FAST = TrainConfig(epochs=8, batch_size=256, patience=2)


@pytest.fixture(scope="module")
def day():
    return synthetic.make_day(60_000, seed=1, keep_rate=0.1)


@pytest.fixture(scope="module")
def held_out():
    return synthetic.make_day(30_000, seed=2, keep_rate=1.0)


@pytest.fixture(scope="module")
def model(day):
    return train_click_model(day.examples, {day.snapshot.version: day.snapshot}, day.keep_rate, FAST,
                             min_segment_clicks=30, log=lambda line: None)


@pytest.fixture(scope="module")
def predictor(model, day):
    return ModelPredictor(model, day.snapshot)


def request(day, candidates, positions=(1, 2), **overrides) -> PredictionRequest:
    candidates = np.asarray(candidates)
    rows = day.snapshot.rows(candidates)
    fields = dict(rows=rows, ctr_prior=day.snapshot.ctr_prior[rows].astype(np.float64), positions=list(positions),
                  placement="feed", user_features=day.examples[0]["user_features"], ad_ids=candidates, country="US",
                  device="ios")
    fields.update(overrides)
    return PredictionRequest(**fields)


def test_the_model_learns_what_the_priors_cannot_and_beats_them_on_ne(model, held_out):
    result = evaluate_click_model(model, held_out.examples, {1: held_out.snapshot}, held_out.truth)
    assert result["ne_model"] < result["ne_baseline"] - 0.08
    assert result["auc"] > result["auc_baseline"] + 0.08
    assert result["ne_oracle"] < result["ne_model"]  # the truth is still better: sanity of the yardstick
    assert {"ne_model", "ne_baseline", "ne_oracle", "calibration_min", "calibration_max", "log_loss",
            "auc"} <= result.keys()


def test_the_recalibrated_model_predicts_the_true_mean_click_rate(model, held_out):
    """Trained on every click and 10 % of the non-clicks, corrected with q = p / (p + (1 - p) / w)."""
    examples = ExampleTable.from_records(held_out.examples)
    tables = {1: ad_table(model.spec, held_out.snapshot)}
    predicted = model.predict_examples(examples, tables)
    assert predicted.mean() == pytest.approx(held_out.true_mean_ctr, rel=0.12)
    from serving.model.features import example_inputs

    uncorrected = model.raw_probabilities(example_inputs(model.spec, examples, tables))
    assert uncorrected.mean() > 3 * held_out.true_mean_ctr


def test_training_records_what_it_was_trained_on(model, day):
    meta = model.metadata
    assert meta["keep_rate"] == pytest.approx(0.1)
    assert meta["training_rows"] + meta["validation_rows"] == len(day.examples)
    assert meta["snapshot_version"] == 1
    assert meta["parameters"] == model.network.count_params()
    assert meta["validation_metrics"]["model"]["ne"] < meta["validation_metrics"]["priors_baseline"]["ne"]


def test_the_predictor_scores_every_candidate_at_every_slot(predictor, day):
    ad_ids = day.snapshot.ad_id[:200]
    predictions = predictor.predict(request(day, ad_ids, (1, 2, 3)), deadline=10.0, clock=lambda: 0.0)
    assert predictions.pctr.shape == (200, 3)
    assert ((predictions.pctr > 0) & (predictions.pctr < 1)).all()
    assert predictions.pcvr.shape == (200,)
    assert predictions.model_version == predictor.model.version
    # each position is its own input row (the tiling): the same ad gets a prediction per position
    assert not np.allclose(predictions.pctr[:, 0], predictions.pctr[:, 2])


def test_the_predictor_agrees_with_the_offline_predictions(predictor, model, day):
    examples = day.examples[:40]
    offline = model.predict_examples(ExampleTable.from_records(examples), {1: ad_table(model.spec, day.snapshot)})
    online = [predictor.predict(request(day, [e["ad_id"]], (e["slot_position"],), placement=e["placement"],
                                        country=e["country"], device=e["device"], user_features=e["user_features"]),
                                deadline=10.0, clock=lambda: 0.0).pctr[0, 0] for e in examples]
    assert np.allclose(online, offline, rtol=1e-4)


def test_an_ad_the_snapshot_does_not_know_still_gets_a_probability(predictor, day):
    predictions = predictor.predict(request(day, [day.snapshot.ad_id[0], 987_654_321]), deadline=10.0,
                                    clock=lambda: 0.0)
    assert ((predictions.pctr > 0) & (predictions.pctr < 1)).all()


def test_more_candidates_than_the_largest_bucket_are_scored_in_parts(predictor, day):
    ad_ids = np.resize(day.snapshot.ad_id, 1_000)
    predictions = predictor.predict(request(day, ad_ids, (1, 2, 3, 4)), deadline=10.0, clock=lambda: 0.0)
    assert predictions.pctr.shape == (1_000, 4)
    assert np.allclose(predictions.pctr[:200], predictions.pctr[200:400])


def test_the_predictor_raises_a_timeout_past_its_deadline(predictor, day):
    with pytest.raises(PredictionTimeout, match="before scoring"):
        predictor.predict(request(day, day.snapshot.ad_id[:10]), deadline=1.0, clock=lambda: 2.0)
    ticks = iter([0.0, 5.0])  # the deadline passes while the model scores
    with pytest.raises(PredictionTimeout, match="while scoring"):
        predictor.predict(request(day, day.snapshot.ad_id[:10]), deadline=1.0, clock=lambda: next(ticks))


def test_a_request_without_ad_ids_cannot_be_scored(predictor, day):
    with pytest.raises(PredictionUnavailable):
        predictor.predict(request(day, day.snapshot.ad_id[:10], ad_ids=None), deadline=10.0, clock=lambda: 0.0)


def test_a_saved_model_loads_and_predicts_the_same(model, predictor, day, tmp_path):
    folder = save_versioned(model, tmp_path, export_saved_model=False)
    assert folder.name == "click-v1"
    assert {p.name for p in folder.iterdir()} >= {"model.keras", "feature_spec.json", "calibration.json",
                                                  "metadata.json"}
    assert json.loads((folder / "metadata.json").read_text())["keep_rate"] == pytest.approx(0.1)
    loaded = ModelPredictor(ClickModel.load(folder), day.snapshot)
    asked = request(day, day.snapshot.ad_id[:200])
    assert np.array_equal(loaded.predict(asked, 10.0, lambda: 0.0).pctr,
                          predictor.predict(asked, 10.0, lambda: 0.0).pctr)
    assert np.array_equal(loaded.affinity(asked), predictor.affinity(asked))  # the student travels with it
    assert save_versioned(model, tmp_path, export_saved_model=False).name == "click-v2"


def _log_pctr_pairs(model, predictor, day, held_out, users=300, ads=50):
    """The model's and its student's first-slot log pCTR for held-out users crossed with random ads."""
    rng = np.random.default_rng(5)
    vectors = ad_matrix(model.spec, ad_table(model.spec, day.snapshot))
    model_log, student_log = [], []
    for i in rng.choice(len(held_out.examples), users, replace=False):
        example = held_out.examples[i]
        rows = rng.choice(len(day.snapshot), ads, replace=False)
        asked = request(day, day.snapshot.ad_id[rows], positions=(example["slot_position"],),
                        user_features=example["user_features"], placement=example["placement"],
                        country=example["country"], device=example["device"])
        model_log.append(np.log(predictor.predict(asked, 10.0, lambda: 0.0).pctr[:, 0]))
        r = model.student.request_vector(model.spec, example["user_features"], example["placement"],
                                         example["country"], example["device"], example["slot_position"])
        student_log.append(vectors[rows] @ r)
    return np.concatenate(model_log), np.concatenate(student_log)


def test_the_pre_rankers_student_copies_the_models_log_pctr_on_users_it_was_not_fitted_on(model, predictor, day,
                                                                                          held_out):
    assert model.student is not None and model.metadata["prerank_student"]["fit_pairs"] > 0
    model_log, student_log = _log_pctr_pairs(model, predictor, day, held_out)
    # the bilinear student keeps the model's order: most of the model's spread over users x ads is explained
    # (measured: correlation 0.91, rms error 0.42 of the spread; a student of zeros: 0 and 4.3)
    assert np.corrcoef(model_log, student_log)[0, 1] > 0.8
    assert np.sqrt(np.mean((model_log - student_log) ** 2)) < 0.6 * model_log.std()


def test_the_affinity_the_pre_ranker_gets_is_the_students_log_pctr_over_its_prior(model, predictor, day):
    asked = request(day, day.snapshot.ad_id[:50], positions=(2, 3))
    example = day.examples[0]
    r = model.student.request_vector(model.spec, example["user_features"], "feed", "US", "ios", 2)
    expected = ad_matrix(model.spec, ad_table(model.spec, day.snapshot))[asked.rows] @ r - np.log(asked.ctr_prior)
    assert np.allclose(predictor.affinity(asked), expected, atol=1e-4)
    # with weight 1 (DEFAULT_MODEL_WEIGHTS) the pre-ranker's prior x exp(affinity) is the student's pCTR
    assert DEFAULT_MODEL_WEIGHTS[FEATURES.index("model_affinity")] == 1.0
    assert np.count_nonzero(DEFAULT_MODEL_WEIGHTS) == 1


def test_an_ad_server_on_the_prediction_service_loads_the_same_student_without_tensorflow(model, predictor, day,
                                                                                        tmp_path):
    from adserve.serve_cli import ads_predictor
    from serving.model.remote import RemotePredictor
    from serving.model.student import StudentAffinity, WithStudent

    folder = save_versioned(model, tmp_path / "models", export_saved_model=False)
    day.snapshot.write(tmp_path / "ad-features")
    asked = request(day, day.snapshot.ad_id[:80], positions=(3,))
    affinity = StudentAffinity.load(folder, tmp_path / "ad-features")
    assert np.allclose(affinity(asked), predictor.affinity(asked), atol=1e-5)
    args = argparse.Namespace(prediction_url="http://127.0.0.1:9", prerank_model=folder,
                              ad_features=tmp_path / "ad-features", model=None)
    wrapped = ads_predictor(args)
    assert isinstance(wrapped, WithStudent) and isinstance(wrapped.predictor, RemotePredictor)
    assert np.allclose(wrapped.affinity(asked), predictor.affinity(asked), atol=1e-5)
    assert wrapped.url == wrapped.predictor.url  # anything else is the service predictor's
    assert model.conversion is None and wrapped.conversion_rates(asked) is None  # no conversion student: the prior
    (folder / "prerank_student.npz").unlink()  # a bundle from before the student: no wrapper, no affinity
    assert isinstance(ads_predictor(args), RemotePredictor)
    with pytest.raises(ValueError, match="--prediction-url"):
        ads_predictor(argparse.Namespace(prediction_url=None, prerank_model=folder, ad_features=None, model=None))


def test_a_model_without_a_student_offers_no_affinity(model, day):
    bare = ModelPredictor(ClickModel(model.network, model.spec, model.calibration, model.keep_rate,
                                     dict(model.metadata), None), day.snapshot, warm_up=False)
    assert bare.affinity(request(day, day.snapshot.ad_id[:5])) is None


def test_the_engine_runs_its_auction_on_the_model(predictor, day):
    from core.targeting import compile_targeting, request_terms
    from serving.decision.campaigns import CampaignRecord, CampaignTable
    from serving.decision.engine import DecisionEngine, RequestContext
    from serving.decision.filters import FilterContext
    from serving.decision.index import AdRecord, TargetingIndex

    snapshot = day.snapshot
    ads = [AdRecord(ad_id=int(snapshot.ad_id[i]), campaign_id=int(snapshot.campaign_id[i]), version=1, bid_type="CPC",
                    bid_micros=1_000_000, quality_micros=0, static_score=1.0,
                    targeting=compile_targeting({"placement": ["feed"]}), creative_ref="c", landing_url="https://x",
                    ctr_prior=float(snapshot.ctr_prior[i]), embedding=[0.0] * 8) for i in range(30)]
    campaigns = CampaignTable()
    for cid in {a.campaign_id for a in ads}:
        campaigns.upsert(CampaignRecord(campaign_id=cid, advertiser_id=cid, version=1))
    engine = DecisionEngine(TargetingIndex.build(ads), campaigns, predictor)
    context = RequestContext("r1", "feed", [1, 2], request_terms(placement=["feed"]), FilterContext(now_ms=0),
                             country="US", user_features=day.examples[0]["user_features"], device="ios")
    decision = engine.decide(context, clock=lambda: 0.0, deadline=1.0, rng=random.Random(1),
                             np_rng=np.random.default_rng(1))
    assert not decision.scored_by_fallback
    assert decision.model_version == predictor.model.version
    assert len(decision.winners) == 2


def test_model_train_and_evaluate_commands(day, held_out, tmp_path, capsys):
    from adserve.cli import main

    small = synthetic.make_day(20_000, seed=3)
    write_examples(tmp_path / "examples.avro", small.examples)
    small.snapshot.write(tmp_path / "ad-features")
    write_examples(tmp_path / "heldout.avro", held_out.examples)
    (tmp_path / "truth.json").write_text(json.dumps(held_out.truth))
    assert main(["model", "train", "--examples", str(tmp_path / "examples.avro"), "--ad-features",
                 str(tmp_path / "ad-features"), "--out", str(tmp_path / "models"), "--epochs", "2",
                 "--no-saved-model", "--json"]) == 0
    trained = json.loads(capsys.readouterr().out)
    assert Path(trained["model_dir"]).name == "click-v1"
    assert trained["keep_rate"] == pytest.approx(0.1)
    assert main(["model", "evaluate", "--model", trained["model_dir"], "--examples", str(tmp_path / "heldout.avro"),
                 "--ad-features", str(tmp_path / "ad-features"), "--truth", str(tmp_path / "truth.json"),
                 "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    for key in ("ne_model", "ne_baseline", "ne_oracle", "calibration_min", "calibration_max", "log_loss", "auc"):
        assert key in evaluated
    assert evaluated["ne_oracle"] < evaluated["ne_baseline"]
    assert main(["model", "evaluate", "--model", str(tmp_path / "nothing"), "--examples",
                 str(tmp_path / "heldout.avro"), "--ad-features", str(tmp_path / "ad-features")]) == 2
