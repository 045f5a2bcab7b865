"""Fitting the calibration layer, offline: Platt coefficients per segment on held-out examples, which
serving.model.calibration.SegmentCalibration then applies on the request path.

a and b are fitted by weighted Newton steps (IRLS) on held-out examples, weighted by sample_weight so a
down-sampled file fits the full population. A segment is fitted only with at least min_positives clicks and
min_negatives non-clicks (raw counts: the evidence, not the weight it stands for).

Every fit's slope a is also held to its parent's slope (the global fit's to 1) by a prior worth
slope_prior_clicks (default 100), the intercept left free to fit the level: the data measure a only as well
as the held-out scores are spread. A model trained on a log where the best ad of each campaign took nearly
every impression scores its held-out examples at two or three values, and their slope is noise (0.5-1.1 on
the same data) that would carry every other ad's pCTR toward the middle; over thousands of clicks of spread
scores the prior weighs nothing. A fitted segment is also shrunk toward its parent by a prior worth some
clicks, so a segment just over the minimum does not swing on noise: weakly at (placement, billing type)
(coarse_prior_clicks, default 10: a placement's level is real and well measured), strongly at (placement, country, billing type) (prior_clicks, default 1,000: on the
simulated day a country moved the fit by more noise than signal). Never runs on the request path."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from serving.model.calibration import IDENTITY, LEVELS, Platt, SegmentCalibration, logit, segment_codes, sigmoid


def fit_platt(scores, labels, weights=None, *, prior: Platt = IDENTITY, prior_clicks: float = 0.0,
              slope_prior_clicks: float = 0.0, iterations: int = 50) -> Platt:
    """a, b maximising the weighted log likelihood of sigmoid(a * score + b), minus a Gaussian penalty
    toward `prior` worth `prior_clicks` clicks (plus a tiny one that keeps separable data finite), and one on
    the slope alone toward prior.a worth `slope_prior_clicks` (b stays free: it holds the slope where the
    scores' spread does not measure it, whatever their level).

    Newton's method on the mean log loss: gradient X'(w (p - y)) / W, Hessian X' diag(w p (1 - p)) X / W;
    the penalty adds (prior_clicks / W) I, since a click rate's information per unit weight is about
    clicks / W. Each step is halved until the objective falls."""
    z = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    w = np.ones(len(z)) if weights is None else np.asarray(weights, dtype=np.float64)
    total = w.sum()
    if total <= 0:
        return prior
    x = np.stack([z, np.ones_like(z)], axis=1)
    centre = np.array([prior.a, prior.b])
    strength = np.diag([prior_clicks + slope_prior_clicks, prior_clicks]) / total + 1e-6 * np.eye(2)

    def objective(theta: np.ndarray) -> float:
        margin = x @ theta
        loss = (w * (np.logaddexp(0.0, margin) - y * margin)).sum() / total
        return float(loss + 0.5 * (theta - centre) @ strength @ (theta - centre))

    theta = centre.copy()
    current = objective(theta)
    for _ in range(iterations):
        p = sigmoid(x @ theta)
        gradient = x.T @ (w * (p - y)) / total + strength @ (theta - centre)
        hessian = (x * (w * p * (1 - p))[:, None]).T @ x / total + strength
        step = np.linalg.solve(hessian, gradient)
        scale = 1.0
        while scale > 1e-6:
            candidate = theta - scale * step
            value = objective(candidate)
            if value <= current:
                break
            scale /= 2
        else:
            break
        theta, improvement, current = candidate, current - value, value
        if improvement < 1e-12:
            break
    return Platt(float(theta[0]), float(theta[1]))


@dataclass(frozen=True)
class SegmentFitRules:
    """How much evidence a segment needs to be fitted (raw clicks and non-clicks) and how strongly each fit is
    held to its parent (priors worth that many clicks; see the module docstring)."""

    min_positives: int = 50
    min_negatives: int = 50
    prior_clicks: float = 1000.0
    coarse_prior_clicks: float = 10.0
    slope_prior_clicks: float = 100.0


def fit_segment_calibration(probabilities, labels, weights, placement, country, billing_type,
                            rules: SegmentFitRules = SegmentFitRules()) -> SegmentCalibration:
    """Fit the global level (its slope held to 1), then every (placement, billing type) with enough evidence
    shrunk toward the global fit, then every (placement, country, billing type) shrunk toward its parent;
    every slope held to its parent's by rules.slope_prior_clicks."""
    min_positives, min_negatives = rules.min_positives, rules.min_negatives
    prior_clicks, coarse_prior_clicks, slope_prior_clicks = \
        rules.prior_clicks, rules.coarse_prior_clicks, rules.slope_prior_clicks
    z = logit(probabilities)
    y = np.asarray(labels, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    values = {"placement": np.asarray(placement, dtype=object), "country": np.asarray(country, dtype=object),
              "billing_type": np.asarray(billing_type, dtype=object)}
    values = {k: np.where(v == None, "", v).astype(str) for k, v in values.items()}  # noqa: E711 - elementwise
    calibration = SegmentCalibration({}, {}, min_positives, min_negatives, prior_clicks, coarse_prior_clicks)

    def enough(mask: np.ndarray) -> tuple[bool, int, int]:
        clicks = int(y[mask].sum())
        non_clicks = int(mask.sum()) - clicks
        return clicks >= min_positives and non_clicks >= min_negatives, clicks, non_clicks

    everything = np.ones(len(z), dtype=bool)
    fitted, clicks, non_clicks = enough(everything)
    if fitted:
        calibration.coefficients[(2, ())] = fit_platt(z, y, w, slope_prior_clicks=slope_prior_clicks)
        calibration.counts[(2, ())] = (clicks, non_clicks)
    for level in (1, 0):
        names = LEVELS[level]
        keys, rows = segment_codes([values[n] for n in names])
        for i, key in enumerate(keys):
            mask = rows == i
            fitted, clicks, non_clicks = enough(mask)
            if not fitted:
                continue
            parent = calibration.resolve(dict(zip(names, key)), from_level=level + 1)
            strength = prior_clicks if level == 0 else coarse_prior_clicks
            calibration.coefficients[(level, key)] = fit_platt(z[mask], y[mask], w[mask], prior=parent,
                                                               prior_clicks=strength,
                                                               slope_prior_clicks=slope_prior_clicks)
            calibration.counts[(level, key)] = (clicks, non_clicks)
    calibration._cache.clear()
    return calibration

