"""The calibration layer: Platt scaling per segment, so predicted click rates match observed ones where
prices are computed (design: "a calibration layer per segment (placement, country, bid type)"). Pure numpy.

Each segment maps the model's (down-sampling corrected) probability q to sigmoid(a * logit(q) + b), with a
and b fitted by weighted Newton steps (IRLS) on held-out examples, weighted by sample_weight so a down-sampled
file fits the full population. Segments are looked up finest first:

    (placement, country, billing type)  ->  (placement, billing type)  ->  global  ->  identity

A segment is fitted only with at least min_positives clicks and min_negatives non-clicks (raw counts: the
evidence, not the weight it stands for); a request in a segment that was not fitted uses the coarser one.
A fitted segment is also shrunk toward its parent by a prior worth some clicks, so a segment just over the
minimum does not swing on noise: weakly at (placement, billing type) (coarse_prior_clicks, default 10: a
placement's level is real and well measured), strongly at (placement, country, billing type) (prior_clicks,
default 1,000: on the simulated day a country moved the fit by more noise than signal). Billing type
stands in for the design's "bid type": it is what the TrainingExample logs, and cpc and cpa ads both bill
clicks."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from serving.model.metrics import EPSILON, segment_codes

LEVELS: tuple[tuple[str, ...], ...] = (("placement", "country", "billing_type"), ("placement", "billing_type"), ())
SEGMENT_COLUMNS = ("placement", "country", "billing_type")


def logit(p) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), EPSILON, 1 - EPSILON)
    return np.log(p) - np.log1p(-p)


def sigmoid(x) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


@dataclass(frozen=True)
class Platt:
    a: float = 1.0
    b: float = 0.0

    def apply(self, probabilities) -> np.ndarray:
        return sigmoid(self.a * logit(probabilities) + self.b)


IDENTITY = Platt()


def fit_platt(scores, labels, weights=None, *, prior: Platt = IDENTITY, prior_clicks: float = 0.0,
              iterations: int = 50) -> Platt:
    """a, b maximising the weighted log likelihood of sigmoid(a * score + b), minus a Gaussian penalty
    toward `prior` worth `prior_clicks` clicks (plus a tiny one that keeps separable data finite).

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
    strength = prior_clicks / total + 1e-6

    def objective(theta: np.ndarray) -> float:
        margin = x @ theta
        loss = (w * (np.logaddexp(0.0, margin) - y * margin)).sum() / total
        return float(loss + 0.5 * strength * ((theta - centre) ** 2).sum())

    theta = centre.copy()
    current = objective(theta)
    for _ in range(iterations):
        p = sigmoid(x @ theta)
        gradient = x.T @ (w * (p - y)) / total + strength * (theta - centre)
        hessian = (x * (w * p * (1 - p))[:, None]).T @ x / total + strength * np.eye(2)
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


@dataclass
class SegmentCalibration:
    """Fitted Platt coefficients by (level, segment key), and the rule that looks a request's segment up."""

    coefficients: dict[tuple[int, tuple[str, ...]], Platt]
    counts: dict[tuple[int, tuple[str, ...]], tuple[int, int]] = field(default_factory=dict)  # clicks, non-clicks
    min_positives: int = 50
    min_negatives: int = 50
    prior_clicks: float = 1000.0  # toward the parent, for (placement, country, billing type)
    coarse_prior_clicks: float = 10.0  # toward the global fit, for (placement, billing type)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def lookup(self, placement: str, country: str | None, billing_type: str) -> Platt:
        """The finest fitted segment's coefficients for one request (cached: a server sees few segments)."""
        key = (placement or "", country or "", billing_type or "")
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self.resolve(dict(zip(SEGMENT_COLUMNS, key)))
        return found

    def resolve(self, values: dict[str, str], from_level: int = 0) -> Platt:
        """The first fitted segment of `values` at from_level or coarser; the identity when none is."""
        for level in range(from_level, len(LEVELS)):
            platt = self.coefficients.get((level, tuple(values[n] for n in LEVELS[level])))
            if platt is not None:
                return platt
        return IDENTITY

    def apply(self, probabilities, placement, country, billing_type) -> np.ndarray:
        """Calibrated probabilities for arrays of segment values (one per probability; scalars broadcast)."""
        q = np.asarray(probabilities, dtype=np.float64)
        n = q.shape[0] if q.ndim else 1
        columns = [np.broadcast_to(np.asarray(c, dtype=object), (n,)) for c in (placement, country, billing_type)]
        keys, rows = segment_codes([np.where(c == None, "", c) for c in columns])  # noqa: E711 - elementwise
        a = np.empty(len(keys))
        b = np.empty(len(keys))
        for i, key in enumerate(keys):
            platt = self.lookup(*key)
            a[i], b[i] = platt.a, platt.b
        z = logit(q).reshape(n, -1)
        return sigmoid(a[rows][:, None] * z + b[rows][:, None]).reshape(q.shape)

    # persistence -------------------------------------------------------------------------------------
    def to_json(self) -> str:
        segments = [{"level": level, "key": dict(zip(LEVELS[level], key)), "a": p.a, "b": p.b,
                     "clicks": self.counts.get((level, key), (0, 0))[0],
                     "non_clicks": self.counts.get((level, key), (0, 0))[1]}
                    for (level, key), p in sorted(self.coefficients.items())]
        return json.dumps({"format": 1, "method": "platt per segment", "levels": [list(n) for n in LEVELS],
                           "min_positives": self.min_positives, "min_negatives": self.min_negatives,
                           "prior_clicks": self.prior_clicks, "coarse_prior_clicks": self.coarse_prior_clicks,
                           "segments": segments}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> "SegmentCalibration":
        data = json.loads(text)
        coefficients, counts = {}, {}
        for s in data["segments"]:
            level = int(s["level"])
            key = tuple(s["key"][n] for n in LEVELS[level])
            coefficients[(level, key)] = Platt(float(s["a"]), float(s["b"]))
            counts[(level, key)] = (int(s.get("clicks", 0)), int(s.get("non_clicks", 0)))
        return cls(coefficients, counts, int(data["min_positives"]), int(data["min_negatives"]),
                   float(data["prior_clicks"]), float(data.get("coarse_prior_clicks", data["prior_clicks"])))


def fit_segment_calibration(probabilities, labels, weights, placement, country, billing_type, *,
                            min_positives: int = 50, min_negatives: int = 50,
                            prior_clicks: float = 1000.0, coarse_prior_clicks: float = 10.0) -> SegmentCalibration:
    """Fit the global level, then every (placement, billing type) with enough evidence shrunk toward the
    global fit, then every (placement, country, billing type) shrunk toward its parent."""
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
        calibration.coefficients[(2, ())] = fit_platt(z, y, w)
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
                                                               prior_clicks=strength)
            calibration.counts[(level, key)] = (clicks, non_clicks)
    calibration._cache.clear()
    return calibration

