"""Training and offline evaluation of the click model, on records already read (the `adserve model`
commands read and write the files).

train_click_model: drop the impressions served on fallback scores (design: "the served log marks it as a
fallback so training does not learn from it"), split by request id (90 / 10), learn the FeatureSpec on the
training side, fit the network (anchored on the ads' click priors at the keep rate, learning.network)
unweighted on the down-sampled examples with early stopping on the validation side, then on the validation
side (examples the network never trained on) correct for the down-sampling with q = p / (p + (1 - p) / w) and
fit the per-segment calibration with sample weights.

Both also handle the CONVERSION examples in the records, if any (learning.conversion): training fits
the bundle's conversion model on them, evaluation adds its figures under "conversion".

evaluate_click_model: the model's calibrated predictions on other examples (a held-out day) against the
priors-only baseline (PriorPredictor's formula: the snapshot's ctr prior x position effect), the logged
pCTR (whatever served that day) and, when the true click probabilities are known (a simulated day), the
oracle; every metric weighted by sample_weight."""
from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from serving.decision.prediction import position_effect
from serving.decision.prerank import DEFAULT_CVR_PRIOR
from learning import metrics
from learning.calibration import SegmentFitRules, fit_segment_calibration
from learning.conversion import evaluate_conversion_model, train_conversion_model
from learning.dataset import ExamplesInvalid, by_task, truth_column, validation_mask
from learning.network import TrainConfig, build, fit, stderr_log
from learning.student import fit_conversion_student, fit_student
from serving.model.ad_features import AdFeatureSnapshot
from serving.model.calibration import SegmentCalibration
from serving.model.click_model import ClickModel
from serving.model.examples import ExampleTable
from serving.model.features import AdFeatureTable, FeatureSpec, ad_table, example_inputs

SEGMENTS = ("placement", "country", "billing_type")


def _ad_tables(spec: FeatureSpec, examples: ExampleTable,
               snapshots: Mapping[int, AdFeatureSnapshot]) -> dict[int, AdFeatureTable]:
    needed = sorted(int(v) for v in np.unique(examples.ad_snapshot_version))
    missing = [v for v in needed if v not in snapshots]
    if missing:
        raise ExamplesInvalid(f"the examples were served with ad-feature snapshot(s) {missing[:5]}, not in the "
                              f"ad-features folder (it has {sorted(snapshots)[-5:]})")
    return {v: ad_table(spec, snapshots[v]) for v in needed}


def priors_baseline(examples: ExampleTable, snapshots: Mapping[int, AdFeatureSnapshot]) -> np.ndarray:
    """PriorPredictor's pCTR of each example: the ad's ctr prior in its snapshot x the position effect (an
    ad the snapshot does not know gets the snapshot's mean prior)."""
    prior = np.empty(len(examples), dtype=np.float64)
    for version in np.unique(examples.ad_snapshot_version).tolist():
        snapshot = snapshots[int(version)]
        picked = np.flatnonzero(examples.ad_snapshot_version == version)
        rows = snapshot.rows(examples.ad_id[picked])
        known = snapshot.ctr_prior.astype(np.float64)
        prior[picked] = np.where(rows >= 0, known[rows], known.mean() if len(known) else 0.0)
    return np.clip(prior * position_effect(examples.slot_position), 0.0, 1.0)


class ExampleSplit(NamedTuple):
    """A training run's click examples: all of them, those not scored on fallback, and the training and
    validation sides of those."""

    everything: ExampleTable
    examples: ExampleTable
    train: ExampleTable
    held: ExampleTable


def _split(records: Sequence[dict[str, Any]], validation_share: float) -> ExampleSplit:
    """The click examples split for training; ExamplesInvalid when either side is too thin to train or calibrate
    on."""
    everything = ExampleTable.from_records(records)
    examples = everything.take(~everything.scored_by_fallback)
    validation = validation_mask(examples.request_id, validation_share)
    train, held = examples.take(~validation), examples.take(validation)
    if len(train) == 0 or train.positives == 0 or held.positives == 0 or held.positives == len(held):
        raise ExamplesInvalid(f"too few examples to train on: {len(train)} training rows with {train.positives} "
                              f"clicks, {len(held)} validation rows with {held.positives} clicks")
    return ExampleSplit(everything, examples, train, held)


