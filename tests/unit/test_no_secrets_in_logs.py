"""No secret, key or token in any log line, metric or printed setting.

The tracker, the ad server and the advertiser API run in this process (the advertiser API on an in-memory key
table) with every logger captured at DEBUG, and are sent what carries secrets: signed tokens and click ids
(good, forged, expired, signed with a retired key), API keys (valid, guessed, rate limited), oversize bodies,
and a broker that fails. Then none of the secrets (the signing keys, every token and click id, the API keys, a
database password) may appear in a captured log record (message or traceback), in /metrics of any of them, or in
the settings as printed at start (describe, repr, str).

The servers run as the `start_*` functions run them: without an access log (which would print each request's
query, and a beacon's token is in its query); a guard below keeps every server in serving/ that way."""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from core.rate_limit import RateLimit
from core.tokens import ClickIdClaims, TokenClaims, TokenKeys
from schemas import topics
from serving.adserver.app import AdServer, RequestPathParts, ServerConfig
from serving.adserver.settings import AdServerSettings, TrackerSettings
from serving.adserver.state import ServingState
from serving.advertiser.api import AdvertiserApi, AdvertiserApiSettings, RateLimits
from serving.frequency_store import UserStore
from serving.tracker import Tracker
from tests.factories import ServedLogStandIn

NOW_S = 1_800_000_000.0
SIGNING_SECRET = "leak-check-signing-secret-5f1c9a0e"
RETIRED_SECRET = "leak-check-retired-secret-77d0e2aa"
API_KEY = "ak_leakcheck_Zq8mP2xW"
GUESSED_KEY = "ak_leakcheck_guess_Yy31"
DB_PASSWORD = "leak-check-db-p@ssword-4b2e"
KEYS = TokenKeys({"live": SIGNING_SECRET.encode(), "old": b"leak-check-old-secret-0c8d1f"}, active="live")
PLACEMENT = "leak-check"
SERVING = Path(__file__).resolve().parents[2] / "serving"


class Secrets:
    """Every secret string the scenario handled; tokens are added as they are issued."""

    def __init__(self) -> None:
        self.values: set[str] = {SIGNING_SECRET, RETIRED_SECRET, API_KEY, GUESSED_KEY, DB_PASSWORD,
                                 "leak-check-old-secret-0c8d1f"}

    def token(self, token: str) -> str:
        self.values.add(token)
        self.values.add(token.rsplit(".", 1)[-1])  # the signature alone
        return token

    def found_in(self, text: str) -> list[str]:
        return sorted(secret for secret in self.values if secret in text)


def _claims(**overrides: Any) -> TokenClaims:
    return dataclasses.replace(TokenClaims("imp-leak:1", 10, 1, 5_000_000, "CLICK", "https://x.example/",
                                           expires_ms=int(NOW_S * 1000) + 3_600_000), **overrides)


def _state() -> ServingState:
    state = ServingState("leak-check")
    state.apply(topics.SERVING_CAMPAIGNS, {
        "campaign_id": 1, "advertiser_id": 1, "version": 1, "event_time": 1_000, "status": "ACTIVE",
        "bid_type": "CPC", "daily_budget_micros": 10**9, "currency": "USD", "timezone": "UTC", "flight_start": None,
        "flight_end": None, "dayparts": [], "cap_per_day": None, "cap_per_week": None, "cpa_target_micros": None},
        2_000)
    state.apply(topics.SERVING_ADS, {
        "ad_id": 10, "campaign_id": 1, "advertiser_id": 1, "version": 1, "event_time": 1_000, "removed": False,
        "bid_type": "CPC", "bid_micros": 5_000_000, "quality_prior": 0.0, "creative_ref": "c",
        "landing_url": "https://x.example/", "static_score": 1.0,
        "targeting": [{"attribute": "placement", "values": [PLACEMENT], "excluded": False}]}, 2_000)
    return state


class KeyTable:
    async def advertiser_for_key(self, key: str) -> int | None:
        return 1 if key == API_KEY else None

    async def list_campaigns(self, advertiser_id: int) -> list[dict[str, Any]]:
        return []


