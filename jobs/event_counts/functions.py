"""The Flink functions of `event_counts`: decode ad.events, and count per campaign window in typed map
state with an event-time timer per window. Each method adapts I/O around core.event_counts; none decides."""
from __future__ import annotations

from pyflink.common import Row, Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import MapStateDescriptor

from core import event_counts as rules
from core.dead_letters import SourcePosition, dead_letter
from jobs.common.dead_letters import dead_letter_row
from jobs.common.routing import DEAD_LETTERS, DecodeOrDeadLetter
from schemas import topics
from schemas.codec import AvroCodec

JOB_NAME = "event_counts"
EVENT_COUNT = topics.record_type(topics.EVENT_COUNTS)
# An open window's (impressions, clicks, billable micros), by window start: core.event_counts.Counts.
OPEN_WINDOWS = MapStateDescriptor("open_windows", Types.LONG(), Types.TUPLE([Types.LONG(), Types.LONG(),
                                                                               Types.LONG()]))


def event_tuple_type():
    """(campaign_id, event_time_ms, event_type, billing_type, price_micros, topic, partition, offset)"""
    return Types.TUPLE([Types.LONG(), Types.LONG(), Types.STRING(), Types.STRING(), Types.LONG(),
                        Types.STRING(), Types.INT(), Types.LONG()])


class DecodeEvents(DecodeOrDeadLetter):
    """Raw Kafka rows -> event tuples; corrupt records -> dead letters (counted, `corrupt_records`)."""

    job_name = JOB_NAME

    def record_type(self, row) -> str:
        return topics.record_type(topics.AD_EVENTS)

    def timestamp_ms(self, row) -> int | None:
        return row.ts.to_epoch_milli() if row.ts is not None else None

    def emit(self, event: dict, row, ctx):
        yield (event["campaign_id"], event["event_time"], event["event_type"], event["billing_type"],
               event["price_micros"], row.topic, row.partition, row.offset)


class CountPerMinute(KeyedProcessFunction):
    """Per campaign: core.event_counts.count_event per event; a window's EventCount out when its timer fires;
    late events -> dead letters (counted, `late_records`)."""

    def __init__(self, window_ms: int = rules.DEFAULT_WINDOW_MS):
        self.window_ms = window_ms

    def open(self, runtime_context: RuntimeContext):
        self.codec = AvroCodec()
        self.windows = runtime_context.get_map_state(OPEN_WINDOWS)
        self.late = runtime_context.get_metrics_group().counter("late_records")

    def process_element(self, value, ctx):
        _, event_time_ms, event_type, billing_type, price_micros, topic, partition, offset = value
        event = {"event_time": event_time_ms, "event_type": event_type, "billing_type": billing_type,
                 "price_micros": price_micros}
        watermark = ctx.timer_service().current_watermark()
        start = rules.window_start(event_time_ms, self.window_ms)
        held = self.windows.get(start)
        counts, timer = rules.count_event(None if held is None else rules.Counts(*held), event, watermark,
                                          self.window_ms)
        if counts is None:
            self.late.inc()
            yield DEAD_LETTERS, dead_letter_row(dead_letter(
                JOB_NAME, SourcePosition(topic, partition, offset), timestamp_ms=event_time_ms, key=None,
                value=None, error_type="LateEvent", reason=rules.late_reason(event_time_ms, watermark)), self.codec)
            return
        self.windows.put(start, counts.as_tuple())
        if timer is not None:
            ctx.timer_service().register_event_time_timer(timer)

    def on_timer(self, timestamp: int, ctx):
        start = rules.window_of_timer(timestamp, self.window_ms)
        held = self.windows.get(start)
        if held is None:
            return
        self.windows.remove(start)
        campaign_id = ctx.get_current_key()
        record = rules.event_count_record(campaign_id, start, rules.Counts(*held), self.window_ms)
        yield Row(str(campaign_id).encode(), self.codec.encode(EVENT_COUNT, record))
