"""Auction integrity on the real path (advertiser API -> PostgreSQL -> Debezium -> the index builder on Flink ->
two running ad servers), with the operator's `adserve` commands: advertisers set only what is theirs, review
belongs to the platform, reserves are live, and every endpoint answers each kind of caller as it should."""
from __future__ import annotations

import asyncio
import json
import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from aiohttp import ClientSession

from core.audiences import AudienceSalt
from core.reserves import PLATFORM_TERMS
from schemas import topics
from serving.advertiser.api import AdvertiserApi, start_advertiser_api
from serving.advertiser.audiences import AudienceMembers
from serving.advertiser.store import MIGRATIONS, migrate
from tests.integration.campaign_world import KEYS, REVIEWER, World, adserve, winner

CPC = {"bid_type": "CPC", "daily_budget_micros": 1_000_000_000, "timezone": "UTC"}


def charge(answer: dict) -> tuple[int, int] | None:
    """(ad id, charge per billable event signed into its token) of the first filled slot, or None."""
    slot = winner(answer)
    return None if slot is None else (slot["ad_id"], KEYS.verify(slot["token"], int(time.time() * 1000)).price_micros)


async def ok(*args: str) -> str:
    done = await adserve(*args)
    assert done.returncode == 0, f"adserve {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def test_an_advertiser_cannot_set_quality_or_review_and_the_free_win_cannot_happen(platform, index_builder):
    placement = f"ai-{uuid.uuid4().hex[:8]}"

    async def scenario():
        async with World(platform) as w:
            cheat, honest = await w.advertiser(), await w.advertiser()
            _, cheat_c = await w.call("POST", "/v1/campaigns", cheat, {"name": "cheat", **CPC})
            ad = {"creative_ref": "c", "landing_url": "https://cheat.example/", "bid_micros": 10_000,
                  "targeting": {"placement": [placement]}}
            ads = f"/v1/campaigns/{cheat_c['campaign_id']}/ads"
            refused = [await w.call("POST", ads, cheat, {**ad, "quality_prior": 1_000_000}),
                       await w.call("POST", ads, cheat, {**ad, "review_status": "APPROVED"})]
            status, cheat_ad = await w.call("POST", ads, cheat, ad)
            assert status == 201 and cheat_ad["review_status"] == "PENDING"
            refused += [await w.call("PATCH", f"/v1/ads/{cheat_ad['ad_id']}", cheat, {"quality_prior": 1_000_000}),
                        await w.call("PATCH", f"/v1/ads/{cheat_ad['ad_id']}", cheat, {"review_status": "APPROVED"})]
            _, honest_c = await w.call("POST", "/v1/campaigns", honest, {"name": "honest", **CPC})
            _, honest_ad = await w.call("POST", f"/v1/campaigns/{honest_c['campaign_id']}/ads", honest,
                                        {**ad, "landing_url": "https://honest.example/", "bid_micros": 5_000_000})

            def both_pending_applied() -> bool:
                return all(w.applied(topics.SERVING_ADS, a["ad_id"], 1) for a in (cheat_ad, honest_ad))
            await w.until(both_pending_applied, "the pending ads reaching the servers")
            before_review = [charge(await w.ask(s, placement)) for s in w.servers]
            for a in (cheat_ad, honest_ad):
                await ok("ads", "review", "approve", str(a["ad_id"]), "--version", "1")

            async def honest_wins() -> bool:
                return all([(charge(await w.ask(s, placement)) or (None,))[0] == honest_ad["ad_id"]
                            for s in w.servers])
            await w.until(honest_wins, "both servers serving the approved ads")
            won = [charge(await w.ask(s, placement)) for s in w.servers]
            quality = [s.server.state.index.quality_micros.data[s.server.state.index.row_of(cheat_ad["ad_id"])]
                       for s in w.servers]
            return refused, before_review, won, quality, await w.call("GET", f"/v1/ads/{cheat_ad['ad_id']}", cheat)

    refused, before_review, won, quality, (_, cheat_view) = asyncio.run(scenario())
    assert [(status, body["field"]) for status, body in refused] == [
        (400, "quality_prior"), (400, "review_status"), (400, "quality_prior"), (400, "review_status")]
    assert before_review == [None, None]  # nothing serves before review
    # HONEST ($5 a click) wins and pays what CHEAT's $0.01 bid is worth, never $0; CHEAT's quality is the
    # platform's (0), not the 1,000,000 it asked for
    assert all(price >= 10_000 for _, price in won) and quality == [0, 0]
    assert cheat_view["quality_prior"] == 0 and cheat_view["review_status"] == "APPROVED"
    assert "reviewed_by" not in cheat_view  # the reviewer's name stays inside the platform


