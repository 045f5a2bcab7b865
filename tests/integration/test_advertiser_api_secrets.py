"""The advertiser API on the real campaign store, every logger at DEBUG: API keys (the live one, the one its
rotation revoked, a guessed one), a rate limit run dry and a campaign written leave no key in any log record or
on /metrics; the revoked key is refused (401) from the request after the rotation on."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from aiohttp.test_utils import TestClient, TestServer

from core.rate_limit import RateLimit
from serving.advertiser.api import AdvertiserApi, RateLimits
from serving.advertiser.store import CampaignStore, migrate

NOW_S = 1_000.0  # the limits' clock stands still: the bursts alone decide
CAMPAIGN = {"name": "secrets", "bid_type": "CPM", "daily_budget_micros": 1_000_000, "timezone": "UTC"}


@contextlib.asynccontextmanager
async def _api(dsn: str):
    store = await CampaignStore(dsn).open()
    api = AdvertiserApi(store, limits=RateLimits(RateLimit(1.0, 4), RateLimit(1.0, 3)), clock=lambda: NOW_S)
    server = TestServer(api.app())
    await server.start_server(access_log=None)  # as start_advertiser_api runs it
    try:
        async with TestClient(server) as client:
            yield store, client
    finally:
        await store.close()


def test_no_api_key_reaches_the_logs_or_metrics_and_a_rotated_key_is_refused(platform, caplog):
    caplog.set_level(logging.DEBUG)
    migrate(platform.postgres_dsn)

    async def scenario() -> tuple[list[int], list[int], str, set[str]]:
        async with _api(platform.postgres_dsn) as (store, client):
            advertiser_id, first_key = await store.create_advertiser(f"secrets-{uuid.uuid4().hex[:8]}")

            async def call(method: str, path: str, key: str, body=None) -> int:
                async with client.request(method, path, json=body, headers={"Authorization": f"Bearer {key}"}) as r:
                    await r.read()
                    return r.status

            before = [await call("POST", "/v1/campaigns", first_key, CAMPAIGN),
                      await call("GET", "/v1/campaigns", first_key)]
            _, rotated_key, _ = await store.rotate_key(advertiser_id, "test")
            guessed = "ak_" + uuid.uuid4().hex
            after = [await call("GET", "/v1/campaigns", first_key), await call("GET", "/v1/campaigns", rotated_key),
                     await call("GET", "/v1/campaigns", guessed)]
            after += [await call("GET", "/v1/campaigns", rotated_key) for _ in range(4)]  # past its burst
            async with client.get("/metrics") as r:
                metrics = await r.text()
            return before, after, metrics, {first_key, rotated_key, guessed}

    before, after, metrics, keys = asyncio.run(scenario())
    assert before == [201, 200]
    assert after[:3] == [401, 200, 401]  # the revoked key, the new one, a guess
    assert 429 in after[3:]  # the clock stands still: the new key's burst of 4 runs dry
    logged = caplog.text + "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert [k for k in keys if k in logged] == []
    assert [k for k in keys if k in metrics] == []
    assert 'adserve_advertiser_api_rate_limited_total{limit="api_key"}' in metrics
