"""Reports through the real click aggregator: beacons of two hours go to ad.events, the click_aggregator Flink
job bills them onto its billed topic, the landing job lands that topic, and each budget day's report equals
core.clicks.recount of the same beacons for every campaign."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Producer

from core import clicks, reports
from infra.platform.topics import TopicSpec, ensure_topics
from jobs import deploy
from serving.report_landing.main import land
from serving.report_landing.settings import ReportLandingSettings
from schemas import topics
from schemas.codec import AvroCodec
from serving.advertiser.store import migrate
from streams import kafka
from tests import billed_feed as feed
from tests.integration.test_reports import Api

PARTITIONS = 2
TICK = 999_999_001  # a bystander campaign whose impressions carry event time forward on every partition
EVENT_TYPE, CAMPAIGN_TYPE = topics.record_type(topics.AD_EVENTS), topics.record_type(topics.SERVING_CAMPAIGNS)


def _ticks(at_ms: int) -> list[dict]:
    return [{"event_id": uuid.uuid4().hex, "impression_id": f"tick-{at_ms}-{p}", "event_type": "IMPRESSION",
             "event_time": at_ms, "served_time": at_ms - 1000, "campaign_id": TICK, "ad_id": 1, "price_micros": 1,
             "billing_type": "CLICK", "user_id": None, "ip_address": None, "user_agent": None, "token_key_id": "k1"}
            for p in range(PARTITIONS)]


def _billed_until(platform, topic: str, at_least_ms: int, timeout_s: float = 300) -> None:
    codec, deadline = AvroCodec(), time.monotonic() + timeout_s
    while True:
        times = [codec.decode(m.value())["event_time"] for m in kafka.read_all(platform.kafka_bootstrap, topic)]
        if times and max(times) >= at_least_ms:
            return
        assert time.monotonic() < deadline, f"the aggregator billed nothing at or after {at_least_ms}"
        time.sleep(3)


def test_reports_of_the_aggregators_bill_equal_the_recount(platform):
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink

    migrate(platform.postgres_dsn)
    suffix = uuid.uuid4().hex[:8]
    names = {n: f"test.reportsagg.{n}.{suffix}" for n in ("events", "campaigns", "billed", "dead", "conversions")}
    ensure_topics(platform.kafka_bootstrap, tuple(
        TopicSpec(t, key="test", schema="", partitions=PARTITIONS if n == "events" else 1) for n, t in names.items()))

    async def setup():
        async with Api(platform) as api:
            auth = await api.advertiser()
            made = []
            for bid_type, budget in (("CPC", 30), ("CPC", 2), ("CPM", 400)):
                status, c = await api.call("POST", "/v1/campaigns", auth, {
                    "name": f"ra-{uuid.uuid4().hex[:6]}", "bid_type": bid_type, "timezone": "UTC",
                    "daily_budget_micros": budget * feed.DOLLAR})
                assert status == 201, c
                made.append(c)
            return auth, made

    auth, made = asyncio.run(setup())
    versions = [feed.campaign_version(c["campaign_id"], c["daily_budget_micros"], "UTC", bid_type=c["bid_type"])
                for c in made] + [feed.campaign_version(TICK, 1_000 * feed.DOLLAR)]
    start = feed.T0 + 22 * feed.HOUR_MS  # 22:00-24:00 UTC
    events = feed.beacons({c["campaign_id"]: "IMPRESSION" if c["bid_type"] == "CPM" else "CLICK" for c in made},
                          hours=2, per_hour=25, start_ms=start)
    ticks = [t for at in range(start, start + 2 * feed.HOUR_MS + 60_000, 20_000) for t in _ticks(at)]
    sent = sorted(events + ticks, key=lambda e: e["event_time"])

    job_id = deploy.deploy("click_aggregator", jobmanager=f"{platform.host}:{platform.flink_rest_port}",
                           conf_dir=Flink(platform).conf_dir,
                           job_args=["--bootstrap", platform.kafka_bootstrap,
                                     "--connector-jar", str(flink_connector_jar(platform)),
                                     "--group-id", f"adserve-reports-agg-test-{suffix}",
                                     "--checkpoint-interval-ms", "1000", "--restart-attempts", "50",
                                     "--shards", "2", "--idle-timeout-ms", "60000",
                                     "--events-topic", names["events"], "--campaigns-topic", names["campaigns"],
                                     "--billed-topic", names["billed"], "--dead-letter-topic", names["dead"]])
    try:
        deploy.wait_running(platform.flink_rest_url, job_id)
        codec = AvroCodec()
        producer = Producer({"bootstrap.servers": platform.kafka_bootstrap, "enable.idempotence": True})
        for v in versions:
            producer.produce(names["campaigns"], key=str(v["campaign_id"]).encode(),
                             value=codec.encode(CAMPAIGN_TYPE, v), timestamp=v["event_time"])
        producer.flush(30)
        time.sleep(2)
        for e in sent:
            partition = {"partition": int(e["impression_id"][-1])} if e["campaign_id"] == TICK else {}
            producer.produce(names["events"], key=str(e["campaign_id"]).encode(), timestamp=e["event_time"],
                             value=codec.encode(EVENT_TYPE, e), **partition)
            producer.poll(0)
        producer.flush(30)
        _billed_until(platform, names["billed"], start + 2 * feed.HOUR_MS + 30_000)
        time.sleep(3)
    finally:
        deploy.stop(platform.flink_rest_url, job_id)

    land(ReportLandingSettings(platform.kafka_bootstrap, platform.postgres_dsn, names["billed"],
                               names["conversions"], names["dead"], f"test-reports-agg-{suffix}",
                               until_caught_up=True))
    recount = clicks.recount(sent, versions)

    async def query():
        async with Api(platform) as api:
            return [await api.call("GET", "/v1/reports", auth, params={"from": "2026-03-10", "to": "2026-03-11"}),
                    await api.call("GET", "/v1/reports", auth, params={
                        "from": "2026-03-10T22:00:00Z", "to": "2026-03-11T00:00:00Z", "granularity": "hour"})]

    (status, daily), (_, hourly) = asyncio.run(query())
    assert status == 200, daily
    assert reports.recount_differences(daily, {str(c): t for (c, d), t in recount.items() if d == "2026-03-10"}) == []
    assert sum(c["totals"]["billed_spend_micros"] for c in daily["campaigns"]) > 0
    for day_row, hour_row in zip(daily["campaigns"], hourly["campaigns"]):
        assert len(hour_row["rows"]) == 2
        assert all(hour_row["totals"][n] == day_row["totals"][n] for n in reports.BILLED_METRICS)
