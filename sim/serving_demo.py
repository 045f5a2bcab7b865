"""The main job's serving part: simulated traffic through the real ad server and tracker.

A catalog of campaigns and ads goes to serving.campaigns and serving.ads,
user profiles to Redis; the ad server (built from those topics) and the
tracker start in this process; simulated users ask for ads, their apps fire
impression beacons and some users click; a few forged tokens are tried. Then
everything is checked against what landed in Kafka and Redis:

- an ad.served record for every answered request;
- an ad.events event for every accepted beacon and click, none for a forged token;
- every click redirected to the ad's own landing URL;
- budget.spend (counted once per server and sequence) equals the expected cost in ad.served;
- no user saw a capped campaign more often in a day than its cap.

At the end the run's ads are removed again (newer versions, removed=True), so
the next run's server does not serve them."""
from __future__ import annotations

import asyncio
import dataclasses
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import CorruptRecord
from core.spend import SpendDedupe, spend_items
from core.tokens import TokenKeys
from infra.platform import PlatformSettings
from schemas.codec import AvroCodec
from schemas.topics import AD_EVENTS, AD_SERVED, BUDGET_SPEND, SERVING_ADS, SERVING_CAMPAIGNS, record_type
from serving.tracker import without_click_id
from sim.synthetic import DEMO_COUNTRIES as COUNTRIES
from sim.synthetic import DEMO_DEVICES as DEVICES
from sim.synthetic import DEMO_INTERESTS as INTERESTS
from sim.synthetic import DEMO_PLACEMENTS as PLACEMENTS
from sim.synthetic import demo_catalogue
from sim.tokens import token_keys_from_env
from streams import kafka, redis_keys

CLICK_SHARE = 0.05  # of impressions, so a short run still has clicks


@dataclass
class ServingReport:
    requests: int = 0
    answered: int = 0
    non_200: int = 0
    non_200_reasons: Counter = field(default_factory=Counter)
    slots: int = 0
    filled: int = 0
    latency_p50_ms: float = 0.0
    latency_p99_ms: float = 0.0
    stage_p99_ms: dict[str, float] = field(default_factory=dict)
    beacons: int = 0
    clicks: int = 0
    bad_redirects: int = 0
    forged_tried: int = 0
    forged_rejected: int = 0
    served_records: int = 0
    missing_served: int = 0
    impression_events: int = 0
    click_events: int = 0
    spend_reported_micros: int = 0
    spend_expected_micros: int = 0
    cap_violations: int = 0
    capped_pairs: int = 0

    @property
    def ok(self) -> bool:
        # A 503 (deadline or overload) is a valid answer of a loaded server; anything else is not.
        shed_only = all(reason.startswith("503") for reason in self.non_200_reasons)
        return (shed_only and self.non_200 <= self.requests // 100 and self.missing_served == 0 and self.bad_redirects == 0
                and self.forged_rejected == self.forged_tried and self.impression_events == self.beacons
                and self.click_events == self.clicks and self.cap_violations == 0
                and self.spend_reported_micros == self.spend_expected_micros and self.filled > 0)

    def render(self) -> list[str]:
        return [
            f"ad requests {self.requests:,} answered {self.answered:,} (non-200: {self.non_200}); slots filled "
            f"{self.filled:,} of {self.slots:,} ({self.filled / max(1, self.slots):.0%})"
            + (f"; not answered: {dict(self.non_200_reasons)}" if self.non_200 else ""),
            f"end-to-end latency over loopback (clients in the server's process) p50 {self.latency_p50_ms:.1f} ms, p99 {self.latency_p99_ms:.1f} ms; "
            f"server stage p99 (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in self.stage_p99_ms.items()),
            f"beacons {self.beacons:,} -> impression events {self.impression_events:,}; clicks {self.clicks:,} -> "
            f"click events {self.click_events:,}; redirects to the wrong place: {self.bad_redirects}",
            f"forged or tampered tokens rejected: {self.forged_rejected} of {self.forged_tried}",
            f"ad.served records: {self.served_records:,} (missing for an answered request: {self.missing_served})",
            f"spend reported on budget.spend {self.spend_reported_micros:,} micros = expected cost in ad.served "
            f"{self.spend_expected_micros:,} micros: {self.spend_reported_micros == self.spend_expected_micros}",
            f"frequency caps: {self.capped_pairs:,} (user, capped campaign) pairs served, over the cap: "
            f"{self.cap_violations}",
        ]


