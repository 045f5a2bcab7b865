"""The gateway (real HAProxy, infra.gateway) in front of two real ad servers on the platform's Kafka and Redis:
a user always reaches the same server, the servers' answers pass through unchanged, a tier with no server up
or with every connection slot taken answers a JSON 503 at the gateway."""
from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from core.tokens import TokenKeys
from infra.gateway import (
    OVERLOADED, REQUEST_START_HEADER, UNAVAILABLE, Backend, Gateway, GatewayOptions, start_gateway,
)
from schemas import topics
from serving.adserver.app import ServerConfig
from serving.adserver.main import AdServerDependencies, RunningAdServer, start_ad_server
from serving.adserver.settings import AdServerSettings
from serving.adserver.state import ServingState

KEYS = TokenKeys({"gw1": b"gateway-test-key-0123456"}, active="gw1")
PLACEMENT = "gateway-test"
CAMPAIGN_ID = 7_700_000


def small_state(server_id: str, now_ms: int) -> ServingState:
    """One CPM campaign with one ad on the test's placement, as the state topics would have built it."""
    state = ServingState(server_id)
    state.apply(topics.SERVING_CAMPAIGNS, {
        "campaign_id": CAMPAIGN_ID, "advertiser_id": 1, "version": 1, "event_time": now_ms, "status": "ACTIVE",
        "bid_type": "CPM", "daily_budget_micros": 100_000_000, "currency": "USD", "timezone": "UTC",
        "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None, "cap_per_week": None,
        "cpa_target_micros": None}, now_ms)
    state.apply(topics.SERVING_ADS, {
        "ad_id": CAMPAIGN_ID + 1, "campaign_id": CAMPAIGN_ID, "advertiser_id": 1, "version": 1,
        "event_time": now_ms, "removed": False, "bid_type": "CPM", "bid_micros": 5_000_000, "quality_prior": 0.0,
        "creative_ref": "creative-gw", "landing_url": "https://shop.example/gw", "static_score": 1.0,
        "targeting": [{"attribute": "placement", "values": [PLACEMENT], "excluded": False}]}, now_ms)
    return state


def ad_request(user_id: str | None = None, **extra) -> dict:
    body = {"request_id": uuid.uuid4().hex, "placement": PLACEMENT, "slots": [{"position": 1}], **extra}
    if user_id is not None:
        body["user_id"] = user_id
    return body


