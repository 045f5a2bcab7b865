"""Scheduled retraining (design: "retrains the click and conversion models daily with hourly updates, and fits a
calibration layer per segment ... ships nothing until a canary passes"): what each run of `adserve model retrain`
does, decided from the registry and the event time of the newest labelled example, and the training steps it
runs. The retraining process (learning.retrainer) reads the topics, writes the model folders and publishes the
registry entries; everything here is pure or works on records already read.

One run is one of:
- judge: a canary is on the registry. Its served traffic since it was published, joined with its labelled
  examples, goes through the promotion rule (learning.canary.canary_report, the same rule as
  `adserve model promote`): "promote" makes it CURRENT, "hold" takes it off (the current model stays), "not
  enough data" waits for more traffic, up to `canary_max_age_s` of event time, then takes it off.
- full: no current model yet, or `full_every_s` of event time since the last full training: a new model trained
  from scratch on the last `window_s` of examples (learning.trainer.train_click_model), published as the canary.
- update: `every_s` since the last run trained anything: the current model's per-segment calibration refit on
  the last `update_window_s` of examples (the network kept), published as the canary. This is the hourly update:
  the calibration layer follows the traffic between two daily trainings.
- wait: nothing is due.

Examples whose ad-feature snapshot is no longer on disk cannot be rebuilt exactly and are left out (counted).
Every run that trains writes `evaluation.json` beside the version: its kind, its examples and its validation
figures."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from learning import metrics
from learning.calibration import SegmentFitRules, fit_segment_calibration
from learning.dataset import by_task, validation_mask
from serving.model.ad_features import AdFeatureSnapshot
from serving.model.examples import ExampleTable
from serving.model.features import ad_table, example_inputs

JUDGE, FULL, UPDATE, WAIT = "judge", "full", "update", "wait"


@dataclass(frozen=True)
class RetrainPolicy:
    every_s: float = 3600.0  # an update (calibration refit) at most this often, in event time
    full_every_s: float = 86_400.0  # a full training this often
    window_s: float = 86_400.0  # the examples a full training reads
    update_window_s: float = 3600.0  # the examples an update refits the calibration on
    min_examples: int = 2_000  # fewer labelled examples in the window: nothing is trained
    min_clicks: int = 100  # fewer clicks in the window: nothing is trained
    canary_share: float = 0.05
    canary_max_age_s: float = 6 * 3600.0  # a canary without a verdict for this long is taken off


@dataclass
class RetrainState:
    """What the runs remember (learning.retrainer keeps it as retrain-state.json beside the models): event
    times, ms."""

    last_full_ms: int = 0
    last_trained_ms: int = 0
    canary_since_ms: int = 0  # event time of the newest example when the canary was published
    runs: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def next_action(state: RetrainState, *, has_current: bool, has_canary: bool, newest_event_ms: int,
                policy: RetrainPolicy) -> str:
    """What this run does (see the module docstring)."""
    if has_canary:
        return JUDGE
    if newest_event_ms <= 0:
        return WAIT
    if not has_current or newest_event_ms - state.last_full_ms >= policy.full_every_s * 1000:
        return FULL
    if newest_event_ms - state.last_trained_ms >= policy.every_s * 1000:
        return UPDATE
    return WAIT


def in_window(records: Sequence[Mapping[str, Any]], newest_event_ms: int, window_s: float) -> list[dict[str, Any]]:
    """The examples served within `window_s` before the newest example's event time."""
    since = newest_event_ms - window_s * 1000
    return [dict(r) for r in records if int(r["served_time"]) >= since]


def with_snapshots(records: Sequence[dict[str, Any]], available: set[int]) -> tuple[list[dict[str, Any]], int]:
    """(the examples whose ad-feature snapshot is available, how many were left out)."""
    kept = [r for r in records if int(r["ad_snapshot_version"]) in available]
    return kept, len(records) - len(kept)


def trainable(records: Sequence[Mapping[str, Any]], policy: RetrainPolicy) -> str | None:
    """Why these examples are too few to train on; None when they are enough."""
    clicks_task, _ = by_task(records)
    clicks = sum(1 for r in clicks_task if int(r["label"]) == 1)
    if len(clicks_task) < policy.min_examples:
        return f"{len(clicks_task):,} click examples in the window, {policy.min_examples:,} needed"
    if clicks < policy.min_clicks:
        return f"{clicks:,} clicks in the window, {policy.min_clicks:,} needed"
    return None


def recalibrate(model, records: Sequence[dict[str, Any]], snapshots: Mapping[int, AdFeatureSnapshot], *,
                min_segment_clicks: int = 50, validation_share: float = 0.3) -> dict[str, Any]:
    """The hourly update: refit `model`'s per-segment calibration (in place) on the click examples of the last
    window, the network unchanged. Fitted on the requests outside a validation share, judged on the share.
    Returns the validation figures before and after the refit."""
    clicks_task, _ = by_task(records)
    examples = ExampleTable.from_records(clicks_task)
    examples = examples.take(~examples.scored_by_fallback)
    held = validation_mask(examples.request_id, validation_share)
    tables = {v: ad_table(model.spec, snapshots[v]) for v in np.unique(examples.ad_snapshot_version).tolist()}
    corrected = model.corrected(model.raw_probabilities(example_inputs(model.spec, examples, tables)))
    before = model.calibration.apply(corrected, examples.placement, examples.country, examples.billing_type)
    fit = ~held
    model.calibration = fit_segment_calibration(
        corrected[fit], examples.label[fit], examples.sample_weight[fit], examples.placement[fit],
        examples.country[fit], examples.billing_type[fit],
        SegmentFitRules(min_positives=min_segment_clicks, min_negatives=min_segment_clicks))
    after = model.calibration.apply(corrected, examples.placement, examples.country, examples.billing_type)
    w, y = examples.sample_weight, examples.label
    return {"model": metrics.summary(y[held], after[held], w[held]),
            "model_before_refit": metrics.summary(y[held], before[held], w[held]),
            "refit_rows": int(fit.sum()), "validation_rows": int(held.sum())}


@dataclass
class RunReport:
    """What one run did, for its log line, its --json output and evaluation.json."""

    action: str
    newest_event_ms: int
    examples: int = 0
    examples_without_snapshot: int = 0
    model_version: str | None = None
    verdict: str | None = None
    published: list[str] = field(default_factory=list)
    reason: str = ""
    figures: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
