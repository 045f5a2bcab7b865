"""Custom audiences on real PostgreSQL and Redis: an advertiser uploads hashed ids through the advertiser API,
an ad targeting the audience reaches exactly its members (matched on the salted hash of the request's email
hash or device id, with consent only), another advertiser can neither see nor target it, and neither store
holds the clear email or even the hash the advertiser sent."""
from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from core.audiences import MIN_AUDIENCE_MEMBERS, AudienceSalt, normalise_device_id, normalise_email, upload_hash
from core.tokens import TokenKeys
from schemas import topics
from serving.adserver.app import AdServer, RequestPathParts, ServerConfig
from serving.adserver.state import ServingState
from serving.advertiser.api import start_advertiser_api
from serving.advertiser.audiences import AudienceMembers
from serving.advertiser.store import migrate
from serving.frequency_store import UserStore
from streams import redis_keys
from tests.factories import ServedLogStandIn

PLACEMENT = "custom-audience-test"
SCAN_BATCH = 1_000


def _state(ad_id: int, audience_value: str) -> ServingState:
    """An ad server's state holding one ad that targets the placement and the audience (as the index builder
    compiles the ad the API stored)."""
    state = ServingState("audience-test")
    state.apply(topics.SERVING_CAMPAIGNS, {
        "campaign_id": ad_id, "advertiser_id": 1, "version": 1, "event_time": 1_000, "status": "ACTIVE",
        "bid_type": "CPM", "daily_budget_micros": 10**9, "currency": "USD", "timezone": "UTC", "flight_start": None,
        "flight_end": None, "dayparts": [], "cap_per_day": None, "cap_per_week": None, "cpa_target_micros": None},
        2_000)
    state.apply(topics.SERVING_ADS, {
        "ad_id": ad_id, "campaign_id": ad_id, "advertiser_id": 1, "version": 1, "event_time": 1_000,
        "removed": False, "bid_type": "CPM", "bid_micros": 5_000_000, "quality_prior": 0.0, "creative_ref": "c",
        "landing_url": "https://audience.example/", "static_score": 1.0,
        "targeting": [{"attribute": "placement", "values": [PLACEMENT], "excluded": False},
                      {"attribute": "audience", "values": [audience_value], "excluded": False}]}, 2_000)
    return state


async def _redis_holds(redis, needles: list[bytes]) -> list[str]:
    """Every Redis key whose name or value contains one of the needles (any case): the whole keyspace."""
    found = []
    lowered = [n.lower() for n in needles]
    keys = [k async for k in redis.scan_iter(count=SCAN_BATCH)]
    for start in range(0, len(keys), SCAN_BATCH):
        batch = keys[start:start + SCAN_BATCH]
        pipe = redis.pipeline(transaction=False)
        for key in batch:
            pipe.type(key)
        kinds = await pipe.execute()
        pipe = redis.pipeline(transaction=False)
        readers = {b"string": pipe.get, b"hash": pipe.hgetall, b"set": pipe.smembers,
                   b"list": lambda k: pipe.lrange(k, 0, -1), b"zset": lambda k: pipe.zrange(k, 0, -1)}
        read = [(key, readers[kind](key)) for key, kind in zip(batch, kinds) if kind in readers]
        values = await pipe.execute()
        for (key, _), value in zip(read, values):
            text = key + b" " + repr(value).encode()
            if any(n in text.lower() for n in lowered):
                found.append(key.decode(errors="replace"))
    return found


# the rest of an audience large enough to be matched (core.audiences.MIN_AUDIENCE_MEMBERS)
FILLER = [upload_hash(f"filler-{n}-{uuid.uuid4().hex}@example.com") for n in range(MIN_AUDIENCE_MEMBERS - 2)]


async def _member_count(members: AudienceMembers, salt: AudienceSalt, uploaded_hash: str) -> int:
    """How many audiences the ad servers would match this member in (its Redis set's size)."""

    return await members.redis.scard(redis_keys.audience_member(salt.member_key(uploaded_hash)))


