"""The tracker's spool on the real platform: under a steady beacon load spread over two trackers the broker is
stopped for 24 s, longer than the trackers' producer delivery timeout (8 s here, an operator's
ADSERVE_KAFKA_PROPERTIES; 30 s by default), so deliveries fail and only the spool holds them; one tracker is
killed with SIGKILL after its deliveries failed and started again on its spool, the other stays up and
reconnects when the broker comes back. Every beacon a tracker answered (204 or
302) is billed exactly once by the click aggregator, and the billed totals equal the batch recount
(core.clicks.recount) of what reached the events topic."""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aiohttp
import pytest

from core import clicks
from core.tokens import TokenClaims, TokenKeys
from jobs import deploy
from schemas import topics
from schemas.codec import AvroCodec
from streams import kafka

REPO = Path(__file__).resolve().parents[2]
KEY_SPEC = "spool1:spool-integration-test-key-01"
KEYS = TokenKeys.from_spec(KEY_SPEC)
CODEC = AvroCodec()
CAMPAIGN_TYPE = topics.record_type(topics.SERVING_CAMPAIGNS)
IMPRESSION_PRICE = 10_000  # a CPM campaign: each billed impression
CLICK_PRICE = 1_000_000  # a CPC campaign: each billed click
BUDGET = 10_000 * 1_000_000
BEACONS_PER_S = 4
CLICK_EVERY_S = 15.0  # one IP (loopback) may click 5 times a minute before its clicks are invalid traffic
DELIVERY_TIMEOUT_S = 8.0  # the trackers' producers fail a delivery after this (librdkafka message.timeout.ms)
BEFORE_S, OUTAGE_S, AFTER_S = 10.0, 24.0, 10.0
KILL_TRACKER_AT_S = BEFORE_S + DELIVERY_TIMEOUT_S + 4.0  # once the producers failed the outage's first deliveries
AGENT = "Mozilla/5.0 (X11; Linux x86_64) spool-test"

