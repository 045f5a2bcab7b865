"""Flink job `training_join`: ad.served + ad.events + ad.conversions -> labelled, down-sampled
training.examples. Keyed by impression id, on event time.

  ad.served       each record's filled slots (core.training.impressions_of)  \
  ad.events       impression and click beacons (impression id, type, times)   > by impression id -> Label
  ad.conversions  conversions the advertisers reported (impression id, times) /

Label (per impression): the job only adapts I/O; the per-impression state machine is core.training's
on_served / on_beacon / on_timer over a LabelState. The first record of an impression sets an event-time
timer at its served time + 1 h (core.training.final_at_ms; the served record and every beacon carry the
served time). Beacons fold into an Outcome (core.training.observe); when the watermark passes the timer
the label is final and core.training.example decides: a positive (clicked within the hour), a kept
negative (rendered, not clicked, hash-sampled at the keep rate with weight 1 / rate), or nothing (never
rendered, or a dropped negative). The example carries the served record's user features exactly as
logged, its ad-snapshot version and the fallback / exploration marks, so training can treat those
requests apart.

Conversions: a clicked impression (a positive) is held on until its conversion label is final, the
conversion window after it was served (core.training.conversion_final_at_ms; default 7 days,
--conversion-window-ms), and then gets a second example with task CONVERSION: 1 when a conversion came
within the window, else 0. ad.conversions is sparse, so it never holds the job's clock back (its watermark
runs a day ahead of its records and an idle partition stops counting); a conversion after its impression's
conversion label, or of an impression whose click example was not a positive, is counted
(`late_conversions`) and ignored.

The same rules run in the Beam backfill (pipelines/training_set) over the archive, and on the same data
the two give the same examples: every example is emitted when its label is final, never before, so the
order in which beacons arrive cannot change it. What can: a record later than the watermark bound. A
served record that arrives after its impression's timer still gets its example (the label was already
final); a beacon that arrives after its impression's example was emitted is counted (`late_beacons`)
and ignored. State of an impression is cleared core.training.CLEANUP_MS after its label is final; beacons
of an impression whose served record never came are counted (`unjoined_impressions`) then.

Outputs: training.examples (TrainingExample, keyed by impression id, exactly-once, Kafka timestamp =
the example's event time, so the archiver files it by event time), dead.letters for records that do
not decode (counted, `corrupt_records`).

Deploy: adserve jobs deploy training_join [--keep-rate 0.1] [--conversion-window-ms 604800000]"""
from __future__ import annotations

import argparse
import json
import logging
from typing import Sequence

from core import training
from jobs.flink_io import (DeadLetterDecoder, KafkaJobSettings, add_common_arguments, bytes_row_type,
                           create_environment, kafka_sink_table, kafka_source_table, parse, settings_from_args,
                           timed_bytes_row_type, timed_table)

JOB_NAME = "training_join"
LOG = logging.getLogger(f"adserve.jobs.{JOB_NAME}")
ROW_FIELDS = ["impression_id", "kind", "served_ms", "event_ms", "event_type", "context"]


def _row_type():
    from pyflink.common import Types

    return Types.ROW_NAMED(ROW_FIELDS, [Types.STRING(), Types.STRING(), Types.LONG(), Types.LONG(), Types.STRING(),
                                        Types.STRING()])


