"""The click_aggregator Flink job on the real platform: scripted beacons in (duplicates, invalid traffic, a
late event, a corrupt record, a campaign over its budget), billed totals out, checked against hand-computed
figures and against the batch recount (core.clicks.recount) of the same events; then a TaskManager kill; last,
a budget toggled through the advertiser API around every window end (its versions come from the shared index
builder, so this module runs in the index builder's group)."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Producer

from core import clicks
from core.tokens import TokenClaims, TokenKeys
from jobs import deploy
from schemas import topics
from schemas.codec import AvroCodec
from streams import kafka
from tests.factories import archived_rows

T0 = 1_767_614_400_000  # 2026-01-05 12:00:00 UTC
DOLLAR = 1_000_000
PARTITIONS = 2
EVENT_TYPE, CAMPAIGN_TYPE = topics.record_type(topics.AD_EVENTS), topics.record_type(topics.SERVING_CAMPAIGNS)


def _campaign(campaign_id: int, budget_micros: int, bid_type: str = "CPC") -> dict:
    return {"campaign_id": campaign_id, "advertiser_id": 1, "version": 1, "event_time": T0 - 60_000,
            "status": "ACTIVE", "bid_type": bid_type, "daily_budget_micros": budget_micros, "currency": "USD",
            "timezone": "UTC", "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None,
            "cap_per_week": None, "cpa_target_micros": None}


class Beacons:
    """Writes ad.events records as the tracker does (keyed by campaign, timestamp = event time)."""

    def __init__(self, bootstrap: str, topics: dict[str, str]):
        self.codec, self.topics, self.sent = AvroCodec(), topics, []
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})

    def event(self, campaign_id: int, impression: str, event_type: str, at_ms: int, *, price: int,
              billing: str, served_ms: int | None = None, ip: str | None = "10.0.0.1", user: str | None = None,
              agent: str = "Mozilla/5.0") -> dict:
        record = {"event_id": uuid.uuid4().hex, "impression_id": impression, "event_type": event_type,
                  "event_time": at_ms, "served_time": served_ms if served_ms is not None else at_ms - 5_000,
                  "campaign_id": campaign_id, "ad_id": campaign_id * 10, "price_micros": price,
                  "billing_type": billing, "user_id": user, "ip_address": ip, "user_agent": agent,
                  "token_key_id": "k1"}
        self.resend(record)
        return record

    def resend(self, record: dict) -> None:
        self.sent.append(record)
        self.producer.produce(self.topics["events"], key=str(record["campaign_id"]).encode(),
                              value=self.codec.encode(EVENT_TYPE, record), timestamp=record["event_time"])

    def campaign(self, record: dict) -> None:
        self.producer.produce(self.topics["campaigns"], key=str(record["campaign_id"]).encode(),
                              value=self.codec.encode(CAMPAIGN_TYPE, record), timestamp=record["event_time"])

    def clock(self, at_ms: int) -> None:
        """An impression of a bystander campaign on every partition: carries event time forward everywhere."""
        for partition in range(PARTITIONS):
            record = {"event_id": uuid.uuid4().hex, "impression_id": f"tick-{at_ms}-{partition}",
                      "event_type": "IMPRESSION", "event_time": at_ms, "served_time": at_ms - 1000,
                      "campaign_id": 999, "ad_id": 9990, "price_micros": 1, "billing_type": "CLICK",
                      "user_id": None, "ip_address": None, "user_agent": None, "token_key_id": "k1"}
            self.sent.append(record)
            self.producer.produce(self.topics["events"], partition=partition, key=b"999", timestamp=at_ms,
                                  value=self.codec.encode(EVENT_TYPE, record))

    def flush(self) -> None:
        self.producer.flush(30)


def _billed(platform, topic: str) -> dict[int, dict]:
    codec = AvroCodec()
    latest: dict[int, dict] = {}
    for m in kafka.read_all(platform.kafka_bootstrap, topic):
        record = codec.decode(m.value())
        current = latest.get(record["campaign_id"])
        if current is None or record["event_time"] >= current["event_time"]:
            latest[record["campaign_id"]] = record
    return latest


def _wait_billed(platform, topic: str, campaign_id: int, at_least_ms: int, timeout_s: float = 180) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        record = _billed(platform, topic).get(campaign_id)
        if record is not None and record["event_time"] >= at_least_ms:
            time.sleep(3)
            return _billed(platform, topic)
        assert time.monotonic() < deadline, f"no billed totals for {campaign_id} at or after {at_least_ms}"
        time.sleep(2)


CAMPAIGNS = [_campaign(201, 10 * DOLLAR, "CPM"), _campaign(202, 5 * DOLLAR), _campaign(203, 1_000 * DOLLAR),
             _campaign(205, 1_000 * DOLLAR), _campaign(206, 1_000 * DOLLAR), _campaign(207, 1_000 * DOLLAR),
             _campaign(208, 1_000 * DOLLAR), _campaign(999, 1_000 * DOLLAR)]


def _toggles() -> list[dict]:
    """Campaign 207's budget cut to 0 a millisecond before every 10 s window's end and put back a millisecond
    after it, as the index builder publishes each change (a new version at its commit time)."""
    records = []
    for k in range(1, 8):
        boundary = T0 + k * 10_000
        for at, budget in ((boundary - 1, 0), (boundary + 1, 1_000 * DOLLAR)):
            records.append(dict(_campaign(207, budget), version=len(records) + 2, event_time=at))
    return records


TOGGLES = _toggles()
KEYS = TokenKeys({"k1": b"click-aggregator-test-key-32-bytes!"}, active="k1")
INGRESS = "127.0.0.0/8"  # the tracker's peer in this test is the loopback "ingress"


def _through_the_tracker(feed: Beacons, at_ms: int) -> None:
    """Clicks through a real tracker (serving.tracker) behind a trusted ingress, at simulated time `at_ms`, on
    tokens as the ad server signs them: 200 from one pseudonymous user on campaign 205's ads (each from its own
    address, so only the user rule can see them), and 50 honest users' clicks on campaign 206 from 50 addresses
    that all reach the tracker through the one ingress address."""
    from aiohttp.test_utils import TestClient, TestServer

    from core.client_address import parse_trusted_proxies
    from serving.tracker import Tracker

    codec, clock = AvroCodec(), [at_ms]

    def produce(topic: str, key: bytes, value: bytes) -> None:
        feed.sent.append(codec.decode(value))
        feed.producer.produce(topic, key=key, value=value, timestamp=clock[0])

    tracker = Tracker(KEYS, produce, clock=lambda: clock[0] / 1000, events_topic=feed.topics["events"],
                      trusted_proxies=parse_trusted_proxies(INGRESS))

    def token(campaign_id: int, n: int, user: str) -> str:
        return KEYS.sign(TokenClaims(f"imp-{campaign_id}-t{n}:1", campaign_id * 10, campaign_id, DOLLAR, "CLICK",
                                     "https://adv.example/", at_ms + 3_600_000, served_ms=at_ms - 5_000,
                                     user_key=KEYS.user_key(user)))

    async def clicks() -> list[int]:
        statuses = []
        async with TestClient(TestServer(tracker.app())) as client:
            plan = [(205, n, "attacker", f"203.0.113.{n % 250}, 10.0.0.7") for n in range(200)]
            plan += [(206, n, f"shopper-{n}", f"198.51.100.{n}") for n in range(50)]
            for i, (campaign_id, n, user, forwarded) in enumerate(plan):
                clock[0] = at_ms + i * 10
                async with client.get("/v1/click", params={"t": token(campaign_id, n, user)},
                                      headers={"X-Forwarded-For": forwarded}, allow_redirects=False) as r:
                    statuses.append(r.status)
        return statuses
    assert asyncio.run(clicks()) == [302] * 250


@pytest.fixture(scope="module")
def billing(platform, tmp_path_factory):
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink
    from infra.platform.topics import TopicSpec, ensure_topics

    suffix = uuid.uuid4().hex[:8]
    topics = {name: f"test.clicks.{name}.{suffix}" for name in ("events", "campaigns", "billed", "dead")}
    ensure_topics(platform.kafka_bootstrap, tuple(
        TopicSpec(t, key="test", schema="", partitions=PARTITIONS if n == "events" else 1)
        for n, t in topics.items()))
    job_id = deploy.deploy("click_aggregator", jobmanager=f"{platform.host}:{platform.flink_rest_port}",
                           conf_dir=Flink(platform).conf_dir,
                           job_args=["--bootstrap", platform.kafka_bootstrap,
                                     "--connector-jar", str(flink_connector_jar(platform)),
                                     "--group-id", f"adserve-clicks-test-{suffix}",
                                     "--checkpoint-interval-ms", "1000", "--restart-attempts", "50",
                                     "--shards", "2",  # several campaigns share each of the bill's keys
                                     # Every partition carries a tick each second (Beacons.clock), so none is
                                     # quiet. With the job's 2 s default, a partition whose reader starts late on
                                     # a loaded machine was marked idle and its records turned late: billed on the
                                     # Python path, without the burst and join rules (a clean CI run failed 6 of
                                     # these tests that way). This module tests the rules, not idleness.
                                     "--idle-timeout-ms", "60000",
                                     "--events-topic", topics["events"], "--campaigns-topic", topics["campaigns"],
                                     "--billed-topic", topics["billed"], "--dead-letter-topic", topics["dead"]])
    archiver_id = None
    try:
        deploy.wait_running(platform.flink_rest_url, job_id)
        archive = tmp_path_factory.mktemp("archive")
        archiver_id = deploy.deploy("archiver", jobmanager=f"{platform.host}:{platform.flink_rest_port}",
                                    conf_dir=Flink(platform).conf_dir,
                                    job_args=["--bootstrap", platform.kafka_bootstrap,
                                              "--connector-jar", str(flink_connector_jar(platform)),
                                              "--group-id", f"adserve-archive-test-{suffix}",
                                              "--checkpoint-interval-ms", "1000", "--restart-attempts", "50",
                                              "--archive-dir", str(archive),
                                              "--topics",
                                              ",".join(topics[n] for n in ("events", "campaigns", "billed"))])
        deploy.wait_running(platform.flink_rest_url, archiver_id)
        feed = Beacons(platform.kafka_bootstrap, topics)
        for c in CAMPAIGNS:
            feed.campaign(c)
        feed.flush()
        half = DOLLAR // 2
        for second in range(1, 91):
            now = T0 + second * 1000
            if second == 3:  # one impression (impression billing, $0.50) whose beacon fires three times
                first = feed.event(201, "imp-dup", "IMPRESSION", now, price=half, billing="IMPRESSION")
                feed.resend(dict(first, event_id=uuid.uuid4().hex, event_time=now + 400))
                feed.resend(dict(first, event_id=uuid.uuid4().hex, event_time=now + 900))
            if 5 <= second < 15:  # ten more impressions of 201
                feed.event(201, f"imp-201-{second}", "IMPRESSION", now, price=half, billing="IMPRESSION")
            if second in (10, 20, 30):  # 202: three $2 clicks on a $5 budget -> $5 billed, $1 absorbed
                feed.event(202, f"imp-202-{second}", "IMPRESSION", now - 500, price=2 * DOLLAR, billing="CLICK")
                feed.event(202, f"imp-202-{second}", "CLICK", now, price=2 * DOLLAR, billing="CLICK",
                           ip=f"10.1.0.{second}")
            if second == 12:  # 203: a valid click, a bot's click and a click 200 ms after serving
                feed.event(203, "imp-203-ok", "CLICK", now, price=DOLLAR, billing="CLICK", ip="10.2.0.1")
                feed.event(203, "imp-203-bot", "CLICK", now, price=DOLLAR, billing="CLICK", ip="10.2.0.2",
                           agent="Mozilla/5.0 (compatible; Googlebot/2.1)")
                feed.event(203, "imp-203-fast", "CLICK", now, price=DOLLAR, billing="CLICK", ip="10.2.0.3",
                           served_ms=now - 200)
            if second == 50:
                _through_the_tracker(feed, now)
            if second < 70:  # twins: the same $0.10 impression each second; 207's budget toggles around window ends
                for campaign_id in (207, 208):
                    feed.event(campaign_id, f"imp-{campaign_id}-{second}", "IMPRESSION", now + 500, price=100_000,
                               billing="IMPRESSION", served_ms=now)
                for record in TOGGLES:
                    if now <= record["event_time"] < now + 1000:
                        feed.campaign(record)
            if second == 15:  # seven clicks from one IP within a minute: the sixth and seventh are invalid
                for i in range(7):
                    feed.event(203, f"imp-203-burst-{i}", "CLICK", now + i * 100, price=DOLLAR, billing="CLICK",
                               ip="10.9.9.9")
            if second == 40:
                feed.producer.produce(topics["events"], key=b"203", value=b"\xc3\x01 not an ad event", timestamp=now)
                # a campaign record whose id the JVM reads, its body cut short: the bill sends it to the dead letters
                feed.producer.produce(topics["campaigns"], key=b"204", timestamp=now,
                                      value=AvroCodec().encode(CAMPAIGN_TYPE, _campaign(204, DOLLAR))[:14])
            feed.clock(now)
            if second == 70:  # a click from +20 s reaching the job long after its window closed, then again
                feed.flush()
                time.sleep(1.5)
                late = feed.event(203, "imp-203-late", "CLICK", T0 + 20_000, price=3 * DOLLAR, billing="CLICK",
                                  ip="10.2.0.9")
                feed.resend(dict(late, event_id=uuid.uuid4().hex))
                # a bot's impression from +25 s, as late: tagged by the rule SQL applied before deduplication
                feed.event(201, "imp-201-late-bot", "IMPRESSION", T0 + 25_000, price=half, billing="IMPRESSION",
                           agent="Mozilla/5.0 (compatible; Googlebot/2.1)")
        feed.flush()
        totals = _wait_billed(platform, topics["billed"], 999, T0 + 80_000)
        dead = [AvroCodec().decode(m.value()) for m in kafka.read_all(platform.kafka_bootstrap, topics["dead"])]
    except BaseException:  # a setup that failed leaves no job running on the shared cluster
        for started in (job_id, archiver_id):
            if started is not None:
                deploy.stop(platform.flink_rest_url, started)
        raise
    yield {"job_id": job_id, "topics": topics, "totals": totals, "dead": dead, "feed": feed, "archive": archive}
    deploy.stop(platform.flink_rest_url, job_id)
    deploy.stop(platform.flink_rest_url, archiver_id)


def test_a_beacon_fired_three_times_is_billed_once(billing):
    t = billing["totals"][201]
    assert t["billed_impressions"] == 11
    assert t["billed_spend_micros"] == 11 * DOLLAR // 2
    assert t["budget_day"] == "2026-01-05"


def test_spend_above_the_budget_is_absorbed_not_billed(billing):
    t = billing["totals"][202]
    assert t["billed_clicks"] == 3
    assert t["joined_clicks"] == 3  # each click found its impression's beacon, sent half a second before it
    assert t["billed_spend_micros"] == 5 * DOLLAR
    assert t["absorbed_overspend_micros"] == 1 * DOLLAR


def test_invalid_traffic_is_not_billed_and_is_credited(billing):
    t = billing["totals"][203]
    # valid: the ok click, five of the burst, the late click ($3); invalid: bot, too soon, two of the burst
    assert t["billed_clicks"] == 1 + 5 + 1
    assert t["billed_spend_micros"] == (1 + 5 + 3) * DOLLAR
    assert t["invalid_credit_micros"] == 4 * DOLLAR
    assert t["joined_clicks"] == 0  # none of these clicks' impressions was ever reported rendered
    assert billing["totals"][201]["invalid_credit_micros"] == DOLLAR // 2  # the bot's late impression


def test_fake_clicks_of_one_pseudonymous_user_are_not_billed_past_the_burst_and_honest_ones_behind_a_proxy_are(
        billing):
    attacked, honest = billing["totals"][205], billing["totals"][206]
    assert attacked["billed_clicks"] == clicks.MAX_CLICKS_PER_MINUTE  # 0 billable after the configured burst
    assert attacked["invalid_credit_micros"] == (200 - clicks.MAX_CLICKS_PER_MINUTE) * DOLLAR
    assert (honest["billed_clicks"], honest["invalid_credit_micros"]) == (50, 0)  # 50 addresses, one ingress
    mine = [e for e in billing["feed"].sent if e["campaign_id"] in (205, 206)]
    assert len({e["user_id"] for e in mine if e["campaign_id"] == 205}) == 1  # one pseudonym, never the raw id
    assert not any(e["user_id"] in ("attacker", "shopper-1") for e in mine)
    assert {e["ip_address"] for e in mine if e["campaign_id"] == 206} == {f"198.51.100.{n}" for n in range(50)}


def test_a_budget_toggled_to_zero_around_every_window_end_bills_what_its_untoggled_twin_bills(billing):
    """Billing follows the budget promised at serve time (core.clicks.billing_limit): cutting the budget for
    the instant each window closes does not make what was served free."""
    toggled, twin = billing["totals"][207], billing["totals"][208]
    assert twin["billed_spend_micros"] == 69 * 100_000  # seven windows, every one closed by the totals' time
    assert toggled["billed_spend_micros"] >= 0.99 * twin["billed_spend_micros"]
    assert toggled["billed_spend_micros"] <= 1_000 * DOLLAR  # never above the highest budget in force
    assert toggled["absorbed_overspend_micros"] == 0


def test_a_click_reaching_the_job_after_its_window_closed_is_billed_once(billing):
    t = billing["totals"][203]
    assert t["billed_spend_micros"] - 6 * DOLLAR == 3 * DOLLAR  # the late $3 click, once despite its resend


def test_the_streaming_totals_equal_the_batch_recount(billing):
    recounted = clicks.recount(billing["feed"].sent, CAMPAIGNS + TOGGLES)
    for campaign_id in (201, 202, 203, 205, 206, 207, 208):
        mine = billing["totals"][campaign_id]
        theirs = recounted[(campaign_id, "2026-01-05")]
        for name in ("billed_spend_micros", "billed_impressions", "billed_clicks", "absorbed_overspend_micros",
                     "invalid_credit_micros", "joined_clicks"):
            assert mine[name] == theirs[name], (campaign_id, name)


def test_a_corrupt_event_goes_to_dead_letters_and_the_job_keeps_running(billing):
    assert len(billing["dead"]) == 2  # the event, and the campaign record cut short
    assert {d["job"] for d in billing["dead"]} == {"click_aggregator"}
    topics = billing["topics"]
    assert {d["source_topic"] for d in billing["dead"]} == {topics["events"], topics["campaigns"]}
    assert billing["totals"][999]["event_time"] >= T0 + 80_000  # events after it were billed


def test_a_taskmanager_killed_mid_stream_bills_every_event_once(platform, billing):
    """Runs last: kills the TaskManager while beacons flow, restarts it; the totals equal the recount."""
    from infra.platform.services import Flink, http_json

    feed, topics = billing["feed"], billing["topics"]
    flink = Flink(platform)
    for second in range(91, 241):
        now = T0 + second * 1000
        if second <= 200:
            feed.event(201, f"imp-201-b-{second}", "IMPRESSION", now, price=10_000, billing="IMPRESSION")
            if second % 3 == 0:
                feed.event(203, f"imp-203-b-{second}", "CLICK", now, price=DOLLAR, billing="CLICK",
                           ip=f"10.3.{second}.1")
        feed.clock(now)
        if second == 150:
            feed.flush()
            time.sleep(1.5)  # a checkpoint or two mid-stream
            flink.kill_taskmanager()
    feed.flush()
    flink.start_taskmanager()
    totals = _wait_billed(platform, topics["billed"], 999, T0 + 230_000, timeout_s=300)
    recounted = clicks.recount(feed.sent, CAMPAIGNS)
    for campaign_id in (201, 203):
        for name in ("billed_spend_micros", "billed_impressions", "billed_clicks", "invalid_credit_micros"):
            assert totals[campaign_id][name] == recounted[(campaign_id, "2026-01-05")][name], (campaign_id, name)
    history = http_json(f"{platform.flink_rest_url}/jobs/{billing['job_id']}/exceptions")["exceptionHistory"]
    assert history["entries"], "the job never failed over: the kill did not reach it"
    # ... and it restored from the state changelog on the cluster's file system (jobs/common/args.py --state-changelog):
    # the file-system storage keeps each job's log under its id; Flink's in-memory default writes nothing there.
    assert (flink.data_dir / "changelog" / billing["job_id"] / "dstl").is_dir()


def test_the_archive_holds_every_record_once_and_the_nightly_recount_finds_no_difference(billing, tmp_path):
    """Runs after the TaskManager kill: the archiver went through it too."""
    from pipelines import nightly_recount

    topics, archive = billing["topics"], billing["archive"]
    deadline = time.monotonic() + 120
    while True:  # files are committed at checkpoints: wait for the last billed totals to be in one
        billed = [AvroCodec().decode(r["v"]) for r in archived_rows(archive, topics["billed"])]
        if any(b["campaign_id"] == 999 and b["event_time"] >= T0 + 230_000 for b in billed):
            break
        assert time.monotonic() < deadline, "the archive never caught up with the billed totals"
        time.sleep(2)
    events = archived_rows(archive, topics["events"])
    coordinates = [(r["partition"], r["offset"]) for r in events]
    assert len(coordinates) == len(set(coordinates))  # nothing archived twice across the restart
    assert len(events) == len(billing["feed"].sent) + 1  # every event, and the corrupt record, once
    summary = nightly_recount.run([
        "--archive", str(archive), "--day", "2026-01-05", "--output", str(tmp_path / "recount"),
        "--events-topic", topics["events"], "--campaigns-topic", topics["campaigns"],
        "--billed-topic", topics["billed"]], save_main_session=False)
    assert summary["corrupt_records"] == 2  # the event and the campaign record
    assert summary["campaigns"] >= 4
    assert summary["differences"] == 0, (tmp_path / "recount" / "differences.jsonl").read_text()
    assert summary["recount"]["202"]["billed_spend_micros"] == 5 * DOLLAR
    assert summary["absorbed_by_budget_size"]["small"]["absorbed_micros"] == 1 * DOLLAR  # 202's extra click


def _billed_days(platform, topic: str, campaign_ids: set[int]) -> dict[tuple[int, str], dict]:
    """The latest billed totals of each (campaign, budget day)."""
    codec, latest = AvroCodec(), {}
    for m in kafka.read_all(platform.kafka_bootstrap, topic):
        record = codec.decode(m.value())
        key = (record["campaign_id"], record["budget_day"])
        if record["campaign_id"] in campaign_ids and (key not in latest
                                                      or record["event_time"] >= latest[key]["event_time"]):
            latest[key] = record
    return latest


def test_a_budget_toggled_through_the_advertiser_api_around_every_window_end_bills_what_its_twin_bills(
        platform, api_budget_toggles, billing):
    """Runs last. A campaign's budget cut to 0 through the advertiser API a second before each of 12 window ends
    and put back a second after (tests/integration/budget_toggles.py, started with the index builder), against
    an untoggled twin: the versions the index builder published for both, and 2 minutes of served impressions
    and clicks on both at the times of the toggles, go through this module's aggregator. The toggled campaign
    bills what its twin bills, never above its highest budget, and the recount agrees."""
    from tests.integration.budget_toggles import BUDGET_MICROS

    toggles = api_budget_toggles.result(timeout_s=300)
    assert toggles.statuses == [200] * len(toggles.statuses)  # every edit accepted: within the edit limit
    toggled_id, twin_id = toggles.toggled_id, toggles.twin_id
    history = toggles.versions[toggled_id]
    for boundary in toggles.boundaries:  # the premise: the budget in force as each window closed was 0
        assert clicks.version_at(history, boundary - 1)["daily_budget_micros"] == 0, boundary
        assert clicks.version_at(history, boundary + 2_000)["daily_budget_micros"] == BUDGET_MICROS, boundary

    feed = Beacons(platform.kafka_bootstrap, billing["topics"])
    versions = sorted(history + toggles.versions[twin_id], key=lambda r: r["event_time"])
    start, end = toggles.boundaries[0] - 10_000, toggles.boundaries[-1]
    for record in (v for v in versions if v["event_time"] < start):
        feed.campaign(record)
    for now in range(start, end + 20_000, 1000):
        for record in (v for v in versions if now <= v["event_time"] < now + 1000):
            feed.campaign(record)
        if now < end:
            for campaign_id in (toggled_id, twin_id):  # the same $0.10 impression each second on both
                feed.event(campaign_id, f"imp-{campaign_id}-{now}", "IMPRESSION", now + 500, price=100_000,
                           billing="IMPRESSION", served_ms=now)
                if (now - start) % 4_000 == 0 and now < end - 5_000:  # and a $0.50 click every 4 s
                    impression = f"imp-{campaign_id}-click-{now}"
                    feed.event(campaign_id, impression, "IMPRESSION", now + 200, price=500_000, billing="CLICK",
                               served_ms=now)
                    feed.event(campaign_id, impression, "CLICK", now + 3_000, price=500_000, billing="CLICK",
                               served_ms=now, ip=f"10.7.{(now // 1000) % 250}.{campaign_id % 250}")
        feed.clock(now)
    feed.flush()
    _wait_billed(platform, billing["topics"]["billed"], 999, end)
    billed = _billed_days(platform, billing["topics"]["billed"], {toggled_id, twin_id})

    def total(campaign_id: int, name: str) -> int:
        return sum(r[name] for (c, _), r in billed.items() if c == campaign_id)
    served = sum(e["price_micros"] for e in feed.sent if e["campaign_id"] == twin_id and (
        e["event_type"] == "CLICK" or e["billing_type"] == "IMPRESSION"))
    assert total(twin_id, "billed_spend_micros") == served  # 12 windows of every impression and click
    assert total(toggled_id, "billed_spend_micros") >= 0.99 * total(twin_id, "billed_spend_micros")
    assert all(r["billed_spend_micros"] <= BUDGET_MICROS for (c, _), r in billed.items() if c == toggled_id)
    assert total(toggled_id, "absorbed_overspend_micros") == 0
    recounted = clicks.recount(feed.sent, versions + [_campaign(999, 1_000 * DOLLAR)])  # 999 carries the clock
    for (campaign_id, day), record in billed.items():
        for name in ("billed_spend_micros", "billed_impressions", "billed_clicks", "absorbed_overspend_micros"):
            assert record[name] == recounted[(campaign_id, day)][name], (campaign_id, day, name)
