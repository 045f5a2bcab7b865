"""The pacing dashboard server (aiohttp): the pacing API, the fleet panels and the page that shows them.

    GET /v1/pacing/campaigns?advertiser_id=&state=&pace=&sort=&order=&limit=&offset=
                                      -> {"campaigns": [row, ...], "total": n}   (core.pacing_view rows)
    GET /v1/pacing/campaigns/{id}     -> {"campaign": row, "series": minute series} (404: unknown campaign)
    GET /v1/fleet                     -> the fleet panels (serving.dashboard.panels) evaluated by Prometheus
    GET /  /static/...                -> the page (plain HTML, JS and CSS; uPlot vendored)
    GET /openapi.json, /metrics, /ready

With auth (`adserve serve dashboard` outside development mode), the /v1 API answers `Authorization: Bearer`
with the operators' token (ADSERVE_OPS_TOKEN: every campaign and the fleet) or an advertiser's API key (its own
campaigns only; another advertiser's campaign is a 404, the fleet a 403), 401 otherwise; failed tokens are
limited per client address (serving.dashboard.auth). The page and its files stay public: the page asks for a
token and sends it.

Handlers only adapt I/O: rows come from the PacingBoard in memory (fed by a follower of the budget-state and
campaigns topics), a campaign's series from one Redis read of `pacing:{id}` (streams.pacing_store), the fleet
from the Prometheus HTTP API when one is configured (without one, an empty list and the reason). A bad query
parameter is a 400 naming it. Nothing a store or Prometheus answers crashes a handler: a failure is an
error in the answer, counted."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import aiohttp
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from core.pacing_view import OPERATOR, InvalidQuery, Viewer, minute_series, parse_query, select
from core.settings import describe
from schemas import topics
from serving.body_limits import DASHBOARD_MAX_BODY_BYTES, application
from serving.dashboard.auth import DashboardAuth
from serving.dashboard.board import PacingBoard
from serving.dashboard.panels import PANELS, Panel
from serving.scrape_targets import announce
from streams.pacing_store import PacingDay

LOG = logging.getLogger("adserve.dashboard")
HERE = Path(__file__).parent
OPENAPI = HERE / "openapi.yaml"
STATIC = HERE / "static"
PROMETHEUS_TIMEOUT_S = 2.0
DEFAULT_PORT = 8092
VIEWER = web.RequestKey("viewer", Viewer)
NO_PROMETHEUS = "no Prometheus URL is configured (adserve serve dashboard --prometheus-url)"


@dataclass(frozen=True)
class DashboardSettings:
    """Everything `adserve serve dashboard` runs with (printed at start, secrets masked)."""

    kafka_bootstrap: str
    redis_url: str
    prometheus_url: str | None = None
    state_topic: str = topics.BUDGET_STATE
    campaigns_topic: str = topics.SERVING_CAMPAIGNS
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT

    def describe(self) -> str:
        return describe(self)


class Metrics:
    def __init__(self, board: PacingBoard, clock: Callable[[], float]) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("adserve_dashboard_requests", "API requests by endpoint and status",
                                ["endpoint", "status"], registry=r)
        self.latency = Histogram("adserve_dashboard_request_seconds", "API handler latency", ["endpoint"],
                                 registry=r, buckets=(.001, .002, .005, .01, .02, .05, .1, .25, 1.0))
        self.failures = Counter("adserve_dashboard_source_failures", "Redis or Prometheus reads that failed",
                                ["source"], registry=r)
        Gauge("adserve_dashboard_campaigns", "Campaigns the dashboard holds", registry=r).set_function(
            lambda: len(board.rows))
        Gauge("adserve_dashboard_budget_state_age_seconds",
              "Wall clock (on a simulated day: the newest event time applied) minus the event time of the "
              "newest budget state (0 before any)", registry=r).set_function(
            lambda: max(0.0, clock() - board.newest_state_ms / 1000) if board.newest_state_ms else 0.0)
        Gauge("adserve_dashboard_committed_spend_micros", "Committed spend today over all campaigns",
              registry=r).set_function(lambda: board.committed_and_unbilled_micros()[0])
        Gauge("adserve_dashboard_unbilled_spend_micros", "Committed spend today that billing has not covered",
              registry=r).set_function(lambda: board.committed_and_unbilled_micros()[1])


def panel_series(panel: Panel, answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The series of a Prometheus instant-query answer ({"status": "success", "data": {"result": [...]}}) as
    [{"labels": {label: value} (only the panel's `by` labels), "value": float or None}], in label order."""
    series = []
    for item in answer.get("data", {}).get("result", []):
        raw = item.get("value", [None, None])[1]
        try:
            value = float(raw) if raw is not None else None
        except (TypeError, ValueError):
            value = None
        if value is not None and value != value:  # NaN (0/0 before any traffic): no value
            value = None
        series.append({"labels": {k: v for k, v in item.get("metric", {}).items() if k in panel.by}, "value": value})
    return sorted(series, key=lambda s: sorted(s["labels"].items()))


