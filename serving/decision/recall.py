"""The pre-ranker's recall monitor: how often the ad the full model would have ranked first among ALL
filtered candidates was inside the pre-ranker's 200 (target > 95 %).

On a small sampled share of requests the engine hands over a RecallSample (the filtered candidates and the
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
from core.reserves import AuctionTerms
from serving.decision.prediction import PredictionRequest, Predictor

DEFAULT_SAMPLE_SHARE = 0.005
CHUNK = 200  # rows per model call: the request size the model is compiled for


@dataclass(frozen=True)
class SampledAds:
    """The columns the check reads of the filtered candidates, copied when the sample is made: the ad server
    checks in a worker thread while the index may take updates (a changed bid, a removed ad), and the check
    must judge the candidates the request saw. A few arrays of ~5,000 values, on the sampled share only."""

    ad_id: np.ndarray
    campaign_id: np.ndarray
    bid_type: np.ndarray
    bid_micros: np.ndarray
    quality_micros: np.ndarray
    exclusion_category: np.ndarray
    ctr_prior: np.ndarray

    @classmethod
    def capture(cls, index, rows: np.ndarray) -> "SampledAds":
        return cls(*(getattr(index, name).data[rows].copy() for name in (
            "ad_id", "campaign_id", "bid_type", "bid_micros", "quality_micros", "exclusion_category", "ctr_prior")))


@dataclass
class RecallSample:
    """A sampled request's candidates: everything the filters let through, and what the pre-ranker kept."""

    filtered_rows: np.ndarray
    participation: np.ndarray
    kept_rows: np.ndarray
    placement: str
    slot_positions: Sequence[int]
    user_features: dict[str, float]
    ctr_multiplier: float
    terms: AuctionTerms  # the reserve, quality floor and default quality the request's auction ran under
    country: str | None = None
    device: str | None = None
    user_embedding: np.ndarray | None = None  # what the pre-ranker saw (for refitting its weights)
    affinity: np.ndarray | None = None  # the pre-ranker's model_affinity per filtered row, when it had one
    ads: SampledAds | None = None  # the filtered rows' columns as the request saw them; None: read the index
    request_id: str | None = None  # so a canary scores the check on the arm that scored the request

    def columns(self, index) -> SampledAds:
        return self.ads if self.ads is not None else SampledAds.capture(index, self.filtered_rows)


def model_first_slot(index, rows: np.ndarray, sample: RecallSample, predictor: Predictor,
                     clock: Callable[[], float] = time.perf_counter) -> tuple[np.ndarray, np.ndarray]:
    """The full model's (pCTR, pCVR) of each filtered row (`rows` is the sample's filtered_rows) at the
    request's first slot position, in chunks."""
    first = [sample.slot_positions[0]]
    ads = sample.columns(index)
    pctr, pcvr = [], []
    for start in range(0, len(rows), CHUNK):
        chunk = rows[start:start + CHUNK]
        part = slice(start, start + CHUNK)
        predictions = predictor.predict(
            PredictionRequest(chunk, ads.ctr_prior[part] * sample.ctr_multiplier, first, sample.placement,
                              sample.user_features, ad_ids=ads.ad_id[part], country=sample.country,
                              device=sample.device, request_id=sample.request_id),
            deadline=clock() + 60.0, clock=clock)
        pctr.append(np.asarray(predictions.pctr, dtype=np.float64)[:, 0])
        pcvr.append(np.asarray(predictions.pcvr, dtype=np.float64))
    if not pctr:
        return np.empty(0), np.empty(0)
    return np.concatenate(pctr), np.concatenate(pcvr)


def _score(index, rows: np.ndarray, sample: RecallSample, predictor: Predictor,
           clock: Callable[[], float]) -> np.ndarray:
    """Total value per impression at the first slot of each row, from the full model; -inf where the ad could
    not take that slot (under the reserve or the quality floor: core.auction's eligibility)."""
    pctr, pcvr = model_first_slot(index, rows, sample, predictor, clock)
    ads = sample.columns(index)
    candidates = CandidateArrays(
        ad_id=ads.ad_id, campaign_id=ads.campaign_id, bid_code=ads.bid_type, bid_micros=ads.bid_micros,
        pctr=pctr[:, None], pcvr=pcvr,
        quality_micros=ads.quality_micros.astype(np.int64) + sample.terms.default_quality_micros,
        exclusion_category=ads.exclusion_category.astype(np.int64),
        participation=np.ones(len(rows)), row=rows.astype(np.int64))
    bid_values = candidates.bid_values()
    totals = candidates.totals(bid_values=bid_values)
    eligible = candidates.eligible(totals, bid_values, sample.terms.reserve_micros, sample.terms.quality_floor_micros)
    return np.where(eligible[:, 0], totals[:, 0], -np.inf)


def prerank_sample(index, sample: RecallSample, predictor: Predictor,
                   clock: Callable[[], float] = time.perf_counter) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pre-ranker features, prior x placement multiplier, model pCTR) of a sample's filtered candidates: the
    rows prerank.fit_weights learns the pre-ranker's weights from."""
    from serving.decision.prerank import features

    rows = sample.filtered_rows
    embedding = sample.user_embedding if sample.user_embedding is not None else \
        np.zeros(index.embedding_dim, dtype=np.float32)
    x = features(index, rows, sample.participation, embedding, sample.ctr_multiplier, len(sample.slot_positions),
                 sample.affinity)
    pctr, _ = model_first_slot(index, rows, sample, predictor, clock)
    return x, sample.columns(index).ctr_prior.astype(np.float64) * sample.ctr_multiplier, pctr


def check(index, sample: RecallSample, predictor: Predictor, clock: Callable[[], float] = time.perf_counter
          ) -> bool | None:
    """Whether the full-set winner was among the kept rows; None when no candidate may take the slot."""
    if len(sample.filtered_rows) == 0:
        return None
    values = _score(index, sample.filtered_rows, sample, predictor, clock)
    best = int(np.argmax(values))
    if not np.isfinite(values[best]):
        return None
    return bool(np.isin(sample.filtered_rows[best], sample.kept_rows))


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
