"""One decision: retrieve -> filter -> pre-rank -> predict -> auction, each stage timed.

The engine is what the ad server calls per request (and the replay pipeline
and benchmarks too). Pure: the clock, the deadline and the random generators
are parameters; nothing here waits on I/O."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from core.auction import AuctionRules, CandidateArrays, cpa_bids, run_auction
from core.exploration import CERTAIN_AT_PSEUDO_IMPRESSIONS, THOMPSON_DRAWS, CtrPosterior
from core.reserves import AuctionTerms, ReserveBook
from serving.decision.campaigns import CampaignTable
from serving.decision.filters import FilterContext, apply_filters
from serving.decision.index import DEFAULT_K, TargetingIndex
from serving.decision.prediction import PredictionRequest, Predictor, PriorPredictor, position_effect
from serving.decision.prerank import (DEFAULT_CVR_PRIOR, DEFAULT_KEEP, DEFAULT_MODEL_WEIGHTS, DEFAULT_WEIGHTS,
                                     RequestSignals, prerank)
from serving.decision.recall import SampledAds, RecallSample


@dataclass
class EngineConfig:
    k: int = DEFAULT_K
    keep: int = DEFAULT_KEEP
    exploration_share: float = 0.01
    # Thompson sampling in the exploration slice (core.exploration): an ad with fewer pseudo-impressions than
    # this ranks on a draw from its posterior; each winner's logged probability comes from this many draws
    exploration_certain_at: float = CERTAIN_AT_PSEUDO_IMPRESSIONS
    exploration_draws: int = THOMPSON_DRAWS
    placement_ctr_multiplier: Mapping[str, float] = field(default_factory=dict)
    model_budget_s: float = 0.035
    cvr_prior: float = DEFAULT_CVR_PRIOR
    recall_sample_share: float = 0.0  # requests whose full candidate set is scored after the response
    prerank_weights: np.ndarray | None = None  # the pre-ranker's weights (prerank.fit_weights); None: defaults


@dataclass
class RequestContext:
    """What the engine needs of one request once the gateway and the user context resolved it."""

    request_id: str
    placement: str
    slot_positions: Sequence[int]
    terms: Mapping[str, frozenset[str]]
    filters: FilterContext
    country: str | None = None
    user_embedding: np.ndarray | None = None
    user_features: dict[str, float] = field(default_factory=dict)
    device: str | None = None


@dataclass
class SlotDecision:
    slot: int
    position: int
    ad_id: int
    campaign_id: int
    creative_ref: str
    landing_url: str
    billing: str
    price_micros: int
    charge_per_event_micros: int
    expected_cost_micros: int
    total_value_micros: int
    explanation: dict[str, Any]


@dataclass
class Decision:
    request_id: str
    winners: list[SlotDecision]
    scored_by_fallback: bool
    explored: bool
    model_version: str | None
    sampled_losers: list[dict[str, Any]]
    funnel: dict[str, int]
    timings_ms: dict[str, float]
    dropped: dict[str, int]
    eligible_campaigns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    slices_wanted: dict[int, int] = field(default_factory=dict)
    recall_sample: RecallSample | None = None  # set on the sampled share: check it after the response
    ad_snapshot_version: int | None = None  # the ad-feature snapshot the model scored with, when it says
    terms: AuctionTerms | None = None  # the reserve, quality floor and default quality the auction ran under


class _Laps:
    """Milliseconds spent in each stage of one decision, read from the injected clock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.mark = clock()
        self.timings: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        now = self.clock()
        self.timings[stage] = (now - self.mark) * 1000
        self.mark = now