def _add_conversion_model(model: ClickModel, conversion_records: Sequence[dict[str, Any]],
                          snapshots: Mapping[int, AdFeatureSnapshot], config: TrainConfig, *,
                          validation_share: float, min_segment_conversions: int, log: Callable[[str], None]) -> str:
    """Train the bundle's conversion model when there are conversion records; returns what the bundle's pCVR is
    (the metadata's "pcvr")."""
    if not conversion_records:
        return f"no conversion examples: pCVR is the constant prior {DEFAULT_CVR_PRIOR}"
    spec = model.spec
    converted = ExampleTable.from_records(conversion_records)
    model.conversion, pcvr = train_conversion_model(
        converted, spec, _ad_tables(spec, converted, snapshots), config, validation_share=validation_share,
        min_segment_conversions=min_segment_conversions, log=log)
    return pcvr


def _add_conversion_student(model: ClickModel, examples: ExampleTable, table: AdFeatureTable, config: TrainConfig,
                            log: Callable[[str], None]) -> None:
    """Fit the student of the bundle's conversion model, when it has one, on the click examples' users."""
    if model.conversion is None:
        return
    model.conversion.student = fit_conversion_student(model.spec, model.conversion, examples, table, seed=config.seed)
    if model.conversion.student is not None:
        log(f"conversion student: {model.conversion.student.fit_pairs:,} user x CPA-ad pairs, rms error of "
            f"log pCVR {model.conversion.student.fit_rmse:.3f}")


def _training_metadata(model: ClickModel, config: TrainConfig, history: Mapping[str, list[float]],
                       split: ExampleSplit, *, snapshot_versions: Sequence[int],
                       validation_metrics: Mapping[str, Any], pcvr: str, conversion_examples: int) -> dict[str, Any]:
    """What a trained bundle's metadata.json says about its training run."""
    architecture = config.architecture
    everything, examples, train, held = split
    return {
        "keep_rate": model.keep_rate, "training_rows": len(train), "training_clicks": train.positives,
        "validation_rows": len(held), "validation_clicks": held.positives,
        "dropped_fallback_rows": len(everything) - len(examples), "snapshot_version": max(snapshot_versions),
        "snapshot_versions": sorted(snapshot_versions), "epochs_run": len(history.get("loss", [])),
        "best_val_loss": min(history.get("val_loss", [float("nan")])), "history": history,
        "parameters": int(model.network.count_params()), "architecture": {
            "embedding_dim": architecture.embedding_dim, "interaction_dim": architecture.interaction_dim,
            "hidden": list(architecture.hidden)},
        "train_config": {"epochs": config.epochs, "batch_size": config.batch_size,
                         "learning_rate": config.learning_rate, "patience": config.patience, "seed": config.seed},
        "validation_metrics": validation_metrics, "calibration_segments": len(model.calibration.coefficients),
        "prerank_student": {"fit_pairs": model.student.fit_pairs, "fit_rmse_log_pctr": model.student.fit_rmse},
        "cvr_prior": DEFAULT_CVR_PRIOR, "pcvr": pcvr, "conversion_examples": conversion_examples}


