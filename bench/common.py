"""What every benchmark shares: the machine it ran on, percentiles in milliseconds, the campaign records the
job benchmarks start from, and a bounded Flink job's rate read from its committed offsets. The benchmarks'
own figures live in their modules; nothing here decides what a figure means."""
from __future__ import annotations

import os
import platform as host
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import RunFailed
from infra.platform import PlatformSettings
from schemas import topics


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_gib, 1),
            "python": sys.version.split()[0], "java": java[0] if java else "?", "os": host.platform()}


def percentiles_ms(samples_ms) -> tuple[float, float]:
    """(p50, p99) of latency samples in milliseconds, rounded to microseconds."""
    return round(float(np.percentile(samples_ms, 50)), 3), round(float(np.percentile(samples_ms, 99)), 3)


def produce_campaign_records(producer, topic: str, campaigns: int, at_ms: int, daily_budget_micros: int) -> None:
    """Campaigns 1..`campaigns` as ServingCampaign records on `topic` for the job benchmarks (keyed by campaign
    id, stamped `at_ms`): active all day in UTC, odd ids CPC, even CPM. The caller flushes `producer`."""
    from schemas.codec import AvroCodec

    codec = AvroCodec()
    for campaign_id in range(1, campaigns + 1):
        record = {"campaign_id": campaign_id, "advertiser_id": 1, "version": 1, "event_time": at_ms,
                  "status": "ACTIVE", "bid_type": "CPC" if campaign_id % 2 else "CPM",
                  "daily_budget_micros": daily_budget_micros, "currency": "USD", "timezone": "UTC",
                  "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None,
                  "cap_per_week": None, "cpa_target_micros": None}
        while True:
            try:
                producer.produce(topic, key=str(campaign_id).encode(), timestamp=at_ms,
                                 value=codec.encode(topics.record_type(topics.SERVING_CAMPAIGNS), record))
                break
            except BufferError:
                producer.poll(0.05)


def committed_rate(settings: PlatformSettings, job_id: str, group: str, topic: str, partitions: int,
                   total: int) -> tuple[float, float]:
    """(records/s, run seconds) of a bounded Flink job reading `topic` with consumer group `group`: progress is
    the offsets the job commits at each completed checkpoint (exact counts of what it has fully processed,
    unlike the REST metrics, refreshed every ~10 s); the rate runs from the first checkpoint that moved them
    to the last (start-up excluded). Raises unless the job FINISHED."""
    from confluent_kafka import Consumer, TopicPartition

    from jobs import deploy

    began = time.monotonic()
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    parts = [TopicPartition(topic, p) for p in range(partitions)]
    samples: list[tuple[float, int]] = []
    while True:
        state, _ = deploy.job_state(settings.flink_rest_url, job_id)
        committed = consumer.committed(parts, timeout=10)
        samples.append((time.monotonic(), sum(max(0, tp.offset) for tp in committed)))
        if state in ("FINISHED", "FAILED", "CANCELED"):
            break
        time.sleep(0.25)
    consumer.close()
    run_s = time.monotonic() - began
    if state != "FINISHED":
        raise RunFailed(f"the benchmark job ended {state}")
    moving = [s for s in samples if s[1] > 0]
    first = moving[0] if moving else (began, 0)
    top = max((s[1] for s in moving), default=0)
    reached = next((s for s in moving if s[1] == top), first)
    span = reached[0] - first[0]
    return ((reached[1] - first[1]) / span if span > 1 else total / run_s), run_s
