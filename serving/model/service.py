"""The prediction service: the click model behind HTTP (aiohttp), with dynamic batching across concurrent
requests and an optional canary model (design: "Prediction service").

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

Dynamic batching: the handler parses the body, picks the arm (serving.model.canary.routes_to_candidate on the
request id) and queues the request with a future. One scoring thread (the event loop keeps accepting while
it scores) takes everything queued, up to max_batch_rows input rows (candidates x positions; at least one
request), waiting at most max_wait_ms after the oldest request's arrival for companions, drops the requests
whose deadline passed, scores each arm's requests with one ModelPredictor.predict_many, and resolves the
futures on the event loop. Under load the queue fills while a batch is scored, so batches grow with the load
and no request waits for companions longer than max_wait_ms.

The ad-feature snapshot is the service's own: the newest version in its folder, checked every
snapshot_refresh_s seconds and swapped whole (ModelPredictor.use_snapshot). The service never decides an
auction and never reads user state: it scores what it is sent."""
from __future__ import annotations

import asyncio
import collections
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from core.errors import AdserveError, BadRequest, InvalidSettings
from serving.body_limits import PREDICTION_MAX_BODY_BYTES, application
from serving.decision.prediction import PredictionRequest, Predictions, PredictionTimeout
from serving.drain import begin_drain, close_listener, until_terminated
from serving.model.canary import promotion_refusal, routes_to_candidate
from serving.scrape_targets import announce

LOG = logging.getLogger("adserve.prediction")
OPENAPI = Path(__file__).with_name("openapi.yaml")
DEFAULT_PORT = 8090
DEFAULT_MAX_WAIT_MS = 1.0
DEFAULT_MAX_BATCH_ROWS = 3_200
DEFAULT_SNAPSHOT_REFRESH_S = 300.0
MAX_CANDIDATES = 10_000
MAX_POSITIONS = 64
AD_ID_RANGE = (-2**63, 2**63 - 1)  # the model looks ads up by id in an int64 column
POSITION_RANGE = (1, 2**31 - 1)  # slot positions, as the ad server and the served log bound them
CURRENT, CANDIDATE = "current", "candidate"


@dataclass
class ScoreRequest:
    request_id: str
    prediction: PredictionRequest
    deadline_ms: float

    @property
    def rows(self) -> int:
        """Input rows it costs the model: candidates x positions."""
        return len(self.prediction.ad_ids) * len(self.prediction.positions)


def _text(body: dict, name: str, *, required: bool) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise BadRequest(name, "required (a string)")
        return None
    if not isinstance(value, str):
        raise BadRequest(name, f"must be a string, got {type(value).__name__}")
    return value


def _integers(body: dict, name: str, limit: int, bounds: tuple[int, int]) -> list[int]:
    values = body.get(name)
    if not isinstance(values, list):
        raise BadRequest(name, "required (a list of integers)")
    if len(values) > limit:
        raise BadRequest(name, f"at most {limit:,} entries, got {len(values):,}")
    least, most = bounds
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int) or not least <= v <= most:
            raise BadRequest(f"{name}[{i}]", f"must be an integer from {least} to {most}, got {v!r}")
    return values


