"""`adserve bench faults`: the fault matrix. A short day of live traffic runs through the real servers and jobs,
and at set times one part of the platform is killed with SIGKILL, held down, and restarted; after each, the
design's invariants are checked (bench.fault_checks) and the fault gets one row.

What runs for real, for the whole matrix: the platform (Kafka, Redis, PostgreSQL, Kafka Connect with the
campaign store's Debezium connector, Flink), the Flink jobs `budget_pacing` and `click_aggregator` (deployed for
the run: the aggregator reads the platform's ad.events from the run's start, the budget job the platform's
budget.spend and writes budget.state and budget.leases, which the ad servers follow; both read the run's
campaigns from a topic of the run, so they decide only about the run's campaigns), two ad servers, the tracker
and the prediction service (each an `adserve serve` process of its own, so a kill is a real SIGKILL of a
process). The day is real time: the servers stamp wall-clock time, the budget job steps every 10 s of it.

The traffic: --rate ad requests a second for 3 slots on the run's own placement (so no other ad competes),
alternating between the two ad servers; every filled slot's impression beacon goes to the tracker over HTTP, and
each beacon the tracker acknowledges (204) is kept with its token's impression, campaign and price: the recount.

Each fault's phase has four campaigns of its own (CPM, so every acknowledged impression is billable): a capped
one (a daily cap per user far above what a user sees: only Redis's absence can exclude it), one paused a few
seconds before the fault, a metered one whose small budget the budget job hands out in slices and which runs out
during the phase, and an open one. The phase: launch its campaigns (their ads reach the servers once the budget
job has stated each), wait until the one to be paused has served (at most 60 s: pacing starts a new campaign
metered, at a low participation probability, so it serves once a server holds a slice of it), let them serve (--settle-s), pause one, kill the part, hold
it down (--outage-s; the broker --broker-outage-s, 40 s, longer than the servers' and tracker's producer
delivery timeout, --delivery-timeout-ms, 30 s), restart it, wait until every job runs and every server
is ready (the recovery time, from the restart), serve a while longer (--after-s), pause the phase's campaigns. At
the end the click aggregator's windows are closed (tick events past the last beacon) and its billed totals are
compared with the recount.

The restart story of each part (docs/faults.md): the broker, Redis, PostgreSQL, Kafka Connect and the
TaskManager restart in place (`adserve up`'s own launch); the local Flink cluster has no high availability, so a
killed JobManager restarts empty and the run's jobs are submitted again from their latest retained checkpoint
(`flink run -s`: the checkpoint files outlive the JobManager); a killed ad server is replaced by a new one with a
new server id (its spend sequence starts again at 1 and must not collide with the dead server's); the tracker
and the prediction service restart on their ports. Two faults fail the jobs in place, the TaskManager left up:
`python_worker` SIGKILLs the TaskManager's Python workers (every job's), `task_failure` arms each job's tripwire
(jobs.tripwire: its stateful operator raises on its next record); Flink restarts each job from its latest
checkpoint in the same TaskManager, and the phase waits until every job's exception history shows the failure
before it measures the recovery (from the fault, with nothing held down).

Figures (--json names): one row per fault in `rows`, each with fault, recovery_s, recovery_bound_s,
lost_events, double_billed_events, billed_above_budget_micros, overspend_beyond_slices_micros,
paused_served_after_bound, capped_served_without_redis, server_errors, shared_impression_ids (every request id is
sent twice; an impression id served for two requests would leave one unbilled), uncapped_served_without_redis (the Redis
row), requests, answered_200, beacons_acknowledged, beacons_refused, slices_at_fault_micros, billed_micros,
error_answers, held, and the evidence that the phase exercised its rules: paused_served_before_pause,
capped_served, request_ids_served_twice, metered_spend_micros against metered_budget_micros; then all_held, faults, rate, settle_s,
outage_s, broker_outage_s, delivery_timeout_ms, after_s, freshness_bound_s, wall_s, and machine (with the load average at the start
and the end). Same-run baseline: the `baseline` row, a phase with no fault, checked the
same way."""
from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bench.fault_checks import Answer, Beacon, PhaseRecord, row
from core.errors import RunFailed
from infra.platform import PlatformSettings
from infra.platform.errors import PlatformError
from infra.platform.process import ManagedProcess, reap, wait_until
from schemas import topics as topic_names

FAULTS = ("kafka", "taskmanager", "python_worker", "task_failure", "jobmanager", "redis", "postgres", "connect",
          "ad_server", "tracker", "prediction")