def test_a_lone_bidder_pays_the_reserve_the_operator_sets_and_every_server_follows(platform, index_builder):
    placement = f"ai-{uuid.uuid4().hex[:8]}"
    us, de = "US/CA/San Francisco", "DE/BE/Berlin"

    async def scenario():
        async with World(platform) as w:
            auth = await w.advertiser()
            _, ad = await w.campaign_with_ad(auth, placement, 5_000_000)  # $5 CPM: 5,000 micros an impression
            seen = []

            async def step(expect_us, expect_de, *command) -> None:
                if command:
                    await ok("reserves", *command)
                began = time.monotonic()

                async def everywhere() -> bool:
                    return all([(charge(await w.ask(s, placement, us)) or (0, None))[1] == expect_us and
                                (charge(await w.ask(s, placement, de)) or (0, None))[1] == expect_de
                                for s in w.servers])
                await w.until(everywhere, f"{command or 'the ad'}: US pays {expect_us}, DE pays {expect_de}")
                seen.append((command, round(time.monotonic() - began, 2)))

            built_in = PLATFORM_TERMS.reserve_micros
            await step(built_in, built_in)  # alone, it pays the platform's reserve, never $0
            await step(1_234, built_in, "set", "--placement", placement, "--country", "US", "--reserve-micros", "1234")
            await step(None, None, "set", "--placement", placement, "--quality-floor-micros", "1")  # quality 0 < 1
            await step(1_234, built_in, "set", "--placement", placement, "--default-quality-micros", "5")
            await step(None, built_in, "set", "--placement", placement, "--country", "US",
                       "--reserve-micros", "6000")  # above what the bid pays an impression: the slot stays empty
            await step(built_in, built_in, "unset", "--placement", placement, "--country", "US")
            listed = json.loads((await ok("reserves", "list")).split("\n", 1)[1])
            return seen, [r for r in listed if r["placement"] == placement]

    seen, rules = asyncio.run(scenario())
    print("seconds from each command to both servers applying it:", seen)
    assert all(waited < 60 for _, waited in seen)
    assert [(r["country"], r["reserve_micros"], r["quality_floor_micros"], r["default_quality_micros"], r["set_by"])
            for r in rules] == [("*", None, 1, 5, REVIEWER)]


def test_a_pending_ad_is_never_served_and_a_change_to_what_review_approved_sends_it_back(platform, index_builder):
    placement = f"ai-{uuid.uuid4().hex[:8]}"

    async def scenario():
        async with World(platform) as w:
            auth = await w.advertiser()
            _, ad = await w.campaign_with_ad(auth, placement, 4_000_000, approve=False)
            ad_id = ad["ad_id"]

            async def served_nowhere(version: int) -> list:
                await w.until(lambda: w.applied(topics.SERVING_ADS, ad_id, version),
                              f"version {version} reaching both servers")
                answers = [charge(await w.ask(s, placement)) for s in w.servers for _ in range(5)]
                rows = [s.server.state.index.row_of(ad_id) for s in w.servers]
                return [a for a in answers if a is not None] + [r for r in rows if r is not None]

            leaks = {"pending": await served_nowhere(1)}
            listed = json.loads(await ok("ads", "review", "list", "--limit", "100000"))
            await ok("ads", "review", "reject", str(ad_id), "--version", "1", "--reason", "blurry creative")
            leaks["rejected"] = await served_nowhere(2)
            _, rejected_view = await w.call("GET", f"/v1/ads/{ad_id}", auth)
            stale = await adserve("ads", "review", "approve", str(ad_id), "--version", "1")
            await ok("ads", "review", "approve", str(ad_id), "--version", "2")

            async def served_everywhere() -> bool:
                return all([(charge(await w.ask(s, placement)) or (None,))[0] == ad_id for s in w.servers])
            await w.until(served_everywhere, "the approved ad serving on both servers")
            status, changed = await w.call("PATCH", f"/v1/ads/{ad_id}", auth, {"creative_ref": "new-creative"})
            assert status == 200
            leaks["changed"] = await served_nowhere(changed["version"])
            return leaks, listed, rejected_view, stale, changed, await w.store.review_history(ad_id)

    leaks, listed, rejected_view, stale, changed, history = asyncio.run(scenario())
    assert leaks == {"pending": [], "rejected": [], "changed": []}
    assert any(r["ad_id"] == history[0]["ad_id"] and r["review_status"] == "PENDING" for r in listed)
    assert (rejected_view["review_status"], rejected_view["review_note"]) == ("REJECTED", "blurry creative")
    assert stale.returncode == 3 and "changed since version 1" in stale.stdout
    assert (changed["review_status"], changed["version"]) == ("PENDING", 4)
    assert [(h["ad_version"], h["decision"], h["reviewer"]) for h in history] == \
        [(1, "REJECTED", REVIEWER), (2, "APPROVED", REVIEWER)]
    assert all(h["decided_at"] is not None for h in history)


