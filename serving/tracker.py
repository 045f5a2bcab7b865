"""The tracker: impression beacons, click redirects and conversion reports, trusting only signed tokens.

    GET /v1/impression?t=TOKEN   -> 204, an IMPRESSION event on ad.events
    GET /v1/click?t=TOKEN        -> 302 to the landing URL inside the signed token, with a signed click id
                                    appended as `adclid`; a CLICK event
    GET /v1/conversion?c=CLICKID -> 204, an AdConversion on ad.conversions (the advertiser reports a
                                    conversion with the click id its landing page received)
    GET /v1/feedback?t=TOKEN&type=hide|report
                                 -> 204, an AdFeedback on ad.feedback (the user hid or reported the ad)

The landing URL comes only from the token's signed claims, never from an
unsigned parameter, so the tracker cannot be used as an open redirect. A
forged, tampered, unknown-key or expired token (a beacon token older than an
hour, a click id older than 7 days) gets a 4xx (400 malformed, 403 bad
signature or unknown key, 410 expired) and is counted by reason. Events are
produced keyed by campaign, conversions and feedback by impression id.

Every accepted record is first appended to a local spool (serving.spool:
written to the OS before the answer, fsynced every 200 ms) and sent to Kafka
from there; it leaves the spool only on the broker's acknowledgement, and a
restart sends every unacknowledged record again with the same bytes (the event
id inside), which the click aggregator's deduplication makes harmless. So a
broker outage delays beacons and loses none. A full spool (`--spool-max-bytes`,
256 MiB by default) refuses new beacons with 503 and Retry-After, counted, and
keeps every accepted one; a spool that cannot write answers 503 too, never a
2xx for a record it does not hold. Settings of `adserve serve tracker`:
`--spool-dir` (default `$ADSERVE_HOME/state/tracker-spool/port-<port>`),
`--spool-max-bytes`, `--spool-fsync-ms` (0: fsync every beacon before its
answer); docs/ad-server.md has the durability rule.

Conversions are not billed (a CPA target bills clicks): they label the
conversion model (core.training). Feedback is never billed
either (its own topic, never ad.events): it teaches the features job each ad's
user-experience cost. A feedback beacon's token is verified like a click's; a
`type` other than hide or report gets a 400 naming `type`. Also: GET /metrics
(Prometheus), with the spool's bytes, pending records, resends and rejections."""
from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from core.beacon_guard import BeaconGuard
from core.client_address import Network, client_address
from core.errors import InvalidField
from core.spool import SpoolFull
from core.tokens import CLICK_ID_LIFETIME_MS, ClickIdClaims, InvalidToken, TokenClaims, TokenKeys
from schemas import topics
from schemas.codec import AvroCodec
from serving.body_limits import TRACKER_MAX_BODY_BYTES, application
from serving.scrape_targets import announce
from serving.spool import SpoolSettings

LOG = logging.getLogger("adserve.tracker")
OPENAPI = Path(__file__).with_name("tracker_openapi.yaml")
STATUS_OF = {"malformed": 400, "bad_signature": 403, "unknown_key": 403, "expired": 410}
CLICK_ID_PARAMETER = "adclid"
FEEDBACK_TYPES = {"hide": "HIDE", "report": "REPORT"}  # the beacon's `type` -> AdFeedback.feedback_type
RETRY_AFTER_S = 5  # a full spool drains as fast as the broker takes records again
EVENT_TYPE, CONVERSION_TYPE, FEEDBACK_TYPE = (topics.record_type(topic) for topic in
                                              (topics.AD_EVENTS, topics.AD_CONVERSIONS, topics.AD_FEEDBACK))


def with_click_id(landing_url: str, click_id: str) -> str:
    """The landing URL with the click id added to its query (any parameter of that name replaced)."""
    parts = urlsplit(landing_url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != CLICK_ID_PARAMETER]
    return urlunsplit(parts._replace(query=urlencode(query + [(CLICK_ID_PARAMETER, click_id)])))


