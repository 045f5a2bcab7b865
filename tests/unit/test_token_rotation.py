"""The token key rotation drill (docs/ad-server.md, "Rotating a key"), on TokenKeys and through the tracker's
HTTP app: key A signs; B is added as a verifier, then signs while A still verifies; A is retired, and from then
on what A signed is refused as unknown_key (403 at the tracker, counted), while B's tokens keep working.

Each phase is a restart with a new ADSERVE_TOKEN_KEYS, so each builds its keys with TokenKeys.from_spec."""
from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from aiohttp.test_utils import TestClient, TestServer

from core.tokens import ClickIdClaims, InvalidToken, TokenClaims, TokenKeys
from serving.tracker import Tracker

NOW = 1_800_000_000_000
SECRET_A, SECRET_B = "rotation-secret-a-0123456789", "rotation-secret-b-9876543210"
ONLY_A = f"a:{SECRET_A}"                  # before the drill
A_SIGNS_B_VERIFIES = f"a:{SECRET_A},b:{SECRET_B}"  # step 1: the trackers learn B
B_SIGNS_A_VERIFIES = f"b:{SECRET_B},a:{SECRET_A}"  # step 2: everyone signs with B
ONLY_B = f"b:{SECRET_B}"                  # step 3: A retired
CLAIMS = TokenClaims(impression_id="req-1:1", ad_id=11, campaign_id=3, price_micros=1_400_000, billing="CLICK",
                     landing_url="https://shop.example/landing", expires_ms=NOW + 3_600_000, served_ms=NOW - 1_000)
CLICK = ClickIdClaims(impression_id="req-1:1", ad_id=11, campaign_id=3, served_ms=NOW - 1_000, click_ms=NOW - 500,
                      expires_ms=NOW + 7 * 86_400_000)


def test_each_spec_signs_with_its_first_key_and_verifies_with_all():
    assert [TokenKeys.from_spec(spec).active for spec in (ONLY_A, A_SIGNS_B_VERIFIES, B_SIGNS_A_VERIFIES, ONLY_B)] \
        == ["a", "a", "b", "b"]
    assert set(TokenKeys.from_spec(B_SIGNS_A_VERIFIES).keys) == {"a", "b"}


def test_a_token_signed_with_a_verifies_through_the_rotation_until_a_is_retired():
    token_a = TokenKeys.from_spec(ONLY_A).sign(CLAIMS)
    for spec in (A_SIGNS_B_VERIFIES, B_SIGNS_A_VERIFIES):
        assert TokenKeys.from_spec(spec).verify(token_a, NOW).key_id == "a"
    with pytest.raises(InvalidToken) as refused:
        TokenKeys.from_spec(ONLY_B).verify(token_a, NOW)
    assert refused.value.reason == "unknown_key"


def test_tokens_signed_with_b_verify_wherever_b_is_known_and_only_there():
    token_b = TokenKeys.from_spec(B_SIGNS_A_VERIFIES).sign(CLAIMS)
    for spec in (A_SIGNS_B_VERIFIES, B_SIGNS_A_VERIFIES, ONLY_B):
        assert TokenKeys.from_spec(spec).verify(token_b, NOW).key_id == "b"
    with pytest.raises(InvalidToken) as refused:  # why step 1 comes first: a tracker without B refuses it
        TokenKeys.from_spec(ONLY_A).verify(token_b, NOW)
    assert refused.value.reason == "unknown_key"


def test_a_click_id_signed_with_a_reports_its_conversion_until_a_is_retired():
    click_a = TokenKeys.from_spec(ONLY_A).sign_click_id(CLICK)
    assert TokenKeys.from_spec(B_SIGNS_A_VERIFIES).verify_click_id(click_a, NOW).key_id == "a"
    with pytest.raises(InvalidToken) as refused:
        TokenKeys.from_spec(ONLY_B).verify_click_id(click_a, NOW)
    assert refused.value.reason == "unknown_key"


def test_a_token_naming_b_but_signed_with_the_retired_secret_is_refused_as_a_bad_signature():
    only_b = TokenKeys.from_spec(ONLY_B)
    forged_as_b = TokenKeys({"b": SECRET_A.encode()}, active="b").sign(CLAIMS)
    with pytest.raises(InvalidToken) as refused:
        only_b.verify(forged_as_b, NOW)
    assert refused.value.reason == "bad_signature"


def _tracker_phase(spec: str, requests: list[tuple[str, dict[str, str]]]) -> tuple[list[int], dict[str, float], int]:
    """A tracker restarted with `spec`, asked each (path, query): (statuses, rejections by reason, records)."""
    produced: list = []
    tracker = Tracker(TokenKeys.from_spec(spec), lambda *record: produced.append(record), clock=lambda: NOW / 1000)

    async def scenario() -> list[int]:
        async with TestClient(TestServer(tracker.app())) as client:
            statuses = []
            for path, query in requests:
                async with client.get(path, params=query, allow_redirects=False) as r:
                    await r.read()
                    statuses.append(r.status)
            return statuses
    statuses = asyncio.run(scenario())
    rejected = {s.labels["reason"]: s.value for m in tracker.rejected.collect() for s in m.samples
                if s.name.endswith("_total")}
    return statuses, rejected, len(produced)


def test_the_drill_through_the_tracker():
    token_a = TokenKeys.from_spec(ONLY_A).sign(CLAIMS)
    click_a = TokenKeys.from_spec(ONLY_A).sign_click_id(CLICK)
    token_b = TokenKeys.from_spec(B_SIGNS_A_VERIFIES).sign(replace(CLAIMS, impression_id="req-2:1"))
    beacons = [("/v1/impression", {"t": token_a}), ("/v1/click", {"t": token_a}), ("/v1/conversion", {"c": click_a}),
               ("/v1/impression", {"t": token_b}), ("/v1/click", {"t": token_b})]

    # before step 1 a tracker knows only A: B's tokens would be refused (so B must not sign yet)
    assert _tracker_phase(ONLY_A, beacons) == ([204, 302, 204, 403, 403], {"unknown_key": 2.0}, 3)
    # steps 1 and 2: both keys verify, so every beacon counts whichever key signed it
    for spec in (A_SIGNS_B_VERIFIES, B_SIGNS_A_VERIFIES):
        assert _tracker_phase(spec, beacons) == ([204, 302, 204, 204, 302], {}, 5)
    # step 3: A retired; what A signed is refused as unknown_key (403) and produces nothing
    assert _tracker_phase(ONLY_B, beacons) == ([403, 403, 403, 204, 302], {"unknown_key": 3.0}, 2)


def test_after_the_rotation_the_tracker_signs_click_ids_with_b():
    produced: list = []
    tracker = Tracker(TokenKeys.from_spec(B_SIGNS_A_VERIFIES), lambda *record: produced.append(record),
                      clock=lambda: NOW / 1000)
    token_a = TokenKeys.from_spec(ONLY_A).sign(CLAIMS)

    async def scenario() -> str:
        async with TestClient(TestServer(tracker.app())) as client:
            async with client.get("/v1/click", params={"t": token_a}, allow_redirects=False) as r:
                return r.headers["Location"]
    location = asyncio.run(scenario())
    click_id = location.split("adclid=", 1)[1]
    assert TokenKeys.from_spec(ONLY_B).verify_click_id(click_id, NOW).key_id == "b"  # survives A's retirement
