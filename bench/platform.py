"""`adserve bench platform`: what the platform itself costs, each figure beside a
baseline measured in the same run on the same machine.

Figures (names as printed by --json):
  platform_start_s             cold `up` of a second, isolated platform instance (jars already fetched)
  start_s_<part>               seconds until each part was healthy within that start
  jvm_start_s                  baseline: `java -version`, the floor under every JVM part
  flink_submit_to_running_s    `flink run` of event_counts until every task is RUNNING
  flink_cli_s                  baseline: `flink --version`, the CLI's own JVM start
  smoke_records_per_s          event_counts, checkpointing on (exactly-once sinks), bounded over N events
                               on the standalone cluster, RUNNING -> FINISHED
  kafka_consume_records_per_s  baseline: one Python consumer reading the same N records
  avro_encode_per_s, avro_decode_per_s  schemas.codec on AdEvent records (framing included)
  json_encode_per_s, json_decode_per_s  baseline: json.dumps / json.loads of the same records"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import machine
from core.errors import RunFailed
from infra.platform import PlatformSettings, control
from schemas import topics

AD_EVENT = topics.record_type(topics.AD_EVENTS)


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    began = time.monotonic()
    subprocess.run(cmd, capture_output=True, check=True, env=env)
    return time.monotonic() - began


def bench_codec(records: int = 50_000) -> dict[str, float]:
    from sim.synthetic import ad_events as simulate_events
    from schemas.codec import AvroCodec

    codec = AvroCodec()
    events = simulate_events(3, events=records)
    began = time.perf_counter()
    encoded = [codec.encode(AD_EVENT, e) for e in events]
    avro_encode = records / (time.perf_counter() - began)
    schema = codec.registry.schema(AD_EVENT)
    began = time.perf_counter()
    for data in encoded:
        codec.decode(data, schema)
    avro_decode = records / (time.perf_counter() - began)
    began = time.perf_counter()
    as_json = [json.dumps(e).encode() for e in events]
    json_encode = records / (time.perf_counter() - began)
    began = time.perf_counter()
    for data in as_json:
        json.loads(data)
    json_decode = records / (time.perf_counter() - began)
    return {"avro_encode_per_s": round(avro_encode), "avro_decode_per_s": round(avro_decode),
            "json_encode_per_s": round(json_encode), "json_decode_per_s": round(json_decode),
            "avro_bytes_per_record": round(sum(map(len, encoded)) / records, 1),
            "json_bytes_per_record": round(sum(map(len, as_json)) / records, 1)}


def bench_cold_start(settings: PlatformSettings, log) -> dict[str, float]:
    """Start a second, isolated instance from nothing (jars shared), then stop and delete it."""
    home = Path(tempfile.mkdtemp(prefix="adserve-bench-", dir=settings.home))
    (home / "jars").symlink_to(settings.jars_dir)
    shift = 400
    other = PlatformSettings(home=home, kafka_port=settings.kafka_port + shift,
                             kafka_controller_port=settings.kafka_controller_port + shift,
                             connect_port=settings.connect_port + shift,
                             postgres_port=settings.postgres_port + shift, redis_port=settings.redis_port + shift,
                             flink_rest_port=settings.flink_rest_port + shift,
                             flink_rpc_port=settings.flink_rpc_port + shift,
                             flink_jobmanager_metrics_port=settings.flink_jobmanager_metrics_port + shift,
                             flink_taskmanager_metrics_port=settings.flink_taskmanager_metrics_port + shift,
                             prometheus_port=settings.prometheus_port + shift)
    times: dict[str, float] = {}
    began = time.monotonic()

    def record(line: str) -> None:
        if ": healthy after " in line:
            part = line.split(":", 1)[0]
            times[f"start_s_{part}"] = round(time.monotonic() - began, 1)
        log(f"[cold start] {line}")

    try:
        report = control.up(other, log=record)
        times["platform_start_s"] = round(report.seconds, 1)
    finally:
        control.down(other, log=lambda _: None, purge=True)
        shutil.rmtree(home, ignore_errors=True)
    return times


def _wait_finished(rest: str, job_id: str) -> None:
    """Until the bounded job ends; raises unless it FINISHED."""
    from jobs import deploy

    while True:
        state, _ = deploy.job_state(rest, job_id)
        if state in ("FINISHED", "FAILED", "CANCELED"):
            break
        time.sleep(0.2)
    if state != "FINISHED":
        raise RunFailed(f"benchmark job ended {state}")


def bench_flink(settings: PlatformSettings, events: int, log) -> dict[str, float]:
    from sim.synthetic import ad_events as simulate_events
    from confluent_kafka.admin import NewTopic
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink, pyflink_home
    from jobs import deploy
    from schemas.codec import AvroCodec
    from streams import kafka

    results: dict[str, float] = {}
    conf = Flink(settings).conf_dir
    flink_env = os.environ | {"FLINK_CONF_DIR": str(conf)}
    results["flink_cli_s"] = round(_timed(["bash", str(pyflink_home() / "bin" / "flink"), "--version"],
                                          flink_env), 2)
    suffix = uuid.uuid4().hex[:8]
    source, output, dead = (f"bench.{n}.{suffix}" for n in ("events", "counts", "dead"))
    admin = kafka.admin(settings.kafka_bootstrap)
    for future in admin.create_topics([NewTopic(source, 4, 1), NewTopic(output, 4, 1), NewTopic(dead, 1, 1)],
                                      request_timeout=15).values():
        future.result(timeout=15)
    codec = AvroCodec()
    log(f"producing {events:,} events to {source} ...")
    simulated = simulate_events(11, events=events, minutes=60)
    kafka.produce_all(settings.kafka_bootstrap, source,
                      [(str(e["campaign_id"]).encode(), codec.encode(AD_EVENT, e), e["event_time"])
                       for e in simulated], timeout_s=120)

    began = time.monotonic()
    consumed = kafka.read_all(settings.kafka_bootstrap, source, expected=events, timeout_s=300)
    results["kafka_consume_records_per_s"] = round(len(consumed) / (time.monotonic() - began))
    del consumed

    common = ["--bootstrap", settings.kafka_bootstrap, "--connector-jar", str(flink_connector_jar(settings)),
              "--input-topic", source, "--output-topic", output, "--dead-letter-topic", dead,
              "--startup-mode", "earliest-offset", "--checkpoint-interval-ms", "2000"]
    rest = settings.flink_rest_url
    jobmanager = f"{settings.host}:{settings.flink_rest_port}"

    log("submitting event_counts (unbounded) to measure submit-to-running ...")
    began = time.monotonic()
    job_id = deploy.deploy("event_counts", jobmanager=jobmanager, conf_dir=conf,
                           job_args=common + ["--group-id", f"bench-a-{suffix}"])
    deploy.wait_running(rest, job_id)
    results["flink_submit_to_running_s"] = round(time.monotonic() - began, 1)
    deploy.stop(rest, job_id)

    log(f"running event_counts bounded over {events:,} events with checkpointing on ...")
    job_id = deploy.deploy("event_counts", jobmanager=jobmanager, conf_dir=conf,
                           job_args=common + ["--group-id", f"bench-b-{suffix}", "--bounded"])
    deploy.wait_running(rest, job_id, timeout_s=300)
    running_at = time.monotonic()
    _wait_finished(rest, job_id)
    results["smoke_records_per_s"] = round(events / (time.monotonic() - running_at))
    admin.delete_topics([source, output, dead], request_timeout=15)
    return results


def run(*, events: int = 100_000, cold_start: bool = True, log=print) -> dict[str, Any]:
    settings = PlatformSettings.from_env()
    figures: dict[str, Any] = {"benchmark": "platform", "machine": machine()}
    figures["jvm_start_s"] = round(_timed(["java", "-version"]), 2)
    log("encoding and decoding AdEvent records ...")
    figures.update(bench_codec())
    control.up(settings, log=log)
    if cold_start:
        figures.update(bench_cold_start(settings, log))
    figures.update(bench_flink(settings, events, log))
    figures["smoke_events"] = events
    return figures


def render(figures: dict[str, Any]) -> str:
    m = figures["machine"]
    lines = [f"adserve bench platform on {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, "
             f"Python {m['python']}, {m['java']}"]
    rows = [
        ("platform cold start", "platform_start_s", "s", "JVM start (java -version)", "jvm_start_s", "s"),
        ("flink run submit -> RUNNING", "flink_submit_to_running_s", "s", "flink CLI start (--version)",
         "flink_cli_s", "s"),
        (f"smoke job, checkpointing on ({figures.get('smoke_events', 0):,} events)", "smoke_records_per_s",
         "records/s", "one Python Kafka consumer", "kafka_consume_records_per_s", "records/s"),
        ("Avro encode (AdEvent, framed)", "avro_encode_per_s", "records/s", "json.dumps", "json_encode_per_s",
         "records/s"),
        ("Avro decode (AdEvent, framed)", "avro_decode_per_s", "records/s", "json.loads", "json_decode_per_s",
         "records/s"),
    ]
    for label, key, unit, base_label, base_key, base_unit in rows:
        if key in figures:
            lines.append(f"  {label:<48} {figures[key]:>12,} {unit:<10} baseline {base_label}: "
                         f"{figures.get(base_key, '-'):,} {base_unit}")
    parts = [k for k in figures if k.startswith("start_s_")]
    if parts:
        lines.append("  cold start, healthy at: " + ", ".join(f"{k[8:]} {figures[k]} s" for k in parts))
    return "\n".join(lines)
