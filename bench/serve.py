"""`adserve bench serve`: the ad server under load over loopback, from a separate process.

The server runs in its own process with synthetic ads (the shape of `adserve
bench decision`, built directly from columns rather than read from
serving.ads) and the real platform around it: user profiles and frequency
records in Redis (5,000 synthetic users, personalised requests), ad.served
and budget.spend to Kafka. This process generates the load with aiohttp:

  closed loop: C clients (1, 4, 16) sending back to back for --duration s;
  open loop:   Poisson arrivals at rising rates for --duration s each, latency
               measured from each request's scheduled send time (so a slow
               server cannot hide queueing), until p99 passes 100 ms or more
               than 1 % of answers are not 200.

Baseline, same run, same load: the same server whose retrieval is a scan of
every ad's compiled expression (core.targeting.matches), at the smallest size.

Figures (--json names; per-size figures are objects keyed by ad count):
  ads_loaded (list), max_rps_at_p99_under_100ms, p50_ms / p99_ms (open loop at
  that rate, end to end), stage_p99_ms (server-side, per funnel stage, same
  run), closed_loop (per concurrency: rps, p50_ms, p99_ms), open_loop (per
  rate: achieved_rps, p50_ms, p99_ms, non_200_share), baseline_max_rps_at_p99_under_100ms,
  baseline_open_loop."""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from typing import Any

import numpy as np
from sim.synthetic import ad_request_bodies, user_profiles
from sim.tokens import token_keys_from_env

USERS = 5_000
RATES = (25, 50, 100, 200, 300, 400, 600, 800, 1200)
BASELINE_RATES = (1, 2, 5, 10, 25, 50, 100)
CONCURRENCY = (1, 4, 16)
P99_LIMIT_MS = 100.0


def _server_process(n: int, baseline: bool, port_queue: Any) -> None:
    import gc

    from sim.synthetic import synthesize, targeting_of
    from core.targeting import matches
    from infra.platform import PlatformSettings
    from serving.adserver.app import ServerConfig
    from serving.adserver.main import start_ad_server
    from serving.adserver.state import ServingState
    from serving.decision.engine import DecisionEngine, EngineConfig

    index, campaigns, vocab = synthesize(n)
    gc.freeze()
    state = ServingState("bench-serve", index=index, campaigns=campaigns)
    config = ServerConfig(server_id="bench-serve", max_in_flight=256, engine=EngineConfig())
    engine = None
    if baseline:
        expressions = [targeting_of(index, r) for r in range(index.size)]

        def scan(terms, k):
            return np.array([r for r, t in enumerate(expressions) if matches(t, terms)], dtype=np.int32)

        engine = DecisionEngine(index, campaigns, config=config.engine, retrieve=scan)
    settings = PlatformSettings.from_env()

    async def main() -> None:
        running = await start_ad_server(bootstrap=settings.kafka_bootstrap, redis_host=settings.host,
                                        redis_port=settings.redis_port, keys=token_keys_from_env(), config=config,
                                        port=0, state=state, follow=False, engine=engine)
        port_queue.put(running.port)
        await asyncio.Event().wait()

    asyncio.run(main())


def _seed_users(vocab_audiences: int) -> None:
    import redis

    from infra.platform import PlatformSettings
    from streams import redis_keys

    s = PlatformSettings.from_env()
    client = redis.Redis(host=s.host, port=s.redis_port)
    pipe = client.pipeline(transaction=False)
    for user_id, profile in user_profiles(USERS, vocab_audiences, seed=11):
        pipe.delete(redis_keys.frequency_record(user_id))
        pipe.hset(redis_keys.user_profile(user_id), mapping=profile)
    pipe.execute()
    client.close()


def _bodies(count: int, seed: int) -> list[bytes]:
    import json

    return [json.dumps(body).encode() for body in ad_request_bodies(count, seed, USERS)]


def _summary(latencies: list[float], statuses: list[int], elapsed: float) -> dict[str, float]:
    ok = [lat for lat, st in zip(latencies, statuses) if st == 200]
    return {"achieved_rps": round(len(statuses) / elapsed, 1),
            "p50_ms": round(float(np.percentile(ok, 50)), 2) if ok else None,
            "p99_ms": round(float(np.percentile(ok, 99)), 2) if ok else None,
            "non_200_share": round(1 - len(ok) / max(1, len(statuses)), 4), "requests": len(statuses)}


async def _closed(url: str, bodies: list[bytes], clients: int, duration: float) -> dict[str, float]:
    import aiohttp

    latencies, statuses = [], []
    stop_at = time.perf_counter() + duration
    counter = iter(range(10**9))

    async def client(session) -> None:
        while time.perf_counter() < stop_at:
            body = bodies[next(counter) % len(bodies)]
            began = time.perf_counter()
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                await r.read()
                statuses.append(r.status)
            latencies.append((time.perf_counter() - began) * 1000)

    began = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return _summary(latencies, statuses, time.perf_counter() - began)


