"""Ending an HTTP service the way a load balancer expects it to end (Kubernetes: SIGTERM, then a grace period).

On SIGTERM (or SIGINT) a service drains: GET /ready answers 503 `{"ready": false, "draining": true}` at once
and every answer says `Connection: close`, while requests are still served for a short delay (the time the
load balancer takes to drop the instance); then the listener closes, the requests in flight finish, and the
service runs its own cleanup (producers flushed, spools closed) and exits 0.

Every service's Application gets the drain through `install` (serving.body_limits.application calls it): a
service with a readiness check of its own keeps it, and one without gets a GET /ready that answers 200 while
the process is up and not draining. The ad server drains more (serving.adserver.main.RunningAdServer.drain)."""
from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

from aiohttp import web

LOG = logging.getLogger("adserve.drain")
READY_PATH = "/ready"
DRAIN_DELAY_S = 5.0
ACCEPT_SETTLE_S = 0.2


@dataclass
class Drain:
    """Whether the service is draining (set once, never cleared)."""

    draining: bool = False


DRAIN = web.AppKey("drain", Drain)


def install(app: web.Application) -> Drain:
    """Make `app` drain-aware: the readiness middleware first (so /ready is answered before authentication)
    and `Connection: close` on every answer while draining."""
    drain = app[DRAIN] = Drain()
    app.middlewares.insert(0, _readiness)

    async def close_when_draining(request: web.Request, response: web.StreamResponse) -> None:
        if drain.draining:
            response.force_close()
    app.on_response_prepare.append(close_when_draining)
    return drain


@web.middleware
async def _readiness(request: web.Request, handler):
    if request.path == READY_PATH and request.method == "GET":
        if request.app[DRAIN].draining:
            return web.json_response({"ready": False, "draining": True}, status=503)
        if request.match_info.http_exception is not None:  # the service has no readiness check of its own
            return web.json_response({"ready": True, "draining": False})
    return await handler(request)


def draining(app: web.Application) -> bool:
    return app[DRAIN].draining


async def until_terminated() -> int:
    """Wait for SIGTERM or SIGINT; returns the signal's number."""
    loop = asyncio.get_running_loop()
    received: asyncio.Future[int] = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda sig=sig: received.done() or received.set_result(sig))
    try:
        return await received
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


async def begin_drain(app: web.Application, delay_s: float = DRAIN_DELAY_S) -> None:
    """/ready to 503 and `Connection: close` at once, then `delay_s` more of serving; the caller closes the
    listener next."""
    app[DRAIN].draining = True
    LOG.info("draining: /ready answers 503; the listener closes in %.1f s", delay_s)
    if delay_s > 0:
        await asyncio.sleep(delay_s)


async def drain_and_close(runner: web.AppRunner, delay_s: float = DRAIN_DELAY_S) -> None:
    """`begin_drain`, then the runner's cleanup: the listener closed, the requests in flight finished, the
    service's on_cleanup hooks run."""
    await begin_drain(runner.app, delay_s)
    await close_listener(runner)
    await runner.cleanup()


async def close_listener(runner: web.BaseRunner) -> None:
    """Stop accepting connections, then give the ones accepted at that instant a moment to be set up, so the
    runner's cleanup answers their requests like any in flight. (aiohttp's cleanup alone can miss a connection
    accepted as the listener closes: its request then waits, unanswered, for the shutdown timeout.)"""
    for site in list(runner.sites):
        await site.stop()
    await asyncio.sleep(ACCEPT_SETTLE_S)
