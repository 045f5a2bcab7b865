"""`adserve bench pacing`: spend items per second through the budget job, and controller steps per second.

Part 1, the job: --items spend reports (default 4 M) from --servers servers
(default 200) on --campaigns campaigns (default 2,000), one report per server
and campaign it served and second, are produced to a fresh topic as ad servers
send them: each server's second in one record per partition, the campaigns as
packed columns (--single-reports: one record per report, with the heartbeats
of every second, as tools send them), and a campaign record for each campaign ($5,000 a
day, open through the run, so the controller steps every campaign every 10 s
and emits its budget states, as in service); `budget_pacing` then runs bounded over them on the
platform's Flink cluster with checkpointing on (exactly-once state, every
--checkpoint-interval-ms: by default the job's own default, 5 s). Figure: items per second through the job while it runs (the offsets
it commits at each checkpoint, from the first checkpoint that moved them to
the last: start-up excluded; with batched records, records/s times the
reports per record), and the job's whole run time.

Part 2, the controller (pure, one core): the budget job's per-campaign work
for --controller-campaigns (default 100,000) campaigns: one 10 s window of
spend and one controller step each, with and without the state's Avro round
trip (what the job adds per step).

Same-run baseline: the per-item path in Python (decode each report with the
project's codec and deduplicate it with core.spend.SpendDedupe in one plain
Python loop, no Flink at all): an upper bound for any Python per-item
operator, which the design's figures put at 4-11 k/s inside PyFlink.

Figures (--json names): spend_items_per_s, job_run_s, items, records,
report_form (batched or single), campaigns, servers, checkpoint_interval_ms, controller_steps_per_s,
controller_steps_per_s_with_state, controller_campaigns,
baseline_python_items_per_s."""
from __future__ import annotations

import time
import uuid
from typing import Any

from infra.platform import PlatformSettings
from jobs.common.settings import KafkaJobSettings
from schemas import topics as topic_names
from sim.synthetic import spend_batches, spend_reports

T0 = 1_773_100_800_000  # 2026-03-10 00:00 UTC
CHECKPOINT_MS = KafkaJobSettings.checkpoint_interval_ms  # the jobs' own default
BUDGET_MICROS = 5_000 * 1_000_000  # each campaign's daily budget: open through the run
SPEND_REPORT = topic_names.record_type(topic_names.BUDGET_SPEND)


def bench_job(settings: PlatformSettings, *, items: int, servers: int, campaigns: int, checkpoint_ms: int,
              log, batched: bool = True) -> dict[str, Any]:
    from confluent_kafka import Producer

    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink
    from infra.platform.topics import TopicSpec, ensure_topics
    from jobs import deploy

    suffix = uuid.uuid4().hex[:8]
    topics = {n: f"bench.pacing.{n}.{suffix}"
              for n in ("spend", "campaigns", "ads", "billed", "state", "leases", "dead")}
    ensure_topics(settings.kafka_bootstrap, tuple(TopicSpec(t, key="campaign id", schema="",
                                                            partitions=4 if n == "spend" else 1)
                                                  for n, t in topics.items()))
    log(f"producing {items:,} spend reports ({servers} servers, {campaigns:,} campaigns) to {topics['spend']} ...")
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 2_000_000})
    from bench.common import produce_campaign_records

    # so the controller steps every campaign, as it would in service
    produce_campaign_records(producer, topics["campaigns"], campaigns, T0 - 60_000, BUDGET_MICROS)
    records = 0
    stream = spend_batches(items, servers, campaigns, seed=5, start_ms=T0) if batched else \
        ((*report, None) for report in spend_reports(items, servers, campaigns, seed=5, start_ms=T0))
    for key, value, ts, partition, _ in stream:
        records += 1
        while True:
            try:
                if partition is None:
                    producer.produce(topics["spend"], key=key, value=value, timestamp=ts)
                else:
                    producer.produce(topics["spend"], key=key, value=value, timestamp=ts, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)
    rest, conf = settings.flink_rest_url, Flink(settings).conf_dir
    log(f"running budget_pacing bounded over them, checkpointing every {checkpoint_ms / 1000:g} s ...")
    job_id = deploy.deploy("budget_pacing", jobmanager=f"{settings.host}:{settings.flink_rest_port}", conf_dir=conf,
                           job_args=["--bootstrap", settings.kafka_bootstrap,
                                     "--connector-jar", str(flink_connector_jar(settings)),
                                     "--group-id", f"bench-pacing-{suffix}", "--startup-mode", "earliest-offset",
                                     "--bounded", "--checkpoint-interval-ms", str(checkpoint_ms), "--redis-url", "",
                                     "--spend-topic", topics["spend"], "--campaigns-topic", topics["campaigns"],
                                     "--ads-topic", topics["ads"],
                                     "--billed-topic", topics["billed"], "--state-topic", topics["state"],
                                     "--leases-topic", topics["leases"], "--dead-letter-topic", topics["dead"]])
    deploy.wait_running(rest, job_id, timeout_s=300)
    from bench.common import committed_rate

    rate, job_run_s = committed_rate(settings, job_id, f"bench-pacing-{suffix}", topics["spend"], 4, records)
    return {"spend_items_per_s": round(rate * items / records), "job_run_s": round(job_run_s, 1), "items": items,
            "records": records, "report_form": "batched" if batched else "single", "campaigns": campaigns,
            "servers": servers, "checkpoint_interval_ms": checkpoint_ms}


