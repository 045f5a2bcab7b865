"""Consent: a signal the user did not consent to never becomes a targeting term, a model feature or a logged
feature, and never reaches the user's features or a training example. The ad server runs in process on a
profile store that hands out the whole profile whatever it is asked (so only the server's own gating keeps the
signals out), with an ad for each profile signal; the same request with consent shows each signal does get
through, so every check here can fail."""
from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import numpy as np
from aiohttp.test_utils import TestServer

from core import feature_inputs, training
from core.audiences import AudienceSalt, request_member_keys, upload_hash
from core.targeting import request_terms
from core.tokens import TokenKeys
from schemas import topics
from serving.adserver.app import AdServer, RequestPathParts, ServerConfig
from serving.adserver.request import parse_ad_request, targeting_terms
from serving.adserver.state import ServingState
from serving.frequency_store import UserContext, UserStore
from streams import redis_keys
from tests.factories import ServedLogStandIn
from tests.redis_doubles import Pipelined

PLACEMENT = "consent-test"
SALT = AudienceSalt(b"consent-test-audience-salt-0123")
DEVICE = "6d92078a-8246-4ba4-ae5b-76104861e7dc"
EMAIL_SHA256 = upload_hash("jane@example.com")
PROFILE = {"age_band": "25-34", "gender": "female", "interests": "hiking", "audiences": "newsletter",
           "locations": "US/CA/San Francisco", "hidden_advertisers": "99",
           "features": json.dumps({"clicks_window": 3.0}), "embedding": ",".join(["0.5"] * 8)}
# One ad per profile signal (each its own campaign, so one page can show them all) and the terms it needs.
SIGNAL_ADS = {10: ("interest", "hiking"), 11: ("audience", "aud-7"), 12: ("age_band", "25-34"),
              13: ("gender", "female"), 14: ("audience", "newsletter"), 15: ("location", "US/CA")}


class WholeProfileStore:
    """A user store that returns the whole profile and the custom audience "aud-7" for any read, and records
    what it was asked: only the server's gating can keep these signals out of a request without consent."""

    def __init__(self) -> None:
        self.reads: list[dict[str, Any]] = []

    async def read(self, user_id, member_keys=None, *, profile=True) -> UserContext:
        self.reads.append({"user_id": user_id, "member_keys": list(member_keys or []), "profile": profile})
        return UserContext(profile=dict(PROFILE), frequency=None, custom_audiences=["aud-7"])

    async def record_served(self, user_id, campaign_ids, today) -> int:
        return len(campaign_ids)

    async def close(self) -> None:
        return None


def _state() -> ServingState:
    state = ServingState("consent-test")
    for ad_id, (attribute, value) in SIGNAL_ADS.items():
        campaign_id = ad_id
        state.apply(topics.SERVING_CAMPAIGNS, {
            "campaign_id": campaign_id, "advertiser_id": campaign_id, "version": 1, "event_time": 1_000,
            "status": "ACTIVE", "bid_type": "CPM", "daily_budget_micros": 10**9, "currency": "USD",
            "timezone": "UTC", "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None,
            "cap_per_week": None, "cpa_target_micros": None}, 2_000)
        state.apply(topics.SERVING_ADS, {
            "ad_id": ad_id, "campaign_id": campaign_id, "advertiser_id": campaign_id, "version": 1,
            "event_time": 1_000, "removed": False, "bid_type": "CPM", "bid_micros": 5_000_000 + ad_id,
            "quality_prior": 0.0, "creative_ref": f"c{ad_id}", "landing_url": "https://x.example/",
            "static_score": 1.0, "targeting": [
                {"attribute": "placement", "values": [PLACEMENT], "excluded": False},
                {"attribute": attribute, "values": [value], "excluded": False}]}, 2_000)
    return state


