"""Training and offline evaluation of the conversion model: pCVR, the probability that a click converts, which
prices conversion (CPA) bids at bid x pCTR x pCVR (design: "Prediction service ... pCVR for conversion bids",
"Conversions arrive days later and join on the same id").

Its examples are the joins' CONVERSION examples (core.training.conversion_example): one per clicked
impression, label 1 when a conversion came within the conversion window, never down-sampled (clicks are
few). The network is the click model's architecture (learning.network.build) on the same inputs
and FeatureSpec with the slot position fixed at 1, trained unweighted with early stopping on a validation
split by request id, then calibrated per segment (placement, country, billing type) on that split, as the
click model is (learning.calibration; a segment needs min_conversions conversions and as many
non-conversions, else a coarser segment serves it).

The baseline is the constant prior served without a conversion model (serving.decision.prerank.DEFAULT_CVR_PRIOR); on a
simulated day the oracle is the true conversion probability (truth_conversions.json). Reads and writes no
files; never runs on the request path."""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from serving.decision.prerank import DEFAULT_CVR_PRIOR
from learning import metrics
from learning.calibration import SegmentFitRules, fit_segment_calibration
from learning.dataset import truth_column, validation_mask
from learning.network import TrainConfig, build, fit, stderr_log
from serving.model.calibration import SegmentCalibration
from serving.model.click_model import ConversionModel
from serving.model.examples import ExampleTable
from serving.model.features import AdFeatureTable, FeatureSpec, conversion_inputs

SEGMENTS = ("placement", "country", "billing_type")
MIN_CONVERSIONS = 20  # conversions each side of the split needs before a model is trained at all


def train_conversion_model(everything: ExampleTable, spec: FeatureSpec,
                           tables: Mapping[int, AdFeatureTable], config: TrainConfig = TrainConfig(), *,
                           validation_share: float = 0.3, min_segment_conversions: int = 30,
                           log: Callable[[str], None] = stderr_log) -> tuple[ConversionModel | None, str]:
    """(the trained, calibrated ConversionModel, what was done); (None, why not) when the examples are too few
    (fewer than MIN_CONVERSIONS conversions on either side of the split): pCVR then stays the constant prior.
    `tables`: the ad-feature tables of every snapshot version the examples name (trainer._ad_tables)."""
    examples = everything.take(~everything.scored_by_fallback)
    validation = validation_mask(examples.request_id, validation_share)
    train, held = examples.take(~validation), examples.take(validation)
    if min(train.positives, held.positives) < MIN_CONVERSIONS:
        why = (f"too few conversion examples for a conversion model: {len(train):,} training clicks with "
               f"{train.positives:,} conversions, {len(held):,} validation clicks with {held.positives:,} (each "
               f"side needs {MIN_CONVERSIONS}); pCVR stays the constant prior {DEFAULT_CVR_PRIOR}")
        log(why)
        return None, why
    log(f"conversion model: training on {len(train):,} clicks ({train.positives:,} converted), validating on "
        f"{len(held):,} ({held.positives:,} converted)")
    train_inputs, held_inputs = conversion_inputs(spec, train, tables), conversion_inputs(spec, held, tables)
    network = build(spec, config.architecture, name="conversion_model")
    history = fit(network, train_inputs, train.label, held_inputs, held.label, config, log)
    model = ConversionModel(network, SegmentCalibration({}))
    raw = model.raw_probabilities(held_inputs)
    ones = np.ones(len(held))
    model.calibration = fit_segment_calibration(raw, held.label, ones, held.placement, held.country, held.billing_type,
                                                SegmentFitRules(min_positives=min_segment_conversions,
                                                                min_negatives=min_segment_conversions))
    calibrated = model.calibration.apply(raw, held.placement, held.country, held.billing_type)
    y = held.label.astype(np.float64)
    model.metadata = {
        "training_clicks": len(train), "training_conversions": train.positives, "validation_clicks": len(held),
        "validation_conversions": held.positives, "dropped_fallback_rows": len(everything) - len(examples),
        "epochs_run": len(history.get("loss", [])), "history": history, "parameters": int(network.count_params()),
        "calibration_segments": len(model.calibration.coefficients),
        "validation_metrics": {
            "model": metrics.summary(y, calibrated), "model_before_segment_calibration": metrics.summary(y, raw),
            "constant_prior": metrics.summary(y, np.full(len(held), DEFAULT_CVR_PRIOR))}}
    v = model.metadata["validation_metrics"]
    log(f"conversion model: validation NE {v['model']['ne']:.4f} (constant prior {v['constant_prior']['ne']:.4f}), "
        f"predicted/observed conversions {v['model']['calibration']:.3f}")
    return model, "trained"


def evaluate_conversion_model(model: ConversionModel, spec: FeatureSpec, examples: ExampleTable,
                              tables: Mapping[int, AdFeatureTable], truth: Mapping[str, float] | None = None, *,
                              min_segment_conversions: int = 50) -> dict[str, Any]:
    """NE, log loss, AUC and calibration per segment of the conversion model on conversion examples, beside the
    constant prior and, with the true conversion probabilities, the oracle. cvr_calibration_min/max are over
    segments with at least min_segment_conversions conversions."""
    y = examples.label.astype(np.float64)
    predicted = model.predict_examples(spec, examples, tables)
    ones = np.ones(len(examples))
    mine, prior = metrics.summary(y, predicted), metrics.summary(y, np.full(len(examples), DEFAULT_CVR_PRIOR))
    columns = {n: getattr(examples, n) for n in SEGMENTS}
    segments = metrics.calibration_by_segment(y, predicted, ones, columns)
    judged = [s["ratio"] for s in segments if s["clicks"] >= min_segment_conversions]
    result: dict[str, Any] = {
        "clicks": len(examples), "conversions": examples.positives, "base_rate": metrics.base_rate(y),
        "ne_cvr_model": mine["ne"], "ne_cvr_baseline": prior["ne"], "ne_cvr_oracle": None,
        "auc_cvr_model": mine["auc"], "log_loss_cvr": mine["log_loss"], "cvr_calibration": mine["calibration"],
        "cvr_calibration_min": min(judged) if judged else None, "cvr_calibration_max": max(judged) if judged else None,
        "cvr_segments_judged": len(judged), "min_segment_conversions": min_segment_conversions,
        "cvr_segments": segments}
    if truth is not None:
        oracle = truth_column(examples.impression_id, truth, "conversion truth")
        result["ne_cvr_oracle"] = metrics.normalised_entropy(y, oracle)
        result["auc_cvr_oracle"] = metrics.auc(y, oracle)
        expected = metrics.calibration_by_segment(oracle, predicted, ones, columns)
        counts = {tuple(s["segment"].values()): s["clicks"] for s in segments}
        judged_expected = [s["ratio"] for s in expected
                           if counts.get(tuple(s["segment"].values()), 0) >= min_segment_conversions]
        result["cvr_calibration_expected"] = float(predicted.sum() / max(float(oracle.sum()), 1e-12))
        result["cvr_calibration_expected_min"] = min(judged_expected) if judged_expected else None
        result["cvr_calibration_expected_max"] = max(judged_expected) if judged_expected else None
    return result
