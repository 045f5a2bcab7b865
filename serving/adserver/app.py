"""The ad server: `POST /v1/ads` on the decision engine (aiohttp, one event loop per process).

Per request, inside a 100 ms deadline: parse and validate (400 naming the
field), resolve the location, read the user's profile and frequency record
from Redis in parallel (5 ms), run the decision engine, sign a token per
filled slot and answer. Before the answer leaves, the winners' expected cost
goes to the spend accumulator (whose reporter thread sends budget.spend once a
second) and the user gets an in-memory "just served" note, so no concurrent
request of that user can miss this serve. After the response is written: the
winners' frequency fields are incremented in Redis (the note covers the gap)
and the `ad.served` record is queued for the served-log thread
(serving.adserver.offloop: nothing that is not an answer is encoded or
produced on the event loop).

Overload: a request that would wait behind those in flight for more than half
its deadline (their count x the moving average of the time a request takes),
or finds `max_in_flight` requests inside the handler, or finds the served log
a full queue behind, gets a 503 at once; a
request that is already past its deadline after the user reads gets a 503
instead of a late answer. Until the state topics are
read to their heads, /v1/ads answers 503 and /ready says why.

Other endpoints: GET /ready, GET /metrics (Prometheus), GET /openapi.json."""
from __future__ import annotations

import asyncio
import collections
import json
import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol
from urllib.parse import quote

import numpy as np
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from core.audiences import AudienceSalt, request_member_keys
from core.client_address import client_address
from core.frequency import JustServed, day_number
from core.spend import SpendAccumulator
from core.tokens import TOKEN_LIFETIME_MS, TokenClaims, TokenKeys
from serving import served_log
from serving.body_limits import ADSERVER_MAX_BODY_BYTES, application
from serving.ops_auth import ops_authorized
from serving.decision.recall import RecallMonitor, check as recall_check
from serving.adserver.request import (REQUEST_START_HEADER, BadRequest, GeoResolver, gateway_wait_s,
                                      parse_ad_request, targeting_terms)
from serving.adserver.learned import Scoring
from serving.adserver.state import ServingState
from serving.decision.engine import Decision, DecisionEngine, EngineConfig, RequestContext
from serving.decision.filters import FREQUENCY_RECORD_UNAVAILABLE, FilterContext
from serving.decision.prediction import PriorPredictor
from serving.frequency_store import UserStore

LOG = logging.getLogger("adserve.adserver")
OPENAPI = Path(__file__).with_name("openapi.yaml")
STAGES = ("user_context", "retrieval", "filters", "prerank", "prediction", "auction", "response")
BILLING_OF = served_log.BILLING_OF
# Stage timings kept for GET /debug/timings: about 10 MB at most. A server nobody reads them from (every server
# in production) holds this many, so they must stay small; a benchmark reads and clears them every step.
TIMINGS_KEPT = 20_000


@dataclass
class ServerConfig:
    server_id: str = "adserver-1"
    tracker_url: str = "http://127.0.0.1:8081"
    deadline_ms: float = 100.0
    user_read_timeout_ms: float = 5.0
    max_in_flight: int = 64
    admission_wait_ms: float | None = None  # refuse when the expected wait passes this (default: half the deadline)
    engine: EngineConfig = field(default_factory=EngineConfig)
    # The operators' bearer token for GET /debug/timings (ADSERVE_OPS_TOKEN); None: the endpoint is off (404).
    ops_token: str | None = field(default=None, repr=False)
    # The proxies whose X-Forwarded-For names the caller (ADSERVE_TRUSTED_PROXIES, core.client_address): a
    # request without location or ip is located by the caller's address behind them; none: not located.
    trusted_proxies: tuple = ()


