"""Schemathesis against the advertiser API on the platform's PostgreSQL (tests/api_fuzz.py): no generated
request, fitting the API's OpenAPI description or breaking it, gets a 5xx or an answer its own description
does not allow. Requests carry a fresh advertiser's key; a third run holds the path id at that advertiser's own
campaign or ad, so generated changes reach the validation and the store rather than stopping at a 404."""
from __future__ import annotations

import uuid

import aiohttp

from core.audiences import AudienceSalt
from serving.advertiser.api import start_advertiser_api
from serving.advertiser.audiences import AudienceMembers
from serving.advertiser.store import migrate
from tests.api_fuzz import LiveApp, fuzz

CAMPAIGN = {"name": "fuzzed", "bid_type": "CPM", "daily_budget_micros": 50_000_000, "timezone": "UTC"}
AD = {"creative_ref": "creative-fuzzed", "landing_url": "https://adv.example/", "bid_micros": 2_000_000,
      "targeting": {"placement": ["fuzz"]}}


def test_the_advertiser_api_answers_every_generated_request_within_its_description(platform):
    migrate(platform.postgres_dsn)
    stores = []

    async def start():
        # As `adserve serve advertiser-api` runs it with a salt: audience uploads are live.
        salt = AudienceSalt(f"fuzz-audience-salt-{uuid.uuid4().hex}".encode())
        members = AudienceMembers(platform.host, platform.redis_port, salt)
        runner, port, store = await start_advertiser_api(platform.postgres_dsn, port=0, audience_members=members)
        stores.append(store)
        return runner, port

    async def close():
        await stores[0].close()

    with LiveApp(start=start, close=close) as live:
        async def owner() -> tuple[dict[str, str], int, int]:
            _, key = await stores[0].create_advertiser(f"adv-fuzz-{uuid.uuid4().hex[:8]}")
            auth = {"Authorization": f"Bearer {key}"}
            async with aiohttp.ClientSession(headers=auth) as http:
                async with http.post(f"{live.url}/v1/campaigns", json=CAMPAIGN) as r:
                    assert r.status == 201, await r.text()
                    campaign_id = (await r.json())["campaign_id"]
                async with http.post(f"{live.url}/v1/campaigns/{campaign_id}/ads", json=AD) as r:
                    assert r.status == 201, await r.text()
                    ad_id = (await r.json())["ad_id"]
            return auth, campaign_id, ad_id

        auth, campaign_id, ad_id = live.run(owner())
        own_campaign, own_ad = {"path_parameters": {"id": campaign_id}}, {"path_parameters": {"id": ad_id}}
        failures = fuzz(live.url, headers=auth, fixed={
            "GET /v1/campaigns/{id}": own_campaign, "PATCH /v1/campaigns/{id}": own_campaign,
            "POST /v1/campaigns/{id}/pause": own_campaign, "POST /v1/campaigns/{id}/resume": own_campaign,
            "GET /v1/campaigns/{id}/ads": own_campaign, "POST /v1/campaigns/{id}/ads": own_campaign,
            "GET /v1/ads/{id}": own_ad, "PATCH /v1/ads/{id}": own_ad})
    assert not failures, "\n\n".join(failures)
