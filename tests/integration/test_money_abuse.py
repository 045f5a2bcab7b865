"""Hostile sequences on the money path, through the real advertiser API, PostgreSQL and Kafka: a budget toggled
faster than the hourly limit is refused by name; targeting too large for the change stream or the index, a CPA
bid above its target and values that once gave 500s are refused with a 400 naming the field; the operator reads
a day's absorbed overspend; a restarted worker never holds its predecessor's slice."""
from __future__ import annotations

import asyncio
import uuid

import aiohttp

from core.campaigns import BUDGET_EDITS_PER_HOUR
from schemas import topics
from serving.advertiser.api import start_advertiser_api


def _through_the_api(platform, scenario):
    """Run `scenario(call)` against a fresh advertiser API on the platform's PostgreSQL, as one new advertiser:
    `await call(method, path, body=None)` answers (status, JSON body, headers)."""
    async def run():
        runner, port, store = await start_advertiser_api(platform.postgres_dsn, port=0)
        _, key = await store.create_advertiser(f"abuse-{uuid.uuid4().hex[:8]}")
        try:
            async with aiohttp.ClientSession() as http:
                async def call(method: str, path: str, body=None) -> tuple[int, dict, dict]:
                    async with http.request(method, f"http://127.0.0.1:{port}{path}", json=body,
                                            headers={"Authorization": f"Bearer {key}"}) as r:
                        return r.status, await r.json(), dict(r.headers)
                return await scenario(call)
        finally:
            await runner.cleanup()
            await store.close()
    return asyncio.run(run())


async def _campaign(call, **fields) -> dict:
    status, campaign, _ = await call("POST", "/v1/campaigns", {
        "name": "abuse", "bid_type": "CPC", "daily_budget_micros": 5_000_000, "timezone": "UTC", **fields})
    assert status == 201, campaign
    return campaign


def test_a_budget_toggled_past_the_hourly_limit_is_refused_naming_the_field_and_other_changes_still_apply(platform):
    async def scenario(call):
        url = f"/v1/campaigns/{(await _campaign(call))['campaign_id']}"
        toggles = [await call("PATCH", url, {"daily_budget_micros": (n % 2) * 5_000_000})
                   for n in range(BUDGET_EDITS_PER_HOUR + 1)]
        kept = toggles[-2][1]["daily_budget_micros"]
        return toggles, await call("PATCH", url, {"daily_budget_micros": kept}), \
            await call("PATCH", url, {"cap_per_day": 3}), await call("GET", url)

    toggles, same, caps, after = _through_the_api(platform, scenario)
    assert [status for status, _, _ in toggles] == [200] * BUDGET_EDITS_PER_HOUR + [429]
    status, body, headers = toggles[-1]
    assert body["field"] == "daily_budget_micros" and "BUDGET_EDITS_PER_HOUR" in body["error"]
    assert int(headers["Retry-After"]) > 3_000
    assert same[0] == 200  # writing the budget it already has is no change
    assert caps[0] == 200 and caps[1]["cap_per_day"] == 3
    assert after[1]["daily_budget_micros"] == toggles[-2][1]["daily_budget_micros"]
    assert after[1]["version"] == 1 + BUDGET_EDITS_PER_HOUR + 2


def test_targeting_too_large_for_the_change_stream_or_the_index_gets_a_400_naming_the_limit(platform):
    async def scenario(call):
        ads = f"/v1/campaigns/{(await _campaign(call, bid_type='CPM'))['campaign_id']}/ads"
        base = {"creative_ref": "c", "landing_url": "https://adv.example/", "bid_micros": 1_000_000}
        many = await call("POST", ads, {**base, "targeting": {"interest": [f"i{n}" for n in range(70_000)]}})
        quotes = await call("POST", ads, {**base, "targeting": {"interest": ['"' * 500_000]}})
        return many, quotes, await call("GET", ads)

    many, quotes, listed = _through_the_api(platform, scenario)
    assert (many[0], many[1]["field"]) == (400, "targeting.interest") and "MAX_VALUES_PER_ATTRIBUTE" in many[1]["error"]
    assert (quotes[0], quotes[1]["field"]) == (400, "targeting.interest") and "MAX_VALUE_CHARS" in quotes[1]["error"]
    assert listed[1] == []


def test_the_operator_reads_a_days_absorbed_overspend_by_campaign_from_the_billing_report(platform):
    """`adserve billing absorbed` over report_billed_daily (the rows the report landing writes) in PostgreSQL."""
    import json
    import random
    import subprocess
    import sys

    import psycopg

    day = f"2031-{random.randint(1, 12):02d}-{random.randint(1, 28):02d}"

    async def scenario(call):
        return [(await _campaign(call, name=name, daily_budget_micros=budget))["campaign_id"]
                for name, budget in (("cut", 5_000_000_000), ("paced", 50_000_000))]

    cut, paced = _through_the_api(platform, scenario)
    with psycopg.connect(platform.postgres_dsn, autocommit=True) as db:
        db.execute("DELETE FROM report_billed_daily WHERE budget_day = %s", (day,))
        for cid, billed, absorbed in ((cut, 1_000_000_000, 150_000_000), (paced, 50_000_000, 30_000)):
            db.execute("INSERT INTO report_billed_daily VALUES (%s, %s, 0, %s, 0, 0, %s, 0, 0, 0, 0)",
                       (cid, day, billed, absorbed))
    done = subprocess.run([sys.executable, "-m", "adserve", "billing", "absorbed", "--day", day, "--json"],
                          capture_output=True, text=True, timeout=60, env=platform.as_env())
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["billed_micros"], report["absorbed_micros"], report["campaigns_absorbing"]) == (
        1_050_000_000, 150_030_000, 2)
    assert [(r["campaign_id"], r["name"], r["size_class"]) for r in report["top"]] == [
        (cut, "cut", "medium"), (paced, "paced", "small")]
    assert report["by_size_class"]["small"]["absorbed_share"] == 30_000 / 50_000_000


