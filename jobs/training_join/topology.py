"""The wiring of `training_join`: the served log, beacons and conversions as raw rows -> Split (decode) ->
keyed by impression id -> Label -> training.examples (exactly-once, Kafka timestamp = the example's event
time, so the archiver files it by event time); corrupt records -> dead.letters. The deletion requests
(privacy.deletions, compacted, always read from its start) are broadcast to every Label instance: a side
input that never holds the clock back. No rule lives here."""
from __future__ import annotations

import dataclasses

from jobs.common.kafka_tables import kafka_sink_table, kafka_source_table, timed_bytes_row_type, timed_table
from jobs.common.routing import DEAD_LETTERS
from jobs.training_join import state as join_state
from jobs.training_join.functions import DecodeDeletion, Label, Split, join_row_type
from jobs.training_join.settings import TrainingJoinSettings


def build(t_env, settings: TrainingJoinSettings) -> None:
    """Wire the job graph onto t_env's environment (no execution)."""
    from pyflink.common import Types

    kafka, lateness = settings.kafka, settings.out_of_orderness_ms
    kafka_source_table(t_env, "served_in", settings.served_topic, kafka, out_of_orderness_ms=lateness)
    kafka_source_table(t_env, "events_in", settings.events_topic, kafka, out_of_orderness_ms=lateness)
    # Conversions are sparse: a side input that never holds the job's clock back.
    kafka_source_table(t_env, "conversions_in", settings.conversions_topic, kafka,
                       idle_timeout_ms=settings.idle_timeout_ms, side_input=True)
    # Every request in force, whatever the job's own start: the compacted topic from its first record.
    kafka_source_table(t_env, "deletions_in", settings.deletions_topic,
                       dataclasses.replace(kafka, startup_mode="earliest-offset"),
                       idle_timeout_ms=settings.idle_timeout_ms, side_input=True)
    kafka_sink_table(t_env, "examples_out", settings.examples_topic, kafka, with_timestamp=True)
    kafka_sink_table(t_env, "dead_letters_out", settings.dead_letter_topic, kafka)
    raw = t_env.sql_query("""
        SELECT 'served' AS kind, `topic`, `partition`, `offset`, ts, k, v FROM served_in
        UNION ALL
        SELECT 'event' AS kind, `topic`, `partition`, `offset`, ts, k, v FROM events_in
        UNION ALL
        SELECT 'conversion' AS kind, `topic`, `partition`, `offset`, ts, k, v FROM conversions_in""")
    split = (t_env.to_data_stream(raw).process(Split(), output_type=join_row_type())
             .name("decode served records, beacons and conversions"))
    requests = t_env.sql_query("SELECT `topic`, `partition`, `offset`, ts, k, v FROM deletions_in")
    deletions = (t_env.to_data_stream(requests).process(DecodeDeletion(), output_type=join_state.DELETION)
                 .name("decode deletion requests"))
    examples = (split.key_by(lambda r: r.impression_id, key_type=Types.STRING())
                .connect(deletions.broadcast(join_state.deletions_state()))
                .process(Label(settings.rules, settings.kafka.tripwire_file), output_type=timed_bytes_row_type())
                .name("label impressions, drop deleted users").uid("label-impressions"))
    statements = t_env.create_statement_set()
    statements.add_insert("examples_out", timed_table(t_env, examples))
    statements.add_insert("dead_letters_out", t_env.from_data_stream(
        split.get_side_output(DEAD_LETTERS).union(deletions.get_side_output(DEAD_LETTERS))))
    statements.attach_as_datastream()
