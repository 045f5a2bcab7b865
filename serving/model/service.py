"""The prediction service, run: started on an event loop (`start_prediction_service`), served until terminated
and then drained (`run_prediction_service`), or on a background thread for tests and benchmarks
(`ServiceThread`). Its parts, whose public names this module also offers:

  serving.model.score_request  the body of POST /v1/score, checked (parse_score_request)
  serving.model.batcher        dynamic batching across concurrent requests (DynamicBatcher)
  serving.model.routes         the HTTP routes, the canary arm, promotion, metrics, snapshot refresh
                               (PredictionService, ServiceConfig)
  serving.model.loading        the service over saved models or the model registry (load_service,
                               service_from_registry)"""
from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Callable

from aiohttp import web

from serving.drain import begin_drain, close_listener, until_terminated
from serving.model.batcher import (CANDIDATE, CURRENT, DEFAULT_MAX_BATCH_ROWS, DEFAULT_MAX_WAIT_MS, DynamicBatcher,
                                   Pending, Scored, take_batch)
from serving.model.loading import load_service, service_from_registry
from serving.model.routes import (DEFAULT_SNAPSHOT_REFRESH_S, OPENAPI, Metrics, PredictionService, PromotionRefused,
                                  ServiceConfig)
from serving.model.score_request import (AD_ID_RANGE, MAX_CANDIDATES, MAX_POSITIONS, POSITION_RANGE, ScoreRequest,
                                         parse_score_request)
from serving.scrape_targets import announce

__all__ = ["AD_ID_RANGE", "CANDIDATE", "CURRENT", "DEFAULT_MAX_BATCH_ROWS", "DEFAULT_MAX_WAIT_MS", "DEFAULT_PORT",
           "DEFAULT_SNAPSHOT_REFRESH_S", "DynamicBatcher", "MAX_CANDIDATES", "MAX_POSITIONS", "Metrics", "OPENAPI",
           "POSITION_RANGE", "Pending", "PredictionService", "PromotionRefused", "RunningPredictionService",
           "ScoreRequest", "Scored", "ServiceConfig", "ServiceThread", "load_service", "parse_score_request",
           "run_prediction_service", "service_from_registry", "start_prediction_service", "take_batch"]

DEFAULT_PORT = 8090


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