@contextlib.asynccontextmanager
async def _client(app: web.Application):
    server = TestServer(app)
    await server.start_server(access_log=None)  # as the start_* functions run them
    async with TestClient(server) as client:
        yield client


async def _ad_server_scenario(secrets: Secrets) -> tuple[list[str], str]:
    """Ad requests through the real handler (Redis unreachable: reads and writes fail and are logged); returns
    the tokens it signed and its /metrics."""
    store = UserStore("127.0.0.1", 1, read_timeout_s=0.5)
    server = AdServer(ServerConfig(server_id="leak-check", deadline_ms=10_000.0), _state(), store, KEYS,
                      served_log=ServedLogStandIn(), ready=lambda: True, parts=RequestPathParts(clock=lambda: NOW_S))
    tokens = []
    async with _client(server.app()) as client:
        for n in range(3):
            body = {"request_id": f"leak-{n}", "user_id": f"user-{n}", "placement": PLACEMENT,
                    "slots": [{"position": 1}]}
            async with client.post("/v1/ads", json=body) as r:
                assert r.status == 200, await r.text()
                answer = await r.json()
            tokens += [secrets.token(slot["token"]) for slot in answer["slots"] if "token" in slot]
        async with client.post("/v1/ads", data=b"{" + b" " * (128 * 1024)) as r:
            assert r.status == 413
        assert len(tokens) == 3, "the ad did not serve: no token to follow"
        await server.drain()
        async with client.get("/metrics") as r:
            metrics = await r.text()
    await store.close()
    return tokens, metrics


async def _tracker_scenario(secrets: Secrets, tokens: list[str]) -> str:
    """Beacons, clicks, conversions and feedback with good and bad tokens; the third record the tracker keeps
    fails to be kept (logged with its traceback). Returns /metrics."""
    kept: list[tuple[str, bytes, bytes]] = []

    def produce(topic: str, key: bytes, value: bytes) -> None:
        if len(kept) == 2:
            kept.append((topic, key, b""))
            raise OSError("disk full")
        kept.append((topic, key, value))

    tracker = Tracker(KEYS, produce, clock=lambda: NOW_S)
    retired = TokenKeys({"retired": RETIRED_SECRET.encode()}, active="retired")
    forged = secrets.token(tokens[0][:-4] + ("AAAA" if not tokens[0].endswith("AAAA") else "BBBB"))
    expired = secrets.token(KEYS.sign(_claims(expires_ms=int(NOW_S * 1000) - 1)))
    unknown = secrets.token(retired.sign(_claims()))
    old_key = secrets.token(TokenKeys(KEYS.keys, active="old").sign(_claims()))
    click_id = secrets.token(KEYS.sign_click_id(ClickIdClaims("imp-leak:1", 10, 1, int(NOW_S * 1000) - 10,
                                                              int(NOW_S * 1000) - 5, int(NOW_S * 1000) + 86_400_000)))
    requests = [("/v1/impression", {"t": t}) for t in tokens] + \
        [("/v1/click", {"t": t}) for t in (*tokens, forged, expired, unknown, old_key, "not.a-token")] + \
        [("/v1/conversion", {"c": c}) for c in (click_id, tokens[0], forged)] + \
        [("/v1/feedback", {"t": tokens[0], "type": "report"}), ("/v1/feedback", {"t": forged, "type": "hide"}),
         ("/v1/feedback", {"t": tokens[0], "type": f"bogus-{API_KEY}"})]
    async with _client(tracker.app()) as client:
        for path, query in requests:
            async with client.get(path, params=query, allow_redirects=False) as r:
                await r.read()
                if r.status == 302:
                    secrets.token(r.headers["Location"].split("adclid=", 1)[1])
        async with client.get("/metrics") as r:
            return await r.text()


async def _advertiser_api_scenario() -> str:
    """Valid, guessed and missing keys, past both rate limits, and an oversize body. Returns /metrics."""
    api = AdvertiserApi(KeyTable(), limits=RateLimits(RateLimit(1.0, 2), RateLimit(1.0, 2)),  # type: ignore[arg-type]
                        clock=lambda: NOW_S)
    async with _client(api.app()) as client:
        for key in (API_KEY, API_KEY, API_KEY, GUESSED_KEY, GUESSED_KEY, GUESSED_KEY, API_KEY, ""):
            async with client.get("/v1/campaigns", headers={"Authorization": f"Bearer {key}"}) as r:
                await r.read()
        async with client.post("/v1/campaigns", data=b" " * (2 * 1024 * 1024),
                               headers={"Authorization": f"Bearer {API_KEY}"}) as r:
            assert r.status == 413
        async with client.get("/metrics") as r:
            return await r.text()


