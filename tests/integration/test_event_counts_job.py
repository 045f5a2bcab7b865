"""The smoke job on the local mini-cluster and on the standalone cluster, against the real broker."""
from __future__ import annotations

import json
import os
import urllib.request
import subprocess
import sys
import time

from schemas import topics
from schemas.codec import AvroCodec
from streams import kafka
from tests.factories import BASE_MS, SMOKE_EVENTS, ad_event, expected_event_counts

CODEC = AvroCodec()
COUNT_TYPE, DEAD_LETTER_TYPE = topics.record_type(topics.EVENT_COUNTS), topics.record_type(topics.DEAD_LETTERS)
KEY = lambda r: (r["campaign_id"], r["window_start"])  # noqa: E731


def produce_events(bootstrap: str, topic: str, events, corrupt_at: int | None = None) -> None:
    event_type = topics.record_type(topics.AD_EVENTS)
    records = [(str(e["campaign_id"]).encode(), CODEC.encode(event_type, e), e["event_time"]) for e in events]
    if corrupt_at is not None:
        records.insert(corrupt_at, (b"7", b"not avro at all", BASE_MS + 2_000))
    kafka.produce_all(bootstrap, topic, records)


def decoded(messages, record_type):
    return [CODEC.decode(m.value(), record_type, topic=m.topic(), partition=m.partition(), offset=m.offset())
            for m in messages]


def run_local_job(platform, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobs.event_counts", "--bounded", "--startup-mode", "earliest-offset",
         "--bootstrap", platform.kafka_bootstrap, "--checkpoint-interval-ms", "1000", *args],
        capture_output=True, text=True, timeout=600, env=os.environ | platform.as_env())


def test_smoke_job_counts_exactly_and_dead_letters_the_corrupt_record(platform, fresh_topics):
    source, output, dead = fresh_topics("events", "counts", "dead")
    produce_events(platform.kafka_bootstrap, source, SMOKE_EVENTS, corrupt_at=4)

    done = run_local_job(platform, "--input-topic", source, "--output-topic", output,
                         "--dead-letter-topic", dead, "--group-id", f"g-{source}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    counts = decoded(kafka.read_all(platform.kafka_bootstrap, output, expected=5, timeout_s=30), COUNT_TYPE)
    assert sorted(counts, key=KEY) == sorted(expected_event_counts(), key=KEY)
    letters = decoded(kafka.read_all(platform.kafka_bootstrap, dead, expected=1, timeout_s=30), DEAD_LETTER_TYPE)
    assert len(letters) == 1
    letter = letters[0]
    assert (letter["source_topic"], letter["source_partition"], letter["source_offset"]) == (source, 0, 4)
    assert letter["error_type"] == "CorruptRecord"
    assert "C3 01 marker" in letter["reason"]
    assert letter["value"] == b"not avro at all"


def test_output_is_keyed_by_campaign(platform, fresh_topics):
    source, output, dead = fresh_topics("events", "counts", "dead")
    produce_events(platform.kafka_bootstrap, source, SMOKE_EVENTS)
    done = run_local_job(platform, "--input-topic", source, "--output-topic", output,
                         "--dead-letter-topic", dead, "--group-id", f"g-{source}")
    assert done.returncode == 0, done.stderr[-3000:]
    messages = kafka.read_all(platform.kafka_bootstrap, output, expected=5, timeout_s=30)
    assert {(m.key(), CODEC.decode(m.value())["campaign_id"]) for m in messages} == {(b"7", 7), (b"9", 9)}
    assert kafka.read_all(platform.kafka_bootstrap, dead, timeout_s=10, idle_s=1) == []


def adserve(platform, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "adserve", *args], capture_output=True, text=True,
                          timeout=timeout, env=os.environ | platform.as_env())


def corrupt_records_counted(rest_url: str, job_id: str, timeout_s: float = 30) -> int:
    """The job's corrupt_records metric, summed over its vertices, read from Flink's REST API."""
    def get(path):
        return json.loads(urllib.request.urlopen(f"{rest_url}{path}", timeout=5).read())

    deadline = time.monotonic() + timeout_s
    total = 0
    while time.monotonic() < deadline:
        total = 0
        for vertex in get(f"/jobs/{job_id}")["vertices"]:
            names = [m["id"] for m in get(f"/jobs/{job_id}/vertices/{vertex['id']}/metrics")
                     if m["id"].endswith("corrupt_records")]
            if names:
                values = get(f"/jobs/{job_id}/vertices/{vertex['id']}/metrics?get={','.join(names)}")
                total += sum(int(float(v["value"])) for v in values)
        if total:
            return total
        time.sleep(1)
    return total


def test_the_same_job_deploys_unchanged_to_the_standalone_cluster(platform, fresh_topics):
    source, output, dead = fresh_topics("events", "counts", "dead")
    deployed = adserve(platform, "jobs", "deploy", "event_counts", "--",
                       "--input-topic", source, "--output-topic", output, "--dead-letter-topic", dead,
                       "--group-id", f"g-{source}", "--startup-mode", "earliest-offset",
                       "--checkpoint-interval-ms", "1000")
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    assert "is RUNNING" in deployed.stdout
    job_id = deployed.stdout.split("job id ")[1].split()[0]
    try:
        listed = adserve(platform, "jobs", "list")
        assert job_id in listed.stdout and "RUNNING" in listed.stdout
        # An event ten minutes later moves the watermark past every window of the example.
        produce_events(platform.kafka_bootstrap, source,
                       SMOKE_EVENTS + [ad_event(99, campaign_id=7, offset_ms=600_000)], corrupt_at=2)
        counts = decoded(kafka.read_all(platform.kafka_bootstrap, output, expected=5, timeout_s=120),
                         COUNT_TYPE)
        assert sorted(counts, key=KEY) == sorted(expected_event_counts(), key=KEY)
        letters = decoded(kafka.read_all(platform.kafka_bootstrap, dead, expected=1, timeout_s=60), DEAD_LETTER_TYPE)
        assert letters[0]["source_offset"] == 2
        assert corrupt_records_counted(platform.flink_rest_url, job_id) == 1
    finally:
        cancelled = adserve(platform, "jobs", "cancel", job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "savepoint file:" in cancelled.stdout
    assert job_id not in adserve(platform, "jobs", "list").stdout
    # stopping a Python job must leave the cluster whole for the next one
    overview = json.loads(urllib.request.urlopen(f"{platform.flink_rest_url}/overview", timeout=5).read())
    assert overview["taskmanagers"] == 1 and overview["slots-available"] == overview["slots-total"]