TRACKER = """
import asyncio, sys
from pathlib import Path
from core.tokens import TokenKeys
from serving.spool import SpoolSettings
from serving.tracker import start_tracker

async def main():
    bootstrap, keys, port, folder, topic = sys.argv[1:6]
    await start_tracker(bootstrap=bootstrap, keys=TokenKeys.from_spec(keys), port=int(port),
                        spool=SpoolSettings(Path(folder)), events_topic=topic)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _campaign(campaign_id: int, bid_type: str, now_ms: int) -> dict:
    return {"campaign_id": campaign_id, "advertiser_id": 1, "version": 1, "event_time": now_ms - 60_000,
            "status": "ACTIVE", "bid_type": bid_type, "daily_budget_micros": BUDGET, "currency": "USD",
            "timezone": "UTC", "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None,
            "cap_per_week": None, "cpa_target_micros": None}


class TrackerProcess:
    """`start_tracker` in a child process on a fixed port and spool folder, so it can be killed with SIGKILL."""

    def __init__(self, bootstrap: str, spool_dir: Path, events_topic: str, log: Path):
        self.argv = [sys.executable, "-c", TRACKER, bootstrap, KEY_SPEC, str(_free_port()), str(spool_dir),
                     events_topic]
        self.url = f"http://127.0.0.1:{self.argv[5]}"
        self.log, self.proc = log, None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            environ = os.environ | {"ADSERVE_KAFKA_PROPERTIES": f"message.timeout.ms={DELIVERY_TIMEOUT_S * 1000:.0f}"}
            self.proc = subprocess.Popen(self.argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=environ)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, f"the tracker exited: {self.log.read_text()[-2000:]}"
            try:
                with socket.create_connection(("127.0.0.1", int(self.argv[5])), timeout=1):
                    return
            except OSError:
                assert time.monotonic() < deadline, "the tracker never listened"
                time.sleep(0.2)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def metric(self, name: str) -> float:
        import urllib.request

        page = urllib.request.urlopen(f"{self.url}/metrics", timeout=5).read().decode()
        return sum(float(line.split()[-1]) for line in page.splitlines() if line.startswith(name + " "))


class Load:
    """Signed beacons, one at a time, at BEACONS_PER_S: impressions of the CPM campaign, a click of the CPC
    campaign every CLICK_EVERY_S; each answer recorded (only 204 and 302 count as acknowledged)."""

    def __init__(self, cpm: int, cpc: int):
        self.cpm, self.cpc = cpm, cpc
        self.acknowledged: list[tuple[int, str, str]] = []  # (campaign, impression id, event type)
        self.unanswered = self.refused = 0
        self.next_click = 0.0
        self.last_sent_ms = 0  # when the last answered beacon of the two billed campaigns was sent

    def _token(self, campaign_id: int, billing: str, price: int) -> tuple[str, str]:
        now = int(time.time() * 1000)
        impression = f"spool-{uuid.uuid4().hex}"
        return impression, KEYS.sign(TokenClaims(
            impression_id=impression, ad_id=campaign_id * 10, campaign_id=campaign_id, price_micros=price,
            billing=billing, landing_url="https://shop.example/landing", expires_ms=now + 3_600_000,
            served_ms=now - 5_000))

    async def beacon(self, http: aiohttp.ClientSession, tracker_url: str, campaign_id: int | None = None) -> None:
        if campaign_id is None and time.monotonic() >= self.next_click:
            self.next_click = time.monotonic() + CLICK_EVERY_S
            campaign_id, path, billing, price, kind = self.cpc, "/v1/click", "CLICK", CLICK_PRICE, "CLICK"
        else:
            campaign_id = campaign_id or self.cpm
            path, billing, price, kind = "/v1/impression", "IMPRESSION", IMPRESSION_PRICE, "IMPRESSION"
        impression, token = self._token(campaign_id, billing, price)
        sent_ms = int(time.time() * 1000)
        try:
            async with http.get(tracker_url + path, params={"t": token}, allow_redirects=False,
                                headers={"User-Agent": AGENT}, timeout=aiohttp.ClientTimeout(total=10)) as r:
                await r.read()
                status = r.status
        except (aiohttp.ClientError, asyncio.TimeoutError):
            self.unanswered += 1
            return
        if status in (204, 302):
            self.acknowledged.append((campaign_id, impression, kind))
            if campaign_id in (self.cpm, self.cpc):
                self.last_sent_ms = max(self.last_sent_ms, sent_ms)
        else:
            self.refused += 1

    def count(self, campaign_id: int) -> int:
        return sum(1 for c, _, _ in self.acknowledged if c == campaign_id)


def _billed(bootstrap: str, topic: str) -> dict[tuple[int, str], dict]:
    latest: dict[tuple[int, str], dict] = {}
    for m in kafka.read_all(bootstrap, topic, idle_s=1.0):
        record = CODEC.decode(m.value())
        key = (record["campaign_id"], record["budget_day"])
        if key not in latest or clicks.progress_key(record) >= clicks.progress_key(latest[key]):
            latest[key] = record
    return latest


def _summed(totals: dict[tuple[int, str], dict], campaign_id: int, name: str) -> int:
    return sum(t[name] for (c, _), t in totals.items() if c == campaign_id)


@pytest.fixture
def aggregator(platform, fresh_topics):
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink

    events, campaigns, billed, dead = fresh_topics("spool-events", "spool-campaigns", "spool-billed", "spool-dead")
    job_id = deploy.deploy("click_aggregator", jobmanager=f"{platform.host}:{platform.flink_rest_port}",
                           conf_dir=Flink(platform).conf_dir,
                           job_args=["--bootstrap", platform.kafka_bootstrap,
                                     "--connector-jar", str(flink_connector_jar(platform)),
                                     "--group-id", f"adserve-clicks-spool-{uuid.uuid4().hex[:8]}",
                                     # the broker's outage fails checkpoints and tasks: restart until it is back
                                     "--checkpoint-interval-ms", "2000", "--restart-attempts", "1000",
                                     "--idle-timeout-ms", "60000",
                                     "--events-topic", events, "--campaigns-topic", campaigns,
                                     "--billed-topic", billed, "--dead-letter-topic", dead])
    deploy.wait_running(platform.flink_rest_url, job_id)
    yield {"events": events, "campaigns": campaigns, "billed": billed}
    deploy.stop(platform.flink_rest_url, job_id)


def test_every_beacon_answered_through_a_broker_outage_and_a_tracker_kill_is_billed_exactly_once(
        platform, aggregator, tmp_path):
    from infra.platform import control
    from infra.platform.services import Kafka

    bootstrap = platform.kafka_bootstrap
    base = int(time.time()) % 1_000_000 * 100
    cpm, cpc, bystander = base + 1, base + 2, base + 3
    now_ms = int(time.time() * 1000)
    campaigns = [_campaign(cpm, "CPM", now_ms), _campaign(cpc, "CPC", now_ms), _campaign(bystander, "CPC", now_ms)]
    kafka.produce_all(bootstrap, aggregator["campaigns"], [
        (str(c["campaign_id"]).encode(), CODEC.encode(CAMPAIGN_TYPE, c), c["event_time"]) for c in campaigns])

    # `killed` dies by SIGKILL mid-outage and starts again on its spool; `steady` stays up through the outage
    killed, steady = (TrackerProcess(bootstrap, tmp_path / f"spool-{name}", aggregator["events"],
                                     tmp_path / f"tracker-{name}.log") for name in ("killed", "steady"))
    trackers = (killed, steady)
    broker = Kafka(platform)
    load = Load(cpm, cpc)
    resent = {}

    async def scenario() -> None:
        stopping = starting = None
        restarted = False
        start = time.monotonic()
        async with aiohttp.ClientSession() as http:
            while True:
                elapsed = time.monotonic() - start
                if stopping is None and elapsed >= BEFORE_S:
                    stopping = asyncio.create_task(asyncio.to_thread(broker.stop))
                if not restarted and elapsed >= KILL_TRACKER_AT_S:  # between two beacons: none is half answered
                    await asyncio.to_thread(killed.kill)
                    await asyncio.to_thread(killed.start)
                    restarted = True
                if starting is None and elapsed >= BEFORE_S + OUTAGE_S:
                    await stopping
                    starting = asyncio.create_task(asyncio.to_thread(
                        control.up, platform, log=lambda line: None, only=["kafka"]))
                if starting is not None and starting.done():
                    starting.result()
                    if elapsed >= BEFORE_S + OUTAGE_S + AFTER_S:
                        break
                await load.beacon(http, trackers[len(load.acknowledged) % 2].url)
                await asyncio.sleep(1 / BEACONS_PER_S)
            # Every answered beacon reaches the broker: both spools drain once it is back.
            deadline = time.monotonic() + 120
            while any(t.metric("adserve_tracker_spool_pending_records") > 0 for t in trackers):
                assert time.monotonic() < deadline, "a tracker's spool never drained after the outage"
                await asyncio.sleep(1)
            resent.update({t: t.metric("adserve_tracker_spool_resent_total") for t in trackers})
            # Bystander impressions (click-billed, so never billed) carry event time on: once the bystander's
            # totals reach 20 s past the last billed beacon, every window holding one has closed.
            deadline = time.monotonic() + 240
            while True:
                totals = _billed(bootstrap, aggregator["billed"])
                reached = max((t["event_time"] for (c, _), t in totals.items() if c == bystander), default=0)
                if reached >= load.last_sent_ms + 20_000:
                    await asyncio.sleep(3)
                    return
                assert time.monotonic() < deadline, f"the billed totals never passed the load's end: {totals}"
                for _ in range(8):
                    await load.beacon(http, steady.url, campaign_id=bystander)
                    await asyncio.sleep(0.25)

    try:
        for tracker in trackers:
            tracker.start()
        asyncio.run(scenario())
    finally:
        for tracker in trackers:
            tracker.kill()
        if not broker.running():
            control.up(platform, log=lambda line: None, only=["kafka"])

    assert load.refused == 0  # a 256 MiB spool is never full in a minute
    assert resent[killed] > 0, "the restarted tracker sent nothing again from its spool"
    assert resent[steady] > 0, "the tracker that stayed up had no delivery to send again: the outage missed it"
    billed = _billed(bootstrap, aggregator["billed"])
    impressions, click_count = load.count(cpm), load.count(cpc)
    assert impressions > (BEFORE_S + OUTAGE_S) * BEACONS_PER_S / 2 and click_count >= 3
    # every answered beacon reached the events topic (none lost), perhaps more than once ...
    events = [CODEC.decode(m.value()) for m in kafka.read_all(bootstrap, aggregator["events"], idle_s=2.0)]
    delivered = {(e["impression_id"], e["event_type"]) for e in events}
    lost = [b for b in load.acknowledged if (b[1], b[2]) not in delivered]
    print(f"answered {len(load.acknowledged)} beacons ({impressions} billable impressions, {click_count} clicks), "
          f"{load.unanswered} unanswered; {len(events)} records on the topic for {len(delivered)} beacons; sent "
          f"again: {resent[killed]:.0f} by the restarted tracker, {resent[steady]:.0f} by the one that stayed up")
    assert lost == [], f"{len(lost)} answered beacons never reached Kafka"
    # ... and each is billed exactly once: the totals equal a count of the answered beacons and the recount
    assert _summed(billed, cpm, "billed_impressions") == impressions
    assert _summed(billed, cpm, "billed_spend_micros") == impressions * IMPRESSION_PRICE
    assert _summed(billed, cpc, "billed_clicks") == click_count
    assert _summed(billed, cpc, "billed_spend_micros") == click_count * CLICK_PRICE
    assert _summed(billed, cpc, "invalid_credit_micros") == 0
    recounted = clicks.recount(events, campaigns)
    for (campaign_id, day), theirs in recounted.items():
        if campaign_id in (cpm, cpc):
            mine = billed[(campaign_id, day)]
            for name in ("billed_spend_micros", "billed_impressions", "billed_clicks", "invalid_credit_micros"):
                assert mine[name] == theirs[name], (campaign_id, day, name)
