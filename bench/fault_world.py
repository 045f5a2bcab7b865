"""The fault matrix's world: the run's jobs, servers and campaigns on the platform, and how each part of it is
killed and restarted (docs/faults.md gives each part's restart story). It acts and waits; the matrix
(bench.faults) decides when, and bench.fault_checks judges what the phase recorded."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.fault_load import Feed
from bench.fault_plan import (BIDS_MICROS, BUDGETS_MICROS, CAP_PER_DAY, DOLLAR, FAULTS, IN_PLACE, RECOVERY_BOUND_S,
                              Log, now_ms)
from core.errors import RunFailed
from infra.platform import PlatformSettings
from infra.platform.process import ManagedProcess, reap, wait_until
from schemas import topics as topic_names

SERVING_AD, SERVING_CAMPAIGN, AD_EVENT = (topic_names.record_type(topic) for topic in (
    topic_names.SERVING_ADS, topic_names.SERVING_CAMPAIGNS, topic_names.AD_EVENTS))


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
        self.start_ms = now_ms()
        self.feed = Feed(settings.kafka_bootstrap, self.topics["billed"],
                         {cid for ids in self.phase_ids for cid in ids.values()} | {self.clock_campaign})

    # --- campaigns

    def campaign_record(self, campaign_id: int, role: str, status: str, version: int) -> dict[str, Any]:
        return {"campaign_id": campaign_id, "advertiser_id": campaign_id, "version": version,
                "event_time": now_ms(), "status": status, "bid_type": "CPM",
                "daily_budget_micros": BUDGETS_MICROS.get(role, 500 * DOLLAR), "currency": "USD",
                "timezone": "UTC", "flight_start": None, "flight_end": None, "dayparts": [],
                "cap_per_day": CAP_PER_DAY if role == "capped" else None, "cap_per_week": None,
                "cpa_target_micros": None}

    def ad_record(self, campaign_id: int, role: str) -> dict[str, Any]:
        return {"ad_id": campaign_id + 1, "campaign_id": campaign_id, "advertiser_id": campaign_id, "version": 1,
                "event_time": now_ms(), "removed": False, "bid_type": "CPM",
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
        at = now_ms()
        ad_records = [(str(cid + 1).encode(), codec.encode(SERVING_AD, self.ad_record(cid, role)), at)
                      for cid, role, _, _ in campaigns]
        if serving_ads:
            kafka.produce_all(self.settings.kafka_bootstrap, topic_names.SERVING_ADS, ad_records)
            return
        records = [(str(cid).encode(), codec.encode(SERVING_CAMPAIGN, self.campaign_record(cid, role, status, v)), at)
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
            now = now_ms()
            for partition in range(partitions):
                tick = {"event_id": uuid.uuid4().hex, "impression_id": f"faults-tick-{now}-{partition}",
                        "event_type": "IMPRESSION", "event_time": now, "served_time": now,
                        "campaign_id": self.clock_campaign, "ad_id": self.clock_campaign + 1, "price_micros": 1,
                        "billing_type": "IMPRESSION", "user_id": None, "ip_address": None, "user_agent": None,
                        "token_key_id": "faults"}
                producer.produce(topic_names.AD_EVENTS, key=str(self.clock_campaign).encode(), timestamp=now,
                                 partition=partition, value=codec.encode(AD_EVENT, tick))
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