def _serve(consent: bool, slots: int = 3) -> dict[str, Any]:
    """One request of the user through the in-process server: what the store was asked, the decision's input,
    the answer and the served record."""
    async def scenario() -> dict[str, Any]:
        store, served = WholeProfileStore(), ServedLogStandIn()
        server = AdServer(ServerConfig(server_id="consent-test"), _state(), store,  # type: ignore[arg-type]
                          TokenKeys({"k1": b"0" * 32}, "k1"), served_log=served, ready=lambda: True,
                          parts=RequestPathParts(audience_salt=SALT))
        contexts = []
        decide = server.engine.decide

        def recording(context, **kwargs):
            contexts.append(context)
            return decide(context, **kwargs)
        server.engine.decide = recording  # type: ignore[method-assign]
        test_server = TestServer(server.app())
        await test_server.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                body = {"request_id": f"r-{consent}", "user_id": "u-1", "device_id": DEVICE,
                        "email_sha256": EMAIL_SHA256, "consent": {"personalization": consent},
                        "placement": PLACEMENT, "slots": [{"position": p} for p in range(1, slots + 1)]}
                async with session.post(test_server.make_url("/v1/ads"), json=body) as r:
                    answer = await r.json()
                    assert r.status == 200, answer
            await server.drain()
        finally:
            await test_server.close()
        return {"reads": store.reads, "context": contexts[0], "answer": answer, "served": served.records[0]}
    return asyncio.run(scenario())


def _served_ads(answer: dict[str, Any]) -> set[int]:
    return {s["ad_id"] for s in answer["slots"] if "ad_id" in s}


PROFILE_ATTRIBUTES = {"age_band", "gender", "interest", "audience", "location"}


def test_without_consent_no_profile_signal_becomes_a_targeting_term():
    terms = _serve(consent=False)["context"].terms
    assert not PROFILE_ATTRIBUTES & set(terms)
    assert set(terms) == {"placement"}  # the context the request itself carried


def test_with_consent_every_profile_signal_and_the_custom_audience_become_terms():
    terms = _serve(consent=True)["context"].terms
    assert terms["interest"] == {"hiking"} and terms["audience"] == {"newsletter", "aud-7"}
    assert terms["age_band"] == {"25-34"} and terms["gender"] == {"female"} and "US/CA" in terms["location"]


def test_without_consent_no_custom_audience_and_no_profile_is_even_looked_up():
    assert _serve(consent=False)["reads"] == [{"user_id": "u-1", "member_keys": [], "profile": False}]
    assert _serve(consent=True)["reads"] == [{
        "user_id": "u-1", "profile": True,
        "member_keys": request_member_keys(SALT, device_id=DEVICE, email_sha256=EMAIL_SHA256)}]


def test_without_consent_the_model_sees_no_user_feature_embedding_or_hidden_advertiser():
    context = _serve(consent=False)["context"]
    assert context.user_features == {} and context.user_embedding is None
    assert context.filters.hidden_advertisers == frozenset()
    consented = _serve(consent=True)["context"]
    assert consented.user_features == {"clicks_window": 3.0}
    assert consented.user_embedding is not None and np.allclose(consented.user_embedding, 0.5)
    assert consented.filters.hidden_advertisers == frozenset({99})


def test_without_consent_no_ad_that_needs_a_profile_signal_is_served():
    assert _served_ads(_serve(consent=False)["answer"]) == set()
    assert len(_served_ads(_serve(consent=True)["answer"]) & set(SIGNAL_ADS)) == 3  # three slots, all filled


def test_with_consent_the_custom_audience_ad_is_served_and_without_it_not():
    assert _serve_with_only_the_custom_audience(consent=True) == {11}
    assert _serve_with_only_the_custom_audience(consent=False) == set()


def _serve_with_only_the_custom_audience(consent: bool) -> set[int]:
    """Serve the user with an empty profile: only the custom audience "aud-7" (ad 11) can match."""
    saved = dict(PROFILE)
    try:
        PROFILE.clear()
        return _served_ads(_serve(consent=consent)["answer"])
    finally:
        PROFILE.update(saved)