class Tier:
    """Two ad servers with the same small state and the gateway in front of them.

    The servers give the request path room (deadline, user-read and admission limits far above what a loaded
    test machine needs), so every 503 a test sees is the gateway's."""

    def __init__(self, platform, run_dir: Path, options: GatewayOptions = GatewayOptions()):
        self.platform, self.run_dir, self.options = platform, run_dir, options
        self.servers: list[RunningAdServer] = []
        self.gateway: Gateway | None = None

    async def __aenter__(self) -> "Tier":
        tier_id = f"gw-{uuid.uuid4().hex[:6]}"
        now_ms = int(time.time() * 1000)
        try:
            for worker in range(2):
                server_id = f"{tier_id}-w{worker}"
                self.servers.append(await start_ad_server(
                    AdServerSettings.on_platform(self.platform, KEYS, port=0),
                    AdServerDependencies(state=small_state(server_id, now_ms)), follow=False,
                    config=ServerConfig(server_id=server_id, deadline_ms=10_000, user_read_timeout_ms=2_000,
                                        admission_wait_ms=10_000)))
            backends = [Backend("127.0.0.1", s.port, s.server.config.server_id) for s in self.servers]
            self.gateway = await asyncio.to_thread(start_gateway, backends, 0, self.run_dir, options=self.options)
        except BaseException:
            await self.stop_servers()
            raise
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.close()
        await asyncio.to_thread(self.gateway.stop)
        await self.stop_servers()

    async def stop_servers(self) -> None:
        while self.servers:
            await self.servers.pop().stop()

    def direct(self, worker: int) -> str:
        return f"http://127.0.0.1:{self.servers[worker].port}"

    async def post(self, base_url: str, body: dict | bytes) -> tuple[int, str, dict]:
        """(status, content type, JSON body) of POST /v1/ads."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with self.http.post(f"{base_url}/v1/ads", data=data,
                                  headers={"Content-Type": "application/json"}) as r:
            return r.status, r.content_type, json.loads(await r.read())

    async def outcomes(self) -> list[dict[str, float]]:
        """Per server, its ad requests by outcome, from its own GET /metrics."""
        counts = []
        for worker in range(len(self.servers)):
            async with self.http.get(f"{self.direct(worker)}/metrics") as r:
                text = await r.text()
            counts.append({sample.labels["outcome"]: sample.value for family in text_string_to_metric_families(text)
                           if family.name == "adserve_ad_requests" for sample in family.samples
                           if sample.name.endswith("_total")})
        return counts

    async def served(self) -> list[float]:
        return [outcome.get("served", 0.0) for outcome in await self.outcomes()]


def test_one_user_always_reaches_the_same_server_and_users_spread_over_both(platform, tmp_path: Path):
    async def scenario():
        async with Tier(platform, tmp_path) as tier:
            home: dict[str, int] = {}
            for key, body in [(f"user-{i}", ad_request(f"user-{i}")) for i in range(16)] + \
                             [("device-a", ad_request(device_id="device-a"))]:
                before = await tier.served()
                for _ in range(6):
                    status, _, answer = await tier.post(tier.gateway.url, {**body, "request_id": uuid.uuid4().hex})
                    assert status == 200 and answer["slots"][0]["ad_id"] == CAMPAIGN_ID + 1
                grown = [after - was for after, was in zip(await tier.served(), before)]
                assert sorted(grown) == [0, 6], f"{key}'s requests went to both servers: {grown}"
                home[key] = grown.index(6)
            return home

    home = asyncio.run(scenario())
    assert set(home.values()) == {0, 1}, f"every user went to one server: {home}"


def test_a_bad_request_gets_the_servers_400_and_body_through_the_gateway(platform, tmp_path: Path):
    async def scenario():
        async with Tier(platform, tmp_path) as tier:
            pairs = []
            for body in (ad_request("user-1", slots=[{"position": "first"}]), b"{not json",
                         {"user_id": "user-2", "slots": [{"position": 1}]}):
                pairs.append((await tier.post(tier.gateway.url, body), await tier.post(tier.direct(0), body)))
            return pairs

    pairs = asyncio.run(scenario())
    assert all(through_gateway == direct for through_gateway, direct in pairs)
    assert [(status, content_type, body["field"]) for _, (status, content_type, body) in pairs] == [
        (400, "application/json", "slots[0].position"), (400, "application/json", "body"),
        (400, "application/json", "placement")]


def test_ready_metrics_and_the_openapi_document_pass_through_unchanged(platform, tmp_path: Path):
    async def scenario():
        async with Tier(platform, tmp_path) as tier:
            read = {}
            for base in (tier.gateway.url, tier.direct(0)):
                for path in ("/ready", "/openapi.json", "/metrics"):
                    async with tier.http.get(f"{base}{path}") as r:
                        read[base, path] = (r.status, r.content_type, await r.read())
            return tier.gateway.url, tier.direct(0), read

    gateway, direct, read = asyncio.run(scenario())
    assert read[gateway, "/openapi.json"] == read[direct, "/openapi.json"]
    assert read[gateway, "/openapi.json"][0] == 200 and json.loads(read[gateway, "/openapi.json"][2])["paths"]
    status, content_type, body = read[gateway, "/ready"]
    assert (status, content_type, json.loads(body)["ready"]) == (200, "application/json", True)
    assert read[gateway, "/metrics"][0] == 200 and b"adserve_ad_requests" in read[gateway, "/metrics"][2]


def test_with_every_server_stopped_the_gateway_answers_a_json_503(platform, tmp_path: Path):
    async def scenario():
        async with Tier(platform, tmp_path, GatewayOptions(check_interval_ms=200)) as tier:
            status, _, _ = await tier.post(tier.gateway.url, ad_request("user-1"))
            assert status == 200
            await tier.stop_servers()
            answers = []
            deadline = time.monotonic() + 60
            while not answers or answers[-1][2] != {"error": UNAVAILABLE}:
                assert time.monotonic() < deadline, f"the gateway never saw every server down: {answers[-3:]}"
                answers.append(await tier.post(tier.gateway.url, ad_request("user-1")))
                await asyncio.sleep(0.1)
            return answers

    answers = asyncio.run(scenario())
    # until the health checks take the servers out, a refused connection is a 503 too
    assert all(status == 503 and content_type == "application/json" and set(body) == {"error"}
               for status, content_type, body in answers)
    assert {body["error"] for _, _, body in answers} <= {OVERLOADED, UNAVAILABLE}


def test_an_overloaded_tier_is_shed_at_the_gateway_with_a_json_503(platform, tmp_path: Path):
    async def scenario():
        async with Tier(platform, tmp_path, GatewayOptions(server_maxconn=1, server_maxqueue=1)) as tier:
            before = await tier.outcomes()
            results = []
            for _ in range(5):  # rounds of 80 at once, until the gateway sheds some
                results += await asyncio.gather(*(tier.post(tier.gateway.url, ad_request(f"load-{i % 20}"))
                                                  for i in range(80)))
                if any(status == 503 for status, _, _ in results):
                    break
            await asyncio.gather(*(s.server.drain() for s in tier.servers))
            return results, before, await tier.outcomes()

    results, before, after = asyncio.run(scenario())
    statuses = [status for status, _, _ in results]
    assert set(statuses) == {200, 503}, f"statuses seen: {sorted(set(statuses))}"
    assert all(content_type == "application/json" and body == {"error": OVERLOADED}
               for status, content_type, body in results if status == 503)
    # every request the gateway let through was served: none was refused or timed out at a server
    def grown(outcome: str) -> float:
        return sum(a.get(outcome, 0.0) - b.get(outcome, 0.0) for a, b in zip(after, before))

    assert grown("served") == statuses.count(200)
    assert {outcome: grown(outcome) for outcome in {k for a in after for k in a} - {"served"}} == \
        {outcome: 0.0 for outcome in {k for a in after for k in a} - {"served"}}


async def _echo_request_start(request: web.Request) -> web.Response:
    return web.json_response(request.headers.getall(REQUEST_START_HEADER, []))


async def _ready(request: web.Request) -> web.Response:
    return web.json_response({"ready": True})


def test_the_gateway_stamps_each_request_with_the_epoch_microseconds_it_received_it(tmp_path: Path):
    """A backend that shows the headers it got (not an ad server: what the gateway adds is the subject here)."""
    async def scenario():
        app = web.Application()
        app.add_routes([web.post("/v1/ads", _echo_request_start), web.get("/ready", _ready)])
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        gateway = await asyncio.to_thread(start_gateway, [Backend("127.0.0.1", port, "echo")], 0, tmp_path)
        try:
            async with aiohttp.ClientSession() as http:
                seen = []
                for sent in ({}, {REQUEST_START_HEADER: "t=1"}):
                    before_us = time.time_ns() // 1000
                    async with http.post(f"{gateway.url}/v1/ads", json=ad_request("user-1"), headers=sent) as r:
                        stamps = await r.json()
                    seen.append((before_us, stamps, time.time_ns() // 1000))
                return seen
        finally:
            await asyncio.to_thread(gateway.stop)
            await runner.cleanup()

    for before_us, stamps, after_us in asyncio.run(scenario()):
        (stamp,) = stamps  # a client's own value is replaced, not added to
        assert re.fullmatch(r"t=\d{16}", stamp), stamp
        assert before_us <= int(stamp[2:]) <= after_us
