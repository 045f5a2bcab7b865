"""`adserve bench billing`: events per second through the click aggregator, beacon-to-billed latency, and the
nightly recount over the same day's archive.

Part 1, throughput: --events ad.events records (default 3 M: impressions of
--campaigns campaigns, about 2 % clicks, 3 % repeated beacons, a few bots)
are produced to a fresh 4-partition topic; `click_aggregator` then runs
bounded over them on the platform's Flink cluster with checkpointing on
(exactly-once state, every --checkpoint-interval-ms: by default the job's
own default, 5 s, as `adserve jobs deploy` runs it). Figure: events per
second while it runs (the offsets it commits at each checkpoint, from the
first checkpoint that moved them to the last: start-up excluded), and the
job's whole run time with the rate over it (start-up included: the
conservative figure). A run needs several checkpoints for the first figure
to mean much: with fewer events or a longer interval it rests on two or three
points and varies more.

Part 2, the recount: `archiver` runs bounded over the same events, the
campaigns and the billed totals part 1 produced, and `pipelines.nightly_recount`
(Beam, DirectRunner) recomputes the day from those files. Figures: its run
time and the number of differences from the streaming totals (0 on a clean
day).

Part 3, latency: `click_aggregator` runs unbounded on fresh topics while
events are produced in real time (--latency-rate per second for
--latency-s seconds, event time = now). Every billed record covers its
campaign's events of one 10 s window; an event's beacon-to-billed latency is
the wall time its window's record is read back minus the event's time.
Figures: p50 and p99 over every billable event.

With --compare-full-snapshots, part 1 runs a second time over the same
events with the job's state checkpointed whole (--no-state-changelog, the heap
backend's full snapshot): what the changelog's incremental checkpoints buy.

Same-run baseline: the per-event path in plain Python (decode with the
project's codec, deduplicate in a dict, tag with core.clicks, sum per campaign
window) over part 1's events, one core, no Flink.

Figures (--json names): events_per_s, job_run_s, events_per_s_whole_run, events, campaigns,
checkpoint_interval_ms, recount_s, recount_differences, recount_events, beacon_to_billed_p50_s,
beacon_to_billed_p99_s, latency_events, baseline_python_events_per_s; with --compare-full-snapshots
also events_per_s_full_snapshots, job_run_s_full_snapshots."""
from __future__ import annotations

import tempfile
import threading
import time
import uuid
from typing import Any

from core.errors import RunFailed
from infra.platform import PlatformSettings
from jobs.common.settings import KafkaJobSettings
from schemas import topics as topic_names
from sim.synthetic import billing_events

T0 = 1_773_100_800_000  # 2026-03-10 00:00 UTC
DAY = "2026-03-10"
DOLLAR = 1_000_000
PARTITIONS = 4
CHECKPOINT_MS = KafkaJobSettings.checkpoint_interval_ms  # the jobs' own default
AD_EVENT = topic_names.record_type(topic_names.AD_EVENTS)


def _producer(settings: PlatformSettings):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": settings.kafka_bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                     "compression.type": "lz4", "queue.buffering.max.messages": 2_000_000})


