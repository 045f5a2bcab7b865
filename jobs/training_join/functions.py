"""The Flink functions of `training_join`: Split decodes records into the join's inputs
(core.training.join_records), DecodeDeletion decodes the deletion requests, Label keeps one impression's
LabelState and applies core.training.apply and on_timer to it, and drops what core.privacy erases: a deleted
user's served records, and any example of an impression served to the user before the request, whenever its
label becomes final. The methods only load state, call the rule, and emit what the returned LabelStep asks."""
from __future__ import annotations

import json

from pyflink.common import Row, Types
from pyflink.datastream import KeyedBroadcastProcessFunction, RuntimeContext

from core import privacy, training
from core.monitoring import calibration_counts
from jobs.common.routing import DecodeOrDeadLetter
from jobs.training_join import state as join_state
from jobs.tripwire import Tripwire
from schemas import topics
from schemas.codec import AvroCodec

JOB_NAME = "training_join"
# The record type of each row kind: its topic's (schemas.topics)
RECORD_TYPES = {kind: topics.record_type(topic) for kind, topic in (
    ("served", topics.AD_SERVED), ("event", topics.AD_EVENTS), ("conversion", topics.AD_CONVERSIONS))}
TRAINING_EXAMPLE = topics.record_type(topics.TRAINING_EXAMPLES)
JOIN_ROW_FIELDS = ["impression_id", "kind", "served_ms", "event_ms", "event_type", "context", "user_id"]


def join_row_type():
    """A core.training.JoinRecord as a Flink row (its context as JSON)."""
    return Types.ROW_NAMED(JOIN_ROW_FIELDS, [Types.STRING(), Types.STRING(), Types.LONG(), Types.LONG(),
                                             Types.STRING(), Types.STRING(), Types.STRING()])


def join_row(record: training.JoinRecord) -> Row:
    context = None if record.context is None else json.dumps(record.context)
    return Row(record.impression_id, record.kind, record.served_ms, record.event_ms, record.event_type, context,
               record.user_id)


def join_record(row) -> training.JoinRecord:
    impression_id, kind, served_ms, event_ms, event_type, context, user_id = row  # JOIN_ROW_FIELDS
    return training.JoinRecord(impression_id, kind, served_ms, event_ms, event_type,
                               None if context is None else json.loads(context), user_id)


class Split(DecodeOrDeadLetter):
    """Decode; a served record becomes one row per filled slot, a beacon or conversion one row; corrupt ->
    dead letters (counted, `corrupt_records`)."""

    job_name, record_types = JOB_NAME, RECORD_TYPES

    def emit(self, record: dict, row, ctx):
        for joined in training.join_records(row.kind, record):
            yield join_row(joined)


class DecodeDeletion(DecodeOrDeadLetter):
    """A deletion request (UserDeletion) -> join_state.DELETION row; corrupt -> dead letters (counted,
    `corrupt_records`)."""

    job_name = JOB_NAME

    def record_type(self, row) -> str:
        return topics.record_type(topics.PRIVACY_DELETIONS)

    def emit(self, record: dict, row, ctx):
        request = privacy.request_of(record)
        yield Row(request.user_id, request.requested_at_ms)


