"""`adserve bench soak`: one ad server under a constant rate on loopback for --minutes, watched for slow growth.

The server is what `adserve serve ads --workers 0` runs (serving.adserver.main.start_ad_server) in a process of
its own, on --ads synthetic ads (the shape of `adserve bench decision`), with the real platform around it:
profiles and frequency records in Redis (5,000 synthetic users), ad.served and budget.spend to Kafka. The load
is the project's open-loop generator (Poisson arrivals at --rate, latency from each request's scheduled send
time) in this process, one minute at a time, on loopback only; it never stops early and never raises the
rate. Give --rate the highest rate the server holds (`adserve bench serve`'s max_rps_at_p99_under_100ms, for
one worker) to soak it at its limit.

Every --sample-s seconds: the server's resident memory (/proc/PID/smaps_rollup), its open file descriptors
(/proc/PID/fd) and the queue lengths of its Kafka producers (the served log's and the spend reporter's
librdkafka queues, plus the served log's own backlog), reported by the server itself. Every minute: the
achieved rate, p50 and p99 and the share of answers that were not 200.

Trends (pure, below: Theil-Sen slopes, robust to a noisy minute) over the run after its warm-up (the first
minute, or the first fifth of a shorter run), each held or not against TrendLimits:
  memory flat       resident memory grows under rss_mb_per_min
  p99 steady        p99 grows under p99_share_per_min of the run's median p99
  no fd growth      open descriptors grow under fds_per_min
  no queue growth   producer queues grow under queue_per_min records
Baseline, same run: the idle server's memory and descriptors before the first request.

Figures (--json names): machine, ads, rate, minutes, sample_s, idle_rss_mb, idle_fds, per_minute (minute,
achieved_rps, p50_ms, p99_ms, non_200_share, requests, rss_mb, fds, producer_queue), samples, slopes
(rss_mb_per_min, p99_ms_per_min, fds_per_min, producer_queue_per_min), limits, held (per trend), all_held."""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import time
from dataclasses import asdict, dataclass
from itertools import combinations
from typing import Any, Sequence

import numpy as np

MINUTES = 20
RATE = 200.0
ADS = 100_000
SAMPLE_S = 10.0
WARMUP_S = 60.0  # left out of the trends: connections opening, caches and buffers filling
WARMUP_SHARE = 0.2  # ... or this share of a run too short to spare a minute


@dataclass(frozen=True)
class TrendLimits:
    """How much growth a minute still counts as flat (20 minutes at each limit: 20 MB, 20 % of p99, 10 fds)."""

    rss_mb_per_min: float = 1.0
    p99_share_per_min: float = 0.01
    fds_per_min: float = 0.5
    queue_per_min: float = 20.0


@dataclass(frozen=True)
class Sample:
    """One look at the server, `at_s` seconds into the load."""

    at_s: float
    rss_mb: float
    fds: int
    producer_queue: int


@dataclass(frozen=True)
class Minute:
    minute: int
    achieved_rps: float
    p50_ms: float | None
    p99_ms: float | None
    non_200_share: float
    requests: int


