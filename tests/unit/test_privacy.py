"""User deletion: the rule of which records a request erases (core.privacy), the Beam pipelines that apply it to
the archive (pipelines.archive_erasure) and to the training-set backfill (pipelines.training_set), on the
DirectRunner over small files."""
from __future__ import annotations

import json
from pathlib import Path

import fastavro
import pytest

from core import privacy, training
from core.errors import InvalidField
from schemas import topics
from schemas.codec import AvroCodec
from sim.learning_day import make_world, simulate_day
from tests.unit.test_training_rules import SERVED_MS, served

CODEC = AvroCodec()
SERVED_RECORD = topics.record_type(topics.AD_SERVED)
USER_DELETION = topics.record_type(topics.PRIVACY_DELETIONS)
REQUESTED_MS = SERVED_MS + 3_600_000
ENVELOPE_SCHEMA = {  # the archiver's file format (jobs/archiver): the Kafka record in an envelope
    "type": "record", "name": "Envelope", "fields": [
        {"name": "topic", "type": ["null", "string"]}, {"name": "partition", "type": ["null", "int"]},
        {"name": "offset", "type": ["null", "long"]},
        {"name": "event_time", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "k", "type": ["null", "bytes"]}, {"name": "v", "type": ["null", "bytes"]}]}


def _deletions(*users: str, at_ms: int = REQUESTED_MS) -> privacy.Deletions:
    return privacy.Deletions.of(privacy.deletion_request(u, at_ms, f"req-{u}") for u in users)


# ------------------------------------------------------------------ the rule

def test_a_request_erases_the_users_records_up_to_its_time_and_not_after():
    deletions = _deletions("u1")
    assert deletions.erases_user("u1", REQUESTED_MS)
    assert deletions.erases_user("u1", SERVED_MS)
    assert not deletions.erases_user("u1", REQUESTED_MS + 1)  # activity after the request is new data
    assert not deletions.erases_user("u2", SERVED_MS)
    assert not deletions.erases_user(None, SERVED_MS)


def test_the_newest_request_of_a_user_is_the_one_in_force():
    older = privacy.deletion_request("u1", SERVED_MS, "a")
    newer = privacy.deletion_request("u1", REQUESTED_MS, "b")
    assert privacy.Deletions.of([newer, older]).requested_at_ms == {"u1": REQUESTED_MS}


def test_a_request_arriving_after_a_newer_one_leaves_the_newer_in_force():
    assert privacy.newest_request_ms(None, REQUESTED_MS) == REQUESTED_MS
    assert privacy.newest_request_ms(REQUESTED_MS, REQUESTED_MS - 1) == REQUESTED_MS
    assert privacy.newest_request_ms(REQUESTED_MS, REQUESTED_MS + 1) == REQUESTED_MS + 1


def test_every_record_of_an_erased_impression_goes_with_it_even_without_a_user_id():
    record = served(user_id="u1")
    erased = set(privacy.erased_impressions(record, _deletions("u1")))
    assert erased == {"r1:1"}
    conversion = {"impression_id": "r1:1", "event_time": REQUESTED_MS + 86_400_000}  # after the request, still theirs
    example = {"impression_id": "r1:1", "event_time": SERVED_MS + 10}
    other = {"impression_id": "r9:1", "event_time": SERVED_MS}
    deletions = _deletions("u1")
    assert privacy.erases_record(conversion, deletions, erased)
    assert privacy.erases_record(example, deletions, erased)
    assert privacy.erases_record(record, deletions, erased)
    assert not privacy.erases_record(other, deletions, erased)
    assert privacy.erased_impressions(served(user_id="u2"), deletions) == []


def test_a_request_names_what_is_wrong_with_it():
    with pytest.raises(InvalidField, match="user_id"):
        privacy.deletion_request("  ", REQUESTED_MS, "r")
    with pytest.raises(InvalidField, match="requested_at"):
        privacy.deletion_request("u1", -5, "r")
    with pytest.raises(InvalidField, match="reason"):
        privacy.deletion_request("u1", REQUESTED_MS, "r", "x" * 501)


