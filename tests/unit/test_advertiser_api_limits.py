"""The advertiser API's rate limits over HTTP, on an in-memory key table and a scripted clock: each API key
its own bucket, 429 with Retry-After and {"error", "field"} past it; requests without a valid key spend their
address's bucket, and an address that ran it dry is refused before its key is even looked up; counted on
/metrics. Also the settings and flags that set the limits."""
from __future__ import annotations

import argparse
import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from core.errors import InvalidSettings
from core.rate_limit import RateLimit
from serving.advertiser.api import AdvertiserApi, AdvertiserApiSettings, RateLimits

KEYS = {"ak_owner_key_1": 1, "ak_other_key_2": 2}
LIMITS = RateLimits(per_api_key=RateLimit(rate_per_s=1.0, burst=3),
                    unauthenticated=RateLimit(rate_per_s=0.5, burst=2))


class KeyTable:
    """The two calls the limited paths reach: who a key belongs to (each lookup recorded) and a list."""

    def __init__(self) -> None:
        self.lookups: list[str] = []

    async def advertiser_for_key(self, key: str) -> int | None:
        self.lookups.append(key)
        return KEYS.get(key)

    async def list_campaigns(self, advertiser_id: int) -> list[dict[str, Any]]:
        return []


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_000.0

    def __call__(self) -> float:
        return self.now_s


def _calls(api: AdvertiserApi, clock: Clock, steps: list[tuple[str | None, float]], path: str = "/v1/campaigns"):
    """Each (key, seconds to advance first) as GET `path`: [(status, Retry-After, body)]."""
    async def scenario():
        async with TestClient(TestServer(api.app())) as client:
            answers = []
            for key, advance_s in steps:
                clock.now_s += advance_s
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                async with client.get(path, headers=headers) as r:
                    body = await r.json() if r.content_type == "application/json" else await r.text()
                    answers.append((r.status, r.headers.get("Retry-After"), body))
            return answers
    return asyncio.run(scenario())


def _limited(api: AdvertiserApi) -> dict[str, float]:
    return {s.labels["limit"]: s.value for m in api.metrics.rate_limited.collect() for s in m.samples
            if s.name.endswith("_total")}


def test_a_key_past_its_burst_gets_429_with_retry_after_and_the_api_error_body():
    clock = Clock()
    api = AdvertiserApi(KeyTable(), limits=LIMITS, clock=clock)  # type: ignore[arg-type]
    owner = "ak_owner_key_1"
    answers = _calls(api, clock, [(owner, 0)] * 4 + [("ak_other_key_2", 0), (owner, 1.0)])
    assert [status for status, _, _ in answers] == [200, 200, 200, 429, 200, 200]
    _, retry_after, body = answers[3]
    assert retry_after == "1"
    assert set(body) == {"error", "field"} and body["field"] == "Authorization"
    assert body["error"].startswith("too many requests from this API key")
    assert _limited(api) == {"api_key": 1.0}


def test_requests_without_a_valid_key_spend_the_address_bucket_then_nothing_is_looked_up():
    clock, table = Clock(), KeyTable()
    api = AdvertiserApi(table, limits=LIMITS, clock=clock)  # type: ignore[arg-type]
    answers = _calls(api, clock, [(None, 0), ("ak_guess_1", 0), ("ak_guess_2", 0), ("ak_owner_key_1", 0),
                                  ("ak_owner_key_1", 2.0)])
    assert [(status, retry) for status, retry, _ in answers] == [(401, None), (401, None), (429, "2"), (429, "2"),
                                                                (200, None)]
    assert answers[2][2]["field"] == "Authorization"
    # the first guess ran the bucket dry: the second one and the owner's key were refused unread, until the
    # address had a token again
    assert table.lookups == ["ak_guess_1", "ak_owner_key_1"]
    assert _limited(api) == {"address": 2.0}


def test_a_valid_key_spends_nothing_of_its_address_bucket():
    clock = Clock()
    api = AdvertiserApi(KeyTable(), limits=RateLimits(RateLimit(100.0, 100), RateLimit(0.5, 1)),
                        clock=clock)  # type: ignore[arg-type]
    answers = _calls(api, clock, [("ak_owner_key_1", 0)] * 10 + [(None, 0)])
    assert [status for status, _, _ in answers] == [200] * 10 + [401]


def test_the_limits_are_counted_on_metrics_and_metrics_and_openapi_need_no_key_and_are_not_limited():
    clock = Clock()
    api = AdvertiserApi(KeyTable(), limits=LIMITS, clock=clock)  # type: ignore[arg-type]
    _calls(api, clock, [(None, 0)] * 3 + [("ak_owner_key_1", 0)])
    answers = _calls(api, clock, [(None, 0)] * 5, path="/metrics")
    assert {status for status, _, _ in answers} == {200}
    text = answers[-1][2]
    assert 'adserve_advertiser_api_rate_limited_total{limit="address"} 2.0' in text
    assert "adserve_advertiser_api_unauthorized_total 2.0" in text  # the third was refused before any lookup
    assert {status for status, _, _ in _calls(api, clock, [(None, 0)] * 5, path="/openapi.json")} == {200}


def test_without_limits_nothing_is_refused_for_speed():
    clock = Clock()
    api = AdvertiserApi(KeyTable(), clock=clock)  # type: ignore[arg-type]
    answers = _calls(api, clock, [("ak_owner_key_1", 0)] * 50 + [(None, 0)] * 30)
    assert {status for status, _, _ in answers} == {200, 401}


def test_the_settings_carry_the_limits_from_flags_with_defaults_of_20_per_second_burst_40():
    env = {"ADSERVE_POSTGRES_DSN": "postgresql://adserve:pw@127.0.0.1:5432/adserve"}
    defaults = AdvertiserApiSettings.from_args(argparse.Namespace(port=8082), env).rate_limits()
    assert defaults == RateLimits() == RateLimits(RateLimit(20.0, 40), RateLimit(1.0, 20))
    flags = argparse.Namespace(port=8082, rate_per_s=5.0, burst=10, unauthenticated_rate_per_s=0.2,
                               unauthenticated_burst=3)
    settings = AdvertiserApiSettings.from_args(flags, env)
    assert settings.rate_limits() == RateLimits(RateLimit(5.0, 10), RateLimit(0.2, 3))
    assert "rate_per_s=5.0" in settings.describe() and "unauthenticated_burst=3" in settings.describe()
    with pytest.raises(InvalidSettings):
        AdvertiserApiSettings.from_args(argparse.Namespace(port=8082, burst=0), env).rate_limits()