def test_an_uploaded_audience_targets_its_members_only_and_no_clear_id_is_stored(platform):
    migrate(platform.postgres_dsn)
    run = uuid.uuid4().hex[:10]
    email = f"  Jane.Doe+{run}@Example.COM "
    email_hash = upload_hash(normalise_email(email))
    device = f"6D92078A-8246-4BA4-AE5B-{run.upper():0>12}"[:60]
    device_hash = upload_hash(normalise_device_id(device))
    stranger_hash = upload_hash(normalise_email(f"someone.else+{run}@example.com"))
    salt = AudienceSalt(f"integration-audience-salt-{run}".encode())

    async def scenario() -> dict[str, Any]:
        members = AudienceMembers(platform.host, platform.redis_port, salt)
        runner, port, store = await start_advertiser_api(platform.postgres_dsn, port=0, audience_members=members)
        base = f"http://127.0.0.1:{port}"
        user_store = UserStore(platform.host, platform.redis_port, read_timeout_s=5.0)
        out: dict[str, Any] = {}
        try:
            _, owner = await store.create_advertiser(f"audience-owner-{run}")
            _, other = await store.create_advertiser(f"audience-other-{run}")
            async with ClientSession() as http:
                async def call(method: str, path: str, key: str, body: Any = None) -> tuple[int, Any]:
                    async with http.request(method, base + path, json=body,
                                            headers={"Authorization": f"Bearer {key}"}) as r:
                        return r.status, await r.json()

                status, audience = await call("POST", "/v1/audiences", owner, {"name": "newsletter"})
                assert status == 201, audience
                path = f"/v1/audiences/{audience['audience_id']}"
                out["clear"] = await call("POST", f"{path}/members", owner, {"hashed_ids": [device_hash, email]})
                out["upload"] = await call("POST", f"{path}/members", owner, {"hashed_ids": [email_hash, device_hash]})
                out["small_member_count"] = await _member_count(members, salt, email_hash)
                out["filled"] = await call("POST", f"{path}/members", owner, {"hashed_ids": FILLER})
                out["again"] = await call("POST", f"{path}/members", owner, {"hashed_ids": [email_hash.upper()]})
                out["other_get"] = (await call("GET", path, other))[0]
                out["other_upload"] = (await call("POST", f"{path}/members", other, {"hashed_ids": [stranger_hash]}))[0]
                out["other_list"] = (await call("GET", "/v1/audiences", other))[1]
                targeting = {"placement": [PLACEMENT], "audience": [audience["targeting_value"]]}
                ad = {"creative_ref": "c", "landing_url": "https://audience.example/", "bid_micros": 1_000_000,
                      "targeting": targeting}
                campaign = {"name": "c", "bid_type": "CPM", "daily_budget_micros": 1_000_000, "timezone": "UTC"}
                for who, key in (("owner", owner), ("other", other)):
                    _, created = await call("POST", "/v1/campaigns", key, campaign)
                    out[f"{who}_ad"] = await call("POST", f"/v1/campaigns/{created['campaign_id']}/ads", key, ad)
                out["audience"] = (await call("GET", path, owner))[1]

            server = AdServer(ServerConfig(server_id="audience-test"), _state(90_001, audience["targeting_value"]),
                              user_store, TokenKeys({"k1": b"0" * 32}, "k1"), served_log=ServedLogStandIn(),
                              ready=lambda: True, parts=RequestPathParts(audience_salt=salt))
            test_server = TestServer(server.app())
            await test_server.start_server()
            try:
                async with ClientSession() as http:
                    async def served(consent: bool, **ids: str) -> bool:
                        body = {"placement": PLACEMENT, "slots": [{"position": 1}],
                                "consent": {"personalization": consent}, **ids}
                        async with http.post(test_server.make_url("/v1/ads"), json=body) as r:
                            answer = await r.json()
                            assert r.status == 200, answer
                        return answer["slots"][0].get("ad_id") == 90_001

                    out["served"] = {
                        "member by email hash": await served(True, user_id=f"u-{run}", email_sha256=email_hash),
                        "member by device id": await served(True, device_id=device),  # upper case: normalised
                        "member without consent": await served(False, user_id=f"u-{run}", email_sha256=email_hash),
                        "stranger": await served(True, user_id=f"s-{run}", email_sha256=stranger_hash),
                        "anonymous": await served(True)}
                    # (a request's device id keys its frequency record, `fc:{id}`, as any user id does: not an
                    # upload)
                    needles = [email.strip().encode(), normalise_email(email).encode(), email_hash.encode(),
                               device_hash.encode()]
                    out["redis"] = await _redis_holds(user_store.redis, needles)
                    # the same scan does find what is stored: the salted key of the email's hash
                    out["redis_control"] = await _redis_holds(user_store.redis,
                                                              [salt.member_key(email_hash).encode()])
                    # one member leaves: the audience falls under the minimum and matches no one
                    async with http.post(f"{base}{path}/members/remove", json={"hashed_ids": [FILLER[0]]},
                                         headers={"Authorization": f"Bearer {owner}"}) as r:
                        out["removed"] = (r.status, await r.json())
                    out["served_under_minimum"] = await served(True, user_id=f"u-{run}", email_sha256=email_hash)
                await server.drain()
            finally:
                await test_server.close()
            out["unlinked"] = await _redis_holds(user_store.redis, [salt.member_key(email_hash).encode()])
        finally:
            await user_store.close()
            await runner.cleanup()
            await store.close()
        return out

    out = asyncio.run(scenario())
    status, refused = out["clear"]
    assert status == 400 and refused["field"] == "hashed_ids[1]" and "clear email" in refused["error"]
    assert out["upload"] == (200, {"audience_id": out["audience"]["audience_id"], "received": 2, "added": 2,
                                   "member_count": 2, "serving": False, "min_members": MIN_AUDIENCE_MEMBERS,
                                   "targeting_value": out["audience"]["targeting_value"]})
    assert out["small_member_count"] == 0  # two people are stored, and matched by nobody
    assert out["filled"][1]["member_count"] == MIN_AUDIENCE_MEMBERS and out["filled"][1]["serving"]
    assert out["again"][1]["added"] == 0 and out["audience"]["member_count"] == MIN_AUDIENCE_MEMBERS
    assert out["audience"]["live"] is True
    assert out["removed"][0] == 200 and out["removed"][1]["removed"] == 1
    assert (out["removed"][1]["member_count"], out["removed"][1]["serving"]) == (MIN_AUDIENCE_MEMBERS - 1, False)
    assert out["served_under_minimum"] is False
    assert out["other_get"] == 404 and out["other_upload"] == 404 and out["other_list"] == []
    assert out["owner_ad"][0] == 201
    assert out["other_ad"][0] == 400 and out["other_ad"][1]["field"] == "targeting.audience"
    assert out["served"] == {"member by email hash": True, "member by device id": True,
                             "member without consent": False, "stranger": False, "anonymous": False}
    assert out["redis"] == []
    assert out["redis_control"] == [redis_keys.audience_member(salt.member_key(email_hash))]
    assert out["unlinked"] == []  # under the minimum, no member's set names the audience any more

    audience_id = out["audience"]["audience_id"]
    with psycopg.connect(platform.postgres_dsn) as conn:
        stored = {bytes(r[0]).hex() for r in conn.execute(
            "SELECT member_key FROM audience_members WHERE audience_id = %s", (audience_id,))}
        holding = conn.execute(
            "SELECT count(*) FROM audience_members WHERE member_key = ANY(%s) "
            "OR position(%s in encode(member_key, 'escape')) > 0",
            ([bytes.fromhex(email_hash), bytes.fromhex(device_hash)], normalise_email(email))).fetchone()[0]
        rows_with_email = conn.execute(
            "SELECT count(*) FROM audiences a WHERE position(lower(%s) in lower(a::text)) > 0 "
            "OR position(%s in a::text) > 0", (normalise_email(email), email_hash)).fetchone()[0]
    assert stored == {salt.member_key(h) for h in (email_hash, device_hash, *FILLER[1:])}
    assert holding == 0 and rows_with_email == 0