def without_click_id(url: str) -> str:
    """A redirect's URL without the click id the tracker added: the ad's landing URL as signed."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != CLICK_ID_PARAMETER]
    return urlunsplit(parts._replace(query=urlencode(query)))


def feedback_type(value: str | None) -> str:
    """The AdFeedback feedback_type of a feedback beacon's `type` parameter (hide or report, in any case);
    InvalidField naming `type` otherwise."""
    found = FEEDBACK_TYPES.get((value or "").strip().lower())
    if found is None:
        raise InvalidField("type", f"must be one of {', '.join(FEEDBACK_TYPES)}, got {value!r}")
    return found


def feedback_record(claims: TokenClaims, kind: str, event_id: str, now_ms: int) -> dict[str, Any]:
    """schemas/ad_feedback.avsc: what the user did about the impression the verified token names, at now_ms."""
    return {"event_id": event_id, "impression_id": claims.impression_id, "feedback_type": kind,
            "event_time": now_ms, "served_time": claims.served_ms or now_ms, "campaign_id": claims.campaign_id,
            "ad_id": claims.ad_id, "user_id": None, "token_key_id": claims.key_id}


class TrackerMetrics:
    """What a tracker exports on /metrics (one registry per tracker; the simulated day's tracker exports the
    same)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.events = Counter("adserve_tracker_events", "Accepted events by type", ["type"], registry=self.registry)
        self.rejected = Counter("adserve_tracker_rejected_tokens", "Rejected tokens by reason", ["reason"],
                                registry=self.registry)
        self.delivery_failures = Counter("adserve_tracker_delivery_failures",
                                         "Deliveries the broker did not acknowledge (each record is sent again)",
                                         registry=self.registry)
        self.spool_rejections = Counter("adserve_tracker_spool_rejections",
                                        "Beacons answered 503 because the spool was full or could not write",
                                        ["reason"], registry=self.registry)
        self.replays = Counter("adserve_tracker_replays", "Beacons answered but not kept again: the same token's "
                               "event was kept before", ["type"], registry=self.registry)
        self.spool_resent = Counter("adserve_tracker_spool_resent",
                                    "Records sent again after a failed delivery or a restart", registry=self.registry)
        self.spool_bytes = Gauge("adserve_tracker_spool_bytes", "Bytes the spool's segments hold",
                                 registry=self.registry)
        self.spool_pending = Gauge("adserve_tracker_spool_pending_records",
                                   "Accepted records the broker has not acknowledged yet", registry=self.registry)