def test_a_cpa_bid_above_its_campaigns_target_is_refused_and_a_lowered_target_lowers_the_bids(platform):
    async def scenario(call):
        cid = (await _campaign(call, bid_type="CPA", daily_budget_micros=50_000_000,
                               cpa_target_micros=5_000_000))["campaign_id"]
        base = {"creative_ref": "c", "landing_url": "https://adv.example/", "targeting": {"placement": ["feed"]}}
        huge = await call("POST", f"/v1/campaigns/{cid}/ads", {**base, "bid_micros": 100_000_000_000})
        _, ad, _ = await call("POST", f"/v1/campaigns/{cid}/ads", {**base, "bid_micros": 5_000_000})
        raised = await call("PATCH", f"/v1/ads/{ad['ad_id']}", {"bid_micros": 5_000_001})
        lowered = await call("PATCH", f"/v1/campaigns/{cid}", {"cpa_target_micros": 3_000_000})
        return huge, ad, raised, lowered, await call("GET", f"/v1/ads/{ad['ad_id']}")

    huge, ad, raised, lowered, after = _through_the_api(platform, scenario)
    assert (huge[0], huge[1]["field"]) == (400, "bid_micros") and "cpa_target_micros" in huge[1]["error"]
    assert (raised[0], raised[1]["field"]) == (400, "bid_micros")
    assert lowered[0] == 200
    assert (after[1]["bid_micros"], after[1]["version"]) == (3_000_000, ad["version"] + 1)  # a new version: CDC


def test_values_that_once_gave_500s_get_400s_naming_the_field(platform):
    async def scenario(call):
        url = f"/v1/campaigns/{(await _campaign(call))['campaign_id']}"
        answers = [await call("PATCH", url, {"flight_start": "0001-01-01T00:00:00+14:00"}),
                   await call("PATCH", url, {"name": "nul\u0000"}),
                   await call("POST", f"{url}/ads", {"creative_ref": "c\u0000", "landing_url": "https://adv.example/",
                                                     "bid_micros": 1_000_000, "targeting": {"placement": ["feed"]}})]
        for ids in ("\u00b2", "9" * 5000):
            answers.append(await call("GET", f"/v1/reports?from=2026-01-01&to=2026-01-02&campaign_id={ids}"))
        return answers

    answers = _through_the_api(platform, scenario)
    assert [(status, body["field"]) for status, body, _ in answers] == [
        (400, "flight_start"), (400, "name"), (400, "creative_ref"), (400, "campaign_id"), (400, "campaign_id")]


def test_a_restarted_worker_never_takes_up_a_slice_granted_before_it_began(platform):
    """A worker restarted under its server id follows budget.leases from its own start: the slice granted to its
    predecessor (which may have spent it, and reported that) is not held again; a slice granted to it is."""
    import time

    from confluent_kafka import Producer

    from infra.platform.topics import TopicSpec, ensure_topics
    from schemas.codec import AvroCodec
    from serving.adserver.state import ServingState, TopicFollower

    topic = f"test.abuse.leases.{uuid.uuid4().hex[:8]}"
    ensure_topics(platform.kafka_bootstrap, (TopicSpec(topic, key="server id", schema="", partitions=2),))
    codec, producer = AvroCodec(), Producer({"bootstrap.servers": platform.kafka_bootstrap})

    def grant(lease_id: str) -> None:
        now_ms = int(time.time() * 1000)
        value = codec.encode(topics.record_type(topics.BUDGET_LEASES), {
            "lease_id": lease_id, "server_id": "w-1", "campaign_id": 7, "event_time": now_ms,
            "amount_micros": 5_000_000, "expires_at": now_ms + 30_000})
        producer.produce(topic, key=b"w-1", timestamp=now_ms, value=value)
        producer.flush(10)

    grant("before-the-restart")  # the predecessor's slice, still live for 30 s
    time.sleep(0.2)
    delivered: list[str] = []
    follower = TopicFollower(platform.kafka_bootstrap,
                             lambda batch: delivered.extend(r["lease_id"] for _, r, _ in batch),
                             state_topics=(), lease_topic=topic)
    follower.start()
    try:
        time.sleep(2)  # the follower has assigned its partitions and read what it will read of the past
        grant("after-the-restart")
        deadline = time.monotonic() + 30
        while "after-the-restart" not in delivered and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        follower.stop()
        follower.join(10)
    assert delivered == ["after-the-restart"]
    state = ServingState(server_id="w-1")
    state.apply(topics.BUDGET_LEASES, {"lease_id": "after-the-restart", "server_id": "w-1", "campaign_id": 7,
                                  "event_time": 1_000, "amount_micros": 5_000_000, "expires_at": 31_000}, 1_000)
    assert state.leases.remaining(7, 2_000) == 5_000_000