def test_without_consent_the_served_record_logs_no_user_feature():
    record = _serve(consent=False)["served"]
    assert record["user_features"] == {}
    assert _serve(consent=True)["served"]["user_features"] == {"clicks_window": 3.0}


def test_a_request_without_consent_reaches_neither_the_users_features_nor_a_training_example():
    record = {**_serve(consent=False)["served"], "winners": _serve(consent=True)["served"]["winners"]}
    assert feature_inputs.user_served_inputs(record) == []  # the features job learns nothing of the user
    assert all(c["user_features"] == {} for c in training.impressions_of(record))
    consented = _serve(consent=True)["served"]
    assert feature_inputs.user_served_inputs(consented) and \
        all(c["user_features"] == {"clicks_window": 3.0} for c in training.impressions_of(consented))


def test_the_rule_alone_keeps_context_and_drops_the_profile():
    profile = {"interests": ["hiking"], "audiences": ["aud-7"], "age_band": ["25-34"], "gender": ["female"],
               "locations": ["US/CA"]}
    base = {"placement": "feed", "slots": [{"position": 1}], "device": "ios", "language": "en"}
    without = targeting_terms(parse_ad_request(base), None, profile)
    assert without == request_terms(placement="feed", device="ios", language=["en"])
    with_consent = targeting_terms(parse_ad_request({**base, "consent": {"personalization": True}}), None, profile)
    assert PROFILE_ATTRIBUTES <= set(with_consent)


def test_a_store_read_without_consent_fetches_only_the_frequency_record():
    class RecordingRedis(Pipelined):
        def __init__(self) -> None:
            self.keys: list[str] = []

        async def hgetall(self, key: str) -> dict:
            self.keys.append(key)
            return {b"interests": b"hiking"} if key.startswith(redis_keys.USER_PROFILE_PREFIX) else {}

    async def read(profile: bool) -> tuple[list[str], UserContext]:
        store = UserStore("127.0.0.1", 1, read_timeout_s=5.0)
        store.redis = RecordingRedis()  # type: ignore[assignment]
        context = await store.read("u-1", [], profile=profile)
        return store.redis.keys, context  # type: ignore[attr-defined]

    keys, context = asyncio.run(read(profile=False))
    assert keys == [redis_keys.frequency_record("u-1")] and context.profile == {}
    keys, context = asyncio.run(read(profile=True))
    assert sorted(keys) == sorted([redis_keys.frequency_record("u-1"), redis_keys.user_profile("u-1")])
    assert context.values("interests") == ["hiking"]


def test_the_server_makes_the_request_and_impression_ids_and_only_echoes_the_clients_request_id():
    first, second = _serve(consent=True), _serve(consent=True)  # both sent request_id "r-True"
    ids = [served["answer"]["request_id"] for served in (first, second)]
    assert ids[0] != ids[1] and "r-True" not in ids
    assert [served["answer"]["client_request_id"] for served in (first, second)] == ["r-True", "r-True"]
    impressions = [s["impression_id"] for served in (first, second) for s in served["answer"]["slots"]
                   if "impression_id" in s]
    assert len(impressions) == len(set(impressions)) >= 2
    assert all(served["served"]["request_id"] == served["answer"]["request_id"] for served in (first, second))


def test_every_token_carries_the_users_pseudonymous_key_and_never_the_raw_id():
    import base64
    import time

    keys = TokenKeys({"k1": b"0" * 32}, "k1")
    answer = _serve(consent=True)["answer"]
    tokens = [s["token"] for s in answer["slots"] if "token" in s]
    assert tokens
    for token in tokens:
        claims = keys.verify(token, int(time.time() * 1000))
        assert claims.user_key == keys.user_key("u-1") and len(claims.user_key) == 32
        payload = base64.urlsafe_b64decode(token.split(".")[0] + "==")
        assert b"u-1" not in payload
    assert keys.user_key("u-1") != keys.user_key("u-2")
    assert TokenKeys({"k2": b"1" * 32}, "k2").user_key("u-1") != keys.user_key("u-1")  # unlinkable across keys