def theil_sen_slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The median of the slopes between every two points (None with fewer than two distinct xs): a line fit
    that one outlying point cannot tilt."""
    slopes = [(y1 - y0) / (x1 - x0) for (x0, y0), (x1, y1) in combinations(zip(xs, ys), 2) if x1 != x0]
    return float(np.median(slopes)) if slopes else None


def warmup_s(minutes: int) -> float:
    """Seconds of the run the trends leave out: its first minute, or its first fifth when that is shorter."""
    return min(WARMUP_S, WARMUP_SHARE * minutes * 60.0)


def trends(samples: Sequence[Sample], per_minute: Sequence[Minute], limits: TrendLimits,
           skip_s: float) -> dict[str, Any]:
    """Slopes per minute after `skip_s` seconds, and whether each stays within its limit. A trend with too few
    points to fit is not held (a soak that measured nothing proves nothing)."""
    kept = [s for s in samples if s.at_s >= skip_s]
    minutes = [m for m in per_minute if (m.minute + 1) * 60.0 > skip_s and m.p99_ms is not None]

    def per_minute_slope(values: list[float], at_s: list[float]) -> float | None:
        slope = theil_sen_slope([t / 60.0 for t in at_s], values)
        return None if slope is None else round(slope, 4)

    at = [s.at_s for s in kept]
    slopes = {"rss_mb_per_min": per_minute_slope([s.rss_mb for s in kept], at),
              "fds_per_min": per_minute_slope([float(s.fds) for s in kept], at),
              "producer_queue_per_min": per_minute_slope([float(s.producer_queue) for s in kept], at),
              "p99_ms_per_min": per_minute_slope([float(m.p99_ms) for m in minutes],  # type: ignore[misc]
                                                 [m.minute * 60.0 for m in minutes])}
    median_p99 = float(np.median([m.p99_ms for m in minutes])) if minutes else None

    def under(slope: float | None, limit: float | None) -> bool:
        return slope is not None and limit is not None and slope <= limit

    held = {"memory_flat": under(slopes["rss_mb_per_min"], limits.rss_mb_per_min),
            "p99_steady": under(slopes["p99_ms_per_min"],
                                None if median_p99 is None else limits.p99_share_per_min * median_p99),
            "no_fd_growth": under(slopes["fds_per_min"], limits.fds_per_min),
            "no_queue_growth": under(slopes["producer_queue_per_min"], limits.queue_per_min)}
    return {"slopes": slopes, "median_p99_ms": median_p99, "held": held, "all_held": all(held.values())}


# ------------------------------------------------------------------------------------------------ the run
def _server_process(ads: int, ports: Any, samples: Any, sample_s: float) -> None:
    """The ad server on `ads` synthetic ads; reports (pid, port), then its producers' queues every sample_s."""
    from infra.platform import PlatformSettings
    from serving.adserver.app import ServerConfig
    from serving.adserver.main import AdServerDependencies, start_ad_server
    from serving.adserver.settings import AdServerSettings
    from serving.adserver.state import ServingState
    from sim.synthetic import synthesize
    from sim.tokens import token_keys_from_env

    index, campaigns, _ = synthesize(ads)
    state = ServingState("bench-soak", index=index, campaigns=campaigns)
    settings = PlatformSettings.from_env()

    async def main() -> None:
        running = await start_ad_server(AdServerSettings.on_platform(settings, token_keys_from_env(), port=0),
                                        AdServerDependencies(state=state),
                                        config=ServerConfig(server_id="bench-soak", max_in_flight=256), follow=False)
        ports.put((os.getpid(), running.port))
        while True:
            samples.put((time.time(), len(running.served_log.producer) + running.served_log.backlog()
                         + len(running.reporter.producer)))
            await asyncio.sleep(sample_s)

    asyncio.run(main())


def _look(pid: int) -> tuple[float, int]:
    """(resident MB, open descriptors) of a process."""
    from serving.adserver.tier import private_memory_bytes

    return private_memory_bytes(pid)["rss"] / 2**20, len(os.listdir(f"/proc/{pid}/fd"))


def _latest_queue(samples: Any, last: int) -> int:
    """The newest producer-queue length the server reported (`last` when it reported nothing new)."""
    import queue

    while True:
        try:
            _, last = samples.get_nowait()
        except queue.Empty:
            return last