SHORT_FAULTS = ("kafka", "taskmanager", "task_failure", "redis", "ad_server", "tracker")
# Faults a job recovers from inside the TaskManager that stays up (a restart in place): nothing is held down
# or restarted by the matrix; Flink restarts the jobs from their latest checkpoint.
IN_PLACE = ("python_worker", "task_failure")
# The stated bound per fault: kill to every job RUNNING and every server ready again. Each is the part's own
# restart plus what must follow it, with room for a loaded 2-core machine (docs/faults.md gives the reasons).
RECOVERY_BOUND_S = {"baseline": 30.0, "kafka": 90.0, "taskmanager": 120.0, "python_worker": 60.0,
                    "task_failure": 60.0, "jobmanager": 180.0, "redis": 30.0,
                    "postgres": 60.0, "connect": 120.0, "ad_server": 60.0, "tracker": 30.0, "prediction": 60.0}
FRESHNESS_BOUND_S = 10.0  # an advertiser change on every ad server (the design's SLO)
SLOTS = 3
DOLLAR = 1_000_000
BIDS_MICROS = {"capped": 9_000_000, "paused": 8_000_000, "metered": 7_000_000, "open": 5_000_000}  # CPM
# A day's budget far above the run's demand (pacing still starts each new campaign metered, at a low
# participation probability);
# the metered campaign's $0.02 is within the open margin from the start (it spends only from slices) and runs
# out within a phase.
BUDGETS_MICROS = {"capped": 50_000 * DOLLAR, "paused": 50_000 * DOLLAR, "metered": 20_000, "open": 50_000 * DOLLAR}
CAP_PER_DAY = 1_000
# The ad server's load shedding: refused at admission, or the deadline passed before the decision.
OVERLOAD_ANSWERS = ("overloaded", "deadline passed")
USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) fault-matrix"
Log = Callable[[str], None]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _http_ok(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback only
            return resp.status == 200
    except (OSError, ValueError):
        return False


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_group(process: ManagedProcess) -> bool:
    """SIGKILL a managed process's whole group, as a crash would; True if one was running."""
    pid = process.pid()
    if pid is None:
        return False
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    time.sleep(0.5)
    reap(pid)
    process.pid_path.unlink(missing_ok=True)
    return True


# ------------------------------------------------------------------ the run's servers


@dataclass
class Child:
    """One `adserve serve` process of the run: its command, its port and how its readiness is asked."""

    name: str
    argv: list[str]
    port: int
    ready_path: str
    process: ManagedProcess

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, env: dict[str, str]) -> None:
        self.process.start(self.argv, env=env, cwd=Path(__file__).resolve().parents[1])

    def ready(self) -> bool:
        return self.process.pid() is not None and _http_ok(self.url + self.ready_path)


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

        claims = self.keys.verify(slot["token"], _now_ms())
        try:
            async with http.get(slot["impression_url"]) as r:
                status = r.status
        except (aiohttp.ClientError, asyncio.TimeoutError):
            status = None
        self.beacons.append(Beacon(claims.impression_id, claims.campaign_id, claims.price_micros, status, seq))


# ------------------------------------------------------------------ the world: jobs, servers, campaigns