async def _open(url: str, bodies: list[bytes], rate: float, duration: float) -> dict[str, float]:
    import aiohttp

    rng = np.random.default_rng(int(rate))
    gaps = rng.exponential(1 / rate, int(rate * duration * 1.2) + 10)
    schedule = np.cumsum(gaps)
    schedule = schedule[schedule < duration]
    latencies, statuses = [], []

    async def one(session, body: bytes, scheduled: float) -> None:
        try:
            async with session.post(url, data=body, headers={"Content-Type": "application/json"},
                                    timeout=aiohttp.ClientTimeout(total=5)) as r:
                await r.read()
                statuses.append(r.status)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            statuses.append(599)
        latencies.append((time.perf_counter() - scheduled) * 1000)

    tasks = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=512)) as session:
        start = time.perf_counter()
        for i, offset in enumerate(schedule):
            delay = start + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session, bodies[i % len(bodies)], start + offset)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    return _summary(latencies, statuses, elapsed)


async def _stage_p99(base: str) -> dict[str, float]:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/debug/timings?clear=1") as r:
            rows = await r.json()
    stages = sorted({k for row in rows for k in row})
    return {s: round(float(np.percentile([row[s] for row in rows if s in row], 99)), 3) for s in stages if rows}


async def _clear(base: str) -> None:
    await _stage_p99(base)


def _measure(n: int, baseline: bool, duration: float, log) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    server = ctx.Process(target=_server_process, args=(n, baseline, ports), daemon=True)
    server.start()
    try:
        port = ports.get(timeout=900)
        base = f"http://127.0.0.1:{port}"
        url = f"{base}/v1/ads"
        bodies = _bodies(20_000, seed=n)
        out: dict[str, Any] = {"closed_loop": {}, "open_loop": {}}
        asyncio.run(_closed(url, bodies, 4, min(3.0, duration)))  # warm-up
        if not baseline:
            for clients in CONCURRENCY:
                out["closed_loop"][str(clients)] = asyncio.run(_closed(url, bodies, clients, duration))
                log(f"  closed loop, {clients} clients: {out['closed_loop'][str(clients)]}")
        best = None
        for rate in BASELINE_RATES if baseline else RATES:
            asyncio.run(_clear(base))
            result = asyncio.run(_open(url, bodies, rate, duration))
            result["stage_p99_ms"] = asyncio.run(_stage_p99(base))
            out["open_loop"][str(rate)] = result
            log(f"  open loop, {rate} req/s: {result}")
            if result["p99_ms"] is None or result["p99_ms"] > P99_LIMIT_MS or result["non_200_share"] > 0.01:
                break
            best = rate
        out["max_rps"] = best
        return out
    finally:
        server.terminate()
        server.join(10)


def run(sizes: list[int], duration: float = 10.0, log=print) -> dict[str, Any]:
    from bench.common import machine

    f: dict[str, Any] = {"benchmark": "serve", "machine": machine(), "duration_s": duration,
                         "ads_loaded": sorted(sizes)}
    for key in ("max_rps_at_p99_under_100ms", "p50_ms", "p99_ms", "stage_p99_ms", "closed_loop", "open_loop",
                "baseline_max_rps_at_p99_under_100ms", "baseline_open_loop"):
        f[key] = {}
    _seed_users(max(1_000, max(sizes) // 50))
    for n in sorted(sizes):
        log(f"ad server with {n:,} synthetic ads ...")
        m = _measure(n, False, duration, log)
        key = str(n)
        f["max_rps_at_p99_under_100ms"][key] = m["max_rps"]
        f["closed_loop"][key], f["open_loop"][key] = m["closed_loop"], m["open_loop"]
        at = m["open_loop"].get(str(m["max_rps"])) if m["max_rps"] else None
        f["p50_ms"][key] = at["p50_ms"] if at else None
        f["p99_ms"][key] = at["p99_ms"] if at else None
        f["stage_p99_ms"][key] = at["stage_p99_ms"] if at else None
        if n == min(sizes):
            log(f"baseline: the same server retrieving by scanning {n:,} compiled expressions ...")
            b = _measure(n, True, duration, log)
            f["baseline_max_rps_at_p99_under_100ms"][key] = b["max_rps"]
            f["baseline_open_loop"][key] = b["open_loop"]
    return f


def render(f: dict[str, Any]) -> str:
    m = f["machine"]
    lines = [f"adserve bench serve on {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Python {m['python']}"
             f" (load generator and server in separate processes over loopback; {f['duration_s']} s per step)"]
    for n in map(str, f["ads_loaded"]):
        lines.append(f"  {int(n):>9,} ads: max {f['max_rps_at_p99_under_100ms'][n]} req/s with p99 < 100 ms; "
                     f"at that rate p50 {f['p50_ms'][n]} ms, p99 {f['p99_ms'][n]} ms")
        lines.append(f"               server-side stage p99 (ms): {f['stage_p99_ms'][n]}")
        for c, r in f["closed_loop"][n].items():
            lines.append(f"               closed loop {c:>2} clients: {r['achieved_rps']} req/s, "
                         f"p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms")
        if n in f["baseline_max_rps_at_p99_under_100ms"]:
            steps = "; ".join(f"{rate}/s p99 {r['p99_ms']} ms" for rate, r in f["baseline_open_loop"][n].items())
            lines.append(f"               baseline (scan retrieval): max {f['baseline_max_rps_at_p99_under_100ms'][n]}"
                         f" req/s with p99 < 100 ms ({steps})")
    return "\n".join(lines)