class Tracker:
    def __init__(self, keys: TokenKeys, produce: Callable[[str, bytes, bytes], None],
                 clock: Callable[[], float] = time.time, events_topic: str = topics.AD_EVENTS,
                 trusted_proxies: tuple[Network, ...] = (), guard: BeaconGuard | None = None):
        """produce(topic, key, value) keeps one record (ad.events, ad.conversions or ad.feedback) for the broker,
        or raises (SpoolFull when the spool is full): the answer goes out only after it returned.
        trusted_proxies: the proxies whose X-Forwarded-For names the client (core.client_address); none: the
        connection's peer is the client. guard: the replay guard (core.beacon_guard), one per tracker."""
        self.keys, self.produce, self.clock, self.events_topic = keys, produce, clock, events_topic
        self.trusted_proxies = trusted_proxies
        self.guard = guard if guard is not None else BeaconGuard()
        self.codec = AvroCodec()
        m = TrackerMetrics()
        self.registry, self.events, self.rejected = m.registry, m.events, m.rejected
        self.delivery_failures, self.spool_rejections, self.replays = m.delivery_failures, m.spool_rejections, m.replays
        self.spool_resent, self.spool_bytes, self.spool_pending = m.spool_resent, m.spool_bytes, m.spool_pending

    def watch_spool(self, spool) -> None:
        """Read the spool's bytes and pending records at each scrape."""
        self.spool_bytes.set_function(lambda: spool.spool_bytes)
        self.spool_pending.set_function(lambda: spool.pending)

    def app(self) -> web.Application:
        app = application(TRACKER_MAX_BODY_BYTES)
        app.add_routes([web.get("/v1/impression", self.impression), web.get("/v1/click", self.click),
                        web.get("/v1/conversion", self.conversion), web.get("/v1/feedback", self.feedback),
                        web.get("/metrics", self.metrics),
                        web.get("/openapi.json", self.openapi)])
        return app

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), content_type="text/plain")

    async def openapi(self, request: web.Request) -> web.Response:
        """The OpenAPI description (serving/tracker_openapi.yaml), for clients and the API fuzz tests."""
        return web.json_response(yaml.safe_load(OPENAPI.read_text()))

    def _verify(self, request: web.Request, parameter: str = "t", what: str = "the signed token", verify=None):
        """(claims, now) of the request's token (`verify`: TokenKeys.verify by default; verify_click_id for a
        click id); a 4xx, counted by reason, when it is missing or does not verify."""
        verify = verify or self.keys.verify
        token = request.query.get(parameter)
        now_ms = int(self.clock() * 1000)
        if not token:
            self.rejected.labels("malformed").inc()
            raise web.HTTPBadRequest(text=f"{parameter}: {what} is missing")
        try:
            return verify(token, now_ms), now_ms
        except InvalidToken as e:
            self.rejected.labels(e.reason).inc()
            raise _http_error(STATUS_OF[e.reason], f"{what} rejected: {e}") from None

    def _queue(self, topic: str, key: str, record_type: str, record: dict[str, Any], kind: str) -> None:
        """Keep the record for the broker, or answer 503 with Retry-After: never an answer for a lost record."""
        try:
            self.produce(topic, key.encode(), self.codec.encode(record_type, record))
        except SpoolFull as exc:
            self.spool_rejections.labels("full").inc()
            raise web.HTTPServiceUnavailable(headers={"Retry-After": str(RETRY_AFTER_S)}, text=str(exc)) from None
        except Exception:  # noqa: BLE001 - counted and logged; the client hears 503 and may send the beacon again
            self.spool_rejections.labels("write_error").inc()
            LOG.exception("could not keep a %s record", kind)
            raise web.HTTPServiceUnavailable(headers={"Retry-After": str(RETRY_AFTER_S)},
                                             text="the tracker could not keep this beacon: try again") from None
        self.events.labels(kind).inc()

    def _event(self, claims, event_type: str, now_ms: int, request: web.Request) -> None:
        """The beacon's event, kept once per token lifetime: a replay is answered and counted, not kept again
        (core.beacon_guard). The user is the token's pseudonymous user key (never a raw id), the address the
        client's behind the trusted proxies, so the click aggregator's user_burst and ip_burst rules see them."""
        guard_key = f"{claims.impression_id}|{event_type}"
        if self.guard.seen(guard_key, now_ms):
            self.replays.labels(event_type).inc()
            return
        event: dict[str, Any] = {
            "event_id": uuid.uuid4().hex, "impression_id": claims.impression_id, "event_type": event_type,
            "event_time": now_ms, "served_time": claims.served_ms or now_ms, "campaign_id": claims.campaign_id,
            "ad_id": claims.ad_id, "price_micros": claims.price_micros, "billing_type": claims.billing,
            "user_id": claims.user_key or None,
            "ip_address": client_address(request.remote, request.headers.get("X-Forwarded-For"),
                                         self.trusted_proxies),
            "user_agent": request.headers.get("User-Agent"), "token_key_id": claims.key_id}
        self._queue(self.events_topic, str(claims.campaign_id), EVENT_TYPE, event, event_type)
        self.guard.remember(guard_key, claims.expires_ms)

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
        click_id = self.keys.sign_click_id(ClickIdClaims(
            claims.impression_id, claims.ad_id, claims.campaign_id, claims.served_ms or now_ms, now_ms,
            expires_ms=now_ms + CLICK_ID_LIFETIME_MS))
        raise web.HTTPFound(with_click_id(claims.landing_url, click_id))

    async def conversion(self, request: web.Request) -> web.Response:
        claims, now_ms = self._verify(request, "c", "the click id", self.keys.verify_click_id)
        record = {"conversion_id": uuid.uuid4().hex, "impression_id": claims.impression_id, "event_time": now_ms,
                  "served_time": claims.served_ms, "click_time": claims.click_ms, "campaign_id": claims.campaign_id,
                  "ad_id": claims.ad_id, "token_key_id": claims.key_id}
        self._queue(topics.AD_CONVERSIONS, claims.impression_id, CONVERSION_TYPE, record, "CONVERSION")
        return web.Response(status=204)

    async def feedback(self, request: web.Request) -> web.Response:
        claims, now_ms = self._verify(request)
        try:
            kind = feedback_type(request.query.get("type"))
        except InvalidField as e:
            self.rejected.labels("bad_feedback_type").inc()
            raise web.HTTPBadRequest(text=str(e)) from None
        record = feedback_record(claims, kind, uuid.uuid4().hex, now_ms)
        self._queue(topics.AD_FEEDBACK, claims.impression_id, FEEDBACK_TYPE, record, f"FEEDBACK_{kind}")
        return web.Response(status=204)