@dataclass(frozen=True)
class RequestPathParts:
    """The parts of the request path a caller may replace; each None is the default: no geo table, a decision
    engine on the state's index scoring with the priors, no custom audiences (audience_salt: the platform's salt,
    core.audiences). clock: the wall clock the tokens and the frequency notes read."""

    geo: GeoResolver | None = None
    engine: DecisionEngine | None = None
    clock: Callable[[], float] = time.time
    audience_salt: AudienceSalt | None = None


class ServedLogQueue(Protocol):
    """Where the server puts its ad.served records (serving.adserver.offloop.ServedLog: a thread encodes and
    produces them); `put` never blocks."""

    def put(self, key: bytes, record: dict[str, Any]) -> None: ...

    def full(self) -> bool: ...


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("adserve_ad_requests", "Ad requests by outcome", ["outcome"], registry=r)
        self.latency = Histogram("adserve_ad_request_seconds", "End-to-end handler latency", registry=r,
                                 buckets=(.002, .005, .01, .02, .03, .05, .075, .1, .2, .5))
        self.stage = Histogram("adserve_funnel_stage_seconds", "Latency per funnel stage", ["stage"], registry=r,
                               buckets=(.0005, .001, .002, .005, .01, .02, .05, .1))
        self.slots = Counter("adserve_slots", "Slots asked for, by filled or empty", ["result"], registry=r)
        self.fallbacks = Counter("adserve_prediction_fallbacks", "Auctions run on pre-ranker scores", registry=r)
        self.cap_timeouts = Counter("adserve_frequency_read_unavailable",
                                    "Frequency reads that missed their deadline or failed", registry=r)
        self.index_lag = Gauge("adserve_index_lag_seconds", "How far the state topics are behind", registry=r)
        self.commit_lag = Gauge("adserve_commit_to_applied_seconds",
                                "Commit -> applied lag of the latest advertiser change applied", registry=r)
        self.ads = Gauge("adserve_index_ads", "Live ads in the index", registry=r)
        self.after_errors = Counter("adserve_after_response_errors", "Post-response work that failed",
                                    ["what"], registry=r)
        self.recall = RecallMonitor(registry=r)  # the pre-ranker's recall on the sampled share (engine config)
        self.on_priors = Gauge("adserve_scoring_on_priors",
                               "1 while no model is published and the server ranks on priors", registry=r)
        self.on_priors.set(1)
        self.scoring_swaps = Counter("adserve_scoring_swaps", "Model or feature-snapshot swaps installed",
                                     ["what"], registry=r)
        self.scoring_refusals = Gauge("adserve_scoring_refusals",
                                      "Published models or snapshots refused (checks or load failed)", registry=r)
        self.feature_snapshot_version = Gauge("adserve_feature_snapshot_version",
                                              "Version (event-time cut, epoch ms) of the applied ad-feature snapshot",
                                              registry=r)
        self.feature_snapshot_age = Gauge("adserve_feature_snapshot_age_seconds",
                                          "Wall clock now minus the applied ad-feature snapshot's cut", registry=r)


def count_served(m: Metrics, slots_asked: int, filled: int, fallback: bool) -> None:
    """A served request in the metrics: its outcome, its filled and empty slots, and whether its auction ran on
    the pre-ranker's scores (the simulated day's servers count theirs the same way)."""
    m.requests.labels("served").inc()
    m.slots.labels("filled").inc(filled)
    m.slots.labels("empty").inc(slots_asked - filled)
    if fallback:
        m.fallbacks.inc()


