"""The platform learns from its own traffic, with nothing written by a simulator: campaigns made through the
advertiser API reach an ad server through CDC and the index builder; requests over HTTP are answered, their
impressions and clicks go through the tracker; the `features` job turns the served log and the beacons into an
ad-feature snapshot, `training_join` labels the traffic, `adserve model retrain` trains a model, publishes it as a
canary on the registry and promotes it through the canary rule; the ad server follows the registry and swaps
snapshot, canary and model while answering, without one failed request, and the pCTRs it serves change.

Users click each ad at its own true rate (the test's stand-in for people), so the learned model has something
to find: the best ad's served pCTR ends above the worst's. The test server explores on every request (Thompson
sampling in the exploration slice): before the first ad-feature snapshot every ad has the same weak prior and
all six collect impressions; with the snapshot, each ad's posterior holds its first few hundred impressions and
sampling keeps to the best ad of each campaign nearly every time. The first model is trained on that traffic,
so it sees two of the six ads; it scores the others near their priors (the network is anchored on them), so
the canary's predicted clicks stay close to its observed ones. The canary runs on half the requests, and the
promotion's calibration band (0.5-2.0) is wider than production's 0.95-1.05: a test canary has a few hundred
clicks (+-2/sqrt(n) is +-10 % at 400) and its model is trained on 1,500 requests. The test checks the
loop's mechanics; how well the loop learns is the live-loop benchmark's figure."""
from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aiohttp

from schemas import topics
from schemas.codec import AvroCodec
from serving.adserver.app import ServerConfig
from serving.adserver.main import start_ad_server
from serving.adserver.settings import AdServerSettings
from serving.advertiser.api import start_advertiser_api
from serving.decision.engine import EngineConfig
from serving.model.registry import CURRENT, model_entry, publish, read_registry
from serving.tracker import start_tracker
from streams import kafka
from tests.integration.campaign_world import KEYS, REVIEWER

CODEC = AvroCodec()
TRUE_CTR = (0.30, 0.15, 0.05, 0.22, 0.08, 0.02)  # ad i of the six (two advertisers, three ads each)
BID_MICROS = 1_000_000


def _run(args: list[str], platform, timeout_s: int = 900) -> str:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout_s,
                          env=os.environ | platform.as_env())
    assert done.returncode == 0, f"{args[:3]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def _bounded_job(job: str, platform, since_ms: int, *extra: str) -> None:
    """A job over this test's period, from --start-timestamp-ms to the topics' ends, then finished."""
    _run(["-m", f"jobs.{job}", "--bounded", "--startup-mode", "timestamp", "--start-timestamp-ms", str(since_ms),
          "--bootstrap", platform.kafka_bootstrap, "--group-id", f"live-{job}-{uuid.uuid4().hex[:6]}",
          "--checkpoint-interval-ms", "1000", *extra], platform)


def _retrain(platform, models: Path, registry_topic: str, examples_topic: str) -> dict:
    out = _run(["-m", "adserve", "model", "retrain", "--once", "--json", "--models", str(models),
                "--registry-topic", registry_topic, "--examples-topic", examples_topic,
                "--min-examples", "500", "--min-train-clicks", "50", "--canary-share", "0.5",
                "--min-clicks", "120", "--calibration-band", "0.5,2.0", "--tolerance", "0.5", "--epochs", "8"],
               platform)
    return json.loads(out.strip().splitlines()[-1])


class Traffic:
    """Requests over HTTP and the users' beacons through the tracker; every answer's status is kept."""

    def __init__(self, http: aiohttp.ClientSession, url: str, placement: str, ads: list[int], seed: int = 7):
        self.http, self.url, self.placement = http, url, placement
        self.true_ctr = dict(zip(ads, TRUE_CTR))
        self.rng = random.Random(seed)
        self.statuses: list[int] = []

    async def requests(self, n: int) -> None:
        for _ in range(n):
            body = {"request_id": uuid.uuid4().hex, "user_id": f"u{self.rng.randrange(400)}",
                    "placement": self.placement, "slots": [{"position": 1}, {"position": 2}]}
            async with self.http.post(f"{self.url}/v1/ads", json=body) as r:
                self.statuses.append(r.status)
                if r.status != 200:
                    continue
                answer = await r.json()
            for slot in answer["slots"]:
                if not slot.get("ad_id"):
                    continue
                async with self.http.get(slot["impression_url"]) as beacon:
                    assert beacon.status in (200, 204), await beacon.text()
                if self.rng.random() < self.true_ctr[slot["ad_id"]] * (1.0 if slot["position"] == 1 else 0.7):
                    async with self.http.get(slot["click_url"], allow_redirects=False) as click:
                        assert click.status == 302, await click.text()


