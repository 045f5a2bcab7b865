"""`adserve bench freshness`: how fast advertiser changes reach the ad servers, and snapshot boots.

Part 1, the real path: N synthetic ads (default 100 k, `adserve campaigns
bulk-load`'s generator) committed to PostgreSQL, streamed by Debezium, compiled
by the index builder on the Flink cluster (deployed if not running), applied by
two ad servers started here. Figures: the index builder's end-to-end throughput
(ads committed -> held by both servers, per second); then 1,000 random changes
(pause / resume, bid, budget, targeting) committed one by one at --rate per
second, and for every change on every server the lag from its commit
(Debezium's source.ts_ms) to the moment the server applied it. At the end the
bench's ads are retired again (status REMOVED) through the same path; an index
builder the bench deployed keeps running (it is the platform's).

Part 2, snapshots at --snapshot-ads (default 1 M) synthetic ads: the time to
write a snapshot of them (Avro container files; records already in memory, the
read of a 1 M-record topic not included) and the time for a server to boot
from it (load the snapshot, replay the topics from its offsets, ready).

Figures (--json names): servers, ads_loaded, index_builder_ads_per_s, changes,
lag_p50_s, lag_p99_s, lag_max_s, lag_per_server (p50/p99 per server),
snapshot_ads, snapshot_write_s, snapshot_boot_s, snapshot_load_s.
Same-run baselines: baseline_cdc_lag_p50_s / baseline_cdc_lag_p99_s (commit ->
the change on its cdc.* topic, Debezium alone, same changes), and
baseline_record_by_record_load_s (the same snapshot applied one record at a
time, the path without the columnar build)."""
from __future__ import annotations

import asyncio
import random
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import RunFailed
from infra.platform import PlatformSettings
from schemas.topics import SERVING_ADS, SERVING_CAMPAIGNS
from sim.synthetic import synthetic_campaign, synthetic_serving_records
from sim.tokens import token_keys_from_env

CHANGE_KINDS = ("pause_resume", "bid", "budget", "targeting")