def bench_controller(campaigns: int) -> dict[str, Any]:
    from core import budget
    from schemas.codec import AvroCodec

    codec = AvroCodec()
    record = {"timezone": "UTC", "bid_type": "CPC", "status": "ACTIVE", "daily_budget_micros": 5_000 * 1_000_000}
    states = []
    for i in range(campaigns):
        state = budget.PacerState(i + 1)
        budget.on_campaign(state, record, T0)
        states.append(state)
    began = time.perf_counter()
    for state in states:
        budget.on_spend(state, budget.Window(T0 + 10_000, 20_000, 10, 30, 5), 2_000_000)
        budget.step(state, T0 + 10_000)
    plain = campaigns / (time.perf_counter() - began)
    began = time.perf_counter()
    for state in states:
        again = budget.from_record(codec.decode(codec.encode("PacerState", budget.to_record(state)), "PacerState"))
        budget.on_spend(again, budget.Window(T0 + 20_000, 20_000, 10, 30, 5), 2_000_000)
        budget.step(again, T0 + 20_000)
        codec.encode("PacerState", budget.to_record(again))
    with_state = campaigns / (time.perf_counter() - began)
    return {"controller_steps_per_s": round(plain), "controller_steps_per_s_with_state": round(with_state),
            "controller_campaigns": campaigns}


def bench_python_baseline(items: int) -> dict[str, Any]:
    from core.spend import SpendDedupe
    from schemas.codec import AvroCodec

    codec = AvroCodec()
    values = [v for _, v, _, p in spend_reports(items, 200, 2_000, seed=6, start_ms=T0) if p is None]
    dedupe = SpendDedupe()
    totals: dict[int, int] = {}
    began = time.perf_counter()
    for value in values:
        report = codec.decode(value, SPEND_REPORT)
        if dedupe.first_time(report):
            totals[report["campaign_id"]] = totals.get(report["campaign_id"], 0) + report["expected_spend_micros"]
    return {"baseline_python_items_per_s": round(len(values) / (time.perf_counter() - began))}


def run(*, items: int, servers: int, campaigns: int, controller_campaigns: int, checkpoint_ms: int = CHECKPOINT_MS,
        log=print, batched: bool = True) -> dict[str, Any]:
    from bench.common import machine
    from infra.platform import control

    settings = PlatformSettings.from_env()
    control.up(settings, log=log)
    figures: dict[str, Any] = {"machine": machine()}
    figures.update(bench_job(settings, items=items, servers=servers, campaigns=campaigns, checkpoint_ms=checkpoint_ms,
                             log=log, batched=batched))
    log(f"controller: {controller_campaigns:,} campaigns, one step each ...")
    figures.update(bench_controller(controller_campaigns))
    log("baseline: the per-item path in plain Python ...")
    figures.update(bench_python_baseline(min(items, 300_000)))
    return figures


def render(f: dict[str, Any]) -> str:
    m = f["machine"]
    return "\n".join([
        f"machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB",
        f"budget job (Flink, checkpoint every {f['checkpoint_interval_ms']} ms): {f['spend_items_per_s']:,} spend "
        f"items/s ({f['items']:,} items in {f['records']:,} {f['report_form']} records, {f['servers']} servers, "
        f"{f['campaigns']:,} campaigns; run {f['job_run_s']} s)",
        f"baseline, per-item decode + dedupe in plain Python: {f['baseline_python_items_per_s']:,} items/s "
        f"(x{f['spend_items_per_s'] / max(1, f['baseline_python_items_per_s']):.1f})",
        f"controller: {f['controller_steps_per_s']:,} steps/s, {f['controller_steps_per_s_with_state']:,} with the "
        f"state's Avro round trip ({f['controller_campaigns']:,} campaigns, one core)"])
