"""A hostile advertiser's budget toggles through the real change path, for the click aggregator's billing test.

One advertiser creates two identical campaigns through the advertiser API, then cuts the first one's daily
budget to 0 a second before each of 12 consecutive 10 s window ends (2 minutes) and puts it back a second after
each, through `PATCH /v1/campaigns/{id}`: 24 budget edits, inside the API's limit of
core.campaigns.BUDGET_EDITS_PER_HOUR. The second campaign is its untoggled twin. The changes travel PostgreSQL ->
Debezium -> the index builder, which publishes each as a ServingCampaign version at its commit time on
serving.campaigns; a reader tails that topic from before the campaigns exist and keeps every version of the two.

It runs in a thread beside other tests because its 2 minutes are real time: the toggles need real commits
around real window ends. conftest starts it with the shared index builder, so the minutes pass while the index
builder's group of modules runs, and the click aggregator's test bills the versions it collected."""
from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import dataclass, field

import aiohttp
from confluent_kafka import TopicPartition

from core.campaigns import BUDGET_EDITS_PER_HOUR
from core.clicks import WINDOW_MS
from schemas.codec import AvroCodec
from schemas.topics import SERVING_CAMPAIGNS
from streams import kafka

BOUNDARIES = 12  # window ends toggled around: 2 minutes of 10 s windows
BUDGET_MICROS = 1_000_000_000  # $1,000 a day, far above what the test's traffic costs
MARGIN_MS = 1_000  # the cut commits this long before a window end, the restore this long after it
assert 2 * BOUNDARIES <= BUDGET_EDITS_PER_HOUR  # the toggles themselves stay within the API's budget-edit limit


@dataclass
class Toggled:
    """What the toggles produced: the two campaigns, the window ends toggled around, the API's answers and
    every ServingCampaign version the index builder published for the two (sorted by event time)."""

    toggled_id: int
    twin_id: int
    boundaries: list[int]
    statuses: list[int]
    versions: dict[int, list[dict]] = field(default_factory=dict)


class ApiBudgetToggles:
    """Started once (start() is idempotent); result() waits for the toggles and for the index builder's last
    version of them."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._result: Toggled | None = None
        self._error: BaseException | None = None

    def start(self, platform) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, args=(platform,), name="api-budget-toggles", daemon=True)
        self._thread.start()

    def result(self, timeout_s: float = 300) -> Toggled:
        assert self._thread is not None, "the budget toggles were never started (they start with index_builder)"
        assert self._done.wait(timeout_s), f"the budget toggles did not finish within {timeout_s:.0f} s"
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def _run(self, platform) -> None:
        try:
            tail = _Tail(platform.kafka_bootstrap, kafka.end_offsets(platform.kafka_bootstrap, SERVING_CAMPAIGNS))
            try:
                toggled = asyncio.run(self._toggle(platform))
                last = {toggled.toggled_id: 1 + 2 * BOUNDARIES, toggled.twin_id: 1}  # created, then 24 edits
                toggled.versions = tail.versions(last, timeout_s=180)
            finally:
                tail.close()
            self._result = toggled
        except BaseException as e:  # handed to the test that reads the result
            self._error = e
        finally:
            self._done.set()

    @staticmethod
    async def _toggle(platform) -> Toggled:
        from serving.advertiser.api import start_advertiser_api

        runner, port, store = await start_advertiser_api(platform.postgres_dsn, port=0)
        try:
            _, key = await store.create_advertiser(f"toggler-{uuid.uuid4().hex[:8]}")
            auth = {"Authorization": f"Bearer {key}"}
            api = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as http:
                async def call(method: str, path: str, body: dict) -> tuple[int, dict]:
                    async with http.request(method, api + path, json=body, headers=auth) as r:
                        return r.status, await r.json()

                ids = []
                for name in ("toggled", "twin"):
                    status, c = await call("POST", "/v1/campaigns", {
                        "name": f"{name}-{uuid.uuid4().hex[:6]}", "bid_type": "CPM",
                        "daily_budget_micros": BUDGET_MICROS, "timezone": "UTC"})
                    assert status == 201, c
                    ids.append(c["campaign_id"])
                first = (int(time.time() * 1000) + 2 * MARGIN_MS) // WINDOW_MS * WINDOW_MS + WINDOW_MS
                boundaries = [first + k * WINDOW_MS for k in range(BOUNDARIES)]
                statuses = []
                for boundary in boundaries:
                    for at_ms, budget in ((boundary - MARGIN_MS, 0), (boundary + MARGIN_MS, BUDGET_MICROS)):
                        await asyncio.sleep(max(0.0, at_ms / 1000 - time.time()))
                        status, _ = await call("PATCH", f"/v1/campaigns/{ids[0]}", {"daily_budget_micros": budget})
                        statuses.append(status)
            return Toggled(ids[0], ids[1], boundaries, statuses)
        finally:
            await runner.cleanup()
            await store.close()


class _Tail:
    """Every ServingCampaign version on serving.campaigns from `starts`, read in a thread as they are published
    (the topic is compacted: read later, the intermediate versions may be gone). A version published twice (a
    job restarted before its transaction committed) is kept once."""

    def __init__(self, bootstrap: str, starts: dict[int, int]):
        self.bootstrap, self.starts = bootstrap, starts
        self.seen: dict[tuple[int, int], dict] = {}
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, name="serving-campaigns-tail", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        codec = AvroCodec()
        cons = kafka.consumer(self.bootstrap, group_id=f"adserve-toggles-{uuid.uuid4().hex[:8]}")
        try:
            cons.assign([TopicPartition(SERVING_CAMPAIGNS, p, offset) for p, offset in self.starts.items()])
            while not self._stop.is_set():
                msg = cons.poll(0.5)
                if msg is None or msg.error() or msg.value() is None:
                    continue
                record = codec.decode(msg.value())
                with self._lock:
                    self.seen[(record["campaign_id"], record["version"])] = record
        except BaseException as e:
            self._error = e
        finally:
            cons.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def versions(self, last: dict[int, int], timeout_s: float) -> dict[int, list[dict]]:
        """Each campaign's versions (sorted by event time) once it reached its last version in `last`."""
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                if self._error is not None:
                    raise self._error
                with self._lock:
                    got = {c: sorted(v for (i, v) in self.seen if i == c) for c in last}
                if all(got[c] and got[c][-1] >= v for c, v in last.items()):
                    break
                assert time.monotonic() < deadline, (
                    f"the index builder published versions {got} of the toggled campaigns within "
                    f"{timeout_s:.0f} s, not up to {last}")
                time.sleep(0.5)
        finally:
            self.close()
        with self._lock:
            return {c: sorted((r for (i, _), r in self.seen.items() if i == c), key=lambda r: r["event_time"])
                    for c in last}
