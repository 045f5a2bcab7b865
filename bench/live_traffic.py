"""The live loop's simulated users (`adserve bench live-loop`): ad requests and their beacons from several
client processes, each impression streamed to a file as it happens.

A phase of n requests is split over `processes` client processes (spawned, each with its own asyncio loop,
`concurrency` requests in flight and its own random stream from the run's seed). Each rebuilds the world from its
parameters (sim.live_world is pure), sends its requests to the ad server, fetches every filled slot's impression
beacon and, with the world's true probability, its click beacon, and appends one line per impression to its own
file in the run's folder: nothing of the traffic is held in memory, so a run's size is bounded by the disk,
not by RAM. A shared counter of requests sent drives the parent's progress bar and the new ads' arrival.

An impression line (tab-separated, IMPRESSION_FIELDS): impression id, phase, ad id, placement, country, slot
position, true click probability, clicked (0/1)."""
from __future__ import annotations

import asyncio
import multiprocessing
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

IMPRESSION_FIELDS = ("impression_id", "phase", "ad_id", "placement", "country", "position", "true_p", "clicked")


@dataclass(frozen=True)
class WorldSpec:
    """What rebuilds the run's world in a client process (sim.live_world.make_live_world's arguments)."""

    seed: int
    advertisers: int
    users: int
    new_ad_share: float
    id_base: int

    def build(self):
        from sim.live_world import make_live_world

        return make_live_world(self.seed, advertisers=self.advertisers, users=self.users,
                               new_ad_share=self.new_ad_share, id_base=self.id_base)[0]


@dataclass(frozen=True)
class ClientSpec:
    world: WorldSpec
    server: str
    placement_suffix: str
    phase: str
    requests: int
    concurrency: int
    seed: int
    out: str  # the client's impressions file (appended)


@dataclass
class Tally:
    """A phase's answers: status -> count, and the reasons of the failures ("status body" -> count)."""

    statuses: dict[int, int]
    failures: dict[str, int]

    def add(self, other: "Tally") -> None:
        for mine, theirs in ((self.statuses, other.statuses), (self.failures, other.failures)):
            for key, n in theirs.items():
                mine[key] = mine.get(key, 0) + n


_sent = None  # the shared count of requests sent, in a client process


def _init(counter) -> None:
    global _sent
    _sent = counter


def client(spec: ClientSpec) -> Tally:
    """One client process's share of a phase (runs in the spawned process)."""
    world = spec.world.build()
    rng = np.random.default_rng(spec.seed)
    tally = Tally({}, {})
    with open(spec.out, "a", encoding="utf-8", buffering=1 << 16) as out:
        asyncio.run(_traffic(world, spec, rng, tally, out))
    return tally


async def _traffic(world, spec: ClientSpec, rng: np.random.Generator, tally: Tally, out) -> None:
    import aiohttp

    from sim.live_world import pick_placement

    def failed(reason: str) -> None:
        tally.failures[reason] = tally.failures.get(reason, 0) + 1

    connector = aiohttp.TCPConnector(limit=spec.concurrency * 3)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as http:
        queue: asyncio.Queue = asyncio.Queue(maxsize=spec.concurrency * 4)

        async def one(user: int, placement: str, country: str) -> None:
            body = {"request_id": uuid.uuid4().hex, "user_id": f"live-u{user}",
                    "placement": placement + spec.placement_suffix, "location": country,
                    "consent": {"personalization": True}, "slots": [{"position": p} for p in (1, 2)]}
            try:
                async with http.post(f"{spec.server}/v1/ads", json=body) as r:
                    tally.statuses[r.status] = tally.statuses.get(r.status, 0) + 1
                    if r.status != 200:
                        failed(f"{spec.phase}: {r.status} {(await r.text())[:60]}")
                        return
                    answer = await r.json()
            except (asyncio.TimeoutError, aiohttp.ClientError):
                tally.statuses[-1] = tally.statuses.get(-1, 0) + 1
                return
            for slot in answer["slots"]:
                if not slot.get("ad_id"):
                    continue
                row = int(np.searchsorted(world.ad_id, slot["ad_id"]))
                p = float(world.true_ctr(user, np.array([row]), placement, int(slot["position"]))[0])
                clicked = bool(rng.random() < p)
                out.write(f"{slot['impression_id']}\t{spec.phase}\t{slot['ad_id']}\t{placement}\t{country}\t"
                          f"{slot['position']}\t{p!r}\t{int(clicked)}\n")
                try:
                    async with http.get(slot["impression_url"]) as b:
                        await b.read()
                    if clicked:
                        async with http.get(slot["click_url"], allow_redirects=False) as c:
                            await c.read()
                except (asyncio.TimeoutError, aiohttp.ClientError):
                    failed("beacon not delivered")

        async def worker() -> None:
            while True:
                item = await queue.get()
                if item is None:
                    return
                try:
                    await one(*item)
                except (asyncio.TimeoutError, aiohttp.ClientError, ValueError) as exc:  # counted, never fatal
                    failed(f"client {type(exc).__name__}")

        workers = [asyncio.create_task(worker()) for _ in range(spec.concurrency)]
        for _ in range(spec.requests):
            user = int(rng.integers(world.users))
            await queue.put((user, pick_placement(rng), str(world.user_country[user])))
            if _sent is not None:
                with _sent.get_lock():
                    _sent.value += 1
        for _ in workers:
            await queue.put(None)
        await asyncio.gather(*workers)


class Clients:
    """The run's client processes, kept for every phase (spawned once: each imports numpy and aiohttp)."""

    def __init__(self, processes: int, folder: Path):
        context = multiprocessing.get_context("spawn")
        self.processes, self.folder = processes, folder
        self.sent = context.Value("q", 0)
        self.pool = context.Pool(processes, initializer=_init, initargs=(self.sent,))

    def files(self) -> list[Path]:
        return [self.folder / f"impressions-{i}.tsv" for i in range(self.processes)]

    def phase(self, world: WorldSpec, server: str, placement_suffix: str, phase: str, requests: int,
              concurrency: int, seed: int, tick: Callable[[int], None]) -> Tally:
        """Run a phase of `requests` over the processes; `tick(sent so far in the run)` about every 0.5 s."""
        shares = [requests // self.processes + (1 if i < requests % self.processes else 0)
                  for i in range(self.processes)]
        specs = [ClientSpec(world, server, placement_suffix, phase, share, concurrency,
                            seed * 1_000 + i, str(path)) for i, (share, path) in enumerate(zip(shares, self.files()))]
        pending = [self.pool.apply_async(client, (spec,)) for spec in specs]
        while not all(p.ready() for p in pending):
            tick(self.sent.value)
            time.sleep(0.5)
        tick(self.sent.value)
        tally = Tally({}, {})
        for p in pending:
            tally.add(p.get())  # a client's exception surfaces here
        return tally

    def close(self) -> None:
        self.pool.terminate()
        self.pool.join()


def impressions(files: list[Path]) -> Iterator[tuple[str, str, int, str, str, int, float, bool]]:
    """Every impression line of the run's files, typed."""
    for path in files:
        if not path.exists():
            continue
        with open(path, encoding="utf-8") as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) != len(IMPRESSION_FIELDS):
                    continue  # a line cut by a killed client
                iid, phase, ad, placement, country, position, p, clicked = parts
                yield iid, phase, int(ad), placement, country, int(position), float(p), clicked == "1"


def summary(files: list[Path]) -> dict[str, Any]:
    """Impressions and clicks over the files."""
    n = clicks = 0
    for row in impressions(files):
        n += 1
        clicks += row[7]
    return {"impressions": n, "clicks": clicks}