# ------------------------------------------------------------------------------------------ authorization

CALLERS = ("no key", "revoked key", "another advertiser's key", "the owner's key")
DENIED = {"no key": 401, "revoked key": 401, "another advertiser's key": 404}
CAMPAIGN = {"name": "authz", "bid_type": "CPM", "daily_budget_micros": 1_000_000, "timezone": "UTC"}
AD = {"creative_ref": "c", "landing_url": "https://authz.example/", "bid_micros": 1_000_000,
      "targeting": {"placement": ["authz"]}}
# every endpoint and method: (method, path, body, what the owner gets, what another advertiser gets)
TABLE = [
    ("GET", "/v1/campaigns", None, 200, 200),  # another advertiser lists its own campaigns (none of the owner's)
    ("POST", "/v1/campaigns", CAMPAIGN, 201, 201),  # ... and creates its own
    ("GET", "/v1/campaigns/{campaign}", None, 200, 404),
    ("PATCH", "/v1/campaigns/{campaign}", {"name": "renamed"}, 200, 404),
    ("POST", "/v1/campaigns/{campaign}/pause", None, 200, 404),
    ("POST", "/v1/campaigns/{campaign}/resume", None, 200, 404),
    ("GET", "/v1/campaigns/{campaign}/ads", None, 200, 404),
    ("POST", "/v1/campaigns/{campaign}/ads", AD, 201, 404),
    ("GET", "/v1/ads/{ad}", None, 200, 404),
    ("PATCH", "/v1/ads/{ad}", {"bid_micros": 1_500_000}, 200, 404),
    ("GET", "/v1/reports?campaign_id={campaign}&from=2026-03-10&to=2026-03-11", None, 200, 404),
    ("GET", "/v1/audiences", None, 200, 200),  # another advertiser lists its own audiences
    ("POST", "/v1/audiences", {"name": "authz"}, 201, 201),  # ... and creates its own
    ("GET", "/v1/audiences/{audience}", None, 200, 404),
    ("POST", "/v1/audiences/{audience}/members", {"hashed_ids": ["0" * 64]}, 200, 404),
    ("POST", "/v1/audiences/{audience}/members/remove", {"hashed_ids": ["0" * 64]}, 200, 404),
]
PUBLIC = [("GET", "/openapi.json"), ("GET", "/metrics")]


def _routes(store) -> set[tuple[str, str]]:
    """Every (method, path) the API serves, with the table's names for the ids."""
    app = AdvertiserApi(store).app()
    named = {"/v1/campaigns/{id}": "/v1/campaigns/{campaign}", "/v1/ads/{id}": "/v1/ads/{ad}",
             "/v1/audiences/{id}": "/v1/audiences/{audience}"}
    routes = set()
    for r in app.router.routes():
        if r.method != "HEAD":
            path = r.resource.canonical
            for generic, name in named.items():
                path = path.replace(generic, name)
            routes.add((r.method, path))
    return routes


