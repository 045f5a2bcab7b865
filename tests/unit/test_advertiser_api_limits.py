"""The advertiser API's rate limits over HTTP, on an in-memory key table and a scripted clock: each API key
its own bucket, 429 with Retry-After and {"error", "field"} past it; requests without a valid key spend their
address's bucket (the client's address behind trusted proxies), and an address that ran it dry is refused
before its key is even looked up, except for a key that authenticated lately; counted on /metrics. Also the settings and flags that set the limits."""
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


def _calls(api: AdvertiserApi, clock: Clock, steps: list[tuple], path: str = "/v1/campaigns"):
    """Each (key, seconds to advance first[, X-Forwarded-For]) as GET `path`: [(status, Retry-After, body)]."""
    async def scenario():
        async with TestClient(TestServer(api.app())) as client:
            answers = []
            for key, advance_s, *forwarded in steps:
                clock.now_s += advance_s
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                if forwarded:
                    headers["X-Forwarded-For"] = forwarded[0]
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


def test_bad_keys_from_a_shared_ingress_address_never_lock_out_an_advertiser_whose_key_worked():
    clock, table = Clock(), KeyTable()
    api = AdvertiserApi(table, limits=LIMITS, clock=clock)  # type: ignore[arg-type]
    owner = "ak_owner_key_1"
    guesses = [(f"ak_guess_{n}", 0) for n in range(20)]
    answers = _calls(api, clock, [(owner, 0)] + guesses + [(owner, 0), ("ak_guess_x", 0)])
    assert [status for status, _, _ in answers] == [200, 401, 401] + [429] * 18 + [200, 429]
    assert table.lookups.count(owner) == 2 and len(table.lookups) == 4  # throttled guesses are never looked up


def test_behind_trusted_proxies_each_client_address_has_its_own_bucket_and_others_cannot_choose_theirs():
    from core.client_address import parse_trusted_proxies

    clock = Clock()
    api = AdvertiserApi(KeyTable(), limits=LIMITS, clock=clock,  # type: ignore[arg-type]
                        trusted_proxies=parse_trusted_proxies("127.0.0.0/8"))
    answers = _calls(api, clock, [(None, 0, "198.51.100.1")] * 3 + [(None, 0, "198.51.100.2")])
    assert [status for status, _, _ in answers] == [401, 401, 429, 401]  # the second client is not the first
    untrusted = AdvertiserApi(KeyTable(), limits=LIMITS, clock=clock)  # type: ignore[arg-type]
    answers = _calls(untrusted, clock, [(None, 0, f"198.51.100.{n}") for n in range(3)])
    assert [status for status, _, _ in answers] == [401, 401, 429]  # the header alone changes nothing


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
