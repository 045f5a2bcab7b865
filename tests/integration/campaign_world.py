"""The advertiser API and two running ad servers inside one event loop, for the tests of changes that travel
advertiser API -> PostgreSQL -> Debezium -> the index builder on Flink -> serving.* -> the ad servers."""
from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import time
import uuid

import aiohttp

from core.tokens import TokenKeys
from serving.adserver.app import ServerConfig
from serving.adserver.main import start_ad_server
from serving.adserver.settings import AdServerSettings
from serving.advertiser.api import start_advertiser_api

KEYS = TokenKeys({"cc1": b"campaign-change-test-key-01"}, active="cc1")
REVIEWER = "integration-test"


async def adserve(*args: str) -> subprocess.CompletedProcess:
    """The `adserve` command, as an operator runs it against the test platform (its settings from the same
    environment), in a thread so the servers in this event loop keep answering."""
    return await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "adserve", *args], capture_output=True,
                                   text=True, timeout=120, env={**os.environ, "ADSERVE_OPERATOR": REVIEWER})


# These tests are about changes reaching the servers, not latency: on a loaded two-core CI machine (Flink, Kafka
# and the test client all on it) a Redis read now and then outlasts the production 100 ms deadline and the server
# rightly answers 503, so the servers here get a deadline that only a hang would miss.
RELAXED_DEADLINE_MS = 5_000.0


class World:
    """The advertiser API and two ad servers, started inside one event loop."""

    def __init__(self, platform):
        self.platform = platform

    async def __aenter__(self):
        p = self.platform
        self.api_runner, api_port, self.store = await start_advertiser_api(p.postgres_dsn, port=0)
        self.api = f"http://127.0.0.1:{api_port}"
        self.servers = [await start_ad_server(AdServerSettings.on_platform(p, KEYS, port=0),
                                              config=ServerConfig(server_id=f"cc-{i}-{uuid.uuid4().hex[:4]}",
                                                                  deadline_ms=RELAXED_DEADLINE_MS),
                                              wait_ready_s=300)
                        for i in range(2)]
        assert all(s.server.is_ready() for s in self.servers), "an ad server did not catch up with its topics"
        self.http = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc):
        await self.http.close()
        for s in self.servers:
            await s.stop()
        await self.api_runner.cleanup()
        await self.store.close()

    async def advertiser(self) -> dict[str, str]:
        _, key = await self.store.create_advertiser(f"adv-{uuid.uuid4().hex[:8]}")
        return {"Authorization": f"Bearer {key}"}

    async def call(self, method: str, path: str, auth, body=None) -> tuple[int, dict]:
        async with self.http.request(method, self.api + path, json=body, headers=auth) as r:
            return r.status, await r.json()

    async def campaign_with_ad(self, auth, placement: str, bid: int, *, approve: bool = True,
                               **campaign) -> tuple[dict, dict]:
        """A campaign and one ad targeting the test's own placement, through the API; the operator approves the
        ad (as the review store call the `adserve ads review` command makes) unless approve=False."""
        status, c = await self.call("POST", "/v1/campaigns", auth, {
            "name": f"c-{uuid.uuid4().hex[:6]}", "bid_type": "CPM", "daily_budget_micros": 1_000_000_000,
            "timezone": "UTC", **campaign})
        assert status == 201, c
        status, a = await self.call("POST", f"/v1/campaigns/{c['campaign_id']}/ads", auth, {
            "creative_ref": f"creative-{uuid.uuid4().hex[:6]}", "landing_url": "https://adv.example/",
            "bid_micros": bid, "targeting": {"placement": [placement]}})
        assert status == 201, a
        if approve:
            a = await self.store.review_ad(a["ad_id"], "APPROVED", REVIEWER)
        return c, a

    async def ask(self, server, placement: str, location: str | None = None) -> dict:
        body = {"placement": placement, "slots": [{"position": 1}], "user_id": f"u-{uuid.uuid4().hex[:6]}"}
        if location:
            body["location"] = location
        async with self.http.post(f"http://127.0.0.1:{server.port}/v1/ads", json=body) as r:
            assert r.status == 200
            return await r.json()

    def applied(self, topic: str, key, version: int) -> bool:
        """Whether every server applied this version of a record (or a newer one)."""
        return all(any(t == topic and k == key and v >= version for t, k, v, _ in s.server.state.recent_lags)
                   for s in self.servers)

    async def until(self, check, what: str, timeout_s: float = 60.0) -> float:
        """Poll `check` (a plain or an async function) until it holds; the seconds it took."""
        async def holds() -> bool:
            result = check()
            return bool(await result) if inspect.isawaitable(result) else bool(result)
        began = time.monotonic()
        while not await holds():
            assert time.monotonic() - began < timeout_s, f"{what}: not within {timeout_s:.0f} s"
            await asyncio.sleep(0.2)
        return time.monotonic() - began


def winner(answer: dict) -> dict | None:
    return next((s for s in answer["slots"] if s.get("ad_id")), None)


