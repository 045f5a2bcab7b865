"""The request path makes no blocking call: a Kafka producer stuck inside `produce` and a Redis that never
answers one user hold up nothing but that user's own request.

Nothing here is timed. The stuck parts wait on events the test sets only at the end, so a request that
completes while they are stuck proves the event loop kept running; were anything produced, encoded or
awaited on the loop, the second request could not complete and the test would hang up to its guard and
fail. A watchdog thread releases everything after GUARD_S, so even a loop blocked inside `produce` ends
the test, with a failure naming the cause."""
from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from core.spend import SpendAccumulator
from core.tokens import TokenKeys
from schemas import topics
from serving.adserver.app import AdServer, ServerConfig
from serving.adserver.offloop import ServedLog, SpendReporter
from serving.adserver.state import ServingState
from serving.frequency_store import UserStore
from tests.redis_doubles import Pipelined

PLACEMENT = "loop-test"
GUARD_S = 60.0  # only a guard against a hang; no assertion depends on how long anything takes


class StuckProducer:
    """A confluent_kafka.Producer stand-in whose `produce` blocks its caller until `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.produced: list[tuple[str, Any]] = []

    def produce(self, topic: str, key: bytes | None = None, value: bytes | None = None, **kwargs: Any) -> None:
        self.entered.set()
        self.release.wait()
        self.produced.append((topic, key))
        callback = kwargs.get("on_delivery")
        if callback is not None:
            callback(None, None)

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0

    def list_topics(self, topic: str, timeout: float = 0) -> Any:
        self.release.wait()
        partitions = {0: None, 1: None}
        return type("Meta", (), {"topics": {topic: type("T", (), {"partitions": partitions})()}})()


class SilentRedis(Pipelined):
    """An async Redis stand-in: reads for `stuck_user` wait until `answer` is set; everything else is empty."""

    def __init__(self, stuck_user: str) -> None:
        self.stuck_user = stuck_user
        self.answer = asyncio.Event()

    async def hgetall(self, key: str) -> dict:
        if self.stuck_user in key:
            await self.answer.wait()
        return {}

    async def close(self) -> None:
        return None


def _state() -> ServingState:
    state = ServingState("loop-test")
    state.apply(topics.SERVING_CAMPAIGNS, {
        "campaign_id": 1, "advertiser_id": 1, "version": 1, "event_time": 1_000, "status": "ACTIVE",
        "bid_type": "CPM", "daily_budget_micros": 10**9, "currency": "USD", "timezone": "UTC", "flight_start": None,
        "flight_end": None, "dayparts": [], "cap_per_day": None, "cap_per_week": None, "cpa_target_micros": None},
        2_000)
    state.apply(topics.SERVING_ADS, {
        "ad_id": 10, "campaign_id": 1, "advertiser_id": 1, "version": 1, "event_time": 1_000, "removed": False,
        "bid_type": "CPM", "bid_micros": 5_000_000, "quality_prior": 0.0, "creative_ref": "c",
        "landing_url": "https://x.example/", "static_score": 1.0,
        "targeting": [{"attribute": "placement", "values": [PLACEMENT], "excluded": False}]}, 2_000)
    return state


def _body(user: str) -> dict:
    return {"request_id": uuid.uuid4().hex, "user_id": user, "placement": PLACEMENT, "slots": [{"position": 1}]}


def test_a_stuck_producer_and_a_silent_redis_delay_no_other_request():
    producer, spend_producer = StuckProducer(), StuckProducer()
    watchdog_fired = threading.Event()

    def watchdog() -> None:
        watchdog_fired.set()
        producer.release.set()
        spend_producer.release.set()
    timer = threading.Timer(GUARD_S, watchdog)
    timer.daemon = True
    timer.start()

    async def scenario() -> tuple[list[int], int]:
        redis = SilentRedis("stuck-user")
        store = UserStore("127.0.0.1", 1, read_timeout_s=3600)  # the stuck read ends only when answered
        store.redis = redis  # type: ignore[assignment]

        async def record_served(*args: Any, **kwargs: Any) -> int:
            await redis.answer.wait()
            return 1
        store._record = record_served  # type: ignore[assignment]
        served_log = ServedLog(producer)
        server = AdServer(ServerConfig(server_id="loop-test"), _state(), store,
                          TokenKeys({"k1": b"0" * 32}, "k1"), served_log=served_log, ready=lambda: True)
        reporter = SpendReporter(server.spend, producer=spend_producer)  # the real reporter, stuck producer
        test_server = TestServer(server.app())
        await test_server.start_server()
        url = str(test_server.make_url("/v1/ads"))
        try:
            async with aiohttp.ClientSession() as session:
                async def ask(user: str) -> int:
                    async with session.post(url, json=_body(user)) as r:
                        await r.read()
                        return r.status

                first = await asyncio.wait_for(ask("user-1"), GUARD_S)  # its served record sticks in produce
                await asyncio.wait_for(asyncio.to_thread(producer.entered.wait), GUARD_S)
                reporter.tick(1_000)  # the spend reporter's thread sticks in produce too
                stuck = asyncio.ensure_future(ask("stuck-user"))  # waits on Redis
                others = [await asyncio.wait_for(ask(f"user-{i}"), GUARD_S) for i in range(2, 6)]
                assert not stuck.done() and not producer.release.is_set()
                redis.answer.set()
                producer.release.set()
                spend_producer.release.set()
                last = await asyncio.wait_for(stuck, GUARD_S)
                await asyncio.wait_for(server.drain(), GUARD_S)
                return [first, *others, last], len(producer.produced)
        finally:
            producer.release.set()
            spend_producer.release.set()
            await test_server.close()
            served_log.close(GUARD_S)
            reporter.close(GUARD_S)

    statuses, _ = asyncio.run(scenario())
    timer.cancel()
    assert not watchdog_fired.is_set(), "a request waited for the stuck producer: something blocked the loop"
    assert statuses == [200] * 6
    assert served_log_drained(producer)


def served_log_drained(producer: StuckProducer) -> bool:
    """Every answered request's ad.served record reached the producer once it was released."""
    return len([t for t, _ in producer.produced if t == topics.AD_SERVED]) == 6