def test_the_authorization_table_over_every_endpoint_and_method(platform):
    async def scenario():
        members = AudienceMembers(platform.host, platform.redis_port, AudienceSalt(b"authorization-table-salt"))
        runner, port, store = await start_advertiser_api(platform.postgres_dsn, port=0, audience_members=members)
        base = f"http://127.0.0.1:{port}"
        try:
            owner_id, first_key = await store.create_advertiser(f"owner-{uuid.uuid4().hex[:8]}")
            _, other_key = await store.create_advertiser(f"other-{uuid.uuid4().hex[:8]}")
            rotated = json.loads(await ok("advertisers", "rotate-key", str(owner_id)))
            keys = {"no key": None, "revoked key": first_key, "another advertiser's key": other_key,
                    "the owner's key": rotated["api_key"]}
            async with ClientSession() as http:
                async def call(method, path, key, body=None):
                    headers = {"Authorization": f"Bearer {key}"} if key else {}
                    async with http.request(method, base + path, json=body, headers=headers) as r:
                        json_body = r.content_type == "application/json"  # /metrics is text
                        return r.status, (await r.json() if json_body else await r.text())

                owner = keys["the owner's key"]
                _, campaign = await call("POST", "/v1/campaigns", owner, CAMPAIGN)
                _, ad = await call("POST", f"/v1/campaigns/{campaign['campaign_id']}/ads", owner, AD)
                _, audience = await call("POST", "/v1/audiences", owner, {"name": "authz-owned"})
                ids = {"campaign": campaign["campaign_id"], "ad": ad["ad_id"], "audience": audience["audience_id"]}
                answers = {}
                for caller in CALLERS:  # the owner last: the others must not have changed anything
                    if caller == CALLERS[-1]:
                        answers["owner's objects before the owner's calls"] = (
                            (await call("GET", f"/v1/campaigns/{ids['campaign']}", owner))[1]["version"],
                            (await call("GET", f"/v1/ads/{ids['ad']}", owner))[1]["version"])
                    for method, path, body, _, _ in TABLE:
                        answers[(caller, method, path)] = await call(method, path.format(**ids), keys[caller], body)
                    for method, path in PUBLIC:
                        answers[(caller, method, path)] = (await call(method, path, keys[caller]))[0], None
                revoked_now = json.loads(await ok("advertisers", "revoke-key", str(owner_id),
                                                  str(rotated["key_id"])))
                after_revoke = (await call("GET", "/v1/campaigns", owner))[0]
                listed_keys = json.loads(await ok("advertisers", "keys", str(owner_id)))
            return _routes(store), ids, answers, rotated, revoked_now, after_revoke, listed_keys
        finally:
            await runner.cleanup()
            await store.close()

    routes, ids, answers, rotated, revoked_now, after_revoke, listed_keys = asyncio.run(scenario())
    served = {(m, p.split("?")[0]) for m, p, *_ in TABLE} | set(PUBLIC)
    assert routes == served, "an endpoint without a row in the table"
    for method, path, _, owner_status, other_status in TABLE:
        expected = {**DENIED, "another advertiser's key": other_status, "the owner's key": owner_status}
        got = {caller: answers[(caller, method, path)][0] for caller in CALLERS}
        assert got == expected, (method, path)
    for caller in CALLERS:
        assert answers[(caller, "GET", "/openapi.json")][0] == 200
    assert answers["owner's objects before the owner's calls"] == (1, 1)  # no denied call wrote anything
    others = answers[("another advertiser's key", "GET", "/v1/campaigns")][1]
    assert ids["campaign"] not in [c["campaign_id"] for c in others]
    created = answers[("another advertiser's key", "POST", "/v1/campaigns")][1]
    assert created["advertiser_id"] != answers[("the owner's key", "POST", "/v1/campaigns")][1]["advertiser_id"]
    assert revoked_now["revoked_key_ids"] == [rotated["key_id"]] and after_revoke == 401
    assert len(rotated["revoked_key_ids"]) == 1 and all(k["revoked_at"] for k in listed_keys)
    assert all(k["key_prefix"] is None or k["key_prefix"].startswith("ak_") for k in listed_keys)


# ------------------------------------------------------------------------------------------ the migration

@pytest.fixture
def scratch_database(platform):
    name = f"adserve_migration_{uuid.uuid4().hex[:8]}"
    admin = platform.postgres_dsn
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield make_conninfo(admin, dbname=name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_the_migration_keeps_existing_rows_and_resets_advertiser_set_quality(scratch_database):
    first = sorted(MIGRATIONS.glob("*.sql"))[0]
    with psycopg.connect(scratch_database, autocommit=True) as conn:  # a store as it was before the migration
        conn.execute("CREATE TABLE schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL "
                     "DEFAULT now())")
        conn.execute(first.read_text())
        conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (first.name,))
        advertiser = conn.execute("INSERT INTO advertisers (name) VALUES ('old') RETURNING advertiser_id").fetchone()[0]
        campaign = conn.execute(
            "INSERT INTO campaigns (advertiser_id, name, status, bid_type, daily_budget_micros, currency, timezone) "
            "VALUES (%s, 'old', 'ACTIVE', 'CPC', 5000000, 'USD', 'UTC') RETURNING campaign_id",
            (advertiser,)).fetchone()[0]
        for quality in (1_000_000.0, 0.0):
            conn.execute("INSERT INTO ads (campaign_id, advertiser_id, bid_type, bid_micros, quality_prior, "
                         "creative_ref, landing_url, targeting, status, review_status) VALUES "
                         "(%s, %s, 'CPC', 10000, %s, 'c', 'https://old.example/', '{}', 'ACTIVE', 'APPROVED')",
                         (campaign, advertiser, quality))
    applied = migrate(scratch_database)
    with psycopg.connect(scratch_database) as conn:
        rows = conn.execute("SELECT quality_prior, version, review_status, bid_micros, creative_ref FROM ads "
                            "ORDER BY ad_id").fetchall()
        new_default = conn.execute("SELECT column_default FROM information_schema.columns WHERE table_name = 'ads' "
                                   "AND column_name = 'review_status'").fetchone()[0]
    assert applied == [p.name for p in sorted(MIGRATIONS.glob("*.sql"))[1:]]
    # the advertiser-set quality is the platform's default again, with a new version so CDC carries it to the
    # servers; everything else the rows held is kept, their review included
    assert rows == [(0.0, 2, "APPROVED", 10000, "c"), (0.0, 1, "APPROVED", 10000, "c")]
    assert "PENDING" in new_default
    assert migrate(scratch_database) == []  # applied once
