"""The wiring of `click_aggregator`: ad.events and serving.campaigns as raw rows -> the SQL views (views.py)
-> keyed by campaign shard in the JVM (jobs/jvm ByCampaign; Route first for the rows the JVM cannot read) ->
Bill -> billing.billed_spend (at-least-once: the totals are cumulative) and dead.letters. No rule lives here."""
from __future__ import annotations

from jobs.click_aggregator.functions import Bill, Route, reduced_row_type
from jobs.click_aggregator.settings import ClickAggregatorSettings
from jobs.click_aggregator.views import create_views
from jobs.common.kafka_tables import (kafka_sink_table, kafka_source_table, single_object_header,
                                      timed_bytes_row_type, timed_table)
from jobs.common.routing import DEAD_LETTERS
from jobs.common.shards import by_campaign_shard
from schemas import topics


def build(t_env, settings: ClickAggregatorSettings) -> None:
    """Wire the job graph onto t_env's environment (no execution)."""
    kafka, idle = settings.kafka, settings.idle_timeout_ms
    # A quiet partition (few campaigns hash to it) must not hold the clock back: idle after idle_timeout_ms.
    kafka_source_table(t_env, "events_in", settings.events_topic, kafka,
                       out_of_orderness_ms=settings.out_of_orderness_ms, idle_timeout_ms=idle)
    kafka_source_table(t_env, "campaigns_in", settings.campaigns_topic, kafka, idle_timeout_ms=idle,
                       side_input=True)
    # Billed totals are cumulative for the day: a repeat after a restart changes nothing, so at-least-once.
    kafka_sink_table(t_env, "billed_out", settings.billed_topic, kafka, exactly_once=False, with_timestamp=True)
    kafka_sink_table(t_env, "dead_letters_out", settings.dead_letter_topic, kafka)
    create_views(t_env, single_object_header(topics.record_type(topics.AD_EVENTS)),
                 single_object_header(topics.record_type(topics.SERVING_CAMPAIGNS)))
    # Campaign records carry their campaign id from the JVM and are keyed where they stand, so windows behind a
    # campaign record cannot overtake it on the way to the bill; only rows Route decodes may come a bundle later.
    routed, keyed = by_campaign_shard(t_env.to_data_stream(t_env.from_path("reduced")), reduced_row_type(),
                                      settings.shards, Route(), "decode campaign and other records")
    billed = (keyed.process(Bill(settings.shards, settings.kafka.tripwire_file), output_type=timed_bytes_row_type())
              .name("bill campaigns")
              .uid("bill-campaigns"))
    corrupt = routed.get_side_output(DEAD_LETTERS).union(billed.get_side_output(DEAD_LETTERS))
    statements = t_env.create_statement_set()
    statements.add_insert("billed_out", timed_table(t_env, billed))
    statements.add_insert("dead_letters_out", t_env.from_data_stream(corrupt))
    statements.attach_as_datastream()
