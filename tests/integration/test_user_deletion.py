"""User deletion end to end on the real platform: a user with a profile, a frequency record, served records,
beacons and training examples asks to be deleted through `adserve users delete`; afterwards their id is in no
Redis key, the training join (reading the request from Kafka) emits none of their examples, the training-set
backfill makes none, and `adserve users apply-deletions` has rewritten the archive without any of their
records. Every other user's data stays."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import fastavro
import redis

from adserve.cli import build_parser
from core import training
from pipelines import training_set
from pipelines.avro_files import utc_day
from schemas import topics
from schemas.codec import AvroCodec
from sim.learning_day import DAY, make_world, simulate_day
from streams import kafka, redis_keys
from tests.factories import archived_rows

CODEC = AvroCodec()
KEEP_RATE = 1.0
SERVED_TYPE, EVENT_TYPE = topics.record_type(topics.AD_SERVED), topics.record_type(topics.AD_EVENTS)
CONVERSION_TYPE, EXAMPLE_TYPE = topics.record_type(topics.AD_CONVERSIONS), topics.record_type(topics.TRAINING_EXAMPLES)
ENVELOPE_SCHEMA = {  # the archiver's file format (jobs/archiver)
    "type": "record", "name": "Envelope", "fields": [
        {"name": "topic", "type": ["null", "string"]}, {"name": "partition", "type": ["null", "int"]},
        {"name": "offset", "type": ["null", "long"]},
        {"name": "event_time", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "k", "type": ["null", "bytes"]}, {"name": "v", "type": ["null", "bytes"]}]}


def _cli(*argv: str) -> int:
    args = build_parser().parse_args(list(argv))
    return args.handler(args)


def _renamed(day, suffix: str):
    """The simulated day with every user id made unique to this run (the platform's Redis is shared)."""
    served = [dict(s, user_id=f"{s['user_id']}-{suffix}") for s in day.served]
    events = [dict(e, user_id=f"{e['user_id']}-{suffix}") if e.get("user_id") else e for e in day.events]
    return served, events, list(day.conversions)


def _produce(bootstrap: str, topic: str, record_type: str, records, key) -> None:
    kafka.produce_all(bootstrap, topic, sorted(((key(r).encode(), CODEC.encode(record_type, r), int(r["event_time"]))
                                                for r in records), key=lambda row: row[2]))


def _archive_topic(bootstrap: str, topic: str, archive: Path, folder: str) -> None:
    """A topic's records filed as the archiver files them: {archive}/{folder}/dt=DAY/hr=HH/part-0."""
    by_hour: dict[tuple[str, str], list[dict]] = {}
    for m in kafka.read_all(bootstrap, topic, timeout_s=60):
        ts = m.timestamp()[1]
        hour = f"{(ts // 3_600_000) % 24:02d}"
        by_hour.setdefault((utc_day(ts), hour), []).append(
            {"topic": folder, "partition": m.partition(), "offset": m.offset(), "event_time": ts, "k": m.key(),
             "v": m.value()})
    for (day, hour), rows in by_hour.items():
        path = archive / folder / f"dt={day}" / f"hr={hour}" / "part-0"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            fastavro.writer(f, ENVELOPE_SCHEMA, rows, codec="deflate")


def _archived(archive: Path, folder: str) -> list[dict]:
    return [CODEC.decode(r["v"]) for r in archived_rows(archive, folder)]


def _examples_of(folder: Path) -> list[dict]:
    made = []
    for path in sorted(folder.glob("examples-*.avro")):
        with open(path, "rb") as f:
            made.extend(fastavro.reader(f))
    return made


def test_a_deleted_user_is_gone_from_redis_the_join_the_training_set_and_the_archive(platform, fresh_topics,
                                                                                     tmp_path: Path, capsys):
    bootstrap = platform.kafka_bootstrap
    served_topic, events_topic, conversions_topic, examples_topic, dead_topic, deletions_topic = fresh_topics(
        "served", "events", "conversions", "examples", "dead", "deletions")
    suffix = uuid.uuid4().hex[:8]
    served, events, conversions = _renamed(simulate_day(make_world(seed=3, campaigns=8, users=12), requests=500,
                                                        seed=11), suffix)
    clicked = {e["impression_id"] for e in events if e["event_type"] == "CLICK"}
    deleted = next(s["user_id"] for s in served if any(w["impression_id"] in clicked for w in s["winners"]))
    kept_user = next(s["user_id"] for s in served if s["user_id"] != deleted
                     and any(w["impression_id"] in clicked for w in s["winners"]))
    theirs = {w["impression_id"] for s in served if s["user_id"] == deleted for w in s["winners"]}

    store = redis.Redis.from_url(platform.redis_url)
    for user in (deleted, kept_user):
        store.hset(redis_keys.user_profile(user), mapping={"age_band": "25-34", "interests": "travel"})
        store.hset(redis_keys.frequency_record(user), mapping={"c1:20523": 2})
    _produce(bootstrap, served_topic, SERVED_TYPE, served, key=lambda r: r["request_id"])
    _produce(bootstrap, events_topic, EVENT_TYPE, events, key=lambda e: str(e["campaign_id"]))
    _produce(bootstrap, conversions_topic, CONVERSION_TYPE, conversions, key=lambda c: c["impression_id"])

    assert _cli("users", "delete", deleted, "--reason", "asked by email", "--topic", deletions_topic) == 0
    # The join reads the request before its first label is final: the request's partition holds the join's clock
    # until its record is in (a partition idle past --idle-timeout-ms would stop holding it).
    assert "request id" in capsys.readouterr().out

    done = subprocess.run(
        [sys.executable, "-m", "jobs.training_join", "--bounded", "--startup-mode", "earliest-offset",
         "--bootstrap", bootstrap, "--checkpoint-interval-ms", "1000", "--group-id", f"g-{served_topic}",
         "--served-topic", served_topic, "--events-topic", events_topic, "--conversions-topic", conversions_topic,
         "--examples-topic", examples_topic, "--dead-letter-topic", dead_topic, "--deletions-topic", deletions_topic,
         "--keep-rate", str(KEEP_RATE), "--idle-timeout-ms", "30000"],
        capture_output=True, text=True, timeout=600, env=os.environ | platform.as_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    streamed = sorted((CODEC.decode(m.value(), EXAMPLE_TYPE)
                       for m in kafka.read_all(bootstrap, examples_topic, timeout_s=60)), key=training.example_order)
    others = [s for s in served if s["user_id"] != deleted]
    reference = training.join(others, events, keep_rate=KEEP_RATE, conversions=conversions)
    assert streamed == reference and len(reference) > 10
    assert not theirs & {e["impression_id"] for e in streamed}

    archive = tmp_path / "archive"
    for topic, folder in ((served_topic, topics.AD_SERVED), (events_topic, topics.AD_EVENTS),
                          (conversions_topic, topics.AD_CONVERSIONS), (deletions_topic, topics.PRIVACY_DELETIONS)):
        _archive_topic(bootstrap, topic, archive, folder)
    examples_with_theirs = training.join(served, events, keep_rate=KEEP_RATE, conversions=conversions)
    (archive / topics.TRAINING_EXAMPLES / f"dt={DAY}" / "hr=23").mkdir(parents=True)
    with open(archive / topics.TRAINING_EXAMPLES / f"dt={DAY}" / "hr=23" / "part-0", "wb") as f:
        fastavro.writer(f, ENVELOPE_SCHEMA, [
            {"topic": topics.TRAINING_EXAMPLES, "partition": 0, "offset": i, "event_time": e["event_time"],
             "k": e["impression_id"].encode(), "v": CODEC.encode(EXAMPLE_TYPE, e)}
            for i, e in enumerate(examples_with_theirs)])

    summary = training_set.run(["--archive", str(archive), "--from-day", DAY, "--keep-rate", str(KEEP_RATE),
                                "--output", str(tmp_path / "training-set")], save_main_session=False)
    backfill = sorted(_examples_of(tmp_path / "training-set"), key=training.example_order)
    assert not theirs & {e["impression_id"] for e in backfill}
    assert summary["erased_served_records"] == len(served) - len(others)
    assert backfill == [e for e in reference if utc_day(e["served_time"]) == DAY]

    assert _cli("users", "apply-deletions", "--archive", str(archive), "--report-dir", str(tmp_path / "report"),
                "--topic", deletions_topic, "--group-id", f"deletions-{suffix}") == 0
    assert store.exists(redis_keys.user_profile(deleted), redis_keys.frequency_record(deleted)) == 0
    assert store.exists(redis_keys.user_profile(kept_user), redis_keys.frequency_record(kept_user)) == 2
    archived_served, archived_events = _archived(archive, topics.AD_SERVED), _archived(archive, topics.AD_EVENTS)
    assert deleted not in {s["user_id"] for s in archived_served} | {e.get("user_id") for e in archived_events}
    for folder in (topics.AD_SERVED, topics.AD_EVENTS, topics.AD_CONVERSIONS, topics.TRAINING_EXAMPLES):
        records = _archived(archive, folder)
        impressions = {r["impression_id"] for r in records if "impression_id" in r} | {
            w["impression_id"] for r in records for w in r.get("winners", ())}
        assert not theirs & impressions, folder
    assert len(archived_served) == len(others)
    assert kept_user in {s["user_id"] for s in archived_served}
    assert sorted(_archived(archive, topics.TRAINING_EXAMPLES), key=training.example_order) == [
        e for e in examples_with_theirs if e["impression_id"] not in theirs]

    # A second run has nothing pending and nothing left to remove.
    assert _cli("users", "apply-deletions", "--archive", str(archive), "--report-dir", str(tmp_path / "again"),
                "--topic", deletions_topic, "--group-id", f"deletions-{suffix}") == 0
    assert "0 pending request(s)" in capsys.readouterr().out
    store.delete(redis_keys.user_profile(kept_user), redis_keys.frequency_record(kept_user))
    store.close()
