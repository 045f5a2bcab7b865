"""The simulated day's jobs: `budget_pacing` and `click_aggregator` deployed on the run's own topics and
stopped at its end, the feed that follows what they publish (budget states and leases for the servers, billed
totals for the report), and `DayRun`, the run's connections the day's loop and its billing close share."""
from __future__ import annotations

import logging
import queue
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.topics import BUDGET_LEASES, BUDGET_STATE
from sim.pacing_fleet import SimServer

LOG = logging.getLogger(__name__)


class BudgetFeed(threading.Thread):
    """Reads the run's budget.state and budget.leases topics and queues what it reads for the servers; keeps
    the click aggregator's billed totals (the third topic) for the report. `advanced` is notified whenever
    `progress_ms` (the newest budget state's event time) moves, so the servers wake the moment it does."""

    def __init__(self, bootstrap: str, topics: list[str]):
        super().__init__(name="budget-feed", daemon=True)
        from schemas.codec import AvroCodec
        from streams import kafka

        self.codec = AvroCodec()
        self.consumer = kafka.consumer(bootstrap, group_id=f"adserve-simulate-{uuid.uuid4().hex[:8]}",
                                       **{"auto.offset.reset": "earliest", "fetch.wait.max.ms": 10})
        self.advanced = threading.Condition()
        self.consumer.subscribe(topics)
        self.state_topic, self.billed_topic = topics[0], topics[2] if len(topics) > 2 else None
        self.inbox: queue.Queue = queue.Queue()
        self.progress_ms = 0
        self.billed: list[dict[str, Any]] = []
        self.billed_progress_ms = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            # poll returns with the first record; consume(timeout=...) would wait out its timeout for a full batch
            first = self.consumer.poll(0.05)
            if first is None:
                continue
            for message in [first, *self.consumer.consume(500, timeout=0)]:
                if message.error() is not None:
                    continue
                record = self.codec.decode(message.value())
                if message.topic() == self.billed_topic:
                    self.billed.append(record)
                    self.billed_progress_ms = max(self.billed_progress_ms, int(record["event_time"]))
                    continue
                kind = BUDGET_STATE if message.topic() == self.state_topic else BUDGET_LEASES
                self.inbox.put((kind, record))
                if kind == BUDGET_STATE and int(record["event_time"]) > self.progress_ms:
                    with self.advanced:
                        self.progress_ms = int(record["event_time"])
                        self.advanced.notify_all()
        self.consumer.close()


@dataclass(frozen=True)
class DayRun:
    """The run on the platform: the platform's settings, the run's topics by role (sim.pacing_day.run_topics),
    the feed of what the jobs publish, the producer and codec the day writes its records with, and the fleet's
    /metrics (sim.fleet_export.FleetExport; None: kept, not served)."""

    platform: Any
    topics: dict[str, str]
    feed: BudgetFeed
    producer: Any
    codec: Any
    export: Any = None


def drain(feed: BudgetFeed, fleet: list[SimServer], now_ms: int) -> None:
    """Everything the feed has queued, applied to every server's state at `now_ms`."""
    while True:
        try:
            kind, record = feed.inbox.get_nowait()
        except queue.Empty:
            return
        for server in fleet:
            server.state.apply(kind, record, now_ms)


# The jobs' timers, short: the day waits on the loop servers -> budget job -> servers once every 10 s of event
# time, and each Python bundle, watermark interval and network buffer is a wait on that loop (20 ms each made a
# night's hours take 1.4x as long). The budget job sees a few records a second, so flushing every buffer at
# once (timeout 0) costs nothing.
BUNDLE_TIME_MS = "5"
WATERMARK_INTERVAL_MS = "5"
BUFFER_TIMEOUT_MS = "0"


def deploy_jobs(platform, topics: dict[str, str], run: str, curves_path: Path, parallelism: int) -> tuple[str, str]:
    """The budget job and the click aggregator on the run's topics; (budget job id, aggregator job id)."""
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink
    from jobs import deploy

    job_id = deploy.deploy("budget_pacing", jobmanager=f"{platform.host}:{platform.flink_rest_port}",
                           conf_dir=Flink(platform).conf_dir,
                           job_args=["--bootstrap", platform.kafka_bootstrap,
                                     "--connector-jar", str(flink_connector_jar(platform)),
                                     "--group-id", f"adserve-simulate-{run}", "--startup-mode", "earliest-offset",
                                     "--spend-topic", topics["spend"], "--campaigns-topic", topics["campaigns"],
                                     "--ads-topic", topics["ads"],
                                     "--billed-topic", topics["billed"], "--state-topic", topics["state"],
                                     "--leases-topic", topics["leases"], "--dead-letter-topic", topics["dead"],
                                     "--redis-url", platform.redis_url, "--curves", str(curves_path),
                                     "--heartbeat-ms", "10000", "--bundle-time-ms", BUNDLE_TIME_MS,
                                     "--watermark-interval-ms", WATERMARK_INTERVAL_MS,
                                     "--buffer-timeout-ms", BUFFER_TIMEOUT_MS,
                                     "--checkpoint-interval-ms", "10000", "--parallelism", str(parallelism)])
    billing_id = deploy.deploy("click_aggregator", jobmanager=f"{platform.host}:{platform.flink_rest_port}",
                               conf_dir=Flink(platform).conf_dir,
                               job_args=["--bootstrap", platform.kafka_bootstrap,
                                         "--connector-jar", str(flink_connector_jar(platform)),
                                         "--group-id", f"adserve-simulate-billing-{run}",
                                         "--startup-mode", "earliest-offset",
                                         "--events-topic", topics["events"], "--campaigns-topic", topics["campaigns"],
                                         "--billed-topic", topics["billed"], "--dead-letter-topic", topics["dead"],
                                         "--bundle-time-ms", "20", "--watermark-interval-ms", "20",
                                         "--buffer-timeout-ms", "2", "--checkpoint-interval-ms", "10000"])
    return job_id, billing_id


def stop_jobs(platform, job_id: str, billing_id: str) -> None:
    from jobs import deploy

    for name, running in (("budget", job_id), ("click aggregator", billing_id)):
        try:
            deploy.stop(platform.flink_rest_url, running)
        except Exception:  # noqa: BLE001 - a stuck stop must not hide the day's result
            LOG.exception("stopping the %s job failed; cancelling it", name)
            deploy.cancel(platform.flink_rest_url, running)
