"""The advertiser API (aiohttp): campaigns and ads of the calling advertiser, in the campaign store.

    Authorization: Bearer <api key>          401 without a valid key
    GET    /v1/campaigns                     the advertiser's campaigns
    POST   /v1/campaigns                     create (core.campaigns.validate_campaign)
    GET    /v1/campaigns/{id}                404 if it is another advertiser's
    PATCH  /v1/campaigns/{id}                change budget, caps, schedule, status ...
    POST   /v1/campaigns/{id}/pause|resume   status PAUSED / ACTIVE
    GET    /v1/campaigns/{id}/ads            the campaign's ads
    POST   /v1/campaigns/{id}/ads            create an ad (bid, creative, landing URL, targeting)
    GET    /v1/ads/{id}, PATCH /v1/ads/{id}  read, change bid / targeting / creative / status
    GET    /v1/reports?from=&to=&granularity=hour|day[&campaign_id=1,2]
                                             billed impressions, clicks, spend and conversions per campaign
                                             (core.reports; 400 naming the parameter, 404 for another's campaign)
    GET    /v1/audiences, POST /v1/audiences  the advertiser's custom audiences; create one by name
    GET    /v1/audiences/{id}                404 if it is another advertiser's
    POST   /v1/audiences/{id}/members        {"hashed_ids": [SHA-256 hex of normalised emails or device ids]}
                                             (core.audiences; keyed with the platform's salt before storing;
                                             matched once the audience holds MIN_AUDIENCE_MEMBERS)
    POST   /v1/audiences/{id}/members/remove the same form: those members stop matching
    GET    /openapi.json                     the OpenAPI description
    GET    /metrics                          Prometheus: requests refused by the rate limits, failed keys

A rejected request (4xx with {"error", "field"}) writes nothing; a field that
is the platform's (the quality term, the review state) is refused by name. A
new ad waits for an operator's review (review_status PENDING), and a change to
its creative, landing URL or targeting sends it back; only approved ads serve.
Every change commits with a new version before the answer; the API never calls
an ad server (changes reach them through CDC and the index builder).

Callers: no key or a revoked key -> 401; another advertiser's object -> 404
(its existence is not revealed); the owner -> 2xx.

Limits (RateLimits, core.rate_limit token buckets): each API key may make `rate_per_s` requests a second
with bursts of `burst` (default 20/s, 40); a request past that gets 429 with Retry-After (whole seconds) and
{"error", "field": "Authorization"}. A request without a valid key costs its client address a token of a
smaller bucket (default 1/s, 20), and an address whose bucket is empty gets 429 before its key is looked
up, so keys cannot be guessed at speed. A campaign's budget changes at most 30 times an hour
(core.campaigns.BUDGET_EDITS_PER_HOUR): one more gets 429 naming daily_budget_micros, with Retry-After. All are
counted in adserve_advertiser_api_rate_limited_total{limit}.
A body over ADVERTISER_API_MAX_BODY_BYTES (1 MiB) gets 413 (serving.body_limits). GET /openapi.json and
GET /metrics need no key and are not limited."""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from redis.exceptions import RedisError

from core.audiences import (MIN_AUDIENCE_MEMBERS, AudienceSalt, audience_value, matching_change,
                            named_audience_ids, parse_audience_name, parse_hashed_ids, salt_from)
from core.campaigns import InvalidField, TooManyBudgetEdits, validate_ad, validate_campaign
from core.client_address import TRUSTED_PROXIES_ENV, Network, client_address, parse_trusted_proxies
from core.errors import InvalidSettings
from core.rate_limit import Decision, FailedKeyLimiter, RateLimit, RateLimiter
from core.reports import parse_report_query
from core.settings import describe
from serving.advertiser.audiences import AudienceMembers, AudienceStore
from serving.advertiser.store import CampaignStore, hash_key, to_json, with_ms_times
from serving.body_limits import ADVERTISER_API_MAX_BODY_BYTES, application
from serving.scrape_targets import announce

LOG = logging.getLogger("adserve.advertiser_api")
OPENAPI = Path(__file__).with_name("openapi.yaml")
ADVERTISER = web.RequestKey("advertiser_id", int)
PUBLIC_PATHS = ("/openapi.json", "/metrics")  # no key, no limit
LIMIT_FLAGS = ("rate_per_s", "burst", "unauthenticated_rate_per_s", "unauthenticated_burst")  # settings fields


INTERNAL_COLUMNS = ("reviewed_by",)  # the operator's name stays inside the platform