class DashboardServer:
    """The routes over a PacingBoard; `read_day(campaign_id)` reads a pacing day from Redis (blocking: run in a
    worker thread), `ready()` says whether the follower has read its topics to their heads and still reads them,
    `failure()` why the follower stopped (None while it runs: the pod is live)."""

    def __init__(self, board: PacingBoard, read_day: Callable[[int], PacingDay | None], *,
                 ready: Callable[[], bool] = lambda: True, failure: Callable[[], str | None] = lambda: None,
                 prometheus_url: str | None = None,
                 clock: Callable[[], float] = time.time, auth: DashboardAuth | None = None):
        """auth: who may read the /v1 API (bearer tokens: the operators' token, advertisers' API keys); None: an
        open dashboard, every reader an operator (a local simulated day, in-process tests)."""
        self.board, self.read_day, self.is_ready, self.failure = board, read_day, ready, failure
        self.prometheus_url = prometheus_url.rstrip("/") if prometheus_url else None
        self.clock = clock
        self.auth = auth
        self.metrics = Metrics(board, clock)
        self._session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = application(DASHBOARD_MAX_BODY_BYTES, middlewares=[self._authenticate])
        app.add_routes([web.get("/v1/pacing/campaigns", self.handle_list),
                        web.get("/v1/pacing/campaigns/{campaign_id}", self.handle_campaign),
                        web.get("/v1/fleet", self.handle_fleet), web.get("/", self.handle_page),
                        web.get("/openapi.json", self.handle_openapi), web.get("/metrics", self.handle_metrics),
                        web.get("/ready", self.handle_ready), web.get("/live", self.handle_live),
                        web.static("/static", STATIC)])
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    def _answer(self, endpoint: str, began: float, body: dict[str, Any], status: int = 200) -> web.Response:
        self.metrics.requests.labels(endpoint, str(status)).inc()
        self.metrics.latency.labels(endpoint).observe(time.perf_counter() - began)
        return web.json_response(body, status=status)

    @web.middleware
    async def _authenticate(self, request: web.Request, handler):
        """The /v1 API answers a known bearer token only (when the dashboard has auth); the page, its static
        files, /openapi.json, /metrics, /ready and /live are public. The viewer goes with the request."""
        if not request.path.startswith("/v1/"):
            return await handler(request)
        if self.auth is None:
            request[VIEWER] = OPERATOR
            return await handler(request)
        viewer, refusal = await self.auth.viewer(request)
        if viewer is None:
            self.metrics.requests.labels("auth", str(refusal.status)).inc()
            return refusal
        request[VIEWER] = viewer
        return await handler(request)

    async def handle_list(self, request: web.Request) -> web.Response:
        began = time.perf_counter()
        try:
            query = request[VIEWER].scoped(parse_query(request.query))
        except InvalidQuery as e:
            status = 403 if e.field == "advertiser_id" and request[VIEWER].role != "operator" else 400
            return self._answer("list", began, {"error": str(e), "field": e.field}, status)
        page, total = select(self.board.rows.values(), query)
        return self._answer("list", began, {"campaigns": [row.as_json() for row in page], "total": total})

    async def handle_campaign(self, request: web.Request) -> web.Response:
        began = time.perf_counter()
        raw = request.match_info["campaign_id"]
        try:
            campaign_id = int(raw)
        except ValueError:
            return self._answer("campaign", began, {"error": f"campaign_id: must be an integer, got {raw!r}",
                                                    "field": "campaign_id"}, 400)
        row = self.board.rows.get(campaign_id)
        if row is None or not request[VIEWER].may_see(row):  # another advertiser's campaign is not known either
            return self._answer("campaign", began, {"error": f"campaign_id: no campaign {campaign_id} is known",
                                                    "field": "campaign_id"}, 404)
        try:
            day = await asyncio.to_thread(self.read_day, campaign_id)
        except Exception as e:  # noqa: BLE001 - Redis down or a malformed hash: counted, the row still answers
            self.metrics.failures.labels("redis").inc()
            LOG.warning("could not read the pacing day of campaign %d: %s", campaign_id, e)
            return self._answer("campaign", began, {"campaign": row.as_json(), "series": None,
                                                    "series_error": f"pacing day unavailable: {e}"})
        series = minute_series(campaign_id, day.day, day.points) if day else minute_series(
            campaign_id, row.budget_day or "", [])
        return self._answer("campaign", began, {"campaign": row.as_json(), "series": series.as_json()})

    async def handle_fleet(self, request: web.Request) -> web.Response:
        began = time.perf_counter()
        if request[VIEWER].role != "operator":
            return self._answer("fleet", began, {"error": "the fleet panels are the operators'", "field":
                                                 "Authorization"}, 403)
        if self.prometheus_url is None:
            return self._answer("fleet", began, {"panels": [], "reason": NO_PROMETHEUS})
        panels = await asyncio.gather(*(self._query(panel) for panel in PANELS))
        return self._answer("fleet", began, {"panels": list(panels), "reason": None, "source": self.prometheus_url})

    async def _query(self, panel: Panel) -> dict[str, Any]:
        """One panel evaluated now; a failure (unreachable, timeout, an error answer) is the panel's `error`."""
        out: dict[str, Any] = {"name": panel.name, "title": panel.title, "unit": panel.unit,
                               "expression": panel.expression, "series": [], "error": None}
        try:
            if self._session is None:
                self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROMETHEUS_TIMEOUT_S))
            async with self._session.get(f"{self.prometheus_url}/api/v1/query",
                                         params={"query": panel.expression}) as response:
                answer = await response.json(content_type=None)
            if answer.get("status") != "success":
                out["error"] = f"prometheus: {answer.get('error') or answer.get('status')}"
            else:
                out["series"] = panel_series(panel, answer)
        except Exception as e:  # noqa: BLE001 - Prometheus down or slow: counted, the panel says so
            self.metrics.failures.labels("prometheus").inc()
            out["error"] = f"prometheus unavailable: {type(e).__name__}: {e}"
        return out

    async def handle_page(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    async def handle_openapi(self, request: web.Request) -> web.Response:
        return web.json_response(yaml.safe_load(OPENAPI.read_text()))

    async def handle_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), content_type="text/plain")

    async def handle_live(self, request: web.Request) -> web.Response:
        """200 while the topic follower runs; 503 naming its error once it stopped (the rows would only go stale:
        the pod's liveness check restarts it)."""
        failure = self.failure()
        if failure is None:
            return web.json_response({"live": True})
        return web.json_response({"live": False, "error": failure}, status=503)

    async def handle_ready(self, request: web.Request) -> web.Response:
        ready = self.is_ready()
        body = {"ready": ready, "campaigns": len(self.board.rows), "records_applied": self.board.applied,
                "state_topic": self.board.state_topic, "campaigns_topic": self.board.campaigns_topic}
        return web.json_response(body, status=200 if ready else 503)