class World:
    """The run's jobs, servers and campaigns on the platform, and how each part is killed and restarted."""

    def __init__(self, settings: PlatformSettings, *, phases: int, rate: float, log: Log,
                 delivery_timeout_ms: int = 30_000):
        from core.tokens import TokenKeys
        from serving.adserver.settings import DEVELOPMENT_TOKEN_KEYS

        self.settings, self.log, self.rate = settings, log, rate
        self.run_id = uuid.uuid4().hex[:8]
        self.folder = settings.state_dir / "faults" / self.run_id
        self.folder.mkdir(parents=True, exist_ok=True)
        self.placement = f"faults-{self.run_id}"
        self.base_id = (time.time_ns() // 1000) % 10**11 * 1000
        self.clock_campaign = self.base_id + 99_000
        self.phase_ids = [{role: self.base_id + 1000 * p + 10 * i for i, role in enumerate(BIDS_MICROS)}
                          for p in range(phases)]
        self.keys = TokenKeys.from_spec(DEVELOPMENT_TOKEN_KEYS)
        self.topics = {n: f"bench.faults.{n}.{self.run_id}" for n in ("campaigns", "ads", "billed", "dead")}
        self.job_ids: dict[str, str] = {}
        self.failures_before: dict[str, int] = {}  # each job's failures when an in-place fault struck
        self.children: dict[str, Child] = {}
        self.replacements = 0
        self.routable: set[str] = set()  # the ad servers traffic goes to: a balancer adds a server once ready
        # the servers' and the tracker's producers fail a delivery after delivery_timeout_ms (their spool and
        # spend resends take over): an operator's client property, as ADSERVE_KAFKA_PROPERTIES
        properties = ",".join(p for p in (os.environ.get("ADSERVE_KAFKA_PROPERTIES", ""),
                                          f"message.timeout.ms={delivery_timeout_ms}") if p)
        self.env = {**os.environ, **settings.as_env(), "ADSERVE_DEV": "1", "PYTHONUNBUFFERED": "1",
                    "ADSERVE_KAFKA_PROPERTIES": properties}
        self.stopped = False
        self.start_ms = _now_ms()
        self.feed = Feed(settings.kafka_bootstrap, self.topics["billed"],
                         {cid for ids in self.phase_ids for cid in ids.values()} | {self.clock_campaign})

    # --- campaigns

    def campaign_record(self, campaign_id: int, role: str, status: str, version: int) -> dict[str, Any]:
        return {"campaign_id": campaign_id, "advertiser_id": campaign_id, "version": version,
                "event_time": _now_ms(), "status": status, "bid_type": "CPM",
                "daily_budget_micros": BUDGETS_MICROS.get(role, 500 * DOLLAR), "currency": "USD",
                "timezone": "UTC", "flight_start": None, "flight_end": None, "dayparts": [],
                "cap_per_day": CAP_PER_DAY if role == "capped" else None, "cap_per_week": None,
                "cpa_target_micros": None}

    def ad_record(self, campaign_id: int, role: str) -> dict[str, Any]:
        return {"ad_id": campaign_id + 1, "campaign_id": campaign_id, "advertiser_id": campaign_id, "version": 1,
                "event_time": _now_ms(), "removed": False, "bid_type": "CPM",
                "bid_micros": BIDS_MICROS.get(role, 1_000_000), "quality_prior": 0.0,
                "creative_ref": f"creative-{campaign_id}", "landing_url": "https://shop.example/faults",
                "static_score": 1.0,
                "targeting": [{"attribute": "placement", "values": [self.placement], "excluded": False}]}

    def publish(self, campaigns: list[tuple[int, str, str, int]], ads: bool = False,
                serving_ads: bool = False) -> None:
        """Campaign records (id, role, status, version) to the servers' topic and the jobs' topic of the run;
        with `ads`, their ads to the jobs' topic, with `serving_ads` to the servers' topic (and no records)."""
        from schemas.codec import AvroCodec
        from streams import kafka

        codec = AvroCodec()
        at = _now_ms()
        ad_records = [(str(cid + 1).encode(), codec.encode("ServingAd", self.ad_record(cid, role)), at)
                      for cid, role, _, _ in campaigns]
        if serving_ads:
            kafka.produce_all(self.settings.kafka_bootstrap, topic_names.SERVING_ADS, ad_records)
            return
        records = [(str(cid).encode(), codec.encode("ServingCampaign", self.campaign_record(cid, role, status, v)), at)
                   for cid, role, status, v in campaigns]
        for topic in (topic_names.SERVING_CAMPAIGNS, self.topics["campaigns"]):
            kafka.produce_all(self.settings.kafka_bootstrap, topic, records)
        if ads:
            kafka.produce_all(self.settings.kafka_bootstrap, self.topics["ads"], ad_records)

    # --- start and stop

    def start(self) -> None:
        from infra.platform.topics import TopicSpec, ensure_topics

        ensure_topics(self.settings.kafka_bootstrap, tuple(
            TopicSpec(t, key="campaign id", schema="", partitions=1) for t in self.topics.values()))
        self.publish([(self.clock_campaign, "clock", "ACTIVE", 1)])
        self.feed.start()
        # The model trains while the jobs are submitted (each a JVM of its own): the two take about as long.
        training = threading.Thread(target=self._prepare_model, daemon=True)
        training.start()
        self._deploy_jobs()
        training.join()
        if self.model_dir is None:
            raise RunFailed("the prediction service's click model could not be trained (log above)")
        tracker_port, prediction_port = _free_port(), _free_port()
        py = sys.executable
        self._child("tracker", [py, "-m", "adserve", "serve", "tracker", "--port", str(tracker_port), "--dev"],
                    tracker_port, "/metrics")
        self._child("prediction", [py, "-m", "adserve", "serve", "prediction", "--model", str(self.model_dir),
                                   "--ad-features", str(self.folder / "ad-features"), "--port",
                                   str(prediction_port)], prediction_port, "/healthz")
        for name in ("ads-a", "ads-b"):
            self._ad_server(name, f"faults-{self.run_id}-{name}")
        self.wait_ready(300, what="the run's jobs and servers to start", required=True)
        self.routable = {n for n in self.children if n.startswith("ads-")}

    def _prepare_model(self) -> None:
        """A small click model trained here, and an ad-feature snapshot holding the run's ads (in a thread of
        start's: a failure is logged and leaves model_dir None)."""
        self.model_dir = None
        try:
            self._train_model()
        except Exception as error:  # noqa: BLE001 - said here, raised as RunFailed by start
            self.log(f"training the click model failed: {error!r}")

    def _train_model(self) -> None:
        from dataclasses import replace

        import numpy as np

        from learning import synthetic
        from learning.network import Architecture, TrainConfig
        from learning.trainer import train_click_model
        from serving.model.ad_features import AdFeatureSnapshot
        from serving.model.click_model import save_versioned

        self.log("training a small click model for the prediction service ...")
        day = synthetic.make_day(12_000, seed=1, keep_rate=0.2)
        model = train_click_model(day.examples, {day.snapshot.version: day.snapshot}, day.keep_rate,
                                  replace(TrainConfig(epochs=2, batch_size=512, patience=1,
                                                      architecture=Architecture(hidden=(16,))), seed=1),
                                  min_segment_clicks=30, log=lambda line: None)
        self.model_dir = save_versioned(model, self.folder / "models", export_saved_model=False)
        like = day.snapshot
        ad_ids = np.asarray([cid + 1 for ids in self.phase_ids for cid in ids.values()], dtype=np.int64)
        source = np.arange(len(ad_ids)) % len(like)
        AdFeatureSnapshot(version=int(time.time()), ad_id=ad_ids, campaign_id=like.campaign_id[source],
                          bid_type=like.bid_type[source], bid_micros=like.bid_micros[source],
                          ctr_prior=like.ctr_prior[source], quality_prior=like.quality_prior[source],
                          category=like.category[source], embedding=like.embedding[source]
                          ).write(self.folder / "ad-features")

    def _child(self, name: str, argv: list[str], port: int, ready_path: str) -> Child:
        process = ManagedProcess(f"faults-{self.run_id}-{name}", self.folder / "run", self.folder / f"{name}.log")
        child = Child(name, argv, port, ready_path, process)
        child.start(self.env)
        self.children[name] = child
        return child

    def _ad_server(self, name: str, server_id: str) -> Child:
        port = _free_port()
        return self._child(name, [sys.executable, "-m", "adserve", "serve", "ads", "--workers", "0", "--port",
                                  str(port), "--server-id", server_id, "--tracker-url",
                                  self.children["tracker"].url, "--prediction-url",
                                  self.children["prediction"].url, "--dev"], port, "/ready")

    def ad_server_urls(self) -> list[str]:
        return [c.url for n, c in self.children.items() if n in self.routable and c.process.pid() is not None]

    def _job_args(self, group: str) -> list[str]:
        from infra.platform.jars import flink_connector_jar

        return ["--bootstrap", self.settings.kafka_bootstrap, "--connector-jar",
                str(flink_connector_jar(self.settings)), "--group-id", group, "--startup-mode", "timestamp",
                "--start-timestamp-ms", str(self.start_ms), "--checkpoint-interval-ms", "5000",
                # nine faults in a few minutes: more restarts than a job's default three
                "--restart-attempts", "100"]

    def tripwire(self, job: str) -> Path:
        """The job's jobs.tripwire file: written by the task_failure fault, removed by the job as it fails."""
        return self.folder / f"tripwire.{job}"

    def _job_specs(self) -> dict[str, list[str]]:
        t = self.topics
        return {
            "budget_pacing": [*self._job_args(f"faults-budget-{self.run_id}"),
                              "--spend-topic", topic_names.BUDGET_SPEND, "--campaigns-topic", t["campaigns"],
                              "--ads-topic", t["ads"], "--billed-topic", t["billed"],
                              "--state-topic", topic_names.BUDGET_STATE, "--leases-topic", topic_names.BUDGET_LEASES,
                              "--dead-letter-topic", t["dead"], "--redis-url", self.settings.redis_url,
                              "--heartbeat-ms", "10000", "--tripwire-file", str(self.tripwire("budget_pacing"))],
            "click_aggregator": [*self._job_args(f"faults-billing-{self.run_id}"),
                                 "--events-topic", topic_names.AD_EVENTS, "--campaigns-topic", t["campaigns"],
                                 "--billed-topic", t["billed"], "--dead-letter-topic", t["dead"],
                                 "--tripwire-file", str(self.tripwire("click_aggregator"))]}

    def _deploy_jobs(self, from_checkpoints: dict[str, str] | None = None) -> None:
        from infra.platform.services import Flink
        from jobs import deploy

        for name, args in self._job_specs().items():
            self.job_ids[name] = deploy.deploy(
                name, jobmanager=f"{self.settings.host}:{self.settings.flink_rest_port}",
                conf_dir=Flink(self.settings).conf_dir, job_args=args,
                savepoint=(from_checkpoints or {}).get(name))

    def stop(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from jobs import deploy

        def cancel(job_id: str) -> None:
            try:
                deploy.cancel(self.settings.flink_rest_url, job_id)
            except Exception as error:  # noqa: BLE001 - the matrix's result stands; say what was left
                self.log(f"could not cancel job {job_id}: {error}")

        # every job and server at once: each server drains on its own (ready turns 503, in-flight work answered)
        with ThreadPoolExecutor(max_workers=len(self.job_ids) + len(self.children) + 1) as pool:
            for job_id in self.job_ids.values():
                pool.submit(cancel, job_id)
            for child in self.children.values():
                pool.submit(child.process.stop, 10)
        self.feed.halt.set()
        self.stopped = True

    # --- readiness

    def jobs_running(self) -> bool:
        from jobs import deploy

        try:
            for job_id in self.job_ids.values():
                state, vertices = deploy.job_state(self.settings.flink_rest_url, job_id)
                if state != "RUNNING" or not vertices or any(v != "RUNNING" for v in vertices):
                    return False
        except deploy.DeployError:
            return False
        return True

    def platform_healthy(self) -> bool:
        from infra.platform.cdc import CONNECTOR
        from infra.platform.control import _is_healthy
        from infra.platform.services import all_services

        if not all(s.running() and _is_healthy(s) for s in all_services(self.settings) if s.name != "prometheus"):
            return False
        try:
            with urllib.request.urlopen(f"{self.settings.connect_url}/connectors/{CONNECTOR}/status",  # noqa: S310
                                        timeout=2) as resp:
                status = json.loads(resp.read())
        except (OSError, ValueError):
            return False
        return status["connector"]["state"] == "RUNNING" and all(t["state"] == "RUNNING" for t in status["tasks"])

    def ready(self) -> bool:
        return (all(c.ready() for c in self.children.values()) and self.jobs_running()
                and self.platform_healthy())

    def wait_ready(self, timeout_s: float, what: str, required: bool = False) -> float | None:
        """Seconds until everything is back; None if not within `timeout_s` (RunFailed if `required`)."""
        began = time.monotonic()
        while time.monotonic() - began < timeout_s:
            if self.ready():
                return time.monotonic() - began
            time.sleep(0.5)
        if required:
            raise RunFailed(f"timed out waiting for {what}")
        return None

    # --- faults

    def kill(self, fault: str) -> None:
        """SIGKILL the part (every process of it, its whole process group)."""
        from infra.platform.services import Flink, KafkaConnect, Kafka, Postgres, Redis

        service = {"kafka": Kafka, "redis": Redis, "postgres": Postgres, "connect": KafkaConnect}.get(fault)
        if service is not None:
            for process in service(self.settings).processes():
                _kill_group(process)
        elif fault == "taskmanager":
            Flink(self.settings).kill_taskmanager()
        elif fault in IN_PLACE:
            self._fail_in_place(fault)
        elif fault == "jobmanager":
            _kill_group(Flink(self.settings).processes()[0])
        elif fault == "ad_server":
            _kill_group(self.children["ads-b"].process)
        elif fault in ("tracker", "prediction"):
            _kill_group(self.children[fault].process)
        elif fault != "baseline":
            raise RunFailed(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")

    def restart(self, fault: str) -> None:
        from infra.platform import control
        from infra.platform.services import Flink

        quiet = lambda line: None  # noqa: E731
        if fault in ("kafka", "redis", "postgres", "connect"):
            control.up(self.settings, log=quiet, only=[fault])
        elif fault == "taskmanager":
            Flink(self.settings).start_taskmanager()
        elif fault in IN_PLACE:
            self._until_failed_over(fault)
        elif fault == "jobmanager":
            self._restart_jobmanager()
        elif fault == "ad_server":
            self.replacements += 1
            self.children.pop("ads-b")
            self.routable.discard("ads-b")
            self._ad_server("ads-b", f"faults-{self.run_id}-ads-b-r{self.replacements}")
        elif fault in ("tracker", "prediction"):
            self.children[fault].start(self.env)

    def _fail_in_place(self, fault: str) -> None:
        """python_worker: SIGKILL every Python worker of the TaskManager (each job's), the TaskManager's JVM left
        running; task_failure: arm each job's tripwire, so its stateful operator raises on its next record."""
        from infra.platform.services import Flink
        from jobs import deploy

        self.failures_before = {name: deploy.failures(self.settings.flink_rest_url, job_id)
                                for name, job_id in self.job_ids.items()}
        if fault == "task_failure":
            for name in self.job_ids:
                self.tripwire(name).write_text("1")
            return
        workers = Flink(self.settings).python_workers()
        if not workers:
            raise RunFailed("python_worker: the TaskManager runs no Python worker to kill")
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.log(f"[{fault}] killed Python workers {workers}")

    def _until_failed_over(self, fault: str) -> None:
        """Until every job has failed since the fault (its exception history grew) and a task_failure's
        tripwires are gone: the evidence the fault hit each job. RunFailed when one did not within its bound."""
        from jobs import deploy

        def failed_over() -> bool:
            try:
                return all(deploy.failures(self.settings.flink_rest_url, job_id) > self.failures_before[name]
                           and not self.tripwire(name).exists() for name, job_id in self.job_ids.items())
            except deploy.DeployError:
                return False

        wait_until(failed_over, timeout_s=RECOVERY_BOUND_S[fault], interval_s=0.2,
                   what=f"every job failing over after {fault}")

    def _restart_jobmanager(self) -> None:
        """No HA: the JobManager comes back empty; the run's jobs are submitted again from their latest retained
        checkpoint, once the TaskManager has registered with the new JobManager."""
        from infra.platform.services import Flink, pyflink_home

        flink = Flink(self.settings)
        jm = flink.processes()[0]
        jm.start(["bash", str(pyflink_home() / "bin" / "jobmanager.sh"), "start-foreground",
                  *flink.reporter_port_args("jobmanager")], env=flink.env())
        wait_until(lambda: _http_ok(f"{self.settings.flink_rest_url}/overview") and flink.healthy(),
                   timeout_s=150, what="the JobManager to restart with its TaskManager")
        checkpoints = {name: latest_checkpoint(flink.data_dir / "checkpoints" / job_id)
                       for name, job_id in self.job_ids.items()}
        self.log("  resubmitting from " + ", ".join(f"{n}: {p}" for n, p in checkpoints.items()))
        self._deploy_jobs(from_checkpoints={n: p for n, p in checkpoints.items() if p})

    # --- the end of the day

    def close_billing(self, last_beacon_ms: int, timeout_s: float = 120) -> bool:
        """Event time past the last beacon's window on every partition of ad.events, until its totals are in."""
        from confluent_kafka import Producer

        from core.clicks import WINDOW_MS
        from schemas.codec import AvroCodec

        codec = AvroCodec()
        producer = Producer({"bootstrap.servers": self.settings.kafka_bootstrap})
        partitions = len(producer.list_topics(topic_names.AD_EVENTS, timeout=10).topics[topic_names.AD_EVENTS]
                         .partitions)
        target = (last_beacon_ms // WINDOW_MS + 1) * WINDOW_MS
        began = time.monotonic()
        while time.monotonic() - began < timeout_s:
            now = _now_ms()
            for partition in range(partitions):
                tick = {"event_id": uuid.uuid4().hex, "impression_id": f"faults-tick-{now}-{partition}",
                        "event_type": "IMPRESSION", "event_time": now, "served_time": now,
                        "campaign_id": self.clock_campaign, "ad_id": self.clock_campaign + 1, "price_micros": 1,
                        "billing_type": "IMPRESSION", "user_id": None, "ip_address": None, "user_agent": None,
                        "token_key_id": "faults"}
                producer.produce(topic_names.AD_EVENTS, key=str(self.clock_campaign).encode(), timestamp=now,
                                 partition=partition, value=codec.encode("AdEvent", tick))
            producer.flush(10)
            if self.feed.billed_through_ms() >= target:
                time.sleep(3)  # totals of other campaigns that closed with the same window
                return True
            time.sleep(1)
        return False


def latest_checkpoint(job_folder: Path) -> str | None:
    """The newest complete checkpoint (one with its _metadata) under a job's checkpoint folder, or None."""
    complete = [p for p in job_folder.glob("chk-*") if (p / "_metadata").exists()]
    if not complete:
        return None
    return str(max(complete, key=lambda p: int(p.name.split("-")[1])))


# ------------------------------------------------------------------ the matrix


@dataclass(frozen=True)
class Timing:
    settle_s: float = 15.0
    pause_lead_s: float = 3.0
    outage_s: float = 8.0
    # The broker stays down longer than the producers' 30 s delivery timeout: an outage their in-memory retries
    # cannot cover, so only the tracker's spool and the spend reporter's resends keep the acknowledged events.
    broker_outage_s: float = 40.0
    after_s: float = 12.0
    # The run's servers' and tracker's producer delivery timeout (librdkafka message.timeout.ms): the broker's
    # outage must outlast it. A shorter one lets a shorter outage prove the same (the CI test's 10 s and 12 s).
    delivery_timeout_ms: int = 30_000


def _phase(world: World, traffic: Traffic, index: int, fault: str, timing: Timing, log: Log) -> PhaseRecord:
    ids = world.phase_ids[index]
    campaigns = {cid: {"role": role, "budget_micros": BUDGETS_MICROS[role], "capped": role == "capped"}
                 for role, cid in ids.items()}
    record = PhaseRecord(fault, campaigns, recovery_bound_s=RECOVERY_BOUND_S[fault])
    first_answer, first_beacon = len(traffic.answers), len(traffic.beacons)
    log(f"[{fault}] launching campaigns {sorted(campaigns)} ...")
    launch = [(cid, role, "ACTIVE", 1) for role, cid in ids.items()]
    world.publish(launch, ads=True)
    # The ads reach the servers once the budget job has stated every campaign of the phase: before its first
    # state a server meters a new campaign and it gets no slice (docs/faults.md), so a phase would spend its first
    # seconds waiting for the budget job's next step instead of serving around its fault.
    wait_until(lambda: set(campaigns) <= set(world.feed.states), timeout_s=120,
               what="the budget job's first state for the phase's campaigns")
    world.publish(launch, serving_ads=True)
    waited = _until_served(traffic, first_answer, ids["paused"], timeout_s=60.0)
    log(f"[{fault}] the campaign to pause served after {waited:.1f} s" if waited is not None else
        f"[{fault}] the campaign to pause did not serve within 60 s: the phase goes on without that evidence")
    time.sleep(timing.settle_s)
    record.paused_at_s[ids["paused"]] = time.time()
    world.publish([(ids["paused"], "paused", "PAUSED", 2)])
    time.sleep(timing.pause_lead_s)
    killed_s = time.time()
    record.slices_at_fault_micros = world.feed.outstanding_micros(set(campaigns), int(killed_s * 1000))
    log(f"[{fault}] {'failing the jobs in place' if fault in IN_PLACE else 'SIGKILL'} "
        f"({record.slices_at_fault_micros} micros of slices outstanding)")
    world.kill(fault)
    time.sleep(0 if fault in IN_PLACE else timing.broker_outage_s if fault == "kafka" else timing.outage_s)
    restarting_s = time.time()
    if fault == "redis":
        record.redis_down = (killed_s + 0.5, restarting_s)
    world.restart(fault)
    back = world.wait_ready(2 * RECOVERY_BOUND_S[fault], what=fault)
    record.recovery_s = None if back is None else round(time.time() - restarting_s, 1)
    world.routable |= {n for n in world.children if n.startswith("ads-")}  # a replacement, once ready
    log(f"[{fault}] back after {record.recovery_s} s (bound {RECOVERY_BOUND_S[fault]:g} s)")
    time.sleep(timing.after_s)
    ended = time.time()
    world.publish([(cid, role, "PAUSED", 3) for role, cid in ids.items() if role != "paused"])
    for role, cid in ids.items():
        record.paused_at_s.setdefault(cid, ended)
    time.sleep(2.0)  # the answers sent before the phase's campaigns were paused
    record.answers = traffic.answers[first_answer:]
    record.beacons = [b for b in traffic.beacons[first_beacon:] if b.campaign_id in campaigns]
    return record


def _until_served(traffic: "Traffic", first_answer: int, campaign_id: int, timeout_s: float) -> float | None:
    """Seconds until an answer after `first_answer` served the campaign; None when none did within `timeout_s`."""
    try:
        return wait_until(lambda: any(campaign_id in a.campaigns for a in traffic.answers[first_answer:]),
                          timeout_s=timeout_s, interval_s=0.2, what=f"campaign {campaign_id} served")
    except PlatformError:
        return None


class Matrix:
    """One run of the matrix, a phase at a time: `start` brings up the run's jobs, servers and traffic; `phase`
    runs one fault's phase (the baseline first, then in the order asked; a fault asked again returns its record);
    `finish` runs the phases not yet run, stops the traffic, closes the day's billing windows and judges every
    row; `stop` cancels the run's jobs and stops its servers. `run` drives it whole; the CI test drives one phase
    per test, so each test's time stays bounded and a failed phase names its fault."""

    def __init__(self, faults: tuple[str, ...] = FAULTS, rate: float = 8.0, timing: Timing = Timing(),
                 log: Log = print):
        unknown = [f for f in faults if f not in FAULTS]
        if unknown:
            raise RunFailed(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}")
        self.faults, self.rate, self.timing, self.log = tuple(faults), rate, timing, log
        self.plan = ("baseline", *faults)
        self.records: dict[str, PhaseRecord] = {}
        self.world: World | None = None
        self.traffic: Traffic | None = None
        self.figures: dict[str, Any] | None = None

    def start(self) -> "Matrix":
        from bench.common import machine
        from infra.platform import control

        settings = PlatformSettings.from_env()
        control.up(settings, log=self.log)
        self.began = time.monotonic()
        self.machine = {**machine(), "load_average_start": os.getloadavg()}
        self.world = World(settings, phases=len(self.plan), rate=self.rate, log=self.log,
                           delivery_timeout_ms=self.timing.delivery_timeout_ms)
        self.traffic = Traffic(self.world.ad_server_urls, self.world.placement, self.rate, self.world.keys)
        self.log(f"starting the run's jobs and servers (run {self.world.run_id}) ...")
        self.world.start()
        self.traffic.start()
        return self

    def phase(self, fault: str) -> PhaseRecord:
        if fault not in self.plan:
            raise RunFailed(f"{fault!r} is not a phase of this run ({', '.join(self.plan)})")
        if fault not in self.records:
            if fault != "baseline" and "baseline" not in self.records:
                self.phase("baseline")
            self.records[fault] = _phase(self.world, self.traffic, len(self.records), fault, self.timing,
                                         self.log)
        return self.records[fault]

    def finish(self) -> dict[str, Any]:
        if self.figures is not None:
            return self.figures
        for fault in self.plan:
            self.phase(fault)
        world, traffic = self.world, self.traffic
        traffic.halt.set()
        traffic.join(30)
        self.log("closing the day's billing windows ...")
        began = time.monotonic()
        closed = world.close_billing(_now_ms())
        self.log(f"the day's last window billed after {time.monotonic() - began:.1f} s" if closed else
                 "the click aggregator did not bill the last window in time: counts compare what it billed")
        self.stop()
        phases = [self.records[f] for f in self.plan]
        for phase in phases:
            phase.billed = [r for r in world.feed.billed if int(r["campaign_id"]) in phase.campaigns]
        rows = [row(p, FRESHNESS_BOUND_S) for p in phases]
        timing = self.timing
        self.figures = {"machine": {**self.machine, "load_average_end": os.getloadavg()},
                        "rows": rows, "all_held": all(r["held"] for r in rows), "faults": list(self.faults),
                        "rate": self.rate, "settle_s": timing.settle_s, "outage_s": timing.outage_s,
                        "broker_outage_s": timing.broker_outage_s, "delivery_timeout_ms": timing.delivery_timeout_ms,
                        "after_s": timing.after_s, "freshness_bound_s": FRESHNESS_BOUND_S,
                        "wall_s": round(time.monotonic() - self.began, 1), "run": world.run_id}
        return self.figures

    def stop(self) -> None:
        if self.traffic is not None:
            self.traffic.halt.set()
        if self.world is not None and not self.world.stopped:
            self.world.stop()

    def __enter__(self) -> "Matrix":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run(*, faults: tuple[str, ...] = FAULTS, rate: float = 8.0, timing: Timing = Timing(),
        log: Log = print) -> dict[str, Any]:
    with Matrix(faults, rate, timing, log) as matrix:
        return matrix.finish()


def render(f: dict[str, Any]) -> str:
    m = f["machine"]
    head = ("fault", "recovery_s", "bound_s", "lost", "double", "above_budget", "beyond_slices", "paused_served",
            "capped_no_redis", "5xx", "shared_ids", "held")
    lines = [f"machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB; load "
             f"{m['load_average_start'][0]:.1f} at the start, {m['load_average_end'][0]:.1f} at the end",
             f"{f['rate']:g} requests/s; per fault {f['settle_s']:g} s serving, kill, {f['outage_s']:g} s down, "
             f"restart, {f['after_s']:g} s after recovery; whole run {f['wall_s']} s",
             " | ".join(head)]
    for r in f["rows"]:
        lines.append(" | ".join(str(v) for v in (
            r["fault"], r["recovery_s"], r["recovery_bound_s"], r["lost_events"], r["double_billed_events"],
            r["billed_above_budget_micros"], r["overspend_beyond_slices_micros"], r["paused_served_after_bound"],
            r["capped_served_without_redis"], r["server_errors"], r["shared_impression_ids"],
            "yes" if r["held"] else "NO")))
    lines.append("every invariant held under every fault" if f["all_held"] else "AN INVARIANT BROKE (rows above)")
    return "\n".join(lines)
