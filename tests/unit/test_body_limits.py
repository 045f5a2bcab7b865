"""Every HTTP service refuses a body over its cap with a JSON 413 naming `body`, never a 500: a declared
Content-Length over the cap, a chunked body that grows past it, and a gzip body that inflates past it; a body
under the cap still reaches the handler; a Content-Length that understates the body ends the body there and
the rest is refused by the HTTP parser (4xx), never handled as the request's body."""
from __future__ import annotations

import asyncio
import gzip
import json
from types import SimpleNamespace
from typing import Any, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from core.tokens import TokenKeys
from serving.adserver.app import AdServer, ServerConfig
from serving.adserver.state import ServingState
from serving.advertiser.api import AdvertiserApi
from serving.body_limits import (ADSERVER_MAX_BODY_BYTES, ADVERTISER_API_MAX_BODY_BYTES, DASHBOARD_MAX_BODY_BYTES,
                                 PREDICTION_MAX_BODY_BYTES, TRACKER_MAX_BODY_BYTES)
from serving.dashboard.app import DashboardServer
from serving.dashboard.board import PacingBoard
from serving.frequency_store import UserStore
from serving.model.service import PredictionService
from serving.tracker import Tracker

KEYS = TokenKeys({"k1": b"body-limit-test-key-0123"}, active="k1")
API_KEY = "ak_body_limit_test"


class KeyTable:
    async def advertiser_for_key(self, key: str) -> int | None:
        return 1 if key == API_KEY else None


class NoServedLog:
    def put(self, key: bytes, record: dict[str, Any]) -> None:
        return None

    def full(self) -> bool:
        return False


def ad_server() -> web.Application:
    server = AdServer(ServerConfig(server_id="body-limits"), ServingState("body-limits"),
                      UserStore("127.0.0.1", 1), KEYS, served_log=NoServedLog(), ready=lambda: True)
    return server.app()


def tracker() -> web.Application:
    return Tracker(KEYS, lambda *record: None).app()


def advertiser_api() -> web.Application:
    return AdvertiserApi(KeyTable()).app()  # type: ignore[arg-type]


def prediction_service() -> web.Application:
    model = SimpleNamespace(model=SimpleNamespace(version="click-stand-in"))  # the 413 comes before any scoring
    return PredictionService(model).app()


def dashboard() -> web.Application:
    return DashboardServer(PacingBoard(), lambda campaign_id: None).app()


# (service, its app, method and path that take or ignore a body, headers, the cap)
SERVICES: list[tuple[str, Callable[[], web.Application], str, str, dict[str, str], int]] = [
    ("ad server", ad_server, "POST", "/v1/ads", {}, ADSERVER_MAX_BODY_BYTES),
    ("tracker", tracker, "GET", "/v1/impression?t=x", {}, TRACKER_MAX_BODY_BYTES),
    ("advertiser API", advertiser_api, "POST", "/v1/campaigns", {"Authorization": f"Bearer {API_KEY}"},
     ADVERTISER_API_MAX_BODY_BYTES),
    ("prediction service", prediction_service, "POST", "/v1/score", {}, PREDICTION_MAX_BODY_BYTES),
    ("dashboard", dashboard, "GET", "/v1/pacing/campaigns", {}, DASHBOARD_MAX_BODY_BYTES),
]
IDS = [service[0] for service in SERVICES]


def _send(app: web.Application, method: str, path: str, headers: dict[str, str], data: Any) -> tuple[int, Any]:
    async def scenario():
        async with TestClient(TestServer(app)) as client:
            async with client.request(method, path, headers=headers, data=data) as r:
                body = await r.json() if r.content_type == "application/json" else await r.text()
                return r.status, body
    return asyncio.run(scenario())


def _is_413_naming_body(answer: tuple[int, Any], cap: int) -> bool:
    status, body = answer
    return status == 413 and body["field"] == "body" and f"{cap:,} bytes" in body["error"]


@pytest.mark.parametrize("name, make_app, method, path, headers, cap", SERVICES, ids=IDS)
def test_a_declared_content_length_over_the_cap_is_a_413_naming_the_body(name, make_app, method, path, headers,
                                                                        cap):
    answer = _send(make_app(), method, path, headers, b"{" + b" " * cap + b"}")
    assert _is_413_naming_body(answer, cap), answer


@pytest.mark.parametrize("name, make_app, method, path, headers, cap", SERVICES, ids=IDS)
def test_a_chunked_body_growing_past_the_cap_is_a_413(name, make_app, method, path, headers, cap):
    async def chunks():
        for _ in range(cap // 512 + 2):
            yield b" " * 512
    answer = _send(make_app(), method, path, headers, chunks())
    assert _is_413_naming_body(answer, cap), answer


@pytest.mark.parametrize("name, make_app, method, path, headers, cap", SERVICES, ids=IDS)
def test_a_gzip_body_that_inflates_past_the_cap_is_a_413(name, make_app, method, path, headers, cap):
    small = gzip.compress(b" " * (cap + 1))
    assert len(small) < cap
    answer = _send(make_app(), method, path, {**headers, "Content-Encoding": "gzip"}, small)
    assert _is_413_naming_body(answer, cap), answer


@pytest.mark.parametrize("name, make_app, method, path, headers, cap", SERVICES, ids=IDS)
def test_a_body_under_the_cap_reaches_the_handler(name, make_app, method, path, headers, cap):
    status, _ = _send(make_app(), method, path, headers, b"x" * (cap // 2))
    assert status not in (413,) and status < 500, (name, status)


def test_a_content_length_that_understates_the_body_ends_it_there_and_the_rest_is_refused_by_the_parser():
    async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        return status, await reader.readexactly(length)

    async def scenario() -> list[tuple[int, bytes]]:
        server = TestServer(advertiser_api())
        await server.start_server()
        try:
            reader, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(f"POST /v1/campaigns HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
                         "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}".encode())
            first = await asyncio.wait_for(read_answer(reader), 60)
            writer.write(b"A" * 4096 + b"\r\n\r\n")  # the rest of the "body": parsed as a request line
            second = await asyncio.wait_for(read_answer(reader), 60)
            writer.close()
            return [first, second]
        finally:
            await server.close()

    (first_status, first_body), (second_status, _) = asyncio.run(scenario())
    assert first_status == 400 and json.loads(first_body)["field"] == "name"  # the body was `{}`: no name
    assert second_status == 400
