"""Offline metrics of a click model, every one weighted by sample_weight so a file whose negatives were
down-sampled evaluates as the full population it stands for. Pure numpy.

- log loss: the weighted mean of -[y log p + (1 - y) log(1 - p)].
- normalised entropy (NE, He et al. 2014): log loss divided by the entropy of the weighted base rate, i.e.
  by the log loss of always predicting the base rate. 1.0 is no better than knowing the average click rate;
  lower is better, and it does not move with the base rate the way raw log loss does.
- AUC: the weighted probability that a random click scores above a random non-click, ties counting half.
- calibration: predicted over observed clicks (sum of w p over sum of w y), per segment; 1.0 is calibrated,
  and the design alerts outside 0.95-1.05.

Never runs on the request path; reads no files."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from serving.model.calibration import EPSILON, segment_codes


def _weights(labels: np.ndarray, weights) -> np.ndarray:
    return np.ones(len(labels)) if weights is None else np.asarray(weights, dtype=np.float64)


def log_loss(labels, predictions, weights=None) -> float:
    y = np.asarray(labels, dtype=np.float64)
    p = np.clip(np.asarray(predictions, dtype=np.float64), EPSILON, 1 - EPSILON)
    w = _weights(y, weights)
    return float(-(w * (y * np.log(p) + (1 - y) * np.log1p(-p))).sum() / w.sum())


def entropy(rate: float) -> float:
    """Entropy (nats) of a Bernoulli variable: the log loss of predicting its own rate."""
    rate = min(max(rate, EPSILON), 1 - EPSILON)
    return float(-(rate * np.log(rate) + (1 - rate) * np.log1p(-rate)))


def base_rate(labels, weights=None) -> float:
    y = np.asarray(labels, dtype=np.float64)
    w = _weights(y, weights)
    return float((w * y).sum() / w.sum())


def normalised_entropy(labels, predictions, weights=None) -> float:
    return log_loss(labels, predictions, weights) / entropy(base_rate(labels, weights))


def auc(labels, scores, weights=None) -> float:
    """Weighted ROC AUC with ties counted half; nan when one class is absent."""
    y = np.asarray(labels, dtype=np.float64)
    w = _weights(y, weights)
    distinct, group = np.unique(np.asarray(scores, dtype=np.float64), return_inverse=True)
    positive = np.bincount(group, weights=w * y, minlength=len(distinct))
    negative = np.bincount(group, weights=w * (1 - y), minlength=len(distinct))
    total_positive, total_negative = positive.sum(), negative.sum()
    if total_positive <= 0 or total_negative <= 0:
        return float("nan")
    negatives_below = np.cumsum(negative) - negative
    return float((positive * (negatives_below + 0.5 * negative)).sum() / (total_positive * total_negative))


def summary(labels, predictions, weights=None) -> dict[str, float]:
    """NE, log loss, AUC and calibration (predicted over observed, weighted) of one set of predictions."""
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(predictions, dtype=np.float64)
    w = _weights(y, weights)
    return {"ne": normalised_entropy(y, p, w), "log_loss": log_loss(y, p, w), "auc": auc(y, p, w),
            "calibration": float((w * p).sum() / max(float((w * y).sum()), 1e-12))}


def calibration_by_segment(labels, predictions, weights, segments: Mapping[str, np.ndarray]) -> list[dict]:
    """Predicted over observed clicks per segment (the segment columns named in `segments`), with the
    weighted impressions, predicted and observed clicks and the raw clicks behind each ratio (None for a
    segment without clicks)."""
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(predictions, dtype=np.float64)
    w = _weights(y, weights)
    names = list(segments)
    keys, rows = segment_codes([segments[n] for n in names])
    impressions = np.bincount(rows, weights=w, minlength=len(keys))
    predicted = np.bincount(rows, weights=w * p, minlength=len(keys))
    observed = np.bincount(rows, weights=w * y, minlength=len(keys))
    clicks = np.bincount(rows, weights=y, minlength=len(keys))
    out = []
    for i, key in enumerate(keys):
        out.append({"segment": dict(zip(names, key)), "impressions": round(float(impressions[i]), 1),
                    "predicted_clicks": round(float(predicted[i]), 2), "observed_clicks": round(float(observed[i]), 2),
                    "clicks": int(clicks[i]),
                    "ratio": float(predicted[i] / observed[i]) if observed[i] > 0 else None})
    return out