def _finite(value: Any) -> float | None:
    """A JSON number as a finite float; None for anything else (a bool, a string, an integer beyond a double)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if np.isfinite(number) else None


def parse_score_request(body: Any) -> ScoreRequest:
    """The body of POST /v1/score as a ScoreRequest, or BadRequest naming the first wrong field."""
    if not isinstance(body, dict):
        raise BadRequest("body", "must be a JSON object")
    request_id = _text(body, "request_id", required=True)
    placement = _text(body, "placement", required=True)
    country, device = _text(body, "country", required=False), _text(body, "device", required=False)
    features = body.get("user_features") or {}
    if not isinstance(features, dict):
        raise BadRequest("user_features", "must be an object of feature name -> number")
    values = {name: _finite(value) for name, value in features.items()}
    for name, value in values.items():
        if value is None:
            raise BadRequest(f"user_features.{name}", f"must be a finite number, got {features[name]!r}")
    ad_ids = _integers(body, "ad_ids", MAX_CANDIDATES, AD_ID_RANGE)
    positions = _integers(body, "positions", MAX_POSITIONS, POSITION_RANGE)
    if not positions:
        raise BadRequest("positions", "at least one slot position")
    deadline_ms = _finite(body.get("deadline_ms"))
    if deadline_ms is None or deadline_ms <= 0:
        raise BadRequest("deadline_ms", f"required: the caller's remaining budget in ms (> 0), got "
                                        f"{body.get('deadline_ms')!r}")
    n = len(ad_ids)
    prediction = PredictionRequest(
        rows=np.arange(n), ctr_prior=np.zeros(n), positions=positions, placement=placement,  # the index's rows
        user_features=values, ad_ids=np.asarray(ad_ids, dtype=np.int64),
        country=country, device=device)  # and priors are the ad server's; the model looks ads up by id
    return ScoreRequest(request_id, prediction, deadline_ms)


# ------------------------------------------------------------------------------------------ batching

@dataclass
class Pending:
    """A queued request: what to score, on which arm, by when, and the future its handler awaits."""

    request: ScoreRequest
    arm: str
    arrived: float  # on the batcher's clock
    deadline: float
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


@dataclass
class Scored:
    predictions: Predictions
    batch_requests: int  # requests scored in the same model call (the same batch and arm)
    snapshot_version: int


def take_batch(queue: collections.deque, max_rows: int) -> list[Pending]:
    """Everything queued, oldest first, up to max_rows input rows (at least one request, however large)."""
    batch, rows = [], 0
    while queue and (not batch or rows + queue[0].request.rows <= max_rows):
        item = queue.popleft()
        batch.append(item)
        rows += item.request.rows
    return batch


class DynamicBatcher:
    """One scoring thread over a queue of requests (see the module docstring). `score(arm, requests)` is
    ModelPredictor.predict_many of the arm's model; `on_batch` sees each batch after scoring (metrics)."""

    def __init__(self, score: Callable[[str, list[PredictionRequest]], tuple[list[Predictions], int]], *,
                 max_rows: int = DEFAULT_MAX_BATCH_ROWS, max_wait_s: float = DEFAULT_MAX_WAIT_MS / 1000,
                 clock: Callable[[], float] = time.perf_counter,
                 on_batch: Callable[[list[Pending], float], None] = lambda batch, seconds: None):
        self.score, self.max_rows, self.max_wait_s, self.clock = score, max_rows, max_wait_s, clock
        self.on_batch = on_batch
        self._queue: collections.deque[Pending] = collections.deque()
        self._queued_rows = 0
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name="prediction-batcher", daemon=True)

    def start(self) -> "DynamicBatcher":
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout_s)

    def submit(self, item: Pending) -> None:
        with self._wake:
            self._queue.append(item)
            self._queued_rows += item.request.rows
            self._wake.notify()

    def _next_batch(self) -> list[Pending] | None:
        with self._wake:
            while not self._queue and not self._stopping:
                self._wake.wait()
            if self._stopping:
                return None
            while not self._stopping and self._queued_rows < self.max_rows:
                left = self._queue[0].arrived + self.max_wait_s - self.clock()
                if left <= 0:
                    break
                self._wake.wait(left)  # companions may arrive; a full batch or the oldest's wait ends it
            batch = take_batch(self._queue, self.max_rows)
            self._queued_rows -= sum(item.request.rows for item in batch)
            return batch

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            try:
                self._score_batch(batch)
            except Exception as exc:  # noqa: BLE001 - every waiting request gets the error, the thread lives on
                LOG.exception("scoring a batch of %d requests failed", len(batch))
                _settle(batch, [exc] * len(batch))
        with self._wake:  # stopped: nobody will score what is left
            left, self._queue = list(self._queue), collections.deque()
        _settle(left, [PredictionTimeout("the prediction service is stopping")] * len(left))

    def _score_batch(self, batch: list[Pending]) -> None:
        now = self.clock()
        live = []
        for item in batch:
            if item.future.done():  # the handler gave up already (its deadline, or the client went away)
                continue
            if now > item.deadline:
                _settle([item], [PredictionTimeout("deadline passed while queued")])
            else:
                live.append(item)
        began = self.clock()
        for arm in (CURRENT, CANDIDATE):
            mine = [item for item in live if item.arm == arm]
            if not mine:
                continue
            try:
                predictions, snapshot_version = self.score(arm, [item.request.prediction for item in mine])
                results: list[Any] = [Scored(p, len(mine), snapshot_version) for p in predictions]
            except Exception as exc:  # noqa: BLE001 - this arm's requests get the error (500); the other's still score
                LOG.exception("the %s model failed on a batch of %d requests", arm, len(mine))
                results = [exc] * len(mine)
            _settle(mine, results)
        if live:
            self.on_batch(live, self.clock() - began)