def _removals(ad_records) -> list[tuple[bytes, bytes, int]]:
    codec = AvroCodec()
    now = int(time.time() * 1000)
    out = []
    for key, value, _ in ad_records:
        record = dict(codec.decode(value))
        record.update(version=2, removed=True, event_time=now)
        out.append((key, codec.encode(record_type(SERVING_ADS), record), now))
    return out


def _decoded_since(bootstrap: str, topic: str, start: dict[int, int]) -> list[dict[str, Any]]:
    codec = AvroCodec()
    out = []
    for m in kafka.read_all(bootstrap, topic, start_offsets=start, timeout_s=120, idle_s=2):
        try:
            out.append(codec.decode(m.value()))
        except CorruptRecord:
            continue  # the records the demo corrupts on purpose: the job's dead letters count them
    return out


@dataclass
class _DemoClient:
    """Simulated users on the ad server and the tracker over HTTP: what they were answered, which
    impressions they rendered, the real tokens they saw (to forge from) and each request's latency."""
    http: Any
    url: str
    server_id: str
    rng: random.Random
    users: int
    report: ServingReport
    landing: dict[int, str]
    answered: list[str] = field(default_factory=list)
    impressions: set[str] = field(default_factory=set)
    real_tokens: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    async def request(self, i: int) -> None:
        """One user's ad request; each filled slot's impression beacon, and now and then its click."""
        user = self.rng.randrange(self.users)
        body = {"request_id": f"{self.server_id}-{i}", "user_id": f"demo-user-{user}",
                "consent": {"personalization": user % 5 != 0}, "placement": self.rng.choice(PLACEMENTS),
                "slots": [{"position": p} for p in range(1, self.rng.randint(1, 3) + 1)],
                "device": self.rng.choice(DEVICES),
                "location": f"{self.rng.choice(COUNTRIES)}/R{self.rng.randrange(3)}"}
        began = time.perf_counter()
        async with self.http.post(self.url, json=body) as r:
            answer = await r.json()
            status = r.status
        self.latencies.append((time.perf_counter() - began) * 1000)
        report = self.report
        report.requests += 1
        if status != 200:
            report.non_200 += 1
            report.non_200_reasons[f"{status} {answer.get('error', '')}"] += 1
            return
        report.answered += 1
        self.answered.append(answer["request_id"])
        report.slots += len(answer["slots"])
        for slot in answer["slots"]:
            if slot.get("ad_id"):
                await self._render(slot)

    async def _render(self, slot: dict[str, Any]) -> None:
        self.report.filled += 1
        if len(self.real_tokens) < 10:
            self.real_tokens.append(slot["token"])
        async with self.http.get(slot["impression_url"]) as r:
            if r.status == 204:
                self.report.beacons += 1
                self.impressions.add(slot["impression_id"])
        if self.rng.random() < CLICK_SHARE:
            async with self.http.get(slot["click_url"], allow_redirects=False) as r:
                self.report.clicks += r.status == 302
                if without_click_id(r.headers.get("Location", "")) != self.landing.get(slot["ad_id"]):
                    self.report.bad_redirects += 1

    async def forge(self, keys: TokenKeys, tracker_base: str) -> None:
        """Forged, tampered and expired tokens on both beacons: none may produce an event."""
        forged = ["eyJmb3JnZWQiOnRydWV9.c2lnbmF0dXJl"]
        for token in self.real_tokens[:10]:
            forged.append(token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB"))
            claims = keys.verify(token, int(time.time() * 1000))
            forged.append(keys.sign(dataclasses.replace(claims, expires_ms=int(time.time() * 1000) - 1)))
        for token in forged:
            for path in ("/v1/impression", "/v1/click"):
                self.report.forged_tried += 1
                async with self.http.get(tracker_base + path, params={"t": token}, allow_redirects=False) as r:
                    self.report.forged_rejected += 400 <= r.status < 500


async def _traffic(settings: PlatformSettings, keys: TokenKeys, rng: random.Random, requests: int, users: int,
                   report: ServingReport, landing: dict[int, str], log) -> tuple[list[str], set[str], str]:
    import aiohttp

    from serving.adserver.app import ServerConfig
    from serving.adserver.main import start_ad_server
    from serving.adserver.settings import AdServerSettings
    from serving.tracker import start_tracker
    from sim.progress import Progress

    tracker_runner, tracker_port, tracker, tracker_producer = await start_tracker(
        bootstrap=settings.kafka_bootstrap, keys=keys, port=0)
    server_id = f"demo-{uuid.uuid4().hex[:6]}"
    running = await start_ad_server(AdServerSettings.on_platform(settings, keys, port=0),
                                    config=ServerConfig(server_id=server_id,
                                                        tracker_url=f"http://127.0.0.1:{tracker_port}"))
    log(f"ad server {server_id} ready with {len(running.server.state.index):,} ads; tracker on :{tracker_port}")
    progress = Progress("ad requests", requests)
    try:
        async with aiohttp.ClientSession() as http:
            client = _DemoClient(http, f"http://127.0.0.1:{running.port}/v1/ads", server_id, rng, users, report,
                                 landing)
            for start in range(0, requests, 8):
                await asyncio.gather(*(client.request(i) for i in range(start, min(requests, start + 8))))
                progress.update(min(requests, start + 8))
            progress.close()
            await client.forge(keys, f"http://127.0.0.1:{tracker_port}")
        rows = list(running.server.timings)
        report.stage_p99_ms = {s: float(np.percentile([row[s] for row in rows if s in row], 99))
                               for s in ("user_context", "retrieval", "filters", "prerank", "prediction", "auction",
                                         "handler") if rows}
    finally:
        await running.stop()
        await tracker_runner.cleanup()
        tracker_producer.flush(10)
    if client.latencies:
        report.latency_p50_ms = float(np.percentile(client.latencies, 50))
        report.latency_p99_ms = float(np.percentile(client.latencies, 99))
    return client.answered, client.impressions, server_id


def run_serving(settings: PlatformSettings, *, requests: int = 3_000, users: int = 1_000, campaigns: int = 60,
                ads_per_campaign: int = 20, seed: int = 7, log=print) -> ServingReport:
    import redis


    rng = random.Random(seed)
    run = (int(time.time()) % 100_000) * 10_000_000  # this run's id range
    bootstrap = settings.kafka_bootstrap
    now_ms = int(time.time() * 1000)
    camp_records, ad_records, caps, landing = demo_catalogue(run, rng, campaigns, ads_per_campaign, now_ms)
    kafka.produce_all(bootstrap, SERVING_CAMPAIGNS, camp_records)
    kafka.produce_all(bootstrap, SERVING_ADS, ad_records)
    client = redis.Redis(host=settings.host, port=settings.redis_port)
    pipe = client.pipeline(transaction=False)
    for u in range(users):
        pipe.delete(redis_keys.frequency_record(f"demo-user-{u}"))
        pipe.hset(redis_keys.user_profile(f"demo-user-{u}"),
                  mapping={"interests": ",".join(rng.sample(INTERESTS, 6)),
                           "age_band": rng.choice(["18-24", "25-34", "35-44"])})
    pipe.execute()
    starts = {t: kafka.end_offsets(bootstrap, t) for t in (AD_SERVED, AD_EVENTS, BUDGET_SPEND)}
    report = ServingReport()
    keys = token_keys_from_env()
    try:
        answered, impressions, server_id = asyncio.run(
            _traffic(settings, keys, rng, requests, users, report, landing, log))
    finally:
        kafka.produce_all(bootstrap, SERVING_ADS, _removals(ad_records))
        client.close()
    served = {r["request_id"]: r for r in _decoded_since(bootstrap, AD_SERVED, starts[AD_SERVED])
              if r["server_id"] == server_id}
    report.served_records = len(served)
    report.missing_served = sum(1 for rid in answered if rid not in served)
    report.spend_expected_micros = sum(w["expected_cost_micros"] for r in served.values() for w in r["winners"])
    dedupe = SpendDedupe()
    report.spend_reported_micros = sum(
        item["expected_spend_micros"] for r in _decoded_since(bootstrap, BUDGET_SPEND, starts[BUDGET_SPEND])
        if r["server_id"] == server_id for item in spend_items(r) if dedupe.first_time(item))
    served_impressions = {w["impression_id"] for r in served.values() for w in r["winners"]}
    events = [e for e in _decoded_since(bootstrap, AD_EVENTS, starts[AD_EVENTS])
              if e["impression_id"] in served_impressions]
    report.impression_events = sum(e["event_type"] == "IMPRESSION" for e in events)
    report.click_events = sum(e["event_type"] == "CLICK" for e in events)
    per_user_day: Counter = Counter()
    for r in served.values():
        for w in r["winners"]:
            if caps.get(w["campaign_id"]):
                per_user_day[(r["user_id"], w["campaign_id"], r["event_time"] // 86_400_000)] += 1
    report.capped_pairs = len(per_user_day)
    report.cap_violations = sum(1 for (_, c, _), n in per_user_day.items() if n > caps[c])
    return report