class AdServer:
    """The request path and the post-response work; I/O parts are injected (see serving.adserver.main)."""

    def __init__(self, config: ServerConfig, state: ServingState, store: UserStore, keys: TokenKeys, *,
                 served_log: ServedLogQueue, ready: Callable[[], bool],
                 lag_s: Callable[[], float] = lambda: 0.0, parts: RequestPathParts = RequestPathParts()):
        """parts: the geo table, the decision engine, the clock and the audience salt (RequestPathParts)."""
        self.config, self.state, self.store, self.keys = config, state, store, keys
        self.audience_salt = parts.audience_salt
        self.served_log, self.is_ready, self.lag_s = served_log, ready, lag_s
        self.geo = parts.geo or GeoResolver()
        self.engine = parts.engine or DecisionEngine(state.index, state.campaigns, config=config.engine,
                                                     reserves=state.reserves)
        self.clock = parts.clock
        self.metrics = Metrics()
        self.spend = SpendAccumulator(config.server_id)
        self.just_served = JustServed()
        self.in_flight = 0
        self.service_ms = 5.0  # moving average of the CPU time a request takes (decision and response)
        self.rng = random.Random()
        self.np_rng = np.random.default_rng()
        self._background: set[asyncio.Task] = set()
        # Per-request stage timings (ms) of the latest requests, for `adserve bench serve` (GET /debug/timings).
        self.timings: collections.deque[dict[str, float]] = collections.deque(maxlen=TIMINGS_KEPT)
        self.scoring = Scoring()  # what the registry follower installed (serving.adserver.learned)

    def install_scoring(self, scoring: Scoring) -> None:
        """Swap in what the registry follower prepared (on the event loop, between two requests): the predictor
        (None: the priors) and, when the feature snapshot is newer than the one applied, its learned columns on
        the index (ctr_prior, the exploration posterior, the learned quality term) and its version for the served
        log."""
        m = self.metrics
        if scoring.predictor is not self.scoring.predictor and (scoring.predictor is not None
                                                                or not self.scoring.on_priors):
            self.engine.predictor = scoring.predictor if scoring.predictor is not None else PriorPredictor()
            m.scoring_swaps.labels("model").inc()
            LOG.info("scoring with %s%s", scoring.model_version or "the priors",
                     f", canary {scoring.canary_version} on {scoring.canary_share:.1%}" if scoring.canary_version
                     else "")
        snapshot = scoring.snapshot
        if snapshot is not None and snapshot.version != self.state.features_version:
            changed = self.engine.index.apply_learned(snapshot.ad_id, snapshot.ctr_prior, snapshot.ctr_alpha,
                                                      snapshot.ctr_beta, snapshot.quality_prior)
            self.state.features_version = snapshot.version
            m.feature_snapshot_version.set(snapshot.version)
            m.scoring_swaps.labels("feature_snapshot").inc()
            LOG.info("ad-feature snapshot v%d applied to %d ads of the index", snapshot.version, changed)
        m.on_priors.set(1 if scoring.on_priors else 0)
        m.scoring_refusals.set(len(scoring.refusals))
        self.scoring = scoring

    # ---------------------------------------------------------------- routes
    def app(self) -> web.Application:
        app = application(ADSERVER_MAX_BODY_BYTES)
        app.add_routes([web.post("/v1/ads", self.handle_ads), web.get("/ready", self.handle_ready),
                        web.get("/metrics", self.handle_metrics), web.get("/openapi.json", self.handle_openapi),
                        web.get("/debug/timings", self.handle_timings)])
        return app

    async def handle_ready(self, request: web.Request) -> web.Response:
        lag = self.lag_s()
        ready = self.is_ready()
        body = {"ready": ready, "index_lag_s": round(lag, 3), "commit_lag_s": round(self.state.commit_lag_s, 3),
                "ads": len(self.state.index),
                "snapshot_version": self.state.snapshot_version, "scoring": self.scoring.describe()}
        return web.json_response(body, status=200 if ready else 503)

    async def handle_metrics(self, request: web.Request) -> web.Response:
        self.metrics.index_lag.set(self.lag_s())
        self.metrics.commit_lag.set(self.state.commit_lag_s)
        self.metrics.ads.set(len(self.state.index))
        if self.state.features_version:
            self.metrics.feature_snapshot_age.set(max(0.0, self.clock() - self.state.features_version / 1000))
        return web.Response(body=generate_latest(self.metrics.registry), content_type="text/plain")

    async def handle_timings(self, request: web.Request) -> web.Response:
        """The stage timings (ms) of the latest requests; ?clear=1 empties the buffer after reading. Operators
        only: `Authorization: Bearer <ADSERVE_OPS_TOKEN>`, else 401; off (404) on a server without the token."""
        if not self.config.ops_token:
            return self._error(404, "debug endpoints are off: the server runs without ADSERVE_OPS_TOKEN")
        if not ops_authorized(request.headers.get("Authorization", ""), self.config.ops_token):
            return self._error(401, "send the operators' token: 'Authorization: Bearer <ADSERVE_OPS_TOKEN>'")
        body = list(self.timings)
        if request.query.get("clear") == "1":
            self.timings.clear()
        return web.json_response(body)

    async def handle_openapi(self, request: web.Request) -> web.Response:
        return web.json_response(yaml.safe_load(OPENAPI.read_text()))

    @staticmethod
    def _error(status: int, message: str, outcome_field: str | None = None) -> web.Response:
        body: dict[str, Any] = {"error": message}
        if outcome_field:
            body["field"] = outcome_field
        return web.json_response(body, status=status)

    async def handle_ads(self, request: web.Request) -> web.Response:
        m = self.metrics
        # Admission: a request that would wait behind the ones in flight for more than half its deadline
        # (their count x the recent time per request, one core serving them in turn) is refused at once
        # rather than answered late.
        expected_wait_ms = self.in_flight * self.service_ms
        limit_ms = self.config.admission_wait_ms if self.config.admission_wait_ms is not None \
            else self.config.deadline_ms / 2
        if self.served_log.full():  # the log is behind: refuse rather than drop records
            m.requests.labels("overloaded").inc()
            return self._error(503, "overloaded: the served log is behind; try another server")
        if self.in_flight >= self.config.max_in_flight or expected_wait_ms > limit_ms:
            m.requests.labels("overloaded").inc()
            return self._error(503, f"overloaded: {self.in_flight} requests in flight (~{expected_wait_ms:.0f} ms "
                                    "of work ahead); try another server")
        if not self.is_ready():
            m.requests.labels("not_ready").inc()
            return self._error(503, f"not ready: index {self.lag_s():.1f} s behind its topics")
        self.in_flight += 1
        began = time.perf_counter()
        # The deadline counts from when the gateway had the request: time spent waiting there is spent.
        waited_s = gateway_wait_s(request.headers.get(REQUEST_START_HEADER), self.clock())
        try:
            return await self._serve(request, began, began - waited_s + self.config.deadline_ms / 1000, waited_s)
        finally:
            self.in_flight -= 1
            m.latency.observe(time.perf_counter() - began)

    async def _serve(self, request: web.Request, began: float, deadline: float, waited_s: float) -> web.Response:
        m = self.metrics
        try:
            body = await request.json(loads=json.loads)
        except ValueError:
            m.requests.labels("bad_request").inc()
            return self._error(400, "body: not valid JSON", "body")
        try:
            ad_request = parse_ad_request(body)
        except BadRequest as e:
            m.requests.labels("bad_request").inc()
            return self._error(400, str(e), e.field)
        # the user's address: the publisher's (the body's ip), else the caller's behind the trusted proxies
        ip = ad_request.ip or (client_address(request.remote, request.headers.get("X-Forwarded-For"),
                                              self.config.trusted_proxies) if self.config.trusted_proxies else None)
        location = ad_request.location or (self.geo.locate(ip) if ip else None)
        now_ms = int(self.clock() * 1000)
        read_started = now_ms
        user = await self.store.read(ad_request.user_id, self._member_keys(ad_request),
                                     profile=ad_request.personalization)
        user_context_s = time.perf_counter() - began
        frequency = user.frequency
        if frequency is FREQUENCY_RECORD_UNAVAILABLE:
            m.cap_timeouts.inc()
        elif ad_request.user_id:
            frequency = self.just_served.merged(ad_request.user_id, frequency, read_started, now_ms)
        if time.perf_counter() > deadline:
            m.requests.labels("deadline").inc()
            return self._error(503, "deadline passed before the decision")
        context = self._request_context(ad_request, user, frequency, location, now_ms)
        features = context.user_features
        cpu_began = time.perf_counter()
        decision = self.engine.decide(context, clock=time.perf_counter, deadline=deadline, rng=self.rng,
                                      np_rng=self.np_rng)
        answer = self._answer(ad_request, decision, now_ms)
        self._observe(decision, ad_request, answer, user_context_s)
        self.service_ms = 0.95 * self.service_ms + 0.05 * (time.perf_counter() - cpu_began) * 1000
        self.timings.append({"gateway_wait": waited_s * 1000, "user_context": user_context_s * 1000,
                             **decision.timings_ms,
                             "handler": (time.perf_counter() - began) * 1000})
        # Before the answer leaves, and before any other request's decision can run: the winners' cost into the
        # spend and their slices, and the user's "just served" note, so a concurrent request of the same user
        # (its frequency record read before this serve lands in Redis) already counts this serve.
        account_served(self.spend, self.state, decision, now_ms)
        notes = self.just_served.note(ad_request.user_id, sorted({w.campaign_id for w in decision.winners}),
                                      day_number(now_ms), now_ms) if decision.winners and ad_request.user_id \
            else None
        task = asyncio.get_running_loop().create_task(
            self._after_response(ad_request, decision, location, features, now_ms, notes))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return web.json_response(answer)

    def _member_keys(self, ad_request) -> list[str]:
        """The salted keys of the request's ids, to look custom audiences up: only with personalisation consent
        (without it nothing is looked up at all) and only when the server has the salt."""
        if not ad_request.personalization or self.audience_salt is None:
            return []
        return request_member_keys(self.audience_salt, device_id=ad_request.device_id,
                                   email_sha256=ad_request.email_sha256)

    def _request_context(self, ad_request, user, frequency, location: str | None, now_ms: int) -> RequestContext:
        """The decision's input: targeting terms, filters, and the user's data only with consent."""
        profile = {name: user.values(name) for name in ("locations", "interests", "audiences", "age_band", "gender")}
        profile["audiences"] = [*profile["audiences"], *user.custom_audiences]
        terms = targeting_terms(ad_request, location, profile)
        consented = ad_request.personalization
        hidden = user.hidden_advertisers() if consented else frozenset()
        features = user.features() if consented else {}
        embedding = user.embedding(self.state.index.embedding_dim) if consented else None
        country = location.split("/")[0].upper() if location else None
        return RequestContext(ad_request.request_id, ad_request.placement, ad_request.positions, terms,
                              FilterContext(now_ms, frequency, hidden), country=country,
                              user_embedding=embedding, user_features=features, device=ad_request.device)

    def _answer(self, ad_request, decision, now_ms: int) -> dict[str, Any]:
        """The response body: each filled slot with its signed token and beacon URLs, empty slots as null ads."""
        cfg = self.config
        slots = []
        user = ad_request.user_id or ad_request.device_id
        user_key = self.keys.user_key(user) if user and decision.winners else ""
        for w in decision.winners:
            impression_id = f"{ad_request.request_id}:{w.slot}"
            billing = BILLING_OF[w.billing]
            token = self.keys.sign(TokenClaims(impression_id, w.ad_id, w.campaign_id, w.charge_per_event_micros,
                                               billing, w.landing_url, now_ms + TOKEN_LIFETIME_MS, served_ms=now_ms,
                                               user_key=user_key))
            quoted = quote(token, safe="")
            slots.append({"slot": w.slot, "position": w.position, "ad_id": w.ad_id, "campaign_id": w.campaign_id,
                          "creative_ref": w.creative_ref, "impression_id": impression_id,
                          "impression_url": f"{cfg.tracker_url}/v1/impression?t={quoted}",
                          "click_url": f"{cfg.tracker_url}/v1/click?t={quoted}", "token": token})
        return {"request_id": ad_request.request_id, "client_request_id": ad_request.client_request_id,
                "slots": [next((s for s in slots if s["slot"] == i + 1), {"slot": i + 1, "position": p, "ad": None})
                          for i, p in enumerate(ad_request.positions)]}

    def _observe(self, decision, ad_request, answer: dict[str, Any], user_context_s: float) -> None:
        """Request, slot, fallback and stage metrics of one served decision."""
        m = self.metrics
        count_served(m, len(ad_request.positions), sum(1 for s in answer["slots"] if "token" in s),
                     decision.scored_by_fallback)
        m.stage.labels("user_context").observe(user_context_s)
        for stage, ms in decision.timings_ms.items():
            m.stage.labels(stage).observe(ms / 1000)

    # ------------------------------------------------------- after response
    async def _after_response(self, ad_request, decision, location, features, now_ms: int, notes) -> None:
        await asyncio.sleep(0)  # let the response go out first
        try:
            self.served_log.put(ad_request.request_id.encode(),
                                self.served_record(ad_request, decision, location, features, now_ms))
        except Exception:  # noqa: BLE001 - counted and logged; the response already went out
            self.metrics.after_errors.labels("served_log").inc()
            LOG.exception("could not produce the ad.served record of %s", ad_request.request_id)
        if notes is not None:
            campaigns = sorted({w.campaign_id for w in decision.winners})
            try:
                await self.store.record_served(ad_request.user_id, campaigns, day_number(now_ms))
                JustServed.landed(notes, int(self.clock() * 1000))
            except Exception:  # noqa: BLE001 - the note keeps counting until it expires
                self.metrics.after_errors.labels("frequency_write").inc()
                LOG.warning("frequency write failed for a user; the in-memory note covers %s s",
                            self.just_served.window_ms / 1000)
        if decision.recall_sample is not None:  # last: the frequency write must not wait for it
            # The full candidate set through the model, in a worker thread so the event loop keeps answering.
            # The sample carries its candidates' columns as the request saw them (recall.SampledAds), so an index
            # update meanwhile changes nothing it judges; an error is counted, not retried.
            try:
                self.metrics.recall.record(await asyncio.to_thread(
                    recall_check, self.engine.index, decision.recall_sample, self.engine.predictor))
            except Exception:  # noqa: BLE001 - a monitor; counted, the request is long answered
                self.metrics.after_errors.labels("recall_check").inc()

    def served_record(self, ad_request, decision, location, features, now_ms: int) -> dict[str, Any]:
        terms = decision.terms or self.engine.reserves.terms(ad_request.placement, None)  # the auction's own
        request = served_log.ServedRequest(ad_request.request_id, ad_request.placement, location, ad_request.user_id,
                                           ad_request.device, ",".join(ad_request.languages) or None,
                                           ad_request.page, ad_request.positions)
        return served_log.served_record(decision, request, server_id=self.config.server_id, now_ms=now_ms,
                                        user_features=features, snapshot_version=int(self.state.features_version),
                                        terms=terms)

    async def drain(self) -> None:
        """Wait for the post-response work still running (shutdown, tests)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)


def account_served(spend: SpendAccumulator, state: ServingState, decision: Decision, now_ms: int) -> None:
    """The money side of one answered request: each winner's expected cost into this second's spend report
    (with its price per billing event), metered slices drawn down, and for the budget job the campaigns the
    request could reach and the metered ones this server could not serve for want of a slice."""
    for w in decision.winners:
        spend.add(w.campaign_id, w.expected_cost_micros, now_ms, w.charge_per_event_micros)
        state.charge(w.campaign_id, w.expected_cost_micros, now_ms)
    spend.eligible_many(decision.eligible_campaigns, now_ms)
    for campaign_id, top_bid in decision.slices_wanted.items():
        spend.want_slice(campaign_id, top_bid, now_ms)


def new_request_id() -> str:
    return uuid.uuid4().hex