def _settle(items: Sequence[Pending], results: Sequence[Any]) -> None:
    """Resolve each item's future on its event loop with a result or an exception."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, Any]]] = {}
    for item, result in zip(items, results):
        by_loop.setdefault(item.loop, []).append((item.future, result))
    for loop, pairs in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve, pairs)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


def _resolve(pairs: list[tuple[asyncio.Future, Any]]) -> None:
    for future, result in pairs:
        if future.done():
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)


# ------------------------------------------------------------------------------------------ the service

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


@dataclass
class RunningPredictionService:
    service: PredictionService
    runner: web.AppRunner
    port: int
    tasks: list[asyncio.Task] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await self.runner.cleanup()
        await asyncio.to_thread(self.service.batcher.stop)


async def start_prediction_service(service: PredictionService, *, host: str = "127.0.0.1",
                                   port: int = DEFAULT_PORT) -> RunningPredictionService:
    service.batcher.start()
    runner = web.AppRunner(service.app(), access_log=None)
    target = announce(runner.app, "prediction")
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=512)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    target.publish(host, bound)
    tasks = []
    if service.config.ad_features_dir is not None and service.config.snapshot_refresh_s > 0:
        tasks.append(asyncio.get_running_loop().create_task(service.keep_snapshot_fresh()))
    return RunningPredictionService(service, runner, bound, tasks)


def load_service(model_dir: Path, ad_features_dir: Path, *, canary_model_dir: Path | None = None,
                 config: ServiceConfig | None = None) -> PredictionService:
    """The service over saved models and the newest snapshot of the folder (loads TensorFlow)."""
    from serving.model import ad_features
    from serving.model.click_model import ClickModel
    from serving.model.predictor import ModelPredictor

    snapshot = ad_features.load(ad_features_dir)
    current = ModelPredictor(ClickModel.load(model_dir), snapshot)
    candidate = ModelPredictor(ClickModel.load(canary_model_dir), snapshot) if canary_model_dir else None
    config = config or ServiceConfig()
    config.ad_features_dir = ad_features_dir
    return PredictionService(current, candidate, config)


def service_from_registry(bootstrap: str, config: ServiceConfig | None = None, *, wait_s: float = 10 ** 9,
                          log: Callable[[str], None] = print):
    """(the service over the registry's current model and newest feature snapshot, its registry follower): waits
    until the registry names a model that loads (saying so while it waits). The follower keeps swapping the
    service's models afterwards once `follow(service, loop)` is called."""
    from serving.adserver.learned import RegistryFollower

    latest: list = []
    follower = RegistryFollower(bootstrap, latest.append)
    follower.start()
    began, said = time.monotonic(), 0.0
    while not (latest and latest[-1].current is not None):
        if time.monotonic() - began > wait_s:
            follower.stop()
            raise InvalidSettings(f"the model registry named no loadable model within {wait_s:.0f} s")
        if time.monotonic() - said > 30:
            said = time.monotonic()
            log("prediction service: waiting for the model registry to name a model (`adserve model retrain`)")
        time.sleep(0.2)
    scoring = latest[-1]
    service = PredictionService(scoring.current, None, config or ServiceConfig())
    service.install_scoring(scoring)

    def follow(loop: asyncio.AbstractEventLoop) -> None:
        follower.install = lambda update: loop.call_soon_threadsafe(service.install_scoring, update)
        if follower.scoring is not scoring:
            loop.call_soon_threadsafe(service.install_scoring, follower.scoring)
    return service, follow


def run_prediction_service(service: PredictionService, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                           log: Callable[[str], None] = print, follow: Callable | None = None,
                           drain_delay_s: float = 0.0) -> None:
    """The service until interrupted or terminated, then drained (serving.drain: /ready 503 for
    `drain_delay_s`, the requests in flight finished); `follow(loop)` (service_from_registry's) hands registry
    swaps to its loop."""
    async def main() -> None:
        running = await start_prediction_service(service, host=host, port=port)
        if follow is not None:
            follow(asyncio.get_running_loop())
        described = service.describe()
        canary = described["canary"]
        log(f"prediction service on {host}:{running.port}: model {described['model_version']} (ad-feature snapshot "
            f"v{described['snapshot_version']})"
            + (f", canary {canary['model_version']} on {canary['share']:.2%} of requests" if canary else "")
            + f"; settings {json.dumps(service.config.as_dict())}")
        try:
            await until_terminated()
        finally:
            await begin_drain(running.runner.app, drain_delay_s)
            await close_listener(running.runner)
            await running.stop()

    asyncio.run(main())


class ServiceThread:
    """The service on its own event loop in a background thread, for tests and the benchmark:
    `with ServiceThread(service) as running: RemotePredictor(running.url)`."""

    def __init__(self, service: PredictionService, host: str = "127.0.0.1", port: int = 0):
        self.service, self.host, self.port = service, host, port
        self.loop = asyncio.new_event_loop()
        self._running: RunningPredictionService | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, name="prediction-service", daemon=True)

    @property
    def url(self) -> str:
        assert self._running is not None, "start the service first"
        return f"http://{self.host}:{self._running.port}"

    def start(self) -> "ServiceThread":
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            start_prediction_service(self.service, host=self.host, port=self.port), self.loop)
        self._running = started.result(30)
        return self

    def stop(self) -> None:
        if self._running is not None:
            asyncio.run_coroutine_threadsafe(self._running.stop(), self.loop).result(30)
            self._running = None
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()

    def __enter__(self) -> "ServiceThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