async def _load_ads(store, n_ads: int, seed: int, log) -> tuple[list[int], list[int], list[int]]:

    rng = random.Random(seed)
    ads_per, campaigns_per = 50, 20
    advertisers = max(1, n_ads // (ads_per * campaigns_per))
    advertiser_ids = []
    for a in range(advertisers):
        advertiser_id, _ = await store.create_advertiser(f"bench-freshness-{uuid.uuid4().hex[:6]}-{a}")
        plans = [synthetic_campaign(rng, ads_per) for _ in range(campaigns_per)]
        await store.bulk_load(advertiser_id, [p[0] for p in plans], [p[1] for p in plans],
                              approved_by="bench-freshness")
        advertiser_ids.append(advertiser_id)
    log(f"committed {advertisers * campaigns_per * ads_per:,} ads of {advertisers} advertisers to PostgreSQL")

    async def ids(conn):
        campaigns = await (await conn.execute("SELECT campaign_id FROM campaigns WHERE advertiser_id = ANY(%s)",
                                              (advertiser_ids,))).fetchall()
        ads = await (await conn.execute("SELECT ad_id FROM ads WHERE advertiser_id = ANY(%s)",
                                        (advertiser_ids,))).fetchall()
        return [r["campaign_id"] for r in campaigns], [r["ad_id"] for r in ads]
    campaign_ids, ad_ids = await store._run(ids)  # noqa: SLF001
    return advertiser_ids, campaign_ids, ad_ids


async def _change(store, rng: random.Random, campaign_ids: list[int], ad_ids: list[int],
                  owner: tuple[dict[int, int], dict[int, int]]) -> tuple[str, int, int]:
    """One random change; returns (serving topic, id, new version)."""

    kind = rng.choice(CHANGE_KINDS)
    if kind in ("pause_resume", "budget"):
        cid = rng.choice(campaign_ids)
        fields = {"status": rng.choice(["PAUSED", "ACTIVE"])} if kind == "pause_resume" else \
            {"daily_budget_micros": rng.randint(10, 10_000) * 1_000_000}
        row = await store.update_campaign(owner[0][cid], cid, fields)
        return SERVING_CAMPAIGNS, cid, row["version"]
    aid = rng.choice(ad_ids)
    if kind == "bid":
        fields = {"bid_micros": rng.randint(100_000, 5_000_000)}
    else:
        fields = {"targeting": synthetic_campaign(rng, 1)[1][0]["targeting"]}
    row = await store.update_ad(owner[1][aid], aid, fields)
    return SERVING_ADS, aid, row["version"]


class CdcArrivals(threading.Thread):
    """Baseline: when each change reaches its cdc.* topic (Debezium alone), against its commit time."""

    def __init__(self, bootstrap: str):
        super().__init__(name="cdc-arrivals", daemon=True)
        from confluent_kafka import TopicPartition

        from infra.platform.cdc import CDC_TOPICS
        from streams import kafka

        self.consumer = kafka.consumer(bootstrap, group_id=f"bench-cdc-{uuid.uuid4().hex[:6]}")
        self.consumer.assign([TopicPartition(t, p, o) for t in CDC_TOPICS
                              for p, o in kafka.end_offsets(bootstrap, t).items()])
        self.lags_s: list[float] = []
        self.halt = threading.Event()

    def run(self) -> None:
        import json

        try:
            while not self.halt.is_set():
                for msg in self.consumer.consume(num_messages=500, timeout=0.05):
                    if msg.error() or msg.value() is None:
                        continue
                    commit_ms = json.loads(msg.value())["source"]["ts_ms"]
                    self.lags_s.append(max(0.0, time.time() - commit_ms / 1000))
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.halt.set()


def _ensure_index_builder(settings: PlatformSettings, log) -> str | None:
    """The running index builder's job id; deploys one (returned, to stop later) if none runs."""
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink
    from jobs import deploy

    running = [j for j in deploy.list_jobs(settings.flink_rest_url) if j.name == "index_builder"
               and j.state == "RUNNING"]
    if running:
        log(f"index builder already running ({running[0].job_id})")
        return None
    log("deploying the index builder with flink run ...")
    job_id = deploy.deploy("index_builder", jobmanager=f"{settings.host}:{settings.flink_rest_port}",
                           conf_dir=Flink(settings).conf_dir,
                           job_args=["--bootstrap", settings.kafka_bootstrap,
                                     "--connector-jar", str(flink_connector_jar(settings)),
                                     "--checkpoint-interval-ms", "500"])
    deploy.wait_running(settings.flink_rest_url, job_id)
    return job_id


async def _wait_held(servers, ad_ids: list[int], timeout_s: float = 900) -> None:
    """Until both servers hold the last 50 ads committed (the last ones committed are the last ones streamed)."""
    began = time.monotonic()
    last = set(ad_ids[-50:])
    while True:
        held = [sum(1 for a in last if s.server.state.index.row_of(a) is not None) for s in servers]
        if all(h == len(last) for h in held):
            return
        if time.monotonic() - began > timeout_s:
            raise RunFailed(f"the servers hold {held} of the last {len(last)} ads after 15 minutes")
        await asyncio.sleep(0.2)


async def _owner_maps(conn, advertiser_ids: list[int]) -> tuple[dict[int, int], dict[int, int]]:
    """(campaign id -> advertiser, ad id -> advertiser): campaign and ad ids are separate sequences."""
    campaigns = await (await conn.execute(
        "SELECT campaign_id, advertiser_id FROM campaigns WHERE advertiser_id = ANY(%s)",
        (advertiser_ids,))).fetchall()
    ads = await (await conn.execute(
        "SELECT ad_id, advertiser_id FROM ads WHERE advertiser_id = ANY(%s)", (advertiser_ids,))).fetchall()
    return ({r["campaign_id"]: r["advertiser_id"] for r in campaigns},
            {r["ad_id"]: r["advertiser_id"] for r in ads})


async def _retire(conn, advertiser_ids: list[int]) -> None:
    await conn.execute("UPDATE ads SET status = 'REMOVED', version = version + 1, updated_at = now() "
                       "WHERE advertiser_id = ANY(%s) AND status <> 'REMOVED'", (advertiser_ids,))
    await conn.execute("UPDATE campaigns SET status = 'REMOVED', version = version + 1, "
                       "updated_at = now() WHERE advertiser_id = ANY(%s)", (advertiser_ids,))


async def _commit_changes(store, changes: int, rate: float, campaign_ids: list[int], ad_ids: list[int],
                          owner) -> list:
    """`changes` random changes at `rate` per second; what each server must apply, in order."""
    rng = random.Random(9)
    wanted = []
    start = time.monotonic()
    for i in range(changes):
        wanted.append(await _change(store, rng, campaign_ids, ad_ids, owner))
        delay = start + (i + 1) / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    return wanted


async def _applied_lags(servers, wanted: list, timeout_s: float = 120) -> list[list[float]]:
    """Per server, the commit -> applied lag of each wanted change it applied within the timeout."""
    deadline = time.monotonic() + timeout_s
    per_server = []
    for s in servers:
        while True:
            seen = {(t, k, v): lag for t, k, v, lag in s.server.state.recent_lags}
            got = [seen.get(w) for w in wanted]
            if all(g is not None for g in got) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        per_server.append([g for g in got if g is not None])
    return per_server


def _p(samples, q: int) -> float:
    return round(float(np.percentile(samples, q)), 3)


def _lag_figures(changes: int, per_server: list[list[float]], base: list[float]) -> dict[str, Any]:
    lags = [lag for server in per_server for lag in server]
    out: dict[str, Any] = dict(
        changes=changes, changes_applied_per_server=[len(p) for p in per_server],
        lag_p50_s=_p(lags, 50), lag_p99_s=_p(lags, 99), lag_max_s=round(max(lags), 3),
        lag_per_server=[{"p50_s": _p(p, 50), "p99_s": _p(p, 99)} for p in per_server])
    if base:
        out.update(baseline_cdc_lag_p50_s=_p(base, 50), baseline_cdc_lag_p99_s=_p(base, 99),
                   baseline_cdc_changes=len(base))
    return out


async def _reach(servers, ad_ids: list[int], began: float, log) -> dict[str, Any]:
    """The load's figures once both servers hold every ad committed since `began` (committed now)."""
    committed = time.monotonic()
    await _wait_held(servers, ad_ids)
    missing = [sum(1 for a in ad_ids if s.server.state.index.row_of(a) is None) for s in servers]
    done = time.monotonic()
    out = dict(ads_loaded=len(ad_ids), ads_missing_per_server=missing,
               index_builder_ads_per_s=round(len(ad_ids) / (done - began), 1),
               load_commit_s=round(committed - began, 1), load_to_servers_s=round(done - began, 1))
    log(f"both servers hold the {len(ad_ids):,} ads {done - began:.1f} s after the load began "
        f"({out['index_builder_ads_per_s']:,} ads/s end to end)")
    return out


async def _real_path(settings: PlatformSettings, n_ads: int, changes: int, rate: float, log) -> dict[str, Any]:
    from serving.adserver.app import ServerConfig
    from serving.adserver.main import start_ad_server
    from serving.adserver.settings import AdServerSettings
    from serving.advertiser.store import CampaignStore

    store = await CampaignStore(settings.postgres_dsn, size=2).open()
    servers = [await start_ad_server(AdServerSettings.on_platform(settings, token_keys_from_env(), port=0),
                                     config=ServerConfig(server_id=f"fresh-{i}"), wait_ready_s=600)
               for i in range(2)]
    out: dict[str, Any] = {"servers": len(servers)}
    advertiser_ids: list[int] = []
    try:
        began = time.monotonic()
        advertiser_ids, campaign_ids, ad_ids = await _load_ads(store, n_ads, 3, log)
        out.update(await _reach(servers, ad_ids, began, log))
        owner = await store._run(lambda conn: _owner_maps(conn, advertiser_ids))  # noqa: SLF001
        for s in servers:
            s.server.state.recent_lags.clear()
        cdc = CdcArrivals(settings.kafka_bootstrap)
        cdc.start()
        log(f"committing {changes:,} random changes at {rate:g}/s ...")
        wanted = await _commit_changes(store, changes, rate, campaign_ids, ad_ids, owner)
        per_server = await _applied_lags(servers, wanted)
        cdc.stop()
        cdc.join(10)
        out.update(_lag_figures(changes, per_server, cdc.lags_s))
        log(f"commit -> applied lag: p50 {out['lag_p50_s']} s, p99 {out['lag_p99_s']} s, max {out['lag_max_s']} s; "
            f"baseline, commit -> on the cdc topic (Debezium alone): p50 {out.get('baseline_cdc_lag_p50_s')} s, "
            f"p99 {out.get('baseline_cdc_lag_p99_s')} s")
    finally:
        if advertiser_ids:
            await store._run(lambda conn: _retire(conn, advertiser_ids))  # noqa: SLF001
            log("the bench's campaigns and ads are retired (status REMOVED) through the same path")
        for s in servers:
            await s.stop()
        await store.close()
    return out


async def _snapshot_boot(settings: PlatformSettings, n: int, log) -> dict[str, Any]:
    from serving.adserver.app import ServerConfig
    from serving.adserver.main import start_ad_server
    from serving.adserver.settings import AdServerSettings
    from serving.snapshots import write_files
    from streams import kafka

    records = synthetic_serving_records(n)
    offsets = {t: {str(p): o for p, o in kafka.end_offsets(settings.kafka_bootstrap, t).items()}
               for t in (SERVING_ADS, SERVING_CAMPAIGNS)}
    with tempfile.TemporaryDirectory() as tmp:
        began = time.monotonic()
        folder = write_files(Path(tmp), int(time.time() * 1000), records, offsets)
        write_s = time.monotonic() - began
        log(f"snapshot of {len(records[SERVING_ADS]):,} ads written in {write_s:.1f} s "
            f"({sum(f.stat().st_size for f in folder.iterdir()) / 2**20:.0f} MiB)")
        del records
        server = await start_ad_server(AdServerSettings.on_platform(settings, token_keys_from_env(), port=0,
                                                                    snapshot_dir=Path(tmp)),
                                       config=ServerConfig(server_id="fresh-boot"), wait_ready_s=600)
        boot = server.boot
        ads = len(server.server.state.index)
        await server.stop()
        log("baseline: the same snapshot applied record by record (one index update per ad) ...")
        from serving.adserver.state import ServingState
        from serving.snapshots import read_snapshot

        began = time.monotonic()
        state = ServingState("baseline")
        now_ms = int(time.time() * 1000)
        for topic, record in read_snapshot(folder)[1]:
            state.apply(topic, record, now_ms)
        baseline_s = time.monotonic() - began
        del state
    log(f"a server booted from it in {boot['ready_s']:.1f} s (snapshot load {boot['snapshot_load_s']:.1f} s), "
        f"{ads:,} ads")
    log(f"baseline load, record by record: {baseline_s:.1f} s")
    return {"snapshot_ads": n, "snapshot_write_s": round(write_s, 1), "snapshot_boot_s": round(boot["ready_s"], 1),
            "snapshot_load_s": round(boot["snapshot_load_s"], 1),
            "baseline_record_by_record_load_s": round(baseline_s, 1)}


def run(ads: int = 100_000, changes: int = 1_000, rate: float = 50.0, snapshot_ads: int = 1_000_000,
        log=print) -> dict[str, Any]:
    from bench.common import machine
    from infra.platform import control

    settings = PlatformSettings.from_env()
    control.up(settings, log=lambda line: None)
    figures: dict[str, Any] = {"benchmark": "freshness", "machine": machine(), "rate_per_s": rate}
    if ads:
        started = _ensure_index_builder(settings, log)
        if started:
            log(f"the index builder {started} keeps running after the bench (it is the platform's; it also "
                "carries the retirement of the bench's ads): `adserve jobs cancel index_builder` stops it")
        figures.update(asyncio.run(_real_path(settings, ads, changes, rate, log)))
    if snapshot_ads:
        figures.update(asyncio.run(_snapshot_boot(settings, snapshot_ads, log)))
    return figures


def render(f: dict[str, Any]) -> str:
    m = f["machine"]
    lines = [f"adserve bench freshness on {m['cpu']}, {m['cores']} cores, Python {m['python']}"]
    if "lag_p50_s" in f:
        lines += [f"  {f['ads_loaded']:,} ads through PostgreSQL -> Debezium -> index builder -> {f['servers']} ad "
                  f"servers: {f['index_builder_ads_per_s']:,} ads/s end to end",
                  f"  {f['changes']:,} changes at {f['rate_per_s']:g}/s: commit -> applied lag p50 {f['lag_p50_s']} s, "
                  f"p99 {f['lag_p99_s']} s, max {f['lag_max_s']} s; per server {f['lag_per_server']}",
                  f"  baseline, commit -> cdc topic (Debezium alone): p50 {f.get('baseline_cdc_lag_p50_s')} s, "
                  f"p99 {f.get('baseline_cdc_lag_p99_s')} s"]
    if "snapshot_boot_s" in f:
        lines.append(f"  snapshot of {f['snapshot_ads']:,} ads: written in {f['snapshot_write_s']} s; a server "
                     f"booted from it in {f['snapshot_boot_s']} s (load {f['snapshot_load_s']} s); baseline, the "
                     f"same records applied one by one: {f['baseline_record_by_record_load_s']} s")
    return "\n".join(lines)
