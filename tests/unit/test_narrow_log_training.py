"""Training on a narrow log, where the serving policy showed the best ad of each campaign nearly every time.
The click network is anchored on the ads' click priors (learning.network): untrained, it is the priors
baseline (the ad's ctr prior x the position effect) on the training data's down-sampled scale; trained on two
of six ads, it scores the four others near their true rates rather than wherever its layers extrapolate to.
The global Platt fit (learning.calibration) is shrunk toward the identity, so held-out scores at two values
do not set a slope from noise; with thousands of clicks over spread scores the prior weighs nothing."""
from __future__ import annotations

import numpy as np
import pytest

from core import training
from learning.calibration import fit_platt, fit_segment_calibration
from learning.network import TrainConfig, build
from learning.trainer import priors_baseline, train_click_model
from serving.decision.prediction import position_effect
from serving.model.calibration import logit, sigmoid
from serving.model.ad_features import AdFeatureSnapshot
from serving.model.examples import ExampleTable
from serving.model.features import FeatureSpec, RequestFacts, ad_table, example_inputs, request_inputs

TRUE_CTR = (0.30, 0.15, 0.05, 0.22, 0.08, 0.02)  # two campaigns of three ads, as the live-loop test has them
AD_IDS = np.arange(40, 46, dtype=np.int64)


def _snapshot(seed: int = 5) -> AdFeatureSnapshot:
    rng = np.random.default_rng(seed)
    return AdFeatureSnapshot(
        version=7, ad_id=AD_IDS, campaign_id=np.array([1, 1, 1, 2, 2, 2], dtype=np.int64),
        bid_type=np.ones(6, dtype=np.int8), bid_micros=np.full(6, 1_000_000, dtype=np.int64),
        ctr_prior=np.array(TRUE_CTR, dtype=np.float32), quality_prior=np.zeros(6, dtype=np.float32),
        category=np.zeros(6, dtype=np.int32), embedding=rng.random((6, 6)).astype(np.float32))


def _examples(served: list[tuple[int, int]], count: int, seed: int = 11) -> list[dict]:
    """`count` requests, each showing the (ad row, position) pairs in `served`, clicked at the true rate x
    the position effect; every negative kept (keep rate 1)."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(count):
        user = {"activity": float(rng.normal()), "age": float(rng.integers(18, 70))}
        for row, position in served:
            clicked = rng.random() < TRUE_CTR[row] * position_effect([position])[0]
            records.append({
                "impression_id": f"i{i}-{position}", "request_id": f"r{i}", "served_time": 1_800_000_000_000 + i,
                "event_time": 1_800_000_000_000 + i, "ad_id": int(AD_IDS[row]), "campaign_id": 1 + row // 3,
                "slot_position": position, "placement": "feed", "country": None, "device": "ios",
                "billing_type": "CLICK", "user_features": user, "ad_snapshot_version": 7,
                "logged_pctr": TRUE_CTR[row], "scored_by_fallback": False, "exploration": True,
                "task": "CLICK", "label": int(clicked), "sample_weight": 1.0})
    return records


@pytest.mark.parametrize("keep_rate", [1.0, 0.1])
def test_the_untrained_anchored_network_is_the_priors_baseline_at_the_keep_rate(keep_rate):
    snapshot = _snapshot()
    examples = ExampleTable.from_records(_examples([(r, p) for r in range(6) for p in (1, 2)], 20))
    spec = FeatureSpec.learn(examples, snapshot)
    network = build(spec, prior_keep_rate=keep_rate)
    raw = np.asarray(network(example_inputs(spec, examples, {7: ad_table(spec, snapshot)}))).reshape(-1)
    baseline = priors_baseline(examples, {7: snapshot})
    assert training.recalibrate(raw, keep_rate) == pytest.approx(baseline, rel=1e-4)


def test_a_model_trained_on_two_ads_scores_the_ads_it_never_saw_near_their_true_rates():
    snapshot = _snapshot()
    # the best ad of each campaign, at the top and second slot: what a near-greedy policy logs
    records = _examples([(0, 1), (3, 2)], 1_500)
    model = train_click_model(records, {7: snapshot}, 1.0, TrainConfig(epochs=8), min_segment_clicks=50,
                              log=lambda line: None)
    rows = snapshot.rows(AD_IDS)
    inputs = request_inputs(model.spec, ad_table(model.spec, snapshot), rows, [1],
                            RequestFacts(user_features=records[0]["user_features"], placement="feed", country=None,
                                         device="ios"))
    predicted = model.calibration.lookup("feed", None, "CLICK").apply(
        model.corrected(model.raw_probabilities(inputs)))
    for row in (1, 2, 4, 5):  # never in the training data
        assert 0.5 * TRUE_CTR[row] < predicted[row] < 2.0 * TRUE_CTR[row], (row, predicted.round(3).tolist())


def _two_scores(seed: int, n: int = 900) -> tuple[np.ndarray, np.ndarray]:
    """Held-out examples of a model that scores the two ads it saw at their true rates, 0.28 and 0.21."""
    rng = np.random.default_rng(seed)
    p = np.where(rng.random(n) < 0.5, 0.28, 0.21)
    return p, (rng.random(n) < p).astype(np.int8)


def test_held_out_scores_at_two_values_keep_the_global_slope_near_one():
    slopes, free_slopes = [], []
    for seed in range(12):
        p, y = _two_scores(seed)
        ones, n = np.ones(len(p)), len(p)
        fitted = fit_segment_calibration(p, y, ones, np.full(n, "feed"), np.full(n, "US"), np.full(n, "CLICK"))
        slopes.append(fitted.coefficients[(2, ())].a)
        free_slopes.append(fit_platt(logit(p), y).a)
    assert max(abs(a - 1.0) for a in slopes) < 0.2, slopes
    assert max(abs(a - 1.0) for a in free_slopes) > 0.4, free_slopes  # the unshrunk slope is noise


def test_the_global_prior_weighs_nothing_against_thousands_of_clicks_over_spread_scores():
    rng = np.random.default_rng(5)
    z = rng.normal(-3, 1, 200_000)  # the model's logit
    y = rng.random(len(z)) < sigmoid(0.7 * z - 0.4)  # the truth: over-confident and too high a model
    n = len(z)
    fitted = fit_segment_calibration(sigmoid(z), y, np.ones(n), np.full(n, "feed"), np.full(n, "US"),
                                     np.full(n, "CLICK")).coefficients[(2, ())]
    assert fitted.a == pytest.approx(0.7, abs=0.03)
    assert fitted.b == pytest.approx(-0.4, abs=0.1)