def _http_error(status: int, text: str) -> web.HTTPException:
    cls = {400: web.HTTPBadRequest, 403: web.HTTPForbidden, 410: web.HTTPGone}[status]
    return cls(text=text)


async def start_tracker(*, bootstrap: str, keys: TokenKeys, host: str = "127.0.0.1", port: int = 8081,
                        spool: SpoolSettings | None = None, events_topic: str = topics.AD_EVENTS,
                        producer_overrides: dict[str, Any] | None = None,
                        trusted_proxies: tuple[Network, ...] = ()):
    """Start the tracker with its spool and sender; returns (runner, port, tracker, sender).

    Without `spool` settings the spool is a fresh temporary folder (removed at the end when the broker took
    everything). The runner's cleanup sends what it can for up to 10 s and closes the spool; what is left stays
    in the folder for the next start on it. `sender.flush(timeout_s)` waits for the broker to take everything."""
    import shutil
    import tempfile

    from serving.spool import Spool, SpoolSender
    from streams import kafka

    temporary = spool is None
    settings = spool or SpoolSettings(Path(tempfile.mkdtemp(prefix="adserve-tracker-spool-")))
    folder = Spool(settings)

    def make_producer(on_error):
        # Idempotent with acks=all (streams.kafka.producer): a retry inside the producer never writes twice.
        return kafka.producer(bootstrap, **{"linger.ms": 5, "error_cb": on_error, **(producer_overrides or {})})

    sender = SpoolSender(folder, make_producer, on_resent=lambda n: tracker.spool_resent.inc(n),
                         on_failed=lambda n: tracker.delivery_failures.inc(n))

    def produce(topic: str, key: bytes, value: bytes) -> None:
        folder.append(topic, key, value)
        sender.wake()

    tracker = Tracker(keys, produce, events_topic=events_topic, trusted_proxies=trusted_proxies)
    tracker.watch_spool(folder)
    runner = web.AppRunner(tracker.app(), access_log=None)

    async def close_spool(app: web.Application) -> None:
        left = sender.close(10.0)
        if temporary and not left:
            shutil.rmtree(settings.directory, ignore_errors=True)

    runner.app.on_cleanup.append(close_spool)
    target = announce(runner.app, "tracker")
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    sender.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    target.publish(host, bound)
    return runner, bound, tracker, sender