def test_a_request_is_due_a_day_after_it_was_made_and_overdue_only_unerased():
    late = privacy.deletion_request("u1", SERVED_MS, "late")
    done = privacy.deletion_request("u2", SERVED_MS, "done")
    fresh = privacy.deletion_request("u3", SERVED_MS + 86_000_000, "fresh")
    assert privacy.erasure_due_ms(late) == SERVED_MS + privacy.ERASURE_DEADLINE_MS
    now = SERVED_MS + privacy.ERASURE_DEADLINE_MS + 1
    assert privacy.overdue([fresh, done, late], ["done"], now) == [late]


def test_a_request_survives_its_avro_contract():
    request = privacy.deletion_request("u1", REQUESTED_MS, "req-1", "asked by email")
    assert privacy.request_of(CODEC.decode(CODEC.encode(USER_DELETION, request.as_record()))) == request


# ------------------------------------------------------------------ the pipelines

def _write(path: Path, topic: str, record_type: str, records: list[dict], offset: int = 0) -> None:
    """An archive file as the archiver writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"topic": topic, "partition": 0, "offset": offset + i, "event_time": int(r["event_time"]), "k": b"k",
             "v": CODEC.encode(record_type, r)} for i, r in enumerate(records)]
    with open(path, "wb") as f:
        fastavro.writer(f, ENVELOPE_SCHEMA, rows, codec="deflate")


def _read(path: Path) -> list[dict]:
    with open(path, "rb") as f:
        return [CODEC.decode(r["v"]) for r in fastavro.reader(f)]


def _day():
    return simulate_day(make_world(seed=3, campaigns=6, users=12), requests=400, seed=11)


def _deleted_user(day) -> str:
    """A user with at least one click, so examples of theirs exist."""
    clicked = {e["impression_id"] for e in day.events if e["event_type"] == "CLICK"}
    return next(s["user_id"] for s in day.served if any(w["impression_id"] in clicked for w in s["winners"]))


def _archive(tmp_path: Path, day, user: str, requested_ms: int) -> Path:
    archive = tmp_path / "archive"
    hour = "dt=2026-03-10/hr=00"
    _write(archive / topics.AD_SERVED / hour / "part-0", topics.AD_SERVED, SERVED_RECORD, day.served)
    _write(archive / topics.AD_EVENTS / hour / "part-0", topics.AD_EVENTS, topics.record_type(topics.AD_EVENTS),
           day.events)
    examples = training.join(day.served, day.events, keep_rate=1.0)
    _write(archive / topics.TRAINING_EXAMPLES / hour / "part-0", topics.TRAINING_EXAMPLES,
           topics.record_type(topics.TRAINING_EXAMPLES), examples)
    _write(archive / topics.BILLED_SPEND / hour / "part-0", topics.BILLED_SPEND, SERVED_RECORD,
           day.served[:1])  # a topic without user records: never touched
    request = privacy.deletion_request(user, requested_ms, "req-1")
    _write(archive / topics.PRIVACY_DELETIONS / hour / "part-0", topics.PRIVACY_DELETIONS, USER_DELETION,
           [request.as_record()])
    return archive


def test_the_erasure_rewrites_the_archive_without_the_users_records_and_keeps_everyone_elses(tmp_path):
    from pipelines import archive_erasure

    day = _day()
    user = _deleted_user(day)
    newest_ms = max(int(s["event_time"]) for s in day.served) + 86_400_000
    archive = _archive(tmp_path, day, user, newest_ms)
    theirs = {w["impression_id"] for s in day.served if s["user_id"] == user for w in s["winners"]}
    untouched = (archive / topics.BILLED_SPEND / "dt=2026-03-10/hr=00/part-0").read_bytes()

    report = archive_erasure.run(["--archive", str(archive), "--output", str(tmp_path / "report")],
                                 save_main_session=False)

    hour = "dt=2026-03-10/hr=00/part-0"
    served_after = _read(archive / topics.AD_SERVED / hour)
    events_after = _read(archive / topics.AD_EVENTS / hour)
    examples_after = _read(archive / topics.TRAINING_EXAMPLES / hour)
    assert user not in {s["user_id"] for s in served_after} | {e["user_id"] for e in events_after}
    assert not theirs & {e["impression_id"] for e in examples_after}
    assert len(served_after) == len(day.served) - sum(s["user_id"] == user for s in day.served)
    assert len(events_after) == len(day.events) - sum(e["impression_id"] in theirs for e in day.events)
    assert (archive / topics.BILLED_SPEND / hour).read_bytes() == untouched
    assert report["removed"][topics.AD_SERVED] == len(day.served) - len(served_after)
    assert report["removed"][topics.TRAINING_EXAMPLES] > 0
    assert report["files_rewritten"] == 3 and report["users"] == 1
    assert json.loads((tmp_path / "report" / "report.json").read_text()) == report
    assert not list(archive.rglob(".*.erasing"))

    again = archive_erasure.run(["--archive", str(archive), "--output", str(tmp_path / "again")],
                                save_main_session=False)
    assert again["files_rewritten"] == 0 and sum(again["removed"].values()) == 0


def test_the_erasure_keeps_the_users_records_made_after_the_request(tmp_path):
    from pipelines import archive_erasure

    day = _day()
    user = _deleted_user(day)
    before_everything = min(int(s["event_time"]) for s in day.served) - 1
    archive = _archive(tmp_path, day, user, before_everything)
    report = archive_erasure.run(["--archive", str(archive), "--output", str(tmp_path / "report")],
                                 save_main_session=False)
    assert report["files_rewritten"] == 0
    assert len(_read(archive / topics.AD_SERVED / "dt=2026-03-10/hr=00/part-0")) == len(day.served)


def test_the_training_set_drops_the_deleted_users_impressions(tmp_path):
    from pipelines import training_set

    day = _day()
    user = _deleted_user(day)
    newest_ms = max(int(s["event_time"]) for s in day.served) + 86_400_000
    archive = _archive(tmp_path, day, user, newest_ms)
    theirs = {w["impression_id"] for s in day.served if s["user_id"] == user for w in s["winners"]}
    summary = training_set.run([
        "--served", str(archive / topics.AD_SERVED / "dt=2026-03-10/hr=00/part-0"),
        "--events", str(archive / topics.AD_EVENTS / "dt=2026-03-10/hr=00/part-0"),
        "--deletions", str(archive / topics.PRIVACY_DELETIONS / "dt=2026-03-10/hr=00/part-0"),
        "--keep-rate", "1", "--output", str(tmp_path / "ts")], save_main_session=False)
    made = []
    for path in sorted((tmp_path / "ts").glob("examples-*.avro")):
        with open(path, "rb") as f:
            made.extend(fastavro.reader(f))
    others = [s for s in day.served if s["user_id"] != user]
    reference = training.join(others, day.events, keep_rate=1.0)
    assert sorted(made, key=training.example_order) == reference
    assert not theirs & {e["impression_id"] for e in made}
    assert summary["erased_served_records"] == len(day.served) - len(others) > 0


# ------------------------------------------------------------------ the features job's user window

def test_the_features_job_forgets_a_deleted_users_window_and_writes_nothing_more_for_them():
    from jobs.features import state
    from jobs.features.functions import Decode
    from tests.unit.flink_fakes import FakeContext, at_key, opened
    from tests.unit.test_features_functions import (RULES, T0, TICK, UserWindowOnRecording, _user_beacon, _user_rows,
                                                    served as features_served, winner)

    window, context = opened(UserWindowOnRecording(RULES, "redis://unused", 1_000))
    ctx = at_key(context, FakeContext(), "u1")
    record = features_served("r1", T0 + 1_000, [winner("r1:1", 11, 1, 1, category=4)], user_id="u1",
                             consented=True)
    for row in _user_rows(record):
        window.process_element(row, ctx)
    window.process_element(_user_beacon("r1:1", T0 + 3_000, "CLICK"), ctx)

    decode, _ = opened(Decode(user_features=True))
    request = privacy.deletion_request("u1", T0 + 5_000, "req-1")
    raw = type("Raw", (), {"kind": "deletion", "v": CODEC.encode(USER_DELETION, request.as_record()), "k": b"u1",
                           "topic": topics.PRIVACY_DELETIONS, "partition": 0, "offset": 0})()
    ((_, deletion_row),) = list(decode.process_element(raw, FakeContext()))
    assert (deletion_row.kind, deletion_row.user_id) == (state.DELETION, "u1")
    window.process_element(deletion_row, ctx)
    window.on_timer(T0 + TICK, ctx)
    window.close()
    assert window.store.written == []
    assert context.counter("user_deletions") == 1


def test_users_delete_refuses_an_empty_id_before_it_reaches_kafka(capsys):
    from adserve.cli import build_parser

    args = build_parser().parse_args(["users", "delete", "  "])
    assert args.handler(args) == 2
    assert "user_id" in capsys.readouterr().err
