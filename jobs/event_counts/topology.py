"""The wiring of `event_counts`: ad.events as raw rows -> decode -> count per campaign minute -> Kafka
(exactly-once), dead letters from both steps -> dead.letters. No rule lives here.

Event time: the Kafka source takes each record's Kafka timestamp as its rowtime and emits watermarks per
partition (every producer of the project sets it to the record's event time); windows are assigned from the
event time inside the record."""
from __future__ import annotations

from jobs.event_counts.functions import CountPerMinute, DecodeEvents, event_tuple_type
from jobs.event_counts.settings import EventCountsSettings
from jobs.common.kafka_tables import bytes_row_type, kafka_sink_table, kafka_source_table
from jobs.common.routing import DEAD_LETTERS


def build(t_env, settings: EventCountsSettings) -> None:
    """Wire the job graph onto t_env's environment (no execution)."""
    from pyflink.common import Types

    kafka_source_table(t_env, "events_in", settings.input_topic, settings.kafka,
                       out_of_orderness_ms=settings.out_of_orderness_ms)
    kafka_sink_table(t_env, "counts_out", settings.output_topic, settings.kafka)
    kafka_sink_table(t_env, "dead_letters_out", settings.dead_letter_topic, settings.kafka)

    raw = t_env.to_data_stream(t_env.from_path("events_in"))
    decoded = raw.process(DecodeEvents(), output_type=event_tuple_type()).name("decode ad.events")
    counted = (decoded.key_by(lambda e: e[0], key_type=Types.LONG())
               .process(CountPerMinute(settings.window_ms), output_type=bytes_row_type())
               .name("count per campaign minute").uid("count-per-campaign-minute"))
    rejected = decoded.get_side_output(DEAD_LETTERS).union(counted.get_side_output(DEAD_LETTERS))

    statements = t_env.create_statement_set()
    statements.add_insert("counts_out", t_env.from_data_stream(counted))
    statements.add_insert("dead_letters_out", t_env.from_data_stream(rejected))
    statements.attach_as_datastream()
