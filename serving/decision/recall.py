"""The pre-ranker's recall monitor: how often the ad the full model would have ranked first among ALL
filtered candidates was inside the pre-ranker's 200 (target > 95 %).

On a small sampled share of requests the engine hands over a RecallProbe (the filtered candidates and the
rows the pre-ranker kept); after the response, off the request path, `check` scores every filtered
candidate with the full model (in chunks of the model's request size), finds the best total value at the
first slot above the reserve (core.auction's value formula), and says whether the pre-ranker kept it.
A recall falling below target means the pre-ranker's cheap features no longer agree with the model: retrain
its weights against the model's scores. Pure apart from the predictor it is given."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from core.auction import CandidateArrays
from serving.decision.prediction import PredictionRequest, Predictor

DEFAULT_SAMPLE_SHARE = 0.005
CHUNK = 200  # rows per model call: the request size the model is compiled for


@dataclass
class RecallProbe:
    """A sampled request's candidates: everything the filters let through, and what the pre-ranker kept."""

    filtered_rows: np.ndarray
    participation: np.ndarray
    kept_rows: np.ndarray
    placement: str
    slot_positions: Sequence[int]
    user_features: dict[str, float]
    ctr_multiplier: float
    reserve_micros: int
    country: str | None = None
    device: str | None = None


def _score(index, rows: np.ndarray, probe: RecallProbe, predictor: Predictor,
           clock: Callable[[], float]) -> np.ndarray:
    """Total value per impression at the first slot of each row, from the full model."""
    first = [probe.slot_positions[0]]
    values = []
    for start in range(0, len(rows), CHUNK):
        chunk = rows[start:start + CHUNK]
        predictions = predictor.predict(
            PredictionRequest(chunk, index.ctr_prior.data[chunk] * probe.ctr_multiplier, first, probe.placement,
                              probe.user_features, ad_ids=index.ad_id.data[chunk], country=probe.country,
                              device=probe.device),
            deadline=clock() + 60.0, clock=clock)
        candidates = CandidateArrays(
            ad_id=index.ad_id.data[chunk], campaign_id=index.campaign_id.data[chunk],
            bid_code=index.bid_type.data[chunk], bid_micros=index.bid_micros.data[chunk],
            pctr=np.asarray(predictions.pctr, dtype=np.float64)[:, :1],
            pcvr=np.asarray(predictions.pcvr, dtype=np.float64),
            quality_micros=index.quality_micros.data[chunk].astype(np.int64),
            exclusion_category=index.exclusion_category.data[chunk].astype(np.int64),
            participation=np.ones(len(chunk)), row=chunk.astype(np.int64))
        values.append(candidates.totals()[:, 0])
    return np.concatenate(values) if values else np.empty(0)


def check(index, probe: RecallProbe, predictor: Predictor, clock: Callable[[], float] = time.perf_counter
          ) -> bool | None:
    """Whether the full-set winner was among the kept rows; None when no candidate clears the reserve."""
    if len(probe.filtered_rows) == 0:
        return None
    values = _score(index, probe.filtered_rows, probe, predictor, clock)
    values = np.where(values >= probe.reserve_micros, values, -np.inf)
    best = int(np.argmax(values))
    if not np.isfinite(values[best]):
        return None
    return bool(np.isin(probe.filtered_rows[best], probe.kept_rows))


@dataclass
class RecallMonitor:
    """Counts of checked requests and hits; `recall` is hits / checked. Exported as Prometheus counters when
    a registry is given."""

    checked: int = 0
    hits: int = 0
    registry: object | None = None
    _counters: tuple | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.registry is not None:
            from prometheus_client import Counter

            self._counters = (
                Counter("adserve_prerank_recall_checks", "Sampled requests whose full candidate set was scored",
                        registry=self.registry),
                Counter("adserve_prerank_recall_hits", "Of those, requests whose full-set winner the pre-ranker "
                        "kept", registry=self.registry))

    def record(self, hit: bool | None) -> None:
        if hit is None:
            return
        self.checked += 1
        self.hits += int(hit)
        if self._counters is not None:
            self._counters[0].inc()
            if hit:
                self._counters[1].inc()

    @property
    def recall(self) -> float | None:
        return self.hits / self.checked if self.checked else None
