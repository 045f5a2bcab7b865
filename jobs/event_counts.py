"""Flink job `event_counts`: impressions, clicks and billable value per
campaign and event-time minute, from ad.events to ops.event_counts.

The platform's smoke job. It proves the whole path: Avro records read from
Kafka, a keyed event-time aggregation in a KeyedProcessFunction with typed
state and event-time timers, Avro written back through an exactly-once
(transactional) Kafka sink with checkpointing, and corrupt or late records
sent to the dead-letter topic with the reason, counted, while the job keeps
running. The counting rule lives in core.event_counts.

Event time: the Kafka source takes each record's Kafka timestamp as its
rowtime and emits watermarks per partition (every producer of the project
sets the Kafka timestamp to the record's event time); windows are assigned
from the event time inside the record.

Run locally (mini-cluster):  python -m jobs.event_counts --bounded
Deploy to a cluster:         adserve jobs deploy event_counts   (wraps `flink run`)"""
from __future__ import annotations

import argparse
import logging
from typing import Sequence

from core import event_counts as rules
from core.dead_letters import dead_letter
from jobs.flink_io import (DeadLetterDecoder, KafkaJobSettings, add_common_arguments, bytes_row_type,
                           create_environment, dead_letter_row, kafka_sink_table, kafka_source_table, parse,
                           settings_from_args)

JOB_NAME = "event_counts"
LOG = logging.getLogger(f"adserve.jobs.{JOB_NAME}")

def _event_type():
    """(campaign_id, event_time_ms, event_type, billing_type, price_micros, topic, partition, offset)"""
    from pyflink.common import Types

    return Types.TUPLE([Types.LONG(), Types.LONG(), Types.STRING(), Types.STRING(), Types.LONG(),
                        Types.STRING(), Types.INT(), Types.LONG()])


def build(env, t_env, settings: KafkaJobSettings, *, input_topic: str, output_topic: str, dead_letter_topic: str,
          window_ms: int, out_of_orderness_ms: int) -> None:
    """Wire the job graph onto env (no execution)."""
    from pyflink.common import Row
    from pyflink.datastream import KeyedProcessFunction, OutputTag, ProcessFunction, RuntimeContext
    from pyflink.datastream.state import MapStateDescriptor
    from pyflink.common import Types

    from schemas.codec import AvroCodec

    dead_letters = OutputTag("dead-letters", bytes_row_type())

    class DecodeEvents(ProcessFunction):
        """Raw Kafka rows -> event tuples; corrupt records -> dead letters (counted)."""

        def open(self, runtime_context: RuntimeContext):
            self.codec = AvroCodec()
            self.decoder = DeadLetterDecoder(JOB_NAME, self.codec,
                                             runtime_context.get_metrics_group().counter("corrupt_records"))

        def process_element(self, row, ctx):
            ts_ms = row.ts.to_epoch_milli() if row.ts is not None else None
            event, dead = self.decoder.decode(row.v, "AdEvent", topic=row.topic, partition=row.partition,
                                              offset=row.offset, key=row.k, timestamp_ms=ts_ms)
            if dead is not None:
                yield dead_letters, dead
                return
            yield (event["campaign_id"], event["event_time"], event["event_type"], event["billing_type"],
                   event["price_micros"], row.topic, row.partition, row.offset)

    class CountPerMinute(KeyedProcessFunction):
        """Per campaign: a count per open window in MapState, emitted by an event-time timer at its end."""

        def open(self, runtime_context: RuntimeContext):
            self.codec = AvroCodec()
            self.windows = runtime_context.get_map_state(MapStateDescriptor(
                "open_windows", Types.LONG(), Types.TUPLE([Types.LONG(), Types.LONG(), Types.LONG()])))
            self.late = runtime_context.get_metrics_group().counter("late_records")

        def process_element(self, value, ctx):
            campaign_id, event_time_ms, event_type, billing_type, price_micros, topic, partition, offset = value
            if rules.is_late(event_time_ms, ctx.timer_service().current_watermark(), window_ms):
                self.late.inc()
                yield dead_letters, dead_letter_row(dead_letter(
                    JOB_NAME, topic=topic, partition=partition, offset=offset, timestamp_ms=event_time_ms,
                    key=None, value=None, error_type="LateEvent",
                    reason=f"event time {event_time_ms} is behind the watermark "
                           f"{ctx.timer_service().current_watermark()}: its window was already emitted"))
                return
            start = rules.window_start(event_time_ms, window_ms)
            held = self.windows.get(start)
            counts = rules.Counts(*held) if held is not None else rules.Counts()
            counts = counts.add({"event_type": event_type, "billing_type": billing_type,
                                 "price_micros": price_micros})
            self.windows.put(start, counts.as_tuple())
            if held is None:
                ctx.timer_service().register_event_time_timer(start + window_ms - 1)

        def on_timer(self, timestamp: int, ctx):
            start = timestamp + 1 - window_ms
            held = self.windows.get(start)
            if held is None:
                return
            self.windows.remove(start)
            campaign_id = ctx.get_current_key()
            record = rules.event_count_record(campaign_id, start, rules.Counts(*held), window_ms)
            yield Row(str(campaign_id).encode(), self.codec.encode("EventCount", record))

    kafka_source_table(t_env, "events_in", input_topic, settings, out_of_orderness_ms=out_of_orderness_ms)
    kafka_sink_table(t_env, "counts_out", output_topic, settings)
    kafka_sink_table(t_env, "dead_letters_out", dead_letter_topic, settings)

    raw = t_env.to_data_stream(t_env.from_path("events_in"))
    decoded = raw.process(DecodeEvents(), output_type=_event_type()).name("decode ad.events")
    counted = (decoded.key_by(lambda e: e[0], key_type=Types.LONG())
               .process(CountPerMinute(), output_type=bytes_row_type()).name("count per campaign minute"))
    rejected = decoded.get_side_output(dead_letters).union(counted.get_side_output(dead_letters))

    statements = t_env.create_statement_set()
    statements.add_insert("counts_out", t_env.from_data_stream(counted))
    statements.add_insert("dead_letters_out", t_env.from_data_stream(rejected))
    statements.attach_as_datastream()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="event_counts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, JOB_NAME)
    parser.add_argument("--input-topic", default="ad.events")
    parser.add_argument("--output-topic", default="ops.event_counts")
    parser.add_argument("--dead-letter-topic", default="dead.letters")
    parser.add_argument("--window-ms", type=int, default=rules.DEFAULT_WINDOW_MS)
    parser.add_argument("--out-of-orderness-ms", type=int, default=5000,
                        help="how far behind the newest event time an event may arrive and still count")
    args = parse(parser, argv)
    settings = settings_from_args(args, JOB_NAME)
    logging.basicConfig(level=logging.INFO)
    LOG.info("starting %s: %s, input=%s, output=%s, dead letters=%s", JOB_NAME, settings.describe(),
             args.input_topic, args.output_topic, args.dead_letter_topic)
    env, t_env = create_environment(settings)
    build(env, t_env, settings, input_topic=args.input_topic, output_topic=args.output_topic,
          dead_letter_topic=args.dead_letter_topic, window_ms=args.window_ms,
          out_of_orderness_ms=args.out_of_orderness_ms)
    env.execute(JOB_NAME)


if __name__ == "__main__":
    main()