def advertiser_view(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A row as its advertiser sees it: times as ISO-8601 UTC, without the platform's internal columns."""
    out = to_json(row)
    return None if out is None else {k: v for k, v in out.items() if k not in INTERNAL_COLUMNS}


def _error(status: int, message: str, field: str | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if field:
        body["field"] = field
    return web.json_response(body, status=status)


@dataclass(frozen=True)
class RateLimits:
    """How fast callers may go: each API key (`per_api_key`), and each client address's requests without a
    valid key (`unauthenticated`: a typo is forgiven, guessing is slowed to a crawl)."""

    per_api_key: RateLimit = field(default_factory=lambda: RateLimit(rate_per_s=20.0, burst=40))
    unauthenticated: RateLimit = field(default_factory=lambda: RateLimit(rate_per_s=1.0, burst=20))


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.rate_limited = Counter("adserve_advertiser_api_rate_limited", "Requests refused with 429, by the "
                                    "limit they hit (api_key, address or budget_edits)", ["limit"],
                                    registry=self.registry)
        self.unauthorized = Counter("adserve_advertiser_api_unauthorized", "Requests without a valid API key",
                                    registry=self.registry)
        self.latency = Histogram("adserve_advertiser_api_request_seconds", "Time to answer a request, by method, "
                                 "route (its template, e.g. /v1/campaigns/{id}) and status class (2xx, 4xx, 5xx)",
                                 ["method", "route", "status"], registry=self.registry,
                                 buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5))


def bearer_key(request: web.Request) -> str:
    """The API key of `Authorization: Bearer <key>`, or "" without one."""
    header = request.headers.get("Authorization", "")
    return header[7:].strip() if header.startswith("Bearer ") else ""


class AdvertiserApi:
    def __init__(self, store: CampaignStore, audience_members: AudienceMembers | None = None, *,
                 limits: RateLimits | None = None, clock: Callable[[], float] = time.monotonic,
                 trusted_proxies: tuple[Network, ...] = ()):
        """audience_members: where uploaded members go (Redis and the salt); None: custom audiences are off and
        a members upload answers 503. limits=None: no rate limit (in-process tests and benchmarks); the
        command passes its settings'. trusted_proxies: whose X-Forwarded-For names the client
        (core.client_address), for the per-address limit."""
        self.store = store
        self.limits, self.clock, self.trusted_proxies = limits, clock, trusted_proxies
        self.metrics = Metrics()
        self.per_api_key = RateLimiter(limits.per_api_key) if limits else None
        self.per_address = FailedKeyLimiter(limits.unauthenticated) if limits else None
        self.audiences = AudienceStore(store)
        self.audience_members = audience_members

    def app(self) -> web.Application:
        app = application(ADVERTISER_API_MAX_BODY_BYTES, middlewares=[self._observe, self._auth])
        app.add_routes([
            web.get("/openapi.json", self.openapi), web.get("/metrics", self.metrics_text),
            web.get("/v1/campaigns", self.list_campaigns), web.post("/v1/campaigns", self.create_campaign),
            web.get("/v1/campaigns/{id}", self.get_campaign), web.patch("/v1/campaigns/{id}", self.patch_campaign),
            web.post("/v1/campaigns/{id}/pause", self.pause), web.post("/v1/campaigns/{id}/resume", self.resume),
            web.get("/v1/campaigns/{id}/ads", self.list_ads), web.post("/v1/campaigns/{id}/ads", self.create_ad),
            web.get("/v1/ads/{id}", self.get_ad), web.patch("/v1/ads/{id}", self.patch_ad),
            web.get("/v1/reports", self.reports),
            web.get("/v1/audiences", self.list_audiences), web.post("/v1/audiences", self.create_audience),
            web.get("/v1/audiences/{id}", self.get_audience),
            web.post("/v1/audiences/{id}/members", self.add_audience_members),
            web.post("/v1/audiences/{id}/members/remove", self.remove_audience_members),
        ])
        if self.audience_members is not None:
            members = self.audience_members

            async def close_members(_app: web.Application) -> None:
                await members.close()
            app.on_cleanup.append(close_members)
        return app

    @web.middleware
    async def _observe(self, request: web.Request, handler):
        """Each answered request's time in adserve_advertiser_api_request_seconds (an unknown path counts under
        route "unmatched", so a scan of random paths adds no series)."""
        start, status = time.perf_counter(), 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            info = request.match_info.route.resource
            route = info.canonical if info is not None else "unmatched"
            self.metrics.latency.labels(request.method, route, f"{status // 100}xx").observe(
                time.perf_counter() - start)

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        if request.path in PUBLIC_PATHS:
            return await handler(request)
        key, now_s = bearer_key(request), self.clock()
        address = client_address(request.remote, request.headers.get("X-Forwarded-For"),
                                 self.trusted_proxies) or ""
        digest = hash_key(key).hex() if key else ""
        if self.per_address is not None:  # guessing is slowed per address, never a key that works
            decision = self.per_address.before_lookup(address, digest, now_s)
            if not decision.allowed:
                return self._too_many(decision, "address")
        advertiser_id = await self.store.advertiser_for_key(key) if key else None
        if advertiser_id is None:
            self.metrics.unauthorized.inc()
            if self.per_address is not None:
                decision = self.per_address.failed(address, digest, now_s)
                if not decision.allowed:
                    return self._too_many(decision, "address")
            return _error(401, "missing or unknown API key: send 'Authorization: Bearer <key>'")
        if self.per_address is not None:
            self.per_address.succeeded(digest)
        if self.per_api_key is not None:
            decision = self.per_api_key.take(digest, now_s)
            if not decision.allowed:
                return self._too_many(decision, "api_key")
        request[ADVERTISER] = advertiser_id
        try:
            return await handler(request)
        except InvalidField as e:
            return _error(400, str(e), e.field)
        except TooManyBudgetEdits as e:
            self.metrics.rate_limited.labels("budget_edits").inc()
            response = _error(429, str(e), e.field)
            response.headers["Retry-After"] = str(e.retry_after_s)
            return response

    def _too_many(self, decision: Decision, limit: str) -> web.Response:
        """429 with Retry-After; `limit` (api_key or address) labels the count."""
        self.metrics.rate_limited.labels(limit).inc()
        whose = "this API key" if limit == "api_key" else "this address without a valid API key"
        response = _error(429, f"too many requests from {whose}: retry after {decision.retry_after_s} s",
                          "Authorization")
        response.headers["Retry-After"] = str(decision.retry_after_s)
        return response

    async def metrics_text(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), content_type="text/plain")

    @staticmethod
    async def _body(request: web.Request) -> Any:
        try:
            return await request.json(loads=json.loads)
        except ValueError:
            raise InvalidField("body", "is not valid JSON") from None

    @staticmethod
    def _id(request: web.Request) -> int:
        try:
            return int(request.match_info["id"])
        except ValueError:
            raise web.HTTPNotFound(text="no such object") from None

    @staticmethod
    def _found(row: dict[str, Any] | None, what: str, status: int = 200) -> web.Response:
        if row is None:
            return _error(404, f"no such {what} for this advertiser")
        return web.json_response(advertiser_view(row), status=status)

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(yaml.safe_load(OPENAPI.read_text()))

    async def list_campaigns(self, request: web.Request) -> web.Response:
        rows = await self.store.list_campaigns(request[ADVERTISER])
        return web.json_response([advertiser_view(r) for r in rows])

    async def create_campaign(self, request: web.Request) -> web.Response:
        fields = validate_campaign(await self._body(request))
        row = await self.store.create_campaign(request[ADVERTISER], fields)
        return web.json_response(advertiser_view(row), status=201)

    async def get_campaign(self, request: web.Request) -> web.Response:
        return self._found(await self.store.get_campaign(request[ADVERTISER], self._id(request)), "campaign")

    async def patch_campaign(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        return await self._change_campaign(request, body)

    async def _change_campaign(self, request: web.Request, body: Any) -> web.Response:
        advertiser_id, campaign_id = request[ADVERTISER], self._id(request)
        existing = await self.store.get_campaign(advertiser_id, campaign_id)
        if existing is None:
            return _error(404, "no such campaign for this advertiser")
        fields = validate_campaign(body, existing=with_ms_times(existing))
        if not fields:
            raise InvalidField("body", "names no field to change")
        return self._found(await self.store.update_campaign(advertiser_id, campaign_id, fields), "campaign")

    async def pause(self, request: web.Request) -> web.Response:
        return await self._change_campaign(request, {"status": "PAUSED"})

    async def resume(self, request: web.Request) -> web.Response:
        return await self._change_campaign(request, {"status": "ACTIVE"})

    async def list_ads(self, request: web.Request) -> web.Response:
        advertiser_id, campaign_id = request[ADVERTISER], self._id(request)
        if await self.store.get_campaign(advertiser_id, campaign_id) is None:
            return _error(404, "no such campaign for this advertiser")
        return web.json_response([advertiser_view(r) for r in await self.store.list_ads(advertiser_id, campaign_id)])

    async def create_ad(self, request: web.Request) -> web.Response:
        fields = validate_ad(await self._body(request), creating=True)
        await self._check_audiences(request[ADVERTISER], fields)
        row = await self.store.create_ad(request[ADVERTISER], self._id(request), fields)
        return self._found(row, "campaign", status=201)

    async def _check_audiences(self, advertiser_id: int, fields: dict[str, Any]) -> None:
        """Every uploaded audience ("aud-{id}") the targeting names must be the advertiser's own; another's is
        refused exactly like one that does not exist."""
        if "targeting" in fields:
            missing = await self.audiences.missing(advertiser_id, named_audience_ids(fields["targeting"]))
            if missing:
                raise InvalidField("targeting.audience", f"no audience {audience_value(missing[0])} for this "
                                                         "advertiser: create one with POST /v1/audiences")

    async def get_ad(self, request: web.Request) -> web.Response:
        return self._found(await self.store.get_ad(request[ADVERTISER], self._id(request)), "ad")

    async def patch_ad(self, request: web.Request) -> web.Response:
        fields = validate_ad(await self._body(request), creating=False)
        if not fields:
            raise InvalidField("body", "names no field to change")
        await self._check_audiences(request[ADVERTISER], fields)
        return self._found(await self.store.update_ad(request[ADVERTISER], self._id(request), fields), "ad")

    async def reports(self, request: web.Request) -> web.StreamResponse:
        query = parse_report_query(request.query)
        if query.format == "csv":
            response = web.StreamResponse(headers={
                "Content-Type": "text/csv; charset=utf-8",
                "Content-Disposition": f'attachment; filename="report-{query.granularity}-{query.from_day}.csv"'})

            async def start() -> web.StreamResponse:
                await response.prepare(request)
                return response
            if not await self.store.report_csv(request[ADVERTISER], query, start):
                return _error(404, "no such campaign for this advertiser", "campaign_id")
            await response.write_eof()
            return response
        report = await self.store.report(request[ADVERTISER], query)
        if report is None:
            return _error(404, "no such campaign for this advertiser", "campaign_id")
        return web.Response(body=report, content_type="application/json")

    async def list_audiences(self, request: web.Request) -> web.Response:
        return web.json_response([advertiser_view(r) for r in await self.audiences.list(request[ADVERTISER])])

    async def create_audience(self, request: web.Request) -> web.Response:
        name = parse_audience_name(await self._body(request))
        return web.json_response(advertiser_view(await self.audiences.create(request[ADVERTISER], name)),
                                 status=201)

    async def get_audience(self, request: web.Request) -> web.Response:
        return self._found(await self.audiences.get(request[ADVERTISER], self._id(request)), "audience")

    async def add_audience_members(self, request: web.Request) -> web.Response:
        """Members as SHA-256 hashes (core.audiences.parse_hashed_ids), keyed with the platform's salt, then
        committed to the campaign store and, once the audience holds MIN_AUDIENCE_MEMBERS, made matchable in
        Redis. Sending an upload again adds nothing twice."""
        return await self._change_members(request, removing=False)

    async def remove_audience_members(self, request: web.Request) -> web.Response:
        """Members to remove, as the same hashes; they stop matching at once, and an audience that falls under
        MIN_AUDIENCE_MEMBERS stops matching anyone."""
        return await self._change_members(request, removing=True)

    async def _change_members(self, request: web.Request, *, removing: bool) -> web.Response:
        advertiser_id, audience_id = request[ADVERTISER], self._id(request)
        hashes = parse_hashed_ids(await self._body(request))
        if await self.audiences.get(advertiser_id, audience_id) is None:
            return _error(404, "no such audience for this advertiser")
        if self.audience_members is None:
            return _error(503, "custom audiences are off on this API: it runs without ADSERVE_AUDIENCE_SALT")
        keys = self.audience_members.member_keys(hashes)
        change = self.audiences.remove_members if removing else self.audiences.add_members
        result = await change(advertiser_id, audience_id, keys)
        if result is None:
            return _error(404, "no such audience for this advertiser")
        changed, audience = result
        action = matching_change(audience["live"], audience["member_count"], removing=removing)
        try:  # the store is the record; Redis follows it, and a resend of the same request finishes the work
            if action == "link_all":
                await self.audience_members.add(audience_id, await self.audiences.member_keys(audience_id))
                audience = await self.audiences.set_live(audience_id, True)
            elif action == "link_upload":
                await self.audience_members.add(audience_id, keys)
            elif action == "unlink_upload":
                await self.audience_members.remove(audience_id, keys)
            elif action == "unlink_all":
                await self.audience_members.remove(audience_id, keys + await self.audiences.member_keys(audience_id))
                audience = await self.audiences.set_live(audience_id, False)
        except RedisError:
            LOG.warning("audience %d: members stored, Redis did not follow (%s)", audience_id, action)
            return _error(503, "the members are stored but the matching sets did not follow: send the same "
                               "request again")
        return web.json_response({"audience_id": audience_id, "received": len(hashes),
                                  "removed" if removing else "added": changed,
                                  "member_count": audience["member_count"], "serving": audience["live"],
                                  "min_members": MIN_AUDIENCE_MEMBERS,
                                  "targeting_value": audience["targeting_value"]})


@dataclass(frozen=True)
class AdvertiserApiSettings:
    """Everything `adserve serve advertiser-api` runs with: the campaign store's DSN (its password masked when
    printed) from ADSERVE_POSTGRES_DSN, which `adserve` exports from the platform's settings; host and port;
    the rate limits (per API key, and per address for requests without a valid key: RateLimits)."""

    postgres_dsn: str
    host: str = "127.0.0.1"
    port: int = 8082
    rate_per_s: float = 20.0  # per API key (RateLimits.per_api_key)
    burst: int = 40
    unauthenticated_rate_per_s: float = 1.0  # per client address, requests without a valid key
    unauthenticated_burst: int = 20
    redis_host: str | None = None
    redis_port: int | None = None
    audience_salt: AudienceSalt | None = None  # None: custom audiences off (masked when printed)
    trusted_proxies: tuple = ()  # ADSERVE_TRUSTED_PROXIES: whose X-Forwarded-For names the client

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> "AdvertiserApiSettings":
        """Custom audiences need the platform's Redis (ADSERVE_HOST, ADSERVE_REDIS_PORT) and the salt
        (ADSERVE_AUDIENCE_SALT, or the public development salt with ADSERVE_DEV=1)."""
        dsn = environ.get("ADSERVE_POSTGRES_DSN", "").strip()
        if not dsn:
            raise InvalidSettings("ADSERVE_POSTGRES_DSN is not set: start the API through `adserve`, which sets it "
                                  "from the platform's settings, or set it to the campaign store's DSN")
        development = environ.get("ADSERVE_DEV", "").strip().lower() in ("1", "true", "yes", "on")
        redis_port = environ.get("ADSERVE_REDIS_PORT", "").strip()
        limits = {name: getattr(args, name) for name in LIMIT_FLAGS if getattr(args, name, None) is not None}
        return cls(postgres_dsn=dsn, port=getattr(args, "port", 8082), **limits,
                   redis_host=environ.get("ADSERVE_HOST", "").strip() or None,
                   redis_port=int(redis_port) if redis_port.isdigit() else None,
                   audience_salt=salt_from(environ, development=development),
                   trusted_proxies=parse_trusted_proxies(environ.get(TRUSTED_PROXIES_ENV)))

    def audience_members(self) -> AudienceMembers | None:
        """The Redis side of custom audiences, or None when the salt or Redis is not configured."""
        if self.audience_salt is None or not self.redis_host or not self.redis_port:
            return None
        return AudienceMembers(self.redis_host, self.redis_port, self.audience_salt)

    def rate_limits(self) -> RateLimits:
        """The limits the API applies (InvalidSettings for a rate or burst out of range)."""
        return RateLimits(RateLimit(self.rate_per_s, self.burst),
                          RateLimit(self.unauthenticated_rate_per_s, self.unauthenticated_burst))

    def describe(self) -> str:
        """The settings as one line, the database password masked: printed once at start."""
        return describe(self)

    def __repr__(self) -> str:  # a settings object logged whole must not print the password either
        return f"{type(self).__name__}({self.describe()})"


async def start_advertiser_api(dsn: str, host: str = "127.0.0.1", port: int = 8082,
                               audience_members: AudienceMembers | None = None, limits: RateLimits | None = None,
                               trusted_proxies: tuple[Network, ...] = ()):
    """Start the API; returns (runner, port, store). Without `audience_members` custom audiences are off;
    without `limits` requests are not rate limited."""
    store = await CampaignStore(dsn).open()
    api = AdvertiserApi(store, audience_members, limits=limits, trusted_proxies=trusted_proxies)
    app = api.app()
    target = announce(app, "advertiser")
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    target.publish(host, bound)
    return runner, bound, store
