"""A small pacing world for the dashboard's integration tests: four campaigns of two advertisers published to a
test's own budget-state and campaigns topics, a pacing day in Redis for one of them, and the dashboard server
started on them (its own event loop on a thread, any free port), read over HTTP.

The campaigns (ids unique per run, so Redis keys of other tests are never touched):
  on_pace    advertiser A, ACTIVE, OPEN, committed = target
  audience   advertiser A, ACTIVE, OPEN, at half its target, delivery limit AUDIENCE
  paused     advertiser B, PAUSED, OPEN, committed = target
  spent      advertiser B, ACTIVE, STOPPED at its budget"""
from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from schemas import topics
from schemas.codec import AvroCodec
from serving.dashboard.app import DashboardSettings, start_dashboard
from streams import kafka, redis_keys
from streams.pacing_store import PacingStore

DAY = "2026-03-10"
T0_MS = 1_773_140_400_000  # 2026-03-10 11:00 UTC
BUDGET = 100_000_000
WAIT_S = 60.0
CAMPAIGN_TYPE = topics.record_type(topics.SERVING_CAMPAIGNS)
STATE_TYPE = topics.record_type(topics.BUDGET_STATE)


class DashboardWorld:
    def __init__(self, platform, fresh_topics, auth=None, token: str | None = None):
        """auth: the dashboard's DashboardAuth (None: open); token: the bearer token `get` sends."""
        self.platform = platform
        self.auth, self.token = auth, token
        self.state_topic, self.campaigns_topic = fresh_topics("dashboard-budget-state", "dashboard-campaigns",
                                                              partitions=2)
        base = 880_000_000 + random.randrange(1_000_000) * 10
        self.advertiser_a, self.advertiser_b = base + 1, base + 2
        self.on_pace, self.audience, self.paused, self.spent = base + 1, base + 2, base + 3, base + 4
        self.ids = (self.on_pace, self.audience, self.paused, self.spent)
        self.codec = AvroCodec()
        self.store = PacingStore(platform.redis_url)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.runner = None
        self.port = 0

    # ------------------------------------------------------------ records
    def campaign(self, campaign_id: int, advertiser_id: int, status: str = "ACTIVE") -> dict[str, Any]:
        return {"campaign_id": campaign_id, "advertiser_id": advertiser_id, "version": 1, "event_time": T0_MS,
                "status": status, "bid_type": "CPC", "daily_budget_micros": BUDGET, "currency": "USD",
                "timezone": "UTC", "dayparts": []}

    def state(self, campaign_id: int, kind: str, committed: int, target: int, *, at_ms: int = T0_MS,
              limit: str | None = None, p: float = 0.5) -> dict[str, Any]:
        return {"campaign_id": campaign_id, "event_time": at_ms, "budget_day": DAY, "state": kind,
                "participation_probability": p, "bid_multiplier": 1.0, "daily_budget_micros": BUDGET,
                "billed_spend_micros": committed * 9 // 10, "committed_spend_micros": committed,
                "remaining_micros": max(0, BUDGET - committed), "target_spend_micros": target,
                "delivery_limit": limit}

    def publish_campaigns(self) -> None:
        records = [self.campaign(self.on_pace, self.advertiser_a), self.campaign(self.audience, self.advertiser_a),
                   self.campaign(self.paused, self.advertiser_b, "PAUSED"),
                   self.campaign(self.spent, self.advertiser_b)]
        kafka.produce_all(self.platform.kafka_bootstrap, self.campaigns_topic,
                          [(str(r["campaign_id"]).encode(), self.codec.encode(CAMPAIGN_TYPE, r), T0_MS)
                           for r in records])

    def publish_states(self, *states: dict[str, Any]) -> None:
        kafka.produce_all(self.platform.kafka_bootstrap, self.state_topic,
                          [(str(s["campaign_id"]).encode(), self.codec.encode(STATE_TYPE, s), s["event_time"])
                           for s in states])

    def initial_states(self) -> list[dict[str, Any]]:
        return [self.state(self.on_pace, "OPEN", 40_000_000, 40_000_000),
                self.state(self.audience, "OPEN", 20_000_000, 40_000_000, limit="AUDIENCE", p=1.0),
                self.state(self.paused, "OPEN", 30_000_000, 30_000_000),
                self.state(self.spent, "STOPPED", BUDGET, 60_000_000, p=0.001)]

    def write_minutes(self, campaign_id: int, minutes: range) -> None:
        """Pacing points for these local minutes, as the budget job writes them (streams.pacing_store)."""
        self.store.write({"campaign_id": campaign_id, "budget_day": DAY, "minute": m, "budget_micros": BUDGET,
                          "state": "OPEN", "participation_probability": round(0.3 + m % 7 / 100, 4),
                          "target_micros": 1_000 * m, "committed_micros": 990 * m + m % 5,
                          "billed_micros": 900 * m, "event_time": T0_MS + m * 60_000} for m in minutes)

    # ------------------------------------------------------------ server
    def start(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="dashboard-loop", daemon=True).start()
        started = asyncio.run_coroutine_threadsafe(start_dashboard(DashboardSettings(
            self.platform.kafka_bootstrap, self.platform.redis_url, prometheus_url=None,
            state_topic=self.state_topic, campaigns_topic=self.campaigns_topic, port=0), auth=self.auth), self.loop)
        self.runner, self.port, _, _ = started.result(timeout=30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            with urllib.request.urlopen(urllib.request.Request(self.url + path, headers=headers),
                                        timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def wait_for(self, what: str, check) -> Any:
        """Poll `check()` until it returns something truthy, at most WAIT_S; fail naming `what` otherwise."""
        deadline = time.monotonic() + WAIT_S
        while True:
            found = check()
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"the dashboard did not show {what} within {WAIT_S:.0f} s")
            time.sleep(0.2)

    def wait_loaded(self) -> None:
        self.wait_for("the four campaigns' states", lambda: self.get("/ready")[0] == 200 and all(
            row["state"] is not None for row in self.get("/v1/pacing/campaigns")[1]["campaigns"])
            and self.get("/v1/pacing/campaigns")[1]["total"] == 4)

    def close(self) -> None:
        if self.loop is not None and self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=30)
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.store.client.delete(*(redis_keys.pacing(c) for c in self.ids))
        self.store.close()


def dashboard_world(platform, fresh_topics, auth=None, token: str | None = None):
    """The world published, the pacing day of `on_pace` (minutes 600-629) written and the dashboard loaded."""
    world = DashboardWorld(platform, fresh_topics, auth, token)
    world.publish_campaigns()
    world.publish_states(*world.initial_states())
    world.write_minutes(world.on_pace, range(600, 630))
    world.start()
    try:
        world.wait_loaded()
    except BaseException:
        world.close()
        raise
    return world