async def start_dashboard(settings: DashboardSettings, *, auth: DashboardAuth | None = None,
                          event_time: bool = False) -> tuple[web.AppRunner, int, DashboardServer, Any]:
    """Start the dashboard its settings describe: a follower of the two topics (on its thread, applying batches
    on this event loop), the Redis pacing store and the HTTP server (port 0: any free port), announced to
    Prometheus as a `dashboard` scrape target once bound (serving.scrape_targets; only where
    ADSERVE_SCRAPE_TARGETS_DIR is set). Returns (runner, bound port, server, follower); `await runner.cleanup()`
    stops the follower, closes the store and withdraws the target too. event_time: the topics carry another
    clock's times (a simulated day): readiness measures how far each partition trails the newest record read from
    its topic, and the budget state's age is taken against the newest event time applied, not the wall clock."""
    from serving.adserver.state import TopicFollower
    from streams.pacing_store import PacingStore

    state_topic, campaigns_topic, host = settings.state_topic, settings.campaigns_topic, settings.host
    loop = asyncio.get_running_loop()
    board = PacingBoard(state_topic=state_topic, campaigns_topic=campaigns_topic)
    follower = TopicFollower(settings.kafka_bootstrap, lambda batch: loop.call_soon_threadsafe(board.apply, batch),
                             job="dashboard", state_topics=(state_topic, campaigns_topic), lease_topic=None,
                             event_time=event_time)
    follower.start()
    store = PacingStore(settings.redis_url)
    server = DashboardServer(board, store.read, ready=follower.ready,
                             clock=(lambda: board.newest_event_ms / 1000) if event_time else time.time,
                             failure=lambda: None if follower.error is None else repr(follower.error),
                             prometheus_url=settings.prometheus_url, auth=auth)
    app = server.app()

    async def stop_sources(app: web.Application) -> None:
        follower.stop()
        store.close()
        if auth is not None:
            await auth.close()
    app.on_cleanup.append(stop_sources)
    runner = web.AppRunner(app, access_log=None)
    target = announce(app, "dashboard")
    await runner.setup()
    site = web.TCPSite(runner, host, settings.port)
    try:
        await site.start()
    except OSError:  # the port is taken: stop the follower and the store before saying so
        await runner.cleanup()
        raise
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    target.publish(host, bound)
    return runner, bound, server, follower
