"""The tracker: impression beacons and click redirects, trusting only signed tokens.

    GET /v1/impression?t=TOKEN   -> 204, an IMPRESSION event on ad.events
    GET /v1/click?t=TOKEN        -> 302 to the landing URL inside the signed token, a CLICK event

The landing URL comes only from the token's signed claims, never from an
unsigned parameter, so the tracker cannot be used as an open redirect. A
forged, tampered, unknown-key or expired (older than an hour) token gets a 4xx
(400 malformed, 403 bad signature or unknown key, 410 expired) and is counted
by reason. Events are produced keyed by campaign; the answer does not wait
for the broker's acknowledgement (delivery failures are counted and logged).
Also: GET /metrics (Prometheus)."""
from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, generate_latest

from core.tokens import InvalidToken, TokenKeys
from schemas.codec import AvroCodec

LOG = logging.getLogger("adserve.tracker")
STATUS_OF = {"malformed": 400, "bad_signature": 403, "unknown_key": 403, "expired": 410}


class Tracker:
    def __init__(self, keys: TokenKeys, produce: Callable[[bytes, bytes], None],
                 clock: Callable[[], float] = time.time):
        self.keys, self.produce, self.clock = keys, produce, clock
        self.codec = AvroCodec()
        self.registry = CollectorRegistry()
        self.events = Counter("adserve_tracker_events", "Accepted events by type", ["type"], registry=self.registry)
        self.rejected = Counter("adserve_tracker_rejected_tokens", "Rejected tokens by reason", ["reason"],
                                registry=self.registry)
        self.delivery_failures = Counter("adserve_tracker_delivery_failures", "Events the broker did not take",
                                         registry=self.registry)

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes([web.get("/v1/impression", self.impression), web.get("/v1/click", self.click),
                        web.get("/metrics", self.metrics)])
        return app

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), content_type="text/plain")

    def _verify(self, request: web.Request):
        token = request.query.get("t")
        now_ms = int(self.clock() * 1000)
        if not token:
            self.rejected.labels("malformed").inc()
            raise web.HTTPBadRequest(text="t: the signed token is missing")
        try:
            return self.keys.verify(token, now_ms), now_ms
        except InvalidToken as e:
            self.rejected.labels(e.reason).inc()
            raise _http_error(STATUS_OF[e.reason], f"token rejected: {e}") from None

    def _event(self, claims, event_type: str, now_ms: int, request: web.Request) -> None:
        event: dict[str, Any] = {
            "event_id": uuid.uuid4().hex, "impression_id": claims.impression_id, "event_type": event_type,
            "event_time": now_ms, "served_time": claims.served_ms or now_ms, "campaign_id": claims.campaign_id,
            "ad_id": claims.ad_id, "price_micros": claims.price_micros, "billing_type": claims.billing,
            "user_id": None, "ip_address": request.remote, "user_agent": request.headers.get("User-Agent"),
            "token_key_id": claims.key_id}
        try:
            self.produce(str(claims.campaign_id).encode(), self.codec.encode("AdEvent", event))
            self.events.labels(event_type).inc()
        except Exception:  # noqa: BLE001 - counted; the user still gets the redirect
            self.delivery_failures.inc()
            LOG.exception("could not queue a %s event", event_type)

    async def impression(self, request: web.Request) -> web.Response:
        claims, now_ms = self._verify(request)
        self._event(claims, "IMPRESSION", now_ms, request)
        return web.Response(status=204)

    async def click(self, request: web.Request) -> web.Response:
        claims, now_ms = self._verify(request)
        if not claims.landing_url.startswith(("https://", "http://")):
            self.rejected.labels("bad_landing_url").inc()
            raise _http_error(400, "the ad's landing URL is not http(s)")
        self._event(claims, "CLICK", now_ms, request)
        raise web.HTTPFound(claims.landing_url)


def _http_error(status: int, text: str) -> web.HTTPException:
    cls = {400: web.HTTPBadRequest, 403: web.HTTPForbidden, 410: web.HTTPGone}[status]
    return cls(text=text)


async def start_tracker(*, bootstrap: str, keys: TokenKeys, host: str = "127.0.0.1", port: int = 8081):
    """Start the tracker; returns (runner, port, tracker, producer)."""
    from streams import kafka

    producer = kafka.producer(bootstrap, **{"linger.ms": 5})

    def delivered(err, msg) -> None:
        if err is not None:
            tracker.delivery_failures.inc()
            LOG.warning("event not delivered: %s", err)

    def produce(key: bytes, value: bytes) -> None:
        producer.produce("ad.events", key=key, value=value, on_delivery=delivered)
        producer.poll(0)

    tracker = Tracker(keys, produce)
    runner = web.AppRunner(tracker.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, bound, tracker, producer
