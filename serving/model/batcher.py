"""Dynamic batching across concurrent score requests, for the prediction service (serving.model.service).

The handler parses the body, picks the arm (serving.model.canary.routes_to_candidate on the request id) and
queues the request with a future. One scoring thread (the event loop keeps accepting while it scores) takes
everything queued, up to max_batch_rows input rows (candidates x positions; at least one request), waiting at
most max_wait_ms after the oldest request's arrival for companions, drops the requests whose deadline passed,
scores each arm's requests with one ModelPredictor.predict_many, and resolves the futures on the event loop.
Under load the queue fills while a batch is scored, so batches grow with the load and no request waits for
companions longer than max_wait_ms. The batcher knows nothing of HTTP."""
from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from serving.decision.prediction import PredictionRequest, Predictions, PredictionTimeout
from serving.model.score_request import ScoreRequest

LOG = logging.getLogger("adserve.prediction")
DEFAULT_MAX_WAIT_MS = 1.0
DEFAULT_MAX_BATCH_ROWS = 3_200
CURRENT, CANDIDATE = "current", "candidate"


@dataclass
class Pending:
    """A queued request: what to score, on which arm, by when, and the future its handler awaits."""

    request: ScoreRequest
    arm: str
    arrived: float  # on the batcher's clock
    deadline: float
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


@dataclass
class Scored:
    predictions: Predictions
    batch_requests: int  # requests scored in the same model call (the same batch and arm)
    snapshot_version: int


def take_batch(queue: collections.deque, max_rows: int) -> list[Pending]:
    """Everything queued, oldest first, up to max_rows input rows (at least one request, however large)."""
    batch, rows = [], 0
    while queue and (not batch or rows + queue[0].request.rows <= max_rows):
        item = queue.popleft()
        batch.append(item)
        rows += item.request.rows
    return batch


class DynamicBatcher:
    """One scoring thread over a queue of requests (see the module docstring). `score(arm, requests)` is
    ModelPredictor.predict_many of the arm's model; `on_batch` sees each batch after scoring (metrics)."""

    def __init__(self, score: Callable[[str, list[PredictionRequest]], tuple[list[Predictions], int]], *,
                 max_rows: int = DEFAULT_MAX_BATCH_ROWS, max_wait_s: float = DEFAULT_MAX_WAIT_MS / 1000,
                 clock: Callable[[], float] = time.perf_counter,
                 on_batch: Callable[[list[Pending], float], None] = lambda batch, seconds: None):
        self.score, self.max_rows, self.max_wait_s, self.clock = score, max_rows, max_wait_s, clock
        self.on_batch = on_batch
        self._queue: collections.deque[Pending] = collections.deque()
        self._queued_rows = 0
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name="prediction-batcher", daemon=True)

    def start(self) -> "DynamicBatcher":
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout_s)

    def submit(self, item: Pending) -> None:
        with self._wake:
            self._queue.append(item)
            self._queued_rows += item.request.rows
            self._wake.notify()

    def _next_batch(self) -> list[Pending] | None:
        with self._wake:
            while not self._queue and not self._stopping:
                self._wake.wait()
            if self._stopping:
                return None
            while not self._stopping and self._queued_rows < self.max_rows:
                left = self._queue[0].arrived + self.max_wait_s - self.clock()
                if left <= 0:
                    break
                self._wake.wait(left)  # companions may arrive; a full batch or the oldest's wait ends it
            batch = take_batch(self._queue, self.max_rows)
            self._queued_rows -= sum(item.request.rows for item in batch)
            return batch

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            try:
                self._score_batch(batch)
            except Exception as exc:  # noqa: BLE001 - every waiting request gets the error, the thread lives on
                LOG.exception("scoring a batch of %d requests failed", len(batch))
                _settle(batch, [exc] * len(batch))
        with self._wake:  # stopped: nobody will score what is left
            left, self._queue = list(self._queue), collections.deque()
        _settle(left, [PredictionTimeout("the prediction service is stopping")] * len(left))

    def _score_batch(self, batch: list[Pending]) -> None:
        now = self.clock()
        live = []
        for item in batch:
            if item.future.done():  # the handler gave up already (its deadline, or the client went away)
                continue
            if now > item.deadline:
                _settle([item], [PredictionTimeout("deadline passed while queued")])
            else:
                live.append(item)
        began = self.clock()
        for arm in (CURRENT, CANDIDATE):
            mine = [item for item in live if item.arm == arm]
            if not mine:
                continue
            try:
                predictions, snapshot_version = self.score(arm, [item.request.prediction for item in mine])
                results: list[Any] = [Scored(p, len(mine), snapshot_version) for p in predictions]
            except Exception as exc:  # noqa: BLE001 - this arm's requests get the error (500); the other's still score
                LOG.exception("the %s model failed on a batch of %d requests", arm, len(mine))
                results = [exc] * len(mine)
            _settle(mine, results)
        if live:
            self.on_batch(live, self.clock() - began)


def _settle(items: Sequence[Pending], results: Sequence[Any]) -> None:
    """Resolve each item's future on its event loop with a result or an exception."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, Any]]] = {}
    for item, result in zip(items, results):
        by_loop.setdefault(item.loop, []).append((item.future, result))
    for loop, pairs in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve, pairs)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


def _resolve(pairs: list[tuple[asyncio.Future, Any]]) -> None:
    for future, result in pairs:
        if future.done():
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