def _served(platform, server_id: str, since_ms: int) -> list[dict]:
    records = [CODEC.decode(m.value(), topics.record_type(topics.AD_SERVED)) for m in
               kafka.read_all(platform.kafka_bootstrap, topics.AD_SERVED, timeout_s=120)
               if m.timestamp()[1] >= since_ms]
    return [r for r in records if r["server_id"] == server_id]


async def _until(check, what: str, timeout_s: float = 120.0) -> None:
    began = time.monotonic()
    while not check():
        assert time.monotonic() - began < timeout_s, f"{what}: not within {timeout_s:.0f} s"
        await asyncio.sleep(0.2)


def test_the_platform_learns_from_its_own_traffic_and_swaps_models_without_a_failed_request(
        platform, index_builder, fresh_topics, tmp_path):
    registry_topic, examples_a, *canary_examples = fresh_topics("registry", "examples-a", "examples-b1",
                                                                 "examples-b2", "examples-b3")
    since_ms = int(time.time() * 1000) - 1000
    features_dir, models = tmp_path / "features", tmp_path / "models"

    began = time.monotonic()

    def stage(what: str) -> None:  # where the time goes, in the captured output of a failure or with -s
        print(f"[live loop] {time.monotonic() - began:6.1f} s  {what}", flush=True)

    async def scenario():
        api_runner, api_port, store = await start_advertiser_api(platform.postgres_dsn, port=0)
        tracker_runner, tracker_port, _, tracker_producer = await start_tracker(
            bootstrap=platform.kafka_bootstrap, keys=KEYS, port=0)
        server_id = f"live-{uuid.uuid4().hex[:6]}"
        server = await start_ad_server(
            AdServerSettings.on_platform(platform, KEYS, port=0), wait_ready_s=300, registry="models",
            registry_topic=registry_topic,
            config=ServerConfig(server_id=server_id, tracker_url=f"http://127.0.0.1:{tracker_port}",
                                deadline_ms=5_000.0,
                                # a loaded CI machine must not turn the canary's requests into fallbacks
                                engine=EngineConfig(exploration_share=1.0, model_budget_s=2.0)))
        http = aiohttp.ClientSession()
        try:
            placement = f"live-{uuid.uuid4().hex[:6]}"
            ads = []
            for advertiser in range(2):
                _, key = await store.create_advertiser(f"adv-live-{uuid.uuid4().hex[:6]}")
                auth = {"Authorization": f"Bearer {key}"}
                async with http.post(f"http://127.0.0.1:{api_port}/v1/campaigns", headers=auth, json={
                        "name": f"live-{advertiser}", "bid_type": "CPC", "daily_budget_micros": 10_000_000_000,
                        "timezone": "UTC"}) as r:
                    assert r.status == 201, await r.text()
                    campaign = await r.json()
                for i in range(3):
                    async with http.post(f"http://127.0.0.1:{api_port}/v1/campaigns/{campaign['campaign_id']}/ads",
                                         headers=auth, json={
                                             "creative_ref": f"creative-{advertiser}-{i}",
                                             "landing_url": f"https://adv{advertiser}.example/offer/{i}",
                                             "bid_micros": BID_MICROS, "targeting": {"placement": [placement]}}) as r:
                        assert r.status == 201, await r.text()
                        ad = await r.json()
                    await store.review_ad(ad["ad_id"], "APPROVED", REVIEWER)
                    ads.append(int(ad["ad_id"]))
            await _until(lambda: all(server.server.state.index.row_of(a) is not None for a in ads), "the ads reach the server")
            assert server.server.scoring.on_priors
            traffic = Traffic(http, f"http://127.0.0.1:{server.port}", placement, ads)
            asked = []  # the size of every batch of requests sent

            async def send(n: int) -> None:
                asked.append(n)
                await traffic.requests(n)
                stage(f"{n} requests answered")

            # No model, no snapshot: the server ranks on priors; the features job makes the first snapshot.
            await send(500)
            tracker_producer.flush(10)
            await asyncio.to_thread(_bounded_job, "features", platform, since_ms, "--snapshot-dir", str(features_dir),
                                    "--registry-topic", registry_topic)
            stage("features job done")
            await _until(lambda: server.server.state.features_version > 0, "the server applies the snapshot")
            assert server.server.scoring.on_priors  # a snapshot is not a model

            # Traffic served with that snapshot, labelled by the training join, trains the first model.
            await send(1000)
            tracker_producer.flush(10)
            # The rule judges a canary on the traffic served after it was published, so its labelling starts here.
            canary_since_ms = int(time.time() * 1000)
            await asyncio.to_thread(_bounded_job, "training_join", platform, since_ms, "--examples-topic",
                                    examples_a, "--keep-rate", "1.0")
            stage("training join done")
            trained = await asyncio.to_thread(_retrain, platform, models, registry_topic, examples_a)
            stage(f"trained: {trained.get('action')}")
            assert trained["action"] == "full", trained
            candidate = trained["model_version"]
            assert (models / candidate / "evaluation.json").exists()
            await _until(lambda: server.server.scoring.canary_version == candidate, "the server canaries the model",
                         timeout_s=300)

            # The canary's traffic, labelled, goes through the promotion rule. The rule waits while the canary
            # has too few labelled clicks (how many a phase collects depends on the machine's speed): then the
            # canary serves more traffic and its whole period is labelled again, into a fresh examples topic.
            verdicts = []
            for examples_b in canary_examples:
                await send(1500 if not verdicts else 1000)
                tracker_producer.flush(10)
                await asyncio.to_thread(_bounded_job, "training_join", platform, canary_since_ms,
                                        "--examples-topic", examples_b, "--keep-rate", "1.0")
                stage("training join done")
                judged = await asyncio.to_thread(_retrain, platform, models, registry_topic, examples_b)
                stage(f"judged: {judged.get('verdict')}")
                assert judged["action"] == "judge", judged
                verdicts.append((judged["verdict"], judged["reason"]))
                if judged["verdict"] != "not enough data":
                    break
            assert judged["verdict"] == "promote", \
                (verdicts, judged["figures"].get("canary_report", {}).get("reasons"))
            await _until(lambda: server.server.scoring.model_version == candidate
                         and server.server.scoring.canary_version is None, "the server promotes the model")
            promoted_ms = int(time.time() * 1000)
            await send(300)

            # A published model that fails its checks is refused: the server keeps the current one and says why.
            broken = models / "click-v99"
            broken.mkdir()
            (broken / "metadata.json").write_text(json.dumps({"model_version": "click-v99"}))
            await asyncio.to_thread(publish, platform.kafka_bootstrap, model_entry(CURRENT, "click-v99", broken),
                                    topic=registry_topic)
            await _until(lambda: server.server.scoring.refusals, "the server refuses the broken model")
            assert server.server.scoring.model_version == candidate
            assert "click-v99" in server.server.scoring.describe()["last_refusal"]
            async with http.get(f"http://127.0.0.1:{server.port}/ready") as r:
                ready = await r.json()
            assert ready["scoring"]["model_version"] == candidate and "missing" in ready["scoring"]["last_refusal"]
            await send(100)
            assert read_registry(platform.kafka_bootstrap, topic=registry_topic).current.version == "click-v99"
            return traffic.statuses, sum(asked), server_id, candidate, promoted_ms, ads
        finally:
            await http.close()
            await server.stop()
            await tracker_runner.cleanup()
            tracker_producer.flush(10)
            await api_runner.cleanup()
            await store.close()

    statuses, sent, server_id, candidate, promoted_ms, ads = asyncio.run(scenario())
    assert len(statuses) == sent and set(statuses) == {200}  # every request answered through every swap

    served = _served(platform, server_id, since_ms)
    on_priors = [w["pctr"] for r in served if r["model_version"] == "prior-baseline-1" for w in r["winners"]
                 if w["slot_position"] == 1]
    learned = {}
    for r in served:
        if r["model_version"] == candidate and r["event_time"] >= promoted_ms:
            for w in r["winners"]:
                if w["slot_position"] == 1:
                    learned.setdefault(w["ad_id"], []).append(w["pctr"])
    assert on_priors and learned
    assert {round(p, 6) for values in learned.values() for p in values} != {round(p, 6) for p in on_priors}
    best, worst = ads[0], ads[5]  # true rates 0.30 and 0.02
    if best in learned and worst in learned:
        assert sum(learned[best]) / len(learned[best]) > sum(learned[worst]) / len(learned[worst])
    snapshots = sorted(features_dir.glob("ad-features-v*.npz"))
    assert snapshots, "the features job wrote no snapshot file"
