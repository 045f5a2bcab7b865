"""The wiring of `index_builder`: cdc.public.campaigns, .ads and .reserves as raw rows -> keyed by (topic, row
key) -> Compile -> serving.ads / serving.campaigns / serving.reserves, bad changes -> dead.letters.

The serving sinks are at-least-once: every consumer applies a serving record only if its version is newer,
so a repeat after a restart is harmless, and a record is visible at once instead of at the next checkpoint
(under load the checkpoint's duration would be most of an advertiser change's lag)."""
from __future__ import annotations

from jobs.common.kafka_tables import bytes_row_type, kafka_sink_table, kafka_source_table
from jobs.common.routing import DEAD_LETTERS
from jobs.index_builder.functions import CAMPAIGNS, RESERVES, Compile, change_key
from jobs.index_builder.settings import IndexBuilderSettings
from schemas import topics

SOURCES = (topics.CDC_CAMPAIGNS, topics.CDC_ADS, topics.CDC_RESERVES)


def build(t_env, settings: IndexBuilderSettings) -> None:
    """Wire the job graph onto t_env's environment (no execution)."""
    from pyflink.common import Types

    kafka = settings.kafka
    kafka_source_table(t_env, "changes_in", ";".join(SOURCES), kafka)
    kafka_sink_table(t_env, "ads_out", settings.ads_topic, kafka, exactly_once=False)
    kafka_sink_table(t_env, "campaigns_out", settings.campaigns_topic, kafka, exactly_once=False)
    kafka_sink_table(t_env, "reserves_out", settings.reserves_topic, kafka, exactly_once=False)
    kafka_sink_table(t_env, "dead_letters_out", settings.dead_letter_topic, kafka)

    raw = t_env.to_data_stream(t_env.from_path("changes_in"))
    compiled = (raw.key_by(change_key, key_type=Types.STRING())
                .process(Compile(), output_type=bytes_row_type()).name("compile serving records")
                .uid("compile-serving-records"))
    statements = t_env.create_statement_set()
    statements.add_insert("ads_out", t_env.from_data_stream(compiled))
    statements.add_insert("campaigns_out", t_env.from_data_stream(compiled.get_side_output(CAMPAIGNS)))
    statements.add_insert("reserves_out", t_env.from_data_stream(compiled.get_side_output(RESERVES)))
    statements.add_insert("dead_letters_out", t_env.from_data_stream(compiled.get_side_output(DEAD_LETTERS)))
    statements.attach_as_datastream()