def _printed_settings() -> list[str]:
    """Each service's settings as printed at start (describe), and as repr and str would show them."""
    env = {"ADSERVE_TOKEN_KEYS": f"live:{SIGNING_SECRET},retired:{RETIRED_SECRET}",
           "ADSERVE_KAFKA_BOOTSTRAP": "127.0.0.1:9092", "ADSERVE_HOST": "127.0.0.1", "ADSERVE_REDIS_PORT": "6379",
           "ADSERVE_POSTGRES_DSN": f"postgresql://adserve:{DB_PASSWORD}@db.internal:5432/adserve"}
    settings: list[Any] = [
        AdServerSettings.from_args(argparse.Namespace(port=8080), env),
        TrackerSettings.from_args(argparse.Namespace(port=8081), env),
        AdvertiserApiSettings.from_args(argparse.Namespace(port=8082), env),
        AdvertiserApiSettings.from_args(argparse.Namespace(port=8082), {
            **env, "ADSERVE_POSTGRES_DSN": f"host=db port=5432 user=adserve password={DB_PASSWORD} dbname=adserve"}),
    ]
    return [text for s in settings for text in (s.describe(), repr(s), str(s))]


def test_no_secret_key_or_token_reaches_a_log_line_a_metric_or_the_printed_settings(caplog):
    caplog.set_level(logging.DEBUG)
    secrets = Secrets()

    async def scenario() -> list[str]:
        tokens, ad_metrics = await _ad_server_scenario(secrets)
        tracker_metrics = await _tracker_scenario(secrets, tokens)
        return [ad_metrics, tracker_metrics, await _advertiser_api_scenario()]

    metrics = asyncio.run(scenario())
    assert len(secrets.values) > 20  # the scenario handled tokens, not just the fixed secrets
    records = caplog.records
    assert any(r.name == "adserve.tracker" and r.exc_info for r in records)  # the failure path logged
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''} {r.stack_info or ''}" for r in records)
    logged += "\n" + caplog.text
    assert secrets.found_in(logged) == [], "a secret in the logs"
    for text in metrics:
        assert "adserve_" in text
        assert secrets.found_in(text) == [], "a secret in /metrics"
    for text in _printed_settings():
        assert secrets.found_in(text) == [], f"a secret in the printed settings: {text}"


def test_the_check_finds_a_secret_in_a_log_line(caplog):
    caplog.set_level(logging.DEBUG)
    secrets = Secrets()
    token = secrets.token(KEYS.sign(_claims()))
    logging.getLogger("adserve.tracker").debug("rejected %s", token)
    assert secrets.found_in(caplog.text) == sorted({token, token.rsplit(".", 1)[-1]})


def test_every_server_in_serving_runs_without_an_access_log():
    """An access log prints each request line, query included: a beacon's token is in its query."""
    calls = [(path.relative_to(SERVING.parent), call) for path in SERVING.rglob("*.py")
             for call in re.findall(r"web\.AppRunner\([^\n]*", path.read_text())]
    assert calls, "no AppRunner found: the guard reads the wrong folder"
    assert [c for c in calls if "access_log=None" not in c[1]] == []


@pytest.mark.parametrize("dsn", [
    f"postgresql://adserve:{DB_PASSWORD}@db.internal:5432/adserve",
    f"postgresql://adserve:{DB_PASSWORD}@db.internal/adserve?sslmode=require",
    f"host=db password={DB_PASSWORD} dbname=adserve",
])
def test_a_database_password_with_an_at_sign_is_masked_whole(dsn):
    settings = AdvertiserApiSettings.from_args(argparse.Namespace(port=8082), {"ADSERVE_POSTGRES_DSN": dsn})
    printed = settings.describe()
    assert "p@ss" not in printed and "4b2e" not in printed and "db" in printed
