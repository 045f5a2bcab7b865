"""The training_join job's Flink functions on a fake context, and the join inputs they carry
(core.training.join_records / apply)."""
from __future__ import annotations

from types import SimpleNamespace

from core import training
from jobs.training_join import state as join_state
from jobs.common.routing import DEAD_LETTERS
from jobs.training_join.functions import Label, Split, join_record, join_row
from schemas import topics
from schemas.codec import AvroCodec
from tests.unit.flink_fakes import FakeContext, at_key, opened, through_flink_coder
from tests.unit.test_training_rules import SERVED_MS, beacon, served

CODEC = AvroCodec()
RULES = training.JoinRules(keep_rate=1.0)


def _rows(kind, record):
    return [join_row(r) for r in training.join_records(kind, record)]


def test_a_served_record_becomes_one_join_input_per_filled_slot():
    records = training.join_records("served", served(slots=((1, 11, 1), (2, 12, 2))))
    assert [(r.impression_id, r.kind, r.served_ms) for r in records] == [("r1:1", "served", SERVED_MS),
                                                                         ("r1:2", "served", SERVED_MS)]


def test_a_beacon_becomes_one_join_input_with_its_type_and_times():
    (record,) = training.join_records("event", beacon("r1:1", "CLICK", 4_000))
    assert record == training.JoinRecord("r1:1", "event", SERVED_MS, SERVED_MS + 4_000, "CLICK")


def test_a_join_input_survives_its_flink_row():
    (record,) = training.join_records("served", served())
    assert join_record(join_row(record)) == record


def test_split_sends_a_corrupt_record_to_dead_letters_and_counts_it():
    split, context = opened(Split())
    row = SimpleNamespace(kind="event", v=b"\xc3\x01 truncated", k=b"x", topic=topics.AD_EVENTS, partition=0, offset=5)
    (tag, dead), = split.process_element(row, FakeContext())
    assert tag is DEAD_LETTERS and CODEC.decode(dead[1], topics.record_type(topics.DEAD_LETTERS))["source_offset"] == 5
    assert context.counter("corrupt_records") == 1


def test_the_first_record_of_an_impression_sets_its_label_and_cleanup_timers():
    label, context = opened(Label(RULES))
    ctx = at_key(context, FakeContext(), "r1:1")
    (row,) = _rows("served", served())
    assert list(label.process_element(row, ctx)) == []
    assert ctx.timers.timers == [training.final_at_ms(SERVED_MS), training.final_at_ms(SERVED_MS) + training.CLEANUP_MS]


def test_a_clicked_impression_is_a_positive_when_its_label_timer_fires():
    label, context = opened(Label(RULES))
    ctx = at_key(context, FakeContext(), "r1:1")
    for row in _rows("served", served()) + _rows("event", beacon("r1:1", "CLICK", 4_000)):
        list(label.process_element(row, ctx))
    (out,) = list(label.on_timer(training.final_at_ms(SERVED_MS), ctx))
    made = CODEC.decode(out[1], topics.record_type(topics.TRAINING_EXAMPLES))
    assert (out[0], made["label"], out[2]) == (b"r1:1", 1, made["event_time"])
    assert context.counter("examples") == 1


def test_a_beacon_after_the_label_was_decided_is_counted_late_and_ignored():
    label, context = opened(Label(RULES))
    ctx = at_key(context, FakeContext(), "r1:1")
    for row in _rows("served", served()) + _rows("event", beacon("r1:1", "IMPRESSION", 800)):
        list(label.process_element(row, ctx))
    list(label.on_timer(training.final_at_ms(SERVED_MS), ctx))
    assert list(label.process_element(_rows("event", beacon("r1:1", "CLICK", 9_000))[0], ctx)) == []
    assert context.counter("late_beacons") == 1


def test_an_impressions_label_state_is_a_typed_row_that_round_trips_through_flink():
    (record,) = training.join_records("served", served())
    before_served = training.LabelState(SERVED_MS, training.Outcome(rendered=True, first_click_ms=SERVED_MS + 4_000))
    joined = training.LabelState(SERVED_MS, training.Outcome(True, SERVED_MS + 4_000, SERVED_MS + 86_400_000),
                                 record.context, done=True)
    for state in (before_served, joined):
        row = through_flink_coder(join_state.LABEL_STATE, join_state.label_to_row(state))
        assert join_state.label_from_row(row) == state
    assert join_state.label_from_row(None) is None