def train_click_model(records: Sequence[dict[str, Any]], snapshots: Mapping[int, AdFeatureSnapshot],
                      keep_rate: float, config: TrainConfig = TrainConfig(), *, validation_share: float = 0.3,
                      min_segment_clicks: int = 50, min_segment_conversions: int = 30,
                      log: Callable[[str], None] = stderr_log) -> ClickModel:
    """A trained, calibrated ClickModel (unsaved) with its training metadata, and its conversion model when the
    records hold enough CONVERSION examples."""
    records, conversion_records = by_task(records)
    split = _split(records, validation_share)
    examples, train, held = split.examples, split.train, split.held
    newest = int(examples.ad_snapshot_version.max())
    if newest not in snapshots:
        raise ExamplesInvalid(f"ad-feature snapshot v{newest} (the newest the examples name) is not loaded")
    spec = FeatureSpec.learn(train, snapshots[newest])
    tables = _ad_tables(spec, examples, snapshots)
    log(f"training on {len(train):,} examples ({train.positives:,} clicks), validating on {len(held):,} "
        f"({held.positives:,} clicks); keep rate {keep_rate:g}; {spec.user_dim} user features, "
        f"snapshot v{newest}")
    train_inputs, held_inputs = example_inputs(spec, train, tables), example_inputs(spec, held, tables)
    network = build(spec, config.architecture, prior_keep_rate=keep_rate)
    history = fit(network, train_inputs, train.label, held_inputs, held.label, config, log)
    model = ClickModel(network, spec, SegmentCalibration({}), keep_rate)
    corrected = model.corrected(model.raw_probabilities(held_inputs))
    model.calibration = fit_segment_calibration(
        corrected, held.label, held.sample_weight, held.placement, held.country, held.billing_type,
        SegmentFitRules(min_positives=min_segment_clicks, min_negatives=min_segment_clicks))
    calibrated = model.calibration.apply(corrected, held.placement, held.country, held.billing_type)
    model.student = fit_student(model, examples, tables[newest], seed=config.seed)
    pcvr = _add_conversion_model(model, conversion_records, snapshots, config, validation_share=validation_share,
                                 min_segment_conversions=min_segment_conversions, log=log)
    _add_conversion_student(model, examples, tables[newest], config, log)
    log(f"pre-ranker student: {model.student.fit_pairs:,} user-ad pairs, rms error of log pCTR "
        f"{model.student.fit_rmse:.3f}")
    validation_metrics = {
        "model": metrics.summary(held.label, calibrated, held.sample_weight),
        "model_before_segment_calibration": metrics.summary(held.label, corrected, held.sample_weight),
        "priors_baseline": metrics.summary(held.label, priors_baseline(held, snapshots), held.sample_weight)}
    model.metadata = _training_metadata(
        model, config, history, split, snapshot_versions=list(tables), validation_metrics=validation_metrics,
        pcvr=pcvr, conversion_examples=len(conversion_records))
    return model