class Label(KeyedBroadcastProcessFunction):
    """Per impression: core.training.apply / on_timer on its LabelState; examples out (counted, `examples`, and
    per calibration segment), late beacons and conversions and unjoined impressions counted. The broadcast
    side keeps the deletion requests (join_state.deletions_state); a deleted user's served records and
    examples are dropped (counted, `erased_records`, `erased_examples`)."""

    def __init__(self, rules: training.JoinRules = training.JoinRules(), tripwire_file: str = ""):
        self.rules = rules
        self.tripwire = Tripwire(tripwire_file)  # jobs.tripwire (restart tests only)

    def open(self, runtime_context: RuntimeContext):
        self.codec = AvroCodec()
        self.state = runtime_context.get_state(join_state.label_state())
        self.user = runtime_context.get_state(join_state.impression_user())
        metrics = runtime_context.get_metrics_group()
        self.emitted, self.late = metrics.counter("examples"), metrics.counter("late_beacons")
        self.unjoined = metrics.counter("unjoined_impressions")
        self.late_conversions = metrics.counter("late_conversions")
        self.erased_records, self.erased_examples = metrics.counter("erased_records"), metrics.counter(
            "erased_examples")
        self.metrics, self.calibration = metrics, {}  # segment -> its (predicted micros, clicks) counters

    def process_broadcast_element(self, row, ctx):
        user_id, requested_at_ms = row  # join_state.DELETION
        deletions = ctx.get_broadcast_state(join_state.deletions_state())
        held = deletions.get(user_id) if deletions.contains(user_id) else None
        deletions.put(user_id, privacy.newest_request_ms(held, requested_at_ms))
        yield from ()  # the broadcast side emits nothing

    def process_element(self, row, ctx):
        self.tripwire.step()
        record = join_record(row)
        deletions = _deletions(ctx)
        if record.kind == "served" and deletions.erases_user(record.user_id, record.served_ms):
            self.erased_records.inc()
            return
        state = join_state.label_from_row(self.state.value())
        watermark = ctx.timer_service().current_watermark()
        step = training.apply(state, record, watermark, self.rules)
        if record.kind == "served" and record.user_id and step.changed and (state is None or state.context is None):
            self.user.update(record.user_id)  # the impression's first served record names its user
        yield from self._apply(step, ctx, deletions)

    def on_timer(self, timestamp: int, ctx):
        state = join_state.label_from_row(self.state.value())
        yield from self._apply(training.on_timer(state, timestamp, self.rules), ctx, _deletions(ctx))

    def _apply(self, step: training.LabelStep, ctx, deletions: privacy.Deletions):
        user_id = self.user.value()
        self._keep(step)
        for timestamp in step.timers:
            ctx.timer_service().register_event_time_timer(timestamp)
        for made in step.examples:
            if deletions.erases_user(user_id, int(made["served_time"])):
                self.erased_examples.inc()
                continue
            self.emitted.inc()
            self._count_calibration(made)
            yield Row(made["impression_id"].encode(), self.codec.encode(TRAINING_EXAMPLE, made), made["event_time"])

    def _count_calibration(self, example: dict) -> None:
        """The example's predicted and observed clicks, on counters labelled by its calibration segment
        (placement, country, billing_type), for the calibration alert (infra/prometheus/rules.yml)."""
        counts = calibration_counts(example)
        if counts is None:
            return
        counters = self.calibration.get(counts.segment)
        if counters is None:
            placement, country, billing_type = counts.segment
            group = (self.metrics.add_group("placement", placement).add_group("country", country)
                     .add_group("billing_type", billing_type))
            counters = self.calibration[counts.segment] = (group.counter("calibration_predicted_clicks_micros"),
                                                           group.counter("calibration_clicks"))
        counters[0].inc(counts.predicted_clicks_micros)
        counters[1].inc(counts.clicks)

    def _keep(self, step: training.LabelStep) -> None:
        """Write the step's state and count what it reports."""
        if step.changed:
            if step.state is None:
                self.state.clear()
                self.user.clear()
            else:
                self.state.update(join_state.label_to_row(step.state))
        for flagged, counter in ((step.late_beacon, self.late), (step.late_conversion, self.late_conversions),
                                 (step.unjoined, self.unjoined)):
            if flagged:
                counter.inc()


class _BroadcastDeletions:
    """The broadcast state of deletions (user id -> the newest request's time) as the mapping core.privacy reads."""

    def __init__(self, state):
        self.state = state

    def get(self, user_id: str, default: int | None = None) -> int | None:
        return self.state.get(user_id) if self.state.contains(user_id) else default


def _deletions(ctx) -> privacy.Deletions:
    return privacy.Deletions(_BroadcastDeletions(ctx.get_broadcast_state(join_state.deletions_state())))
