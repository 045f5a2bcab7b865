"""Request body caps: each HTTP service's largest body, and the one way every service refuses a bigger one.

A body over its service's cap gets `413 {"error": "body: ...", "field": "body"}` and is never held in
memory whole: a declared Content-Length over the cap is refused before a byte of the body is read; a chunked
or compressed body is read (as decoded) only up to the cap; a Content-Length that understates the body ends
the body where it says, and the bytes after it are parsed as the next request (a 400 from the HTTP parser).
GET-only services have a small cap too, so a body nobody reads still cannot tie up the connection.

`application(cap)` builds a service's aiohttp Application with the cap set both as aiohttp's
client_max_size and in the middleware that answers the 413. Each service names its cap below, with the
largest legitimate body it has to take."""
from __future__ import annotations

from typing import Any, Iterable

from aiohttp import web

from serving import drain

# POST /v1/ads: ids, context and a few slots; a legitimate request is under 8 KiB.
ADSERVER_MAX_BODY_BYTES = 64 * 1024
# GET only (beacons, clicks, conversions, feedback): a beacon carries its token in the query, never a body.
TRACKER_MAX_BODY_BYTES = 1024
# A campaign or an ad with its targeting lists (a few thousand postcodes or segments fit).
ADVERTISER_API_MAX_BODY_BYTES = 1024 * 1024
# POST /v1/score of up to max_batch_rows candidates with the user's features; POST /v1/promote's canary report.
PREDICTION_MAX_BODY_BYTES = 1024 * 1024
# GET only (the pacing API, the fleet panels, the page).
DASHBOARD_MAX_BODY_BYTES = 1024

MAX_BODY_BYTES = web.AppKey("max_body_bytes", int)


def application(max_body_bytes: int, middlewares: Iterable[Any] = ()) -> web.Application:
    """An Application that refuses bodies over `max_body_bytes` with a JSON 413 (before its own middlewares),
    and drains on SIGTERM (serving.drain)."""
    app = web.Application(client_max_size=max_body_bytes, middlewares=[refuse_large_bodies, *middlewares])
    app[MAX_BODY_BYTES] = max_body_bytes
    drain.install(app)  # GET /ready and the drain on SIGTERM (serving.drain)
    return app


def too_large(max_body_bytes: int) -> web.Response:
    return web.json_response({"error": f"body: larger than the {max_body_bytes:,} bytes this service accepts",
                              "field": "body"}, status=413)


@web.middleware
async def refuse_large_bodies(request: web.Request, handler):
    """413 for a body over the app's cap; otherwise the body is read (up to the cap) before the handler runs,
    so a handler that never reads it (a GET) refuses an oversize one just the same."""
    cap = request.app[MAX_BODY_BYTES]
    declared = request.content_length
    if declared is not None and declared > cap:
        return too_large(cap)
    if request.body_exists:
        try:
            await request.read()  # kept by aiohttp: the handler's json() reads these bytes
        except web.HTTPRequestEntityTooLarge:
            return too_large(cap)
    return await handler(request)
