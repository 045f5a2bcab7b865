"""The prediction service's HTTP routes (aiohttp) over one batcher (serving.model.batcher) and one or two
ModelPredictors: the current model and an optional canary (design: "Prediction service").

  POST /v1/score   {request_id, placement, country, device, user_features, ad_ids, positions, deadline_ms}
                   -> 200 {request_id, pctr: [[per position] per candidate], pcvr: [per candidate],
                           model_version, snapshot_version, batch_requests}
                   400 {error, field} on a malformed body; 504 when the deadline (deadline_ms: the caller's
                   remaining budget, counted from arrival) passed before the answer (the caller falls back)
  GET  /healthz    200 {ok, model_version}
  GET  /v1/model   the model and canary versions, their snapshot versions, the canary share, batching settings
  POST /v1/promote {model_version, report}: the canary becomes the current model, only when `report` is a
                   canary report (serving.model.canary.canary_report) whose verdict is "promote" for exactly
                   this candidate against exactly this current model -> 200 {promoted, previous}; 409 with the
                   reason otherwise (no canary, another version, a "hold" or "not enough data" verdict); the
                   gate `adserve model promote` builds the report from the served log and calls this
  GET  /metrics    Prometheus: requests by outcome and model version, batch sizes, latency, deadline misses
  GET  /openapi.json  the OpenAPI description (serving/model/openapi.yaml)

The ad-feature snapshot is the service's own: the newest version in its folder, checked every
snapshot_refresh_s seconds and swapped whole (ModelPredictor.use_snapshot). The service never decides an
auction and never reads user state: it scores what it is sent. Starting and running it: serving.model.service."""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from core.errors import AdserveError, BadRequest, InvalidSettings
from serving.body_limits import PREDICTION_MAX_BODY_BYTES, application
from serving.decision.prediction import PredictionRequest, Predictions, PredictionTimeout
from serving.model.batcher import (CANDIDATE, CURRENT, DEFAULT_MAX_BATCH_ROWS, DEFAULT_MAX_WAIT_MS, DynamicBatcher,
                                   Pending, Scored)
from serving.model.canary import promotion_refusal, routes_to_candidate
from serving.model.score_request import parse_score_request

LOG = logging.getLogger("adserve.prediction")
OPENAPI = Path(__file__).with_name("openapi.yaml")
DEFAULT_SNAPSHOT_REFRESH_S = 300.0


class PromotionRefused(AdserveError):
    """A promotion the canary's report does not allow."""


@dataclass
class ServiceConfig:
    max_wait_ms: float = DEFAULT_MAX_WAIT_MS
    max_batch_rows: int = DEFAULT_MAX_BATCH_ROWS
    canary_share: float = 0.0
    ad_features_dir: Path | None = None  # checked for a newer snapshot every snapshot_refresh_s
    snapshot_refresh_s: float = DEFAULT_SNAPSHOT_REFRESH_S

    def as_dict(self) -> dict[str, Any]:
        return {"max_wait_ms": self.max_wait_ms, "max_batch_rows": self.max_batch_rows,
                "canary_share": self.canary_share, "ad_features_dir": str(self.ad_features_dir or ""),
                "snapshot_refresh_s": self.snapshot_refresh_s}


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("adserve_prediction_requests", "Score requests by outcome and model version",
                                ["model_version", "outcome"], registry=r)
        self.batch_requests = Histogram("adserve_prediction_batch_requests", "Requests per scoring batch",
                                        registry=r, buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32))
        self.batch_rows = Histogram("adserve_prediction_batch_rows", "Input rows (candidates x positions) per "
                                    "scoring batch", registry=r, buckets=(200, 400, 800, 1_600, 2_400, 3_200, 6_400))
        self.scoring = Histogram("adserve_prediction_batch_scoring_seconds", "Time to score one batch", registry=r,
                                 buckets=(.0005, .001, .002, .003, .005, .0075, .01, .02, .05))
        self.latency = Histogram("adserve_prediction_request_seconds", "Arrival to answer, per model version",
                                 ["model_version"], registry=r,
                                 buckets=(.0005, .001, .002, .003, .005, .0075, .01, .015, .025, .035, .05, .1))
        self.deadline_misses = Counter("adserve_prediction_deadline_misses", "Requests answered 504: their "
                                       "deadline passed before the answer", ["model_version"], registry=r)