def _produce(producer, topic: str, key: bytes, value: bytes, ts: int, partition: int | None = None) -> None:
    while True:
        try:
            if partition is None:
                producer.produce(topic, key=key, value=value, timestamp=ts)
            else:
                producer.produce(topic, key=key, value=value, timestamp=ts, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


def _topics(settings: PlatformSettings, kind: str) -> dict[str, str]:
    from infra.platform.topics import TopicSpec, ensure_topics

    suffix = uuid.uuid4().hex[:8]
    topics = {n: f"bench.billing.{kind}.{n}.{suffix}" for n in ("events", "campaigns", "billed", "dead")}
    ensure_topics(settings.kafka_bootstrap, tuple(TopicSpec(t, key="campaign id", schema="",
                                                            partitions=PARTITIONS if n == "events" else 1)
                                                  for n, t in topics.items()))
    return topics


def _job_args(settings: PlatformSettings, topics: dict[str, str], group: str, checkpoint_ms: int,
              *extra: str) -> list[str]:
    from infra.platform.jars import flink_connector_jar

    return ["--bootstrap", settings.kafka_bootstrap, "--connector-jar", str(flink_connector_jar(settings)),
            "--group-id", group, "--startup-mode", "earliest-offset", "--checkpoint-interval-ms", str(checkpoint_ms),
            "--events-topic", topics["events"], "--campaigns-topic", topics["campaigns"],
            "--billed-topic", topics["billed"], "--dead-letter-topic", topics["dead"], *extra]


def _wait_started(rest: str, job_id: str) -> None:
    """Until a bounded job runs or has already finished (a small run can end before it is seen running)."""
    from jobs import deploy

    try:
        deploy.wait_running(rest, job_id, timeout_s=300)
    except deploy.DeployError:
        if deploy.job_state(rest, job_id)[0] != "FINISHED":
            raise


def _campaign_records(producer, topic: str, campaigns: int, at_ms: int) -> None:
    from bench.common import produce_campaign_records

    produce_campaign_records(producer, topic, campaigns, at_ms, 500 * DOLLAR)


def bench_throughput(settings: PlatformSettings, *, events: int, campaigns: int, checkpoint_ms: int,
                     log) -> tuple[dict, dict]:
    from schemas.codec import AvroCodec

    codec = AvroCodec()
    topics = _topics(settings, "run")
    producer = _producer(settings)
    _campaign_records(producer, topics["campaigns"], campaigns, T0 - 60_000)
    log(f"producing {events:,} events on {campaigns:,} campaigns to {topics['events']} ...")
    last = T0
    for campaign, event in billing_events(events, campaigns, seed=11, start_ms=T0, per_second=20_000):
        _produce(producer, topics["events"], str(campaign).encode(), codec.encode(AD_EVENT, event),
                 event["event_time"])
        last = event["event_time"]
    for partition in range(PARTITIONS):  # a last tick everywhere closes the final windows
        tick = {"event_id": uuid.uuid4().hex, "impression_id": f"end-{partition}", "event_type": "IMPRESSION",
                "event_time": last + 20_000, "served_time": last, "campaign_id": 1, "ad_id": 10,
                "price_micros": 1, "billing_type": "CLICK", "user_id": None, "ip_address": None,
                "user_agent": None, "token_key_id": "k1"}
        _produce(producer, topics["events"], b"1", codec.encode(AD_EVENT, tick), last + 20_000, partition)
    producer.flush(120)
    figures = run_throughput(settings, topics, events=events, checkpoint_ms=checkpoint_ms, log=log)
    figures["campaigns"] = campaigns
    return figures, topics


def run_throughput(settings: PlatformSettings, topics: dict[str, str], *, events: int, checkpoint_ms: int, log,
                   state_changelog: bool = True) -> dict[str, Any]:
    """click_aggregator bounded over `topics`' events (a fresh consumer group): events/s and run time."""
    from infra.platform.services import Flink
    from jobs import deploy

    rest, conf = settings.flink_rest_url, Flink(settings).conf_dir
    group = f"bench-billing-{uuid.uuid4().hex[:6]}"
    how = "state changelog" if state_changelog else "full snapshots of the state"
    log(f"running click_aggregator bounded over them, checkpointing every {checkpoint_ms / 1000:g} s ({how}) ...")
    job_id = deploy.deploy("click_aggregator", jobmanager=f"{settings.host}:{settings.flink_rest_port}",
                           conf_dir=conf, job_args=_job_args(settings, topics, group, checkpoint_ms, "--bounded",
                                                             # a backfill: no partition is quiet, only slow
                                                             "--idle-timeout-ms", "60000",
                                                             "--state-changelog" if state_changelog
                                                             else "--no-state-changelog"))
    _wait_started(rest, job_id)
    from bench.common import committed_rate

    rate, job_run_s = committed_rate(settings, job_id, group, topics["events"], PARTITIONS, events)
    return {"events_per_s": round(rate), "job_run_s": round(job_run_s, 1),
            "events_per_s_whole_run": round(events / job_run_s), "events": events,
            "checkpoint_interval_ms": checkpoint_ms}


def bench_recount(settings: PlatformSettings, topics: dict[str, str], log) -> dict[str, Any]:
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink
    from jobs import deploy
    from pipelines import nightly_recount

    archive = tempfile.mkdtemp(prefix="adserve-bench-archive-")
    log(f"archiving the run's topics bounded into {archive} ...")
    job_id = deploy.deploy("archiver", jobmanager=f"{settings.host}:{settings.flink_rest_port}",
                           conf_dir=Flink(settings).conf_dir,
                           job_args=["--bootstrap", settings.kafka_bootstrap,
                                     "--connector-jar", str(flink_connector_jar(settings)),
                                     "--group-id", f"bench-archive-{uuid.uuid4().hex[:6]}",
                                     "--startup-mode", "earliest-offset", "--bounded",
                                     "--checkpoint-interval-ms", "2000", "--archive-dir", archive,
                                     "--topics", ",".join(topics[n] for n in ("events", "campaigns", "billed"))])
    _wait_started(settings.flink_rest_url, job_id)
    while (state := deploy.job_state(settings.flink_rest_url, job_id)[0]) not in ("FINISHED", "FAILED", "CANCELED"):
        time.sleep(1)
    if state != "FINISHED":
        raise RunFailed(f"the archiver ended {state}")
    log("running the nightly recount (Beam, DirectRunner) over the archive ...")
    began = time.monotonic()
    summary = nightly_recount.run(["--archive", archive, "--day", DAY, "--output", f"{archive}/recount",
                                   "--events-topic", topics["events"], "--campaigns-topic", topics["campaigns"],
                                   "--billed-topic", topics["billed"]], save_main_session=False)
    return {"recount_s": round(time.monotonic() - began, 1), "recount_differences": summary["differences"],
            "recount_events": summary["events"], "recount_campaigns": summary["campaigns"]}


def _read_billed(settings: PlatformSettings, topic: str, codec, billed_at: dict[tuple[int, int], float],
                 stop: threading.Event) -> None:
    """Until `stop`: the wall time each (campaign, window end) billed total is first read back."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    while not stop.is_set():
        for m in consumer.consume(500, timeout=0.2):
            if m.error() is None:
                record = codec.decode(m.value())
                billed_at.setdefault((record["campaign_id"], record["event_time"]), time.time())
    consumer.close()


def _produce_in_real_time(producer, topic: str, codec, *, rate: int, seconds: int,
                          campaigns: int) -> list[tuple[int, int]]:
    """`rate` events a second stamped with the wall clock; (campaign, event time ms) of the billable, valid ones."""
    from core import clicks

    sent: list[tuple[int, int]] = []
    began, produced = time.time(), 0
    for campaign, event in billing_events(rate * seconds, campaigns, seed=13, start_ms=0, per_second=rate,
                                   clock=lambda: int(time.time() * 1000)):
        produced += 1
        _produce(producer, topic, str(campaign).encode(), codec.encode(AD_EVENT, event), event["event_time"])
        if clicks.is_billable(event) and clicks.invalid_reason(event) is None:
            sent.append((campaign, event["event_time"]))
        ahead = began + produced / rate - time.time()  # hold the rate: real time, not a backlog
        if ahead > 0.005:
            producer.poll(0)
            time.sleep(ahead)
    return sent


def _keep_event_time_moving(producer, topic: str, codec, *, seconds: float) -> None:
    """Tick events on every partition for `seconds` after the last event, so its window closes."""
    end = time.time() + seconds
    while time.time() < end:
        now = int(time.time() * 1000)
        for partition in range(PARTITIONS):
            tick = {"event_id": uuid.uuid4().hex, "impression_id": f"tick-{now}-{partition}",
                    "event_type": "IMPRESSION", "event_time": now, "served_time": now - 1000, "campaign_id": 1,
                    "ad_id": 10, "price_micros": 1, "billing_type": "CLICK", "user_id": None,
                    "ip_address": None, "user_agent": None, "token_key_id": "k1"}
            _produce(producer, topic, b"1", codec.encode(AD_EVENT, tick), now, partition)
        producer.poll(0)
        time.sleep(0.2)


def bench_latency(settings: PlatformSettings, *, rate: int, seconds: int, campaigns: int, checkpoint_ms: int,
                  log) -> dict[str, Any]:
    import numpy as np

    from core import clicks
    from infra.platform.services import Flink
    from jobs import deploy
    from schemas.codec import AvroCodec

    codec = AvroCodec()
    topics = _topics(settings, "latency")
    producer = _producer(settings)
    _campaign_records(producer, topics["campaigns"], campaigns, int(time.time() * 1000) - 60_000)
    producer.flush(60)
    job_id = deploy.deploy("click_aggregator", jobmanager=f"{settings.host}:{settings.flink_rest_port}",
                           conf_dir=Flink(settings).conf_dir,
                           job_args=_job_args(settings, topics, f"bench-latency-{uuid.uuid4().hex[:6]}",
                                                             checkpoint_ms))
    deploy.wait_running(settings.flink_rest_url, job_id, timeout_s=300)
    billed_at: dict[tuple[int, int], float] = {}  # (campaign, window end) -> wall time first read
    stop = threading.Event()
    reader = threading.Thread(target=_read_billed, args=(settings, topics["billed"], codec, billed_at, stop),
                              daemon=True)
    reader.start()
    time.sleep(5)  # the job's sources find the topics
    log(f"producing {rate:,} events/s in real time for {seconds} s, reading billed totals back ...")
    sent = _produce_in_real_time(producer, topics["events"], codec, rate=rate, seconds=seconds, campaigns=campaigns)
    _keep_event_time_moving(producer, topics["events"], codec, seconds=25)
    producer.flush(30)
    stop.set()
    reader.join(10)
    deploy.stop(settings.flink_rest_url, job_id)
    latencies = [billed_at[(c, clicks.window_end(t))] - t / 1000 for c, t in sent
                 if (c, clicks.window_end(t)) in billed_at]
    if not latencies:
        raise RunFailed("no billed totals came back: the latency part measured nothing")
    return {"beacon_to_billed_p50_s": round(float(np.percentile(latencies, 50)), 2),
            "beacon_to_billed_p99_s": round(float(np.percentile(latencies, 99)), 2),
            "latency_events": len(latencies), "latency_events_unbilled": len(sent) - len(latencies)}


def bench_python_baseline(events: int, campaigns: int) -> dict[str, Any]:
    from core import clicks
    from schemas.codec import AvroCodec

    codec = AvroCodec()
    values = [codec.encode(AD_EVENT, e) for _, e in billing_events(events, campaigns, seed=17, start_ms=T0,
                                                                   per_second=20_000)]
    seen: set[tuple[str, str]] = set()
    windows: dict[tuple[int, int], clicks.WindowTotals] = {}
    began = time.perf_counter()
    for value in values:
        event = codec.decode(value, AD_EVENT)
        key = clicks.dedupe_key(event)
        if key in seen:
            continue
        seen.add(key)
        end = clicks.window_end(event["event_time"])
        windows.setdefault((event["campaign_id"], end), clicks.WindowTotals(end)).add(
            event, clicks.invalid_reason(event))
    return {"baseline_python_events_per_s": round(len(values) / (time.perf_counter() - began))}


def run(*, events: int, campaigns: int, latency_rate: int, latency_s: int, recount: bool = True,
        checkpoint_ms: int = CHECKPOINT_MS, compare_full_snapshots: bool = False,
        log=print) -> dict[str, Any]:
    from bench.common import machine
    from infra.platform import control

    settings = PlatformSettings.from_env()
    control.up(settings, log=log)
    figures: dict[str, Any] = {"machine": machine()}
    throughput, topics = bench_throughput(settings, events=events, campaigns=campaigns, checkpoint_ms=checkpoint_ms,
                                          log=log)
    figures.update(throughput)
    if recount:
        figures.update(bench_recount(settings, topics, log))
    if compare_full_snapshots:
        log("the same events again, the job's state written whole at every checkpoint (--no-state-changelog) ...")
        outputs = _topics(settings, "full")  # its own billed and dead-letter topics
        full = run_throughput(settings, {**outputs, "events": topics["events"], "campaigns": topics["campaigns"]},
                              events=events, checkpoint_ms=checkpoint_ms, log=log, state_changelog=False)
        figures.update({"events_per_s_full_snapshots": full["events_per_s"],
                        "job_run_s_full_snapshots": full["job_run_s"]})
    figures.update(bench_latency(settings, rate=latency_rate, seconds=latency_s, campaigns=campaigns,
                                 checkpoint_ms=checkpoint_ms, log=log))
    log("baseline: the per-event path in plain Python ...")
    figures.update(bench_python_baseline(min(events, 300_000), campaigns))
    return figures


def render(f: dict[str, Any]) -> str:
    m = f["machine"]
    lines = [
        f"machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB",
        f"click aggregator (Flink, checkpoint every {f['checkpoint_interval_ms']} ms): {f['events_per_s']:,} "
        f"events/s ({f['events']:,} events, {f['campaigns']:,} campaigns; whole run {f['job_run_s']} s, "
        f"{f['events_per_s_whole_run']:,} events/s with start-up)",
        *([f"the same events with the state written whole at every checkpoint (no changelog): "
           f"{f['events_per_s_full_snapshots']:,} events/s (run {f['job_run_s_full_snapshots']} s)"]
          if "events_per_s_full_snapshots" in f else []),
        f"baseline, per-event decode + dedupe + tag + window in plain Python: "
        f"{f['baseline_python_events_per_s']:,} events/s "
        f"(x{f['events_per_s'] / max(1, f['baseline_python_events_per_s']):.1f})"]
    if "recount_s" in f:
        lines.append(f"nightly recount (Beam DirectRunner) over the archive: {f['recount_s']} s for "
                     f"{f['recount_events']:,} archived events, {f['recount_differences']} differences from the "
                     f"streaming totals ({f['recount_campaigns']:,} campaigns)")
    lines.append(f"beacon to billed spend: p50 {f['beacon_to_billed_p50_s']} s, p99 {f['beacon_to_billed_p99_s']} s "
                 f"({f['latency_events']:,} billable events; {f['latency_events_unbilled']} not seen billed)")
    return "\n".join(lines)
