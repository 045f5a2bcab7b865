"""The calibration layer as it is applied: Platt scaling per segment, so predicted click rates match observed
ones where prices are computed (design: "a calibration layer per segment (placement, country, bid type)").
Pure numpy.

Each segment maps the model's (down-sampling corrected) probability q to sigmoid(a * logit(q) + b). Segments
are looked up finest first:

    (placement, country, billing type)  ->  (placement, billing type)  ->  global  ->  identity

A request in a segment that was not fitted uses the coarser one. Billing type stands in for the design's
"bid type": it is what the TrainingExample logs, and cpc and cpa ads both bill clicks. Owns the lookup, the
arithmetic and calibration.json; never fits coefficients (learning.calibration does, offline)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from core.arrays import distinct_keys
from core.errors import InvalidArgument

LEVELS: tuple[tuple[str, ...], ...] = (("placement", "country", "billing_type"), ("placement", "billing_type"), ())
SEGMENT_COLUMNS = ("placement", "country", "billing_type")
EPSILON = 1e-7  # probabilities are clipped to [EPSILON, 1 - EPSILON] before a logit or a log


def segment_codes(columns: Sequence[np.ndarray]) -> tuple[list[tuple[str, ...]], np.ndarray]:
    """The distinct keys (as strings) of several equally long key columns, and each row's key number."""
    if not columns:
        raise InvalidArgument("segment_codes needs at least one column")
    return distinct_keys([np.asarray(column).astype(str) for column in columns])


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

    def fitted_level(self, values: dict[str, str]) -> str:
        """Which fit `resolve` gives this segment: "segment" (its own), "placement, billing_type" (its parent:
        too few clicks of its own), "global", or "identity" (nothing fitted)."""
        for level in range(len(LEVELS)):
            if (level, tuple(values[n] for n in LEVELS[level])) in self.coefficients:
                return "segment" if level == 0 else ", ".join(LEVELS[level]) or "global"
        return "identity"

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