class PredictionService:
    """The HTTP routes over one batcher and one or two ModelPredictors (the current model, the candidate)."""

    def __init__(self, current, candidate=None, config: ServiceConfig | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.config = config or ServiceConfig()
        if candidate is None and self.config.canary_share > 0:
            raise InvalidSettings("a canary share needs a candidate model")
        if candidate is not None and candidate.model.version == current.model.version:
            raise InvalidSettings(f"the candidate has the current model's version {current.model.version}: the served "
                             f"log could not tell the arms apart")
        self.current, self.candidate, self.clock = current, candidate, clock
        self.metrics = Metrics()
        self.batcher = DynamicBatcher(self._score, max_rows=self.config.max_batch_rows,
                                      max_wait_s=self.config.max_wait_ms / 1000, clock=clock,
                                      on_batch=self._batch_done)

    def predictor(self, arm: str):
        candidate = self.candidate  # one read: a promotion may clear it meanwhile (the batch then scores current)
        return candidate if arm == CANDIDATE and candidate is not None else self.current

    def promote(self, version: str, report: dict[str, Any]) -> dict[str, str]:
        """Make the canary the current model, if the report's verdict allows it (see the module docstring);
        raises PromotionRefused with the reason otherwise. New requests route to the promoted model at once;
        a batch already queued for either arm is scored by it too."""
        candidate, current = self.candidate, self.current
        refusal = promotion_refusal(report, version, None if candidate is None else candidate.model.version,
                                    current.model.version)
        if refusal is not None:
            raise PromotionRefused(refusal)
        assert candidate is not None  # (promotion_refusal refuses without one)
        self.config.canary_share = 0.0
        self.current, self.candidate = candidate, None
        LOG.info("promoted %s over %s: %s", candidate.model.version, current.model.version,
                 "; ".join(report.get("reasons", [])))
        return {"promoted": candidate.model.version, "previous": current.model.version}

    def install_scoring(self, scoring) -> None:
        """What the model registry names now (serving.adserver.learned.Scoring, prepared off the loop by its
        follower): the current model and the canary with its share, swapped between two batches. A registry
        without a current model leaves the one this service holds."""
        if scoring.current is not None and scoring.current is not self.current:
            LOG.info("registry: scoring with %s (was %s)", scoring.model_version, self.current.model.version)
            self.current = scoring.current
        candidate = scoring.candidate
        if candidate is not None and candidate.model.version == self.current.model.version:
            candidate = None
        self.candidate = candidate
        self.config.canary_share = scoring.canary_share if candidate is not None else 0.0

    def arm_of(self, request_id: str) -> str:
        share = self.config.canary_share if self.candidate is not None else 0.0
        return CANDIDATE if routes_to_candidate(request_id, share) else CURRENT

    def _score(self, arm: str, requests: list[PredictionRequest]) -> tuple[list[Predictions], int]:
        predictor = self.predictor(arm)
        snapshot_version = predictor.snapshot_version  # read before: a swap applies from the next batch
        return predictor.predict_many(requests), snapshot_version

    def _batch_done(self, batch: list[Pending], seconds: float) -> None:
        self.metrics.batch_requests.observe(len(batch))
        self.metrics.batch_rows.observe(sum(item.request.rows for item in batch))
        self.metrics.scoring.observe(seconds)

    # ------------------------------------------------------------------ routes
    def app(self) -> web.Application:
        app = application(PREDICTION_MAX_BODY_BYTES)
        app.add_routes([web.post("/v1/score", self.handle_score), web.get("/healthz", self.handle_health),
                        web.get("/v1/model", self.handle_model), web.get("/metrics", self.handle_metrics),
                        web.post("/v1/promote", self.handle_promote),
                        web.get("/openapi.json", self.handle_openapi)])
        return app

    def _error(self, status: int, message: str, field: str | None = None) -> web.Response:
        return web.json_response({"error": message, **({"field": field} if field else {})}, status=status)

    async def handle_score(self, request: web.Request) -> web.Response:
        arrived = self.clock()
        m = self.metrics
        try:
            body = await request.json(loads=json.loads)
        except ValueError:
            m.requests.labels("", "bad_request").inc()
            return self._error(400, "body: not valid JSON", "body")
        try:
            score_request = parse_score_request(body)
        except BadRequest as exc:
            m.requests.labels("", "bad_request").inc()
            return self._error(400, str(exc), exc.field)
        arm = self.arm_of(score_request.request_id)
        version = self.predictor(arm).model.version
        deadline = arrived + score_request.deadline_ms / 1000
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.batcher.submit(Pending(score_request, arm, arrived, deadline, future, loop))
        try:
            scored: Scored = await asyncio.wait_for(future, timeout=max(0.0, deadline - self.clock()))
        except (asyncio.TimeoutError, PredictionTimeout):  # waited past the deadline, or dropped late by the batcher
            m.deadline_misses.labels(version).inc()
            m.requests.labels(version, "deadline").inc()
            return self._error(504, f"deadline of {score_request.deadline_ms:g} ms passed before the answer")
        except Exception as exc:  # noqa: BLE001 - a model error: the caller falls back on a 500
            m.requests.labels(version, "error").inc()
            return self._error(500, f"the model failed: {exc}")
        if self.clock() > deadline:
            m.deadline_misses.labels(version).inc()
            m.requests.labels(version, "deadline").inc()
            return self._error(504, f"deadline of {score_request.deadline_ms:g} ms passed while scoring")
        p = scored.predictions
        m.requests.labels(p.model_version, "scored").inc()
        m.latency.labels(p.model_version).observe(self.clock() - arrived)
        return web.json_response({"request_id": score_request.request_id, "pctr": p.pctr.tolist(),
                                  "pcvr": p.pcvr.tolist(), "model_version": p.model_version,
                                  "snapshot_version": scored.snapshot_version, "batch_requests": scored.batch_requests})

    async def handle_health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "model_version": self.current.model.version})

    def describe(self) -> dict[str, Any]:
        canary = None
        if self.candidate is not None:
            canary = {"model_version": self.candidate.model.version,
                      "snapshot_version": self.candidate.snapshot_version, "share": self.config.canary_share}
        return {"model_version": self.current.model.version, "snapshot_version": self.current.snapshot_version,
                "canary": canary, "buckets": list(self.current.buckets), **self.config.as_dict()}

    async def handle_model(self, request: web.Request) -> web.Response:
        return web.json_response(self.describe())

    async def handle_promote(self, request: web.Request) -> web.Response:
        try:
            body = await request.json(loads=json.loads)
        except ValueError:
            return self._error(400, "body: not valid JSON", "body")
        if not isinstance(body, dict) or not isinstance(body.get("model_version"), str):
            return self._error(400, "model_version: the canary's version (a string) is required", "model_version")
        try:
            return web.json_response(self.promote(body["model_version"], body.get("report")))
        except PromotionRefused as exc:
            return self._error(409, f"not promoted: {exc}")

    async def handle_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), content_type="text/plain")

    async def handle_openapi(self, request: web.Request) -> web.Response:
        return web.json_response(yaml.safe_load(OPENAPI.read_text()))

    # ------------------------------------------------------------------ the snapshot
    async def refresh_snapshot(self) -> int | None:
        """Swap in the newest ad-feature snapshot of the folder when it is newer; returns its version."""
        from serving.model import ad_features

        folder = self.config.ad_features_dir
        present = ad_features.versions(folder) if folder is not None else []
        if not present or present[-1] <= self.current.snapshot_version:
            return None
        snapshot = await asyncio.to_thread(ad_features.load, folder, present[-1])
        for predictor in filter(None, (self.current, self.candidate)):
            await asyncio.to_thread(predictor.use_snapshot, snapshot)  # builds the table, then swaps it whole
        LOG.info("ad-feature snapshot v%d in use", snapshot.version)
        return snapshot.version

    async def keep_snapshot_fresh(self) -> None:
        while True:
            await asyncio.sleep(self.config.snapshot_refresh_s)
            try:
                await self.refresh_snapshot()
            except Exception:  # noqa: BLE001 - keep serving the snapshot in use; the failure is logged
                LOG.exception("loading a newer ad-feature snapshot failed")