def evaluate_click_model(model: ClickModel, records: Sequence[dict[str, Any]],
                         snapshots: Mapping[int, AdFeatureSnapshot], truth: Mapping[str, float] | None = None, *,
                         min_segment_clicks: int = 100, conversion_truth: Mapping[str, float] | None = None,
                         min_segment_conversions: int = 50) -> dict[str, Any]:
    """NE, log loss, AUC and calibration per segment of the model, beside the baselines (see the module
    docstring). calibration_min/max are over segments with at least min_segment_clicks clicks (raw clicks:
    a ratio over n clicks is only good to about +-2/sqrt(n)). With CONVERSION examples and a conversion
    model, "conversion" holds learning.conversion.evaluate_conversion_model's figures (None otherwise)."""
    records, conversion_records = by_task(records)
    examples = ExampleTable.from_records(records)
    if len(examples) == 0 or examples.positives == 0:
        raise ExamplesInvalid(f"nothing to evaluate: {len(examples)} examples, {examples.positives} clicks")
    y, w = examples.label, examples.sample_weight
    tables = _ad_tables(model.spec, examples, snapshots)
    corrected = model.corrected(model.raw_probabilities(example_inputs(model.spec, examples, tables)))
    predicted = model.calibration.apply(corrected, examples.placement, examples.country, examples.billing_type)
    model_summary = metrics.summary(y, predicted, w)
    baseline = metrics.summary(y, priors_baseline(examples, snapshots), w)
    logged = metrics.summary(y, examples.logged_pctr, w)
    segments = metrics.calibration_by_segment(y, predicted, w, {n: getattr(examples, n) for n in SEGMENTS})
    for s in segments:  # what calibrates the segment: its own fit, or a parent's when it had too few clicks
        s["calibrated_by"] = model.calibration.fitted_level(s["segment"])
        s["judged"] = s["clicks"] >= min_segment_clicks
    judged = [s["ratio"] for s in segments if s["judged"]]
    result: dict[str, Any] = {
        "model_version": model.version, "examples": len(examples), "clicks": examples.positives,
        "weighted_impressions": round(float(w.sum()), 1), "base_rate": metrics.base_rate(y, w),
        "ne_model": model_summary["ne"], "log_loss": model_summary["log_loss"], "auc": model_summary["auc"],
        "calibration": model_summary["calibration"],
        "ne_model_before_segment_calibration": metrics.normalised_entropy(y, corrected, w),
        "ne_baseline": baseline["ne"], "auc_baseline": baseline["auc"], "calibration_baseline": baseline["calibration"],
        "ne_logged": logged["ne"], "auc_logged": logged["auc"],
        "ne_oracle": None, "auc_oracle": None,
        "calibration_min": min(judged) if judged else None, "calibration_max": max(judged) if judged else None,
        "calibration_segments_judged": len(judged), "min_segment_clicks": min_segment_clicks,
        "segments_on_parent_calibration": sum(s["calibrated_by"] != "segment" for s in segments),
        "segments": segments, "conversion": None}
    if conversion_records and model.conversion is not None:
        converted = ExampleTable.from_records(conversion_records)
        result["conversion"] = evaluate_conversion_model(
            model.conversion, model.spec, converted, _ad_tables(model.spec, converted, snapshots),
            conversion_truth, min_segment_conversions=min_segment_conversions)
    if truth is not None:
        result.update(_oracle_figures(examples, predicted, segments, truth, min_segment_clicks))
    return result


def _oracle_figures(examples: ExampleTable, predicted: np.ndarray, segments: Sequence[Mapping[str, Any]],
                    truth: Mapping[str, float], min_segment_clicks: int) -> dict[str, Any]:
    """The figures only a simulated day has (the true click probability of each impression): the oracle's
    NE, AUC and calibration, and the model's calibration against expected rather than observed clicks."""
    y, w = examples.label, examples.sample_weight
    figures: dict[str, Any] = {}
    oracle = truth_column(examples.impression_id, truth, "truth")
    figures["ne_oracle"] = metrics.normalised_entropy(y, oracle, w)
    figures["auc_oracle"] = metrics.auc(y, oracle, w)
    figures["calibration_oracle"] = float((w * oracle).sum() / max((w * y).sum(), 1e-12))
    # The true probabilities' own spread over the same segments: how far from 1.0 the counts alone put a
    # perfectly calibrated predictor, the yardstick for calibration_min/max.
    oracle_segments = metrics.calibration_by_segment(y, oracle, w, {n: getattr(examples, n) for n in SEGMENTS})
    judged_oracle = [s["ratio"] for s in oracle_segments if s["clicks"] >= min_segment_clicks]
    figures["calibration_oracle_min"] = min(judged_oracle) if judged_oracle else None
    figures["calibration_oracle_max"] = max(judged_oracle) if judged_oracle else None
    # Predicted over EXPECTED clicks (the sum of the true probabilities), per segment: the model's own
    # calibration error without the counts' noise, which only a simulation can measure.
    expected = metrics.calibration_by_segment(oracle, predicted, w, {n: getattr(examples, n) for n in SEGMENTS})
    clicks_in = {tuple(s["segment"].values()): s["clicks"] for s in segments}
    judged_expected = [s["ratio"] for s in expected
                       if clicks_in.get(tuple(s["segment"].values()), 0) >= min_segment_clicks]
    figures["calibration_expected"] = float((w * predicted).sum() / max((w * oracle).sum(), 1e-12))
    figures["calibration_expected_min"] = min(judged_expected) if judged_expected else None
    figures["calibration_expected_max"] = max(judged_expected) if judged_expected else None
    figures["segments_expected"] = expected
    return figures