def test_the_label_keeps_its_state_as_the_typed_row():
    label, context = opened(Label(RULES))
    ctx = at_key(context, FakeContext(), "r1:1")
    (row,) = _rows("served", served())
    list(label.process_element(row, ctx))
    served_ms, _, _, _, context_row, done, _ = context.get_state(join_state.label_state()).value()
    assert (served_ms, context_row[0], done) == (SERVED_MS, "r1:1", False)


def _request(user_id: str, requested_at_ms: int):
    from pyflink.common import Row

    return Row(user_id, requested_at_ms)


def test_a_deleted_users_impression_held_in_state_emits_no_example_after_the_request():
    label, context = opened(Label(RULES))
    ctx = at_key(context, FakeContext(), "r1:1")
    for row in _rows("served", served(user_id="u1")) + _rows("event", beacon("r1:1", "CLICK", 4_000)):
        list(label.process_element(row, ctx))
    list(label.process_broadcast_element(_request("u1", SERVED_MS + 10_000), ctx))
    assert list(label.on_timer(training.final_at_ms(SERVED_MS), ctx)) == []
    assert (context.counter("erased_examples"), context.counter("examples")) == (1, 0)


def test_a_deleted_users_served_record_never_enters_the_join():
    label, context = opened(Label(RULES))
    ctx = at_key(context, FakeContext(), "r1:1")
    list(label.process_broadcast_element(_request("u1", SERVED_MS), ctx))
    for row in _rows("served", served(user_id="u1")):
        assert list(label.process_element(row, ctx)) == []
    assert context.get_state(join_state.label_state()).value() is None
    assert context.counter("erased_records") == 1


def test_other_users_and_the_users_later_impressions_still_become_examples():
    label, context = opened(Label(RULES))
    ctx = at_key(context, FakeContext(), "r1:1")
    list(label.process_broadcast_element(_request("u1", SERVED_MS - 1), ctx))  # before this impression: new data
    for row in _rows("served", served(user_id="u1")) + _rows("event", beacon("r1:1", "CLICK", 4_000)):
        list(label.process_element(row, ctx))
    assert len(list(label.on_timer(training.final_at_ms(SERVED_MS), ctx))) == 1
    other = at_key(context, FakeContext(broadcast=ctx.broadcast), "r2:1")
    for row in _rows("served", served("r2", user_id="u2")) + _rows("event", beacon("r2:1", "CLICK", 4_000)):
        list(label.process_element(row, other))
    assert len(list(label.on_timer(training.final_at_ms(SERVED_MS), other))) == 1


def test_the_newest_deletion_request_of_a_user_is_kept_on_the_broadcast_side():
    label, context = opened(Label(RULES))
    ctx = FakeContext()
    for at in (SERVED_MS + 5, SERVED_MS + 9, SERVED_MS + 1):
        list(label.process_broadcast_element(_request("u1", at), ctx))
    assert ctx.get_broadcast_state(join_state.deletions_state()).get("u1") == SERVED_MS + 9


def test_decode_deletion_reads_a_request_and_dead_letters_a_corrupt_one():
    from core import privacy
    from jobs.training_join.functions import DecodeDeletion

    decode, context = opened(DecodeDeletion())
    request = privacy.deletion_request("u1", SERVED_MS, "req-1")
    value = CODEC.encode(topics.record_type(topics.PRIVACY_DELETIONS), request.as_record())
    good = SimpleNamespace(v=value, k=b"u1", topic=topics.PRIVACY_DELETIONS, partition=0, offset=3)
    assert [tuple(r) for r in decode.process_element(good, FakeContext())] == [("u1", SERVED_MS)]
    bad = SimpleNamespace(v=b"junk", k=b"u1", topic=topics.PRIVACY_DELETIONS, partition=0, offset=4)
    (tag, _), = decode.process_element(bad, FakeContext())
    assert tag is DEAD_LETTERS and context.counter("corrupt_records") == 1
