"""The prediction interface: pCTR per slot position and pCVR, answered within a deadline.

A Predictor takes the request's candidates and slot positions and a deadline
on the caller's clock; it raises PredictionTimeout when it cannot answer in
time, and the engine then runs the auction on the pre-ranker's scores and says
so. PriorPredictor is the priors-only baseline: the ad's CTR prior x a position
effect, and a constant pCVR prior; serving.model.predictor.ModelPredictor is the
learned click model in process (it needs the request's ad ids, country and
device). Pure: the clock is a parameter."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from core.errors import AdserveError


class PredictionTimeout(AdserveError):
    """The model did not answer within its deadline."""


@dataclass
class PredictionRequest:
    rows: np.ndarray
    ctr_prior: np.ndarray  # the index's priors of those rows
    positions: Sequence[int]  # slot positions on the page
    placement: str
    user_features: dict[str, float]
    ad_ids: np.ndarray | None = None  # the candidates' ad ids (a model looks its ad features up by id)
    country: str | None = None
    device: str | None = None
    request_id: str | None = None  # the ad request's id (canary routing, the service's logs)


@dataclass
class Predictions:
    pctr: np.ndarray  # (candidates, slots)
    pcvr: np.ndarray  # (candidates,)
    model_version: str
    ad_snapshot_version: int | None = None  # the ad-feature snapshot the model scored with (None: no snapshot)


class Predictor(Protocol):
    """What the engine calls to score the pre-ranker's candidates. A predictor may also offer
    `affinity(request) -> np.ndarray | None`, a cheap per-candidate estimate of its log pCTR over the
    request's ctr_prior, which the engine hands the pre-ranker as `model_affinity` (the in-process
    ModelPredictor does; the engine checks with getattr)."""

    def predict(self, request: PredictionRequest, deadline: float, clock: Callable[[], float]) -> Predictions: ...


def position_effect(positions: Sequence[int], decay: float = 0.12) -> np.ndarray:
    """Relative click rate of each position, 1.0 at the top: position 4 is clicked more than position 11."""
    return 1.0 / (1.0 + decay * (np.asarray(positions, dtype=np.float64) - 1.0))


@dataclass
class PriorPredictor:
    """Baseline: pCTR = ad prior x position effect; pCVR = a constant prior."""

    cvr_prior: float = 0.05
    version: str = "prior-baseline-1"

    def predict(self, request: PredictionRequest, deadline: float, clock: Callable[[], float]) -> Predictions:
        if clock() > deadline:
            raise PredictionTimeout("deadline passed before scoring")
        pctr = np.clip(request.ctr_prior[:, None] * position_effect(request.positions)[None, :], 0.0, 1.0)
        return Predictions(pctr, np.full(len(request.rows), self.cvr_prior), self.version)
