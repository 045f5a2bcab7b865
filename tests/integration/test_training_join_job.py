"""The training_join Flink job on the real broker: a simulated day's served log, beacons and conversions in,
labelled click and conversion examples out, equal to the Beam backfill (pipelines.training_set) and the in-memory
reference join of the same records."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import fastavro

from sim.learning_day import make_world, simulate_day, write_day
from core import training
from pipelines import training_set
from schemas import topics
from schemas.codec import AvroCodec
from streams import kafka

CODEC = AvroCodec()
KEEP_RATE = 0.3
SERVED_TYPE, EVENT_TYPE = topics.record_type(topics.AD_SERVED), topics.record_type(topics.AD_EVENTS)
CONVERSION_TYPE, EXAMPLE_TYPE = topics.record_type(topics.AD_CONVERSIONS), topics.record_type(topics.TRAINING_EXAMPLES)


def _produce(bootstrap: str, topic: str, record_type: str, records, key, extra=()) -> None:
    rows = [(key(r).encode(), CODEC.encode(record_type, r), int(r["event_time"])) for r in records]
    rows.extend(extra)
    kafka.produce_all(bootstrap, topic, sorted(rows, key=lambda row: row[2]))


def test_streaming_join_equals_the_batch_backfill_and_dead_letters_a_corrupt_record(platform, fresh_topics,
                                                                                    tmp_path: Path):
    served_topic, examples_topic, dead_topic, conversions_topic = fresh_topics("served", "examples", "dead",
                                                                               "conversions")
    (events_topic,) = fresh_topics("events", partitions=2)
    day = simulate_day(make_world(seed=3, campaigns=20, users=500), requests=800, seed=11)
    served = list(day.served) + day.served[100:105]  # the at-least-once served log repeats a few records
    corrupt_ms = int(day.events[len(day.events) // 2]["event_time"])
    _produce(platform.kafka_bootstrap, served_topic, SERVED_TYPE, served, key=lambda r: r["request_id"])
    _produce(platform.kafka_bootstrap, events_topic, EVENT_TYPE, day.events, key=lambda e: str(e["campaign_id"]),
             extra=[(b"1", b"not avro at all", corrupt_ms)])
    _produce(platform.kafka_bootstrap, conversions_topic, CONVERSION_TYPE, day.conversions,
             key=lambda c: c["impression_id"], extra=[(b"x", b"\xc3\x01 truncated", corrupt_ms)])

    # One injected exception halfway through (jobs.tripwire): the job restarts in place, in the same Python
    # worker, and must still give exactly the reference's examples.
    tripwire = tmp_path / "tripwire"
    tripwire.write_text(str(len(served) // 2))
    done = subprocess.run(
        [sys.executable, "-m", "jobs.training_join", "--bounded", "--tripwire-file", str(tripwire), "--startup-mode", "earliest-offset",
         "--bootstrap", platform.kafka_bootstrap, "--checkpoint-interval-ms", "1000", "--group-id",
         f"g-{served_topic}", "--served-topic", served_topic, "--events-topic", events_topic,
         "--conversions-topic", conversions_topic,
         "--examples-topic", examples_topic, "--dead-letter-topic", dead_topic, "--keep-rate", str(KEEP_RATE)],
        capture_output=True, text=True, timeout=900, env=os.environ | platform.as_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not tripwire.exists(), "the injected failure never fired"

    messages = kafka.read_all(platform.kafka_bootstrap, examples_topic, timeout_s=60)
    streaming = sorted((CODEC.decode(m.value(), EXAMPLE_TYPE) for m in messages), key=training.example_order)
    assert all(m.key() == CODEC.decode(m.value())["impression_id"].encode() for m in messages)
    assert all(m.timestamp()[1] == CODEC.decode(m.value())["event_time"] for m in messages)

    reference = training.join(served, day.events, keep_rate=KEEP_RATE, conversions=day.conversions)
    write_day(day, tmp_path / "day", keep_rate=KEEP_RATE)
    training_set.run(["--served", str(tmp_path / "day" / "served.avro"), "--events",
                      str(tmp_path / "day" / "events.avro"),
                      "--conversions", str(tmp_path / "day" / "conversions.avro"),
                      "--keep-rate", str(KEEP_RATE), "--output", str(tmp_path / "batch")], save_main_session=False)
    batch = []
    for path in sorted((tmp_path / "batch").glob("examples-*.avro")):
        with open(path, "rb") as f:
            batch.extend(fastavro.reader(f))
    batch.sort(key=training.example_order)

    assert len(streaming) == len(reference) > 100
    assert streaming == reference
    assert batch == reference
    assert {(e["task"], e["label"]) for e in streaming} == {("CLICK", 0), ("CLICK", 1), ("CONVERSION", 0),
                                                              ("CONVERSION", 1)}

    letters = [CODEC.decode(m.value(), topics.record_type(topics.DEAD_LETTERS)) for m in
               kafka.read_all(platform.kafka_bootstrap, dead_topic, expected=2, timeout_s=30)]
    assert sorted((l["source_topic"], l["value"]) for l in letters) == sorted(
        [(events_topic, b"not avro at all"), (conversions_topic, b"\xc3\x01 truncated")])