def build(env, t_env, settings: KafkaJobSettings, *, served_topic: str = "ad.served", events_topic: str = "ad.events",
          conversions_topic: str = "ad.conversions", examples_topic: str = "training.examples",
          dead_letter_topic: str = "dead.letters", rules: training.JoinRules = training.JoinRules(),
          out_of_orderness_ms: int = 5000, idle_timeout_ms: int = 2000) -> None:
    from pyflink.common import Row, Types
    from pyflink.datastream import KeyedProcessFunction, OutputTag, ProcessFunction, RuntimeContext
    from pyflink.datastream.state import ValueStateDescriptor

    from schemas.codec import AvroCodec

    dead_letters = OutputTag("dead-letters", bytes_row_type())

    record_types = {"served": "ServedRecord", "event": "AdEvent", "conversion": "AdConversion"}

    class Split(ProcessFunction):
        """Decode; a served record becomes one row per filled slot, a beacon or conversion one row; corrupt ->
        dead letters."""

        def open(self, runtime_context: RuntimeContext):
            self.codec = AvroCodec()
            self.decoder = DeadLetterDecoder(JOB_NAME, self.codec,
                                             runtime_context.get_metrics_group().counter("corrupt_records"))

        def process_element(self, row, ctx):
            record, dead = self.decoder.decode(row.v, record_types[row.kind],
                                               topic=row.topic, partition=row.partition, offset=row.offset,
                                               key=row.k)
            if dead is not None:
                yield dead_letters, dead
                return
            if row.kind == "served":
                for impression in training.impressions_of(record):
                    yield Row(impression["impression_id"], "served", impression["served_time"],
                              impression["served_time"], None, json.dumps(impression))
            else:
                yield Row(record["impression_id"], row.kind, int(record["served_time"]), int(record["event_time"]),
                          record.get("event_type"), None)

    class Label(KeyedProcessFunction):
        """Per impression: core.training's steps (on_served, on_beacon, on_conversion, on_timer) on its
        LabelState."""

        def open(self, runtime_context: RuntimeContext):
            self.codec = AvroCodec()
            self.state = runtime_context.get_state(ValueStateDescriptor("label_state", Types.STRING()))
            metrics = runtime_context.get_metrics_group()
            self.emitted, self.late = metrics.counter("examples"), metrics.counter("late_beacons")
            self.unjoined = metrics.counter("unjoined_impressions")
            self.late_conversions = metrics.counter("late_conversions")

        def _apply(self, step: training.LabelStep, ctx):
            if step.changed:
                if step.state is None:
                    self.state.clear()
                else:
                    self.state.update(step.state.text())
            for timestamp in step.timers:
                ctx.timer_service().register_event_time_timer(timestamp)
            if step.late_beacon:
                self.late.inc()
            if step.late_conversion:
                self.late_conversions.inc()
            if step.unjoined:
                self.unjoined.inc()
            for made in step.examples:
                self.emitted.inc()
                yield Row(made["impression_id"].encode(), self.codec.encode("TrainingExample", made),
                          made["event_time"])

        def process_element(self, row, ctx):
            state = training.LabelState.parse(self.state.value())
            if row.kind == "served":
                step = training.on_served(state, json.loads(row.context), ctx.timer_service().current_watermark(),
                                          rules)
            elif row.kind == "conversion":
                step = training.on_conversion(state, row.served_ms, row.event_ms, rules)
            else:
                step = training.on_beacon(state, row.served_ms, row.event_type, row.event_ms)
            yield from self._apply(step, ctx)

        def on_timer(self, timestamp: int, ctx):
            yield from self._apply(training.on_timer(training.LabelState.parse(self.state.value()), timestamp,
                                                     rules), ctx)

    kafka_source_table(t_env, "served_in", served_topic, settings, out_of_orderness_ms=out_of_orderness_ms)
    kafka_source_table(t_env, "events_in", events_topic, settings, out_of_orderness_ms=out_of_orderness_ms)
    kafka_source_table(t_env, "conversions_in", conversions_topic, settings, idle_timeout_ms=idle_timeout_ms,
                       side_input=True)
    kafka_sink_table(t_env, "examples_out", examples_topic, settings, with_timestamp=True)
    kafka_sink_table(t_env, "dead_letters_out", dead_letter_topic, settings)
    raw = t_env.sql_query("""
        SELECT 'served' AS kind, `topic`, `partition`, `offset`, ts, k, v FROM served_in
        UNION ALL
        SELECT 'event' AS kind, `topic`, `partition`, `offset`, ts, k, v FROM events_in
        UNION ALL
        SELECT 'conversion' AS kind, `topic`, `partition`, `offset`, ts, k, v FROM conversions_in""")
    rows = t_env.to_data_stream(raw)
    split = rows.process(Split(), output_type=_row_type()).name("decode served records, beacons and conversions")
    examples = (split.key_by(lambda r: r.impression_id, key_type=Types.STRING())
                .process(Label(), output_type=timed_bytes_row_type()).name("label impressions"))
    statements = t_env.create_statement_set()
    statements.add_insert("examples_out", timed_table(t_env, examples))
    statements.add_insert("dead_letters_out", t_env.from_data_stream(split.get_side_output(dead_letters)))
    statements.attach_as_datastream()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, JOB_NAME)
    parser.add_argument("--served-topic", default="ad.served")
    parser.add_argument("--events-topic", default="ad.events")
    parser.add_argument("--conversions-topic", default="ad.conversions")
    parser.add_argument("--examples-topic", default="training.examples")
    parser.add_argument("--dead-letter-topic", default="dead.letters")
    parser.add_argument("--keep-rate", type=float, default=training.DEFAULT_KEEP_RATE,
                        help=f"share of negatives kept (default {training.DEFAULT_KEEP_RATE}); every click is kept")
    parser.add_argument("--conversion-window-ms", type=int, default=training.CONVERSION_WINDOW_MS,
                        help="a click's conversion label is final this long after serving (default 7 days)")
    parser.add_argument("--idle-timeout-ms", type=int, default=2000,
                        help="an ad.conversions partition without records this long stops counting for the clock")
    parser.add_argument("--out-of-orderness-ms", type=int, default=5000,
                        help="how far a record may trail the newest one and still count before its label is final")
    args = parse(parser, argv)
    settings = settings_from_args(args, JOB_NAME)
    logging.basicConfig(level=logging.INFO)
    rules = training.JoinRules(args.keep_rate, args.conversion_window_ms)
    LOG.info("starting %s: %s, %s", JOB_NAME, rules, settings.describe())
    env, t_env = create_environment(settings)
    build(env, t_env, settings, served_topic=args.served_topic, events_topic=args.events_topic,
          conversions_topic=args.conversions_topic, examples_topic=args.examples_topic,
          dead_letter_topic=args.dead_letter_topic, rules=rules, out_of_orderness_ms=args.out_of_orderness_ms,
          idle_timeout_ms=args.idle_timeout_ms)
    env.execute(JOB_NAME)


if __name__ == "__main__":
    main()
