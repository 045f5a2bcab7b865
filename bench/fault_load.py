"""The fault matrix's load and what it reads back: `Traffic` sends the run's ad requests over the live ad servers
and each filled slot's impression beacon through the tracker, recording every answer and beacon; `Feed` follows
the run's billed totals and the platform's budget leases and states for the run's campaigns. Both record, and
judge nothing (bench.fault_checks does)."""
from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from typing import Any, Callable

from bench.fault_checks import Answer, Beacon
from bench.fault_plan import now_ms
from schemas import topics as topic_names

SLOTS = 3  # slots asked for in every ad request, all on the run's own placement
# The ad server's load shedding: refused at admission, or the deadline passed before the decision.
OVERLOAD_ANSWERS = ("overloaded", "deadline passed")
USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) fault-matrix"


class Feed(threading.Thread):
    """Follows the run's billed totals and the platform's budget.leases and budget.state for the run's
    campaigns."""

    def __init__(self, bootstrap: str, billed_topic: str, campaign_ids: set[int]):
        super().__init__(daemon=True)
        self.bootstrap, self.billed_topic, self.campaign_ids = bootstrap, billed_topic, campaign_ids
        self.billed: list[dict[str, Any]] = []
        self.leases: list[dict[str, Any]] = []
        self.states: dict[int, str] = {}  # campaign id -> its latest budget state
        self.halt = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer

        from schemas.codec import AvroCodec

        codec = AvroCodec()
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"faults-feed-{uuid.uuid4().hex[:8]}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([self.billed_topic, topic_names.BUDGET_LEASES, topic_names.BUDGET_STATE])
        while not self.halt.is_set():
            for message in consumer.consume(500, timeout=0.3):
                if message.error() is not None:
                    continue
                try:
                    record = codec.decode(message.value())
                except Exception:  # noqa: BLE001 - another writer's record on the shared topic: not ours
                    continue
                if int(record.get("campaign_id", -1)) not in self.campaign_ids:
                    continue
                if message.topic() == topic_names.BUDGET_STATE:
                    self.states[int(record["campaign_id"])] = str(record["state"])
                else:
                    (self.billed if message.topic() == self.billed_topic else self.leases).append(record)
        consumer.close()

    def billed_through_ms(self) -> int:
        return max((int(r["event_time"]) for r in self.billed), default=0)

    def outstanding_micros(self, campaign_ids: set[int], at_ms: int) -> int:
        """Slices of these campaigns granted before `at_ms` and not expired by it."""
        return sum(int(r["amount_micros"]) for r in self.leases if int(r["campaign_id"]) in campaign_ids
                   and int(r["event_time"]) <= at_ms < int(r["expires_at"]))


class Traffic(threading.Thread):
    """The day's load: `rate` ad requests a second over the live ad servers, each filled slot's impression
    beacon through the tracker; every answer and beacon recorded with its wall time."""

    def __init__(self, servers: Callable[[], list[str]], placement: str, rate: float, keys):
        super().__init__(daemon=True)
        self.servers, self.placement, self.rate, self.keys = servers, placement, rate, keys
        self.answers: list[Answer] = []
        self.beacons: list[Beacon] = []
        self.halt = threading.Event()
        self.seq = 0
        self.request_ids = uuid.uuid4().hex[:12]

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout, headers={"User-Agent": USER_AGENT}) as http:
            pending: set[asyncio.Task] = set()
            began = time.monotonic()
            while not self.halt.is_set():
                self.seq += 1
                servers = self.servers()
                if servers:
                    task = asyncio.create_task(self._one(http, servers[self.seq % len(servers)], self.seq))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                ahead = began + self.seq / self.rate - time.monotonic()
                await asyncio.sleep(max(0.0, ahead))
            if pending:
                await asyncio.wait(pending, timeout=10)

    async def _one(self, http, server: str, seq: int) -> None:
        import aiohttp

        # Every request id is sent twice (requests 2k and 2k+1): a client's id is only echoed, so both are billed.
        body = {"request_id": f"{self.request_ids}-{seq // 2}", "user_id": f"fault-user-{random.randrange(10**9)}",
                "placement": self.placement, "slots": [{"position": i + 1} for i in range(SLOTS)]}
        sent = time.time()
        try:
            async with http.post(f"{server}/v1/ads", json=body) as r:
                status, answer = r.status, await r.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            self.answers.append(Answer(sent, time.time(), server, None))
            return
        slots = [s for s in (answer.get("slots") or []) if s.get("ad_id")] if status == 200 else []
        error = str(answer.get("error", "")) if status != 200 else ""
        self.answers.append(Answer(sent, time.time(), server, status, tuple(int(s["campaign_id"]) for s in slots),
                                   status == 503 and error.startswith(OVERLOAD_ANSWERS), error[:120]))
        await asyncio.gather(*(self._beacon(http, s, seq) for s in slots))

    async def _beacon(self, http, slot: dict[str, Any], seq: int) -> None:
        import aiohttp

        claims = self.keys.verify(slot["token"], now_ms())
        try:
            async with http.get(slot["impression_url"]) as r:
                status = r.status
        except (aiohttp.ClientError, asyncio.TimeoutError):
            status = None
        self.beacons.append(Beacon(claims.impression_id, claims.campaign_id, claims.price_micros, status, seq))