def run(minutes: int = MINUTES, rate: float = RATE, ads: int = ADS, sample_s: float = SAMPLE_S,
        limits: TrendLimits = TrendLimits(), log=print) -> dict[str, Any]:
    from bench import loadgen
    from bench.common import machine
    from bench.serve import _bodies, _seed_users

    _seed_users(max(1_000, ads // 50))
    ctx = mp.get_context("spawn")
    ports, reports = ctx.Queue(), ctx.Queue()
    server = ctx.Process(target=_server_process, args=(ads, ports, reports, sample_s), daemon=True)
    server.start()
    try:
        pid, port = ports.get(timeout=1800)
        url = f"http://127.0.0.1:{port}/v1/ads"
        idle_rss_mb, idle_fds = _look(pid)
        log(f"ad server (pid {pid}) on {ads:,} synthetic ads: idle {idle_rss_mb:.1f} MB, {idle_fds} fds; "
            f"{rate:g} req/s for {minutes} min ...")
        bodies = _bodies(20_000, seed=ads)
        samples: list[Sample] = []
        per_minute: list[Minute] = []
        queue_now = 0
        began = time.monotonic()

        async def watch(until: float) -> None:
            nonlocal queue_now
            while time.monotonic() < until:
                rss_mb, fds = _look(pid)
                queue_now = _latest_queue(reports, queue_now)
                samples.append(Sample(round(time.monotonic() - began, 1), round(rss_mb, 2), fds, queue_now))
                await asyncio.sleep(sample_s)

        async def minute_of_load() -> dict[str, Any]:
            watcher = asyncio.ensure_future(watch(time.monotonic() + 60.0))
            result = await loadgen.open_loop(url, bodies, rate, 60.0)
            await watcher
            return result

        for minute in range(minutes):
            result = asyncio.run(minute_of_load())
            per_minute.append(Minute(minute, result["achieved_rps"], result["p50_ms"], result["p99_ms"],
                                     result["non_200_share"], result["requests"]))
            last = samples[-1]
            log(f"  minute {minute + 1}: {result['achieved_rps']} req/s, p50 {result['p50_ms']} ms, p99 "
                f"{result['p99_ms']} ms, non-200 {result['non_200_share']:.2%}; {last.rss_mb} MB, {last.fds} fds, "
                f"producer queue {last.producer_queue}")
    finally:
        server.terminate()
        server.join(30)
    found = trends(samples, per_minute, limits, warmup_s(minutes))
    return {"benchmark": "soak", "machine": machine(), "ads": ads, "rate": rate, "minutes": minutes,
            "sample_s": sample_s, "idle_rss_mb": round(idle_rss_mb, 1), "idle_fds": idle_fds,
            "per_minute": [{**asdict(m), "rss_mb": _at_minute_end(samples, m.minute, "rss_mb"),
                            "fds": _at_minute_end(samples, m.minute, "fds"),
                            "producer_queue": _at_minute_end(samples, m.minute, "producer_queue")}
                           for m in per_minute],
            "samples": [asdict(s) for s in samples], "limits": asdict(limits), **found}


def _at_minute_end(samples: Sequence[Sample], minute: int, name: str) -> Any:
    inside = [s for s in samples if s.at_s < (minute + 1) * 60.0]
    return getattr(inside[-1], name) if inside else None


def render(f: dict[str, Any]) -> str:
    m = f["machine"]
    lines = [f"adserve bench soak on {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Python {m['python']}: "
             f"one ad server, {f['ads']:,} ads, {f['rate']:g} req/s open loop for {f['minutes']} min (loopback)",
             f"  idle (baseline): {f['idle_rss_mb']} MB resident, {f['idle_fds']} fds"]
    for row in f["per_minute"]:
        lines.append(f"  minute {row['minute'] + 1:>2}: {row['achieved_rps']} req/s, p50 {row['p50_ms']} ms, "
                     f"p99 {row['p99_ms']} ms, non-200 {row['non_200_share']:.2%}; {row['rss_mb']} MB, "
                     f"{row['fds']} fds, producer queue {row['producer_queue']}")
    s, held, limits = f["slopes"], f["held"], f["limits"]
    lines.append(f"  slopes per minute: memory {s['rss_mb_per_min']} MB ({_word(held['memory_flat'])}, limit "
                 f"{limits['rss_mb_per_min']}), p99 {s['p99_ms_per_min']} ms ({_word(held['p99_steady'])}, limit "
                 f"{limits['p99_share_per_min']:.0%} of the median {f['median_p99_ms']} ms), fds {s['fds_per_min']} "
                 f"({_word(held['no_fd_growth'])}), producer queue {s['producer_queue_per_min']} "
                 f"({_word(held['no_queue_growth'])})")
    return "\n".join(lines)


def _word(held: bool) -> str:
    return "held" if held else "NOT held"