class DecisionEngine:
    def __init__(self, index: TargetingIndex, campaigns: CampaignTable, predictor: Predictor | None = None,
                 config: EngineConfig | None = None,
                 retrieve: Callable[[Mapping[str, frozenset[str]], int], np.ndarray] | None = None,
                 reserves: ReserveBook | None = None):
        """`retrieve` replaces the index's retrieval (benchmark baselines); rows must be ascending. `reserves`:
        the reserve rules (an ad server passes the book its topic follower keeps current); default the
        platform's built-in terms."""
        self.index, self.campaigns = index, campaigns
        self.retrieve = retrieve or index.retrieve
        self.predictor = predictor or PriorPredictor()
        self.config = config or EngineConfig()
        self.reserves = reserves if reserves is not None else ReserveBook()

    def _affinity(self, request: RequestContext, rows: np.ndarray, multiplier: float) -> np.ndarray | None:
        """The learned model's cheap estimate for the pre-ranker (`model_affinity`: its log pCTR over the
        pre-ranker's base, prior x placement multiplier), when the predictor offers one
        (serving.model.predictor.ModelPredictor.affinity); None without, or if it fails (the pre-ranker then
        ranks on its other features, and the prediction that follows reports its own error)."""
        return self._offered("affinity", request, rows, multiplier, np.float32)

    def _conversion_rates(self, request: RequestContext, rows: np.ndarray, multiplier: float) -> np.ndarray | None:
        """The learned conversion model's pCVR of each candidate for the pre-ranker's value of conversion bids,
        when the predictor offers one (ModelPredictor.conversion_rates); None without (the constant prior)."""
        return self._offered("conversion_rates", request, rows, multiplier, np.float64)

    def _offered(self, name: str, request: RequestContext, rows: np.ndarray, multiplier: float,
                 dtype) -> np.ndarray | None:
        offered = getattr(self.predictor, name, None)
        if offered is None or len(rows) == 0:
            return None
        try:
            values = offered(PredictionRequest(
                rows, self.index.ctr_prior.data[rows] * multiplier, request.slot_positions, request.placement,
                request.user_features, ad_ids=self.index.ad_id.data[rows], country=request.country,
                device=request.device, request_id=request.request_id))
        except Exception:  # noqa: BLE001 - a cheap feature missing must not cost the request
            return None
        return None if values is None else np.asarray(values, dtype=dtype)

    def decide(self, request: RequestContext, *, clock: Callable[[], float], deadline: float,
               rng: random.Random, np_rng: np.random.Generator) -> Decision:
        cfg, index = self.config, self.index
        terms = self.reserves.terms(request.placement, request.country)
        laps = _Laps(clock)
        retrieved = self.retrieve(request.terms, cfg.k)
        laps.lap("retrieval")
        filtered = apply_filters(retrieved, index, self.campaigns, request.filters, np_rng)
        laps.lap("filters")
        funnel = {"retrieved": len(retrieved), "filtered": len(filtered.rows)}
        user_embedding = request.user_embedding if request.user_embedding is not None else \
            np.zeros(index.embedding_dim, dtype=np.float32)
        multiplier = cfg.placement_ctr_multiplier.get(request.placement, 1.0)
        affinity = self._affinity(request, filtered.rows, multiplier)
        conversion_rates = self._conversion_rates(request, filtered.rows, multiplier)
        try:
            pre = self._prerank(request, filtered, user_embedding, multiplier, affinity, conversion_rates)
        except Exception:  # noqa: BLE001 - no scores at all: an unscored ad has no fair price, slots stay empty
            return Decision(request.request_id, [], True, False, None, [], funnel, laps.timings, filtered.dropped,
                            filtered.eligible_campaigns, filtered.slices_wanted, terms=terms)
        laps.lap("prerank")
        funnel["preranked"] = len(pre.rows)
        at = np.searchsorted(filtered.rows, pre.rows)
        pctr, pcvr, model_version, snapshot_version, fallback = self._predict(request, pre, multiplier,
                                                                              clock, deadline)
        laps.lap("prediction")
        candidates = self._candidates(pre.rows, filtered, at, pctr, pcvr, terms)
        result = run_auction(candidates, request.slot_positions,
                             rules=AuctionRules(terms.reserve_micros, terms.quality_floor_micros), rng=rng,
                             exploration_share=cfg.exploration_share, scores_from_fallback=fallback,
                             ctr_posterior=lambda: self._posterior(pre.rows))
        winners = [self._slot_decision(w) for w in result.winners]
        laps.lap("auction")
        funnel["winners"] = len(winners)
        sample = None
        if cfg.recall_sample_share > 0 and not fallback and rng.random() < cfg.recall_sample_share:
            sample = RecallSample(filtered.rows, filtered.participation, pre.rows, request.placement,
                                request.slot_positions, request.user_features, multiplier,
                                terms, request.country, request.device,
                                user_embedding, affinity, SampledAds.capture(index, filtered.rows),
                                request.request_id)
        return Decision(request.request_id, winners, fallback, result.explored, model_version,
                        result.sampled_losers, funnel, laps.timings, filtered.dropped, filtered.eligible_campaigns,
                        filtered.slices_wanted, sample, snapshot_version, terms)

    def _prerank(self, request: RequestContext, filtered: Any, user_embedding: np.ndarray, multiplier: float,
                 affinity: np.ndarray | None, conversion_rates: np.ndarray | None) -> Any:
        cfg = self.config
        signals = RequestSignals(user_embedding, multiplier, len(request.slot_positions), affinity)
        return prerank(self.index, filtered.rows, filtered.participation, signals, keep=cfg.keep,
                       cvr_prior=cfg.cvr_prior if conversion_rates is None else conversion_rates,
                       weights=cfg.prerank_weights if cfg.prerank_weights is not None else
                       DEFAULT_WEIGHTS if affinity is None else DEFAULT_MODEL_WEIGHTS)

    def _predict(self, request: RequestContext, pre: Any, multiplier: float, clock: Callable[[], float],
                 deadline: float) -> tuple[np.ndarray, np.ndarray, str | None, Any, bool]:
        """pCTR by slot and pCVR from the predictor; on a timeout or model error, the pre-ranker's scores
        (the decision is marked as a fallback)."""
        index = self.index
        try:
            predictions = self.predictor.predict(
                PredictionRequest(pre.rows, index.ctr_prior.data[pre.rows] * multiplier, request.slot_positions,
                                  request.placement, request.user_features, ad_ids=index.ad_id.data[pre.rows],
                                  country=request.country, device=request.device, request_id=request.request_id),
                deadline=min(deadline, clock() + self.config.model_budget_s), clock=clock)
            return (predictions.pctr, predictions.pcvr, predictions.model_version,
                    predictions.ad_snapshot_version, False)
        except Exception:  # noqa: BLE001 - timeout or model error: the pre-ranker's scores run the auction
            pctr = pre.approx_pctr[:, None] * position_effect(request.slot_positions)[None, :]
            return pctr, np.full(len(pre.rows), self.config.cvr_prior), None, None, True

    def _posterior(self, rows: np.ndarray) -> CtrPosterior:
        """The candidates' click-rate posteriors from the index (what the latest ad-feature snapshot set, or the
        weak prior at their ctr_prior): the auction reads them only on a request of its exploration slice."""
        return CtrPosterior(self.index.ctr_alpha.data[rows], self.index.ctr_beta.data[rows],
                            certain_at=self.config.exploration_certain_at, draws=self.config.exploration_draws)

    def _candidates(self, rows: np.ndarray, filtered: Any, at: np.ndarray, pctr: np.ndarray, pcvr: np.ndarray,
                    terms: AuctionTerms) -> CandidateArrays:
        index = self.index
        participation = filtered.participation[at] if len(rows) else np.empty(0)
        return CandidateArrays(
            ad_id=index.ad_id.data[rows], campaign_id=index.campaign_id.data[rows],
            bid_code=index.bid_type.data[rows],
            bid_micros=cpa_bids(index.bid_micros.data[rows], index.bid_type.data[rows],
                                self.campaigns.bid_multiplier.data[filtered.campaign_rows[at]]),
            pctr=np.asarray(pctr, dtype=np.float64), pcvr=np.asarray(pcvr, dtype=np.float64),
            # the ad's own platform adjustment on top of the placement's default (core.reserves)
            quality_micros=index.quality_micros.data[rows].astype(np.int64) + terms.default_quality_micros,
            exclusion_category=index.exclusion_category.data[rows].astype(np.int64),
            participation=participation.astype(np.float64), row=rows.astype(np.int64))

    def _slot_decision(self, w: Any) -> SlotDecision:
        creative_ref, landing_url = self.index.creative(w.candidate.row)
        return SlotDecision(
            slot=w.slot, position=w.position, ad_id=int(w.candidate.ad_id),
            campaign_id=int(w.candidate.campaign_id), creative_ref=creative_ref, landing_url=landing_url,
            billing=w.billing, price_micros=w.price_micros, charge_per_event_micros=w.charge_per_event_micros,
            expected_cost_micros=w.expected_cost_micros(), total_value_micros=w.total_value_micros,
            explanation=w.explanation)
