"""How much of the index each worker of a shared-port tier holds privately after serving traffic.

`python -m tests.tier_memory ADS WORKERS REQUESTS MODE` builds an index of ADS synthetic ads in a parent
process (as `adserve serve ads --reuse-port` loads a snapshot), forks WORKERS ad servers through the tier's
Supervisor, all on one SO_REUSEPORT port, sends REQUESTS ad requests to that port (a new connection each,
so the kernel spreads them over the workers), then reads every worker's /proc/PID/smaps_rollup and prints
one JSON object. MODE "shared" serves the parent's index; "learned" too, after each worker applied an
ad-feature snapshot to every ad (as the registry follower does at start); "own" has each worker build an index
of its own from the same records (what a worker without a shared snapshot does), the case the measurement must
catch.

Only Kafka and Redis are stood in (an in-memory served log and a profile store that answers one profile):
the request path, the index and the decision engine are the server's own."""
from __future__ import annotations

import asyncio
import gc
import json
import random
import signal
import socket
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib import request as urlrequest

import numpy as np
from aiohttp import web

from core.tokens import TokenKeys
from serving.adserver.app import AdServer, ServerConfig
from serving.adserver.state import ServingState
from serving.adserver.tier import Supervisor, private_memory_bytes
from serving.frequency_store import UserContext
from sim.synthetic import STORE_AGE_BANDS, STORE_COUNTRIES, STORE_PLACEMENTS, synthetic_serving_records

NOW_MS = 1_800_316_800_000


class DroppedServedLog:
    """The served log stood in: counts the records it is handed and keeps none (no memory of its own)."""

    def __init__(self) -> None:
        self.count = 0

    def put(self, key: bytes, record: dict[str, Any]) -> None:
        self.count += 1

    def full(self) -> bool:
        return False


class OneProfileStore:
    """Redis stood in: every user has an age band and a few interests, and no frequency record."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    async def read(self, user_id: str | None, member_keys: list[str] | None = None, *,
                   profile: bool = True) -> UserContext:
        interests = ",".join(f"topic{self.rng.randrange(500)}" for _ in range(5))
        return UserContext(profile={"age_band": self.rng.choice(STORE_AGE_BANDS), "interests": interests})

    async def record_served(self, user_id: str, campaign_ids: list[int], today: int) -> int:
        return 1

    async def close(self) -> None:
        return None


def build_state(records: dict[str, list[dict[str, Any]]]) -> ServingState:
    state = ServingState("tier-memory")
    state.load_snapshot(((topic, r) for topic, rows in records.items() for r in rows), NOW_MS)
    return state


def ad_server(state: ServingState, worker: int) -> AdServer:
    return AdServer(ServerConfig(server_id=f"tier-memory-w{worker}", max_in_flight=10_000, admission_wait_ms=60_000,
                                 deadline_ms=60_000), state, OneProfileStore(worker),  # type: ignore[arg-type]
                    TokenKeys({"k1": b"0" * 32}, "k1"), served_log=DroppedServedLog(), ready=lambda: True)


def warm_request_path(state: ServingState) -> None:
    """Serve a few requests in the parent before it forks, so every module the request path imports lazily is
    imported (and compiled, in a fresh checkout) once, in pages the workers share, as in a parent that has
    served; otherwise whichever tier ran first would count that in its workers' private memory."""
    async def main() -> None:
        runner = web.AppRunner(ad_server(state, -1).app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        for seed in range(20):
            await asyncio.to_thread(ask, port, random.Random(seed))
        await runner.cleanup()
    asyncio.run(main())


def run_worker(state: ServingState | None, records: dict[str, list[dict[str, Any]]], port: int,
               ready_dir: Path, learned: bool, worker: int) -> None:
    """One worker: the ad server's app on the shared port until SIGTERM (`state` None: build its own index);
    a file in `ready_dir` says it listens."""
    if state is None:
        state = build_state(records)
    elif learned:  # an ad-feature snapshot for every ad, as the registry follower installs one at start
        ids = state.index.ad_id.data[:state.index.size]
        n = len(ids)
        state.index.apply_learned(ids, np.full(n, 0.02), np.full(n, 2.0), np.full(n, 98.0), np.full(n, 1.0))

    async def main() -> None:
        app = ad_server(state, worker).app()

        async def tag(request: web.Request, response: web.StreamResponse) -> None:
            response.headers["X-Worker"] = str(worker)
        app.on_response_prepare.append(tag)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, reuse_port=True).start()
        (ready_dir / str(worker)).write_text("")
        stopped = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
        await stopped.wait()
        await runner.cleanup()
    asyncio.run(main())


def ask(port: int, rng: random.Random) -> tuple[int, str, int]:
    """One ad request on a new connection: (status, the worker that answered, slots filled)."""
    body = {"request_id": uuid.uuid4().hex, "user_id": f"user-{rng.randrange(10**6)}",
            "placement": rng.choice(STORE_PLACEMENTS), "location": rng.choice(STORE_COUNTRIES),
            "consent": {"personalization": True}, "slots": [{"position": 1}, {"position": 2}]}
    req = urlrequest.Request(f"http://127.0.0.1:{port}/v1/ads", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json", "Connection": "close"})
    with urlrequest.urlopen(req, timeout=30) as answer:
        slots = json.loads(answer.read())["slots"]
        return answer.status, answer.headers["X-Worker"], sum(1 for s in slots if s.get("ad_id"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(ready_dir: Path, workers: int, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(list(ready_dir.iterdir())) < workers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"not every worker listens after {timeout_s:.0f} s")
        time.sleep(0.1)


def measure(ads: int, workers: int, requests: int, mode: str) -> dict[str, Any]:
    records = synthetic_serving_records(ads)
    warm_request_path(build_state(synthetic_serving_records(100)))  # what a build and a request import: not the index
    gc.collect()
    before = private_memory_bytes_self()
    state = build_state(records) if mode != "own" else None
    gc.collect()
    after = private_memory_bytes_self()
    port = free_port()
    ready_dir = Path(tempfile.mkdtemp(prefix="tier-memory-"))
    supervisor = Supervisor(workers, lambda worker: run_worker(state, records, port, ready_dir,
                                                                       mode == "learned", worker), grace_s=30)
    supervisor.start()
    try:
        wait_listening(ready_dir, workers)
        rng = random.Random(7)
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: ask(port, random.Random(rng.random())), range(requests)))
        memory = {str(worker): private_memory_bytes(pid) for worker, pid in supervisor.pids.items()}
    finally:
        supervisor.stop()
    answered: dict[str, int] = {}
    for _, worker, _ in answers:
        answered[worker] = answered.get(worker, 0) + 1
    return {"ads": ads, "workers": workers, "mode": mode, "requests": requests,
            "statuses": sorted({status for status, _, _ in answers}),
            "filled_slots": sum(filled for _, _, filled in answers), "answered_by_worker": answered,
            "index_bytes": (after["uss"] - before["uss"]) if state is not None else None,
            "index_columns_bytes": sum(state.index.memory_bytes().values()) if state is not None else None,
            "worker_memory": memory}


def private_memory_bytes_self() -> dict[str, int]:
    import os

    return private_memory_bytes(os.getpid())


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])))
