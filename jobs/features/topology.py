"""The wiring of `features`: the served log, beacons, conversions, feedback, serving.ads and serving.campaigns
as raw rows -> Decode -> keyed by ad -> AdWindow -> one key -> Publish -> features.ads and model.registry
(exactly-once, Kafka timestamp = the snapshot's event time); consented users' inputs -> keyed by user ->
UserWindow -> Redis; deletion requests (privacy.deletions, always read from its start) -> keyed by user ->
UserWindow, which forgets the user; corrupt and expired records -> dead.letters. No rule lives here.

Event time: the served log and ad.events drive the clock (watermarks per partition, bounded out-of-orderness).
Conversions, feedback, deletion requests and the compiled ads and campaigns are side inputs that never hold the
clock back (a partition idle for --idle-timeout-ms stops counting); a record of theirs behind the clock still
counts in every window to come that holds its bucket. Publish runs its tick after every AdWindow's tick of the
same time: a watermark passes an operator only after the timers it fires, so the windows of tick T are in when
Publish's timer T fires."""
from __future__ import annotations

import dataclasses

from jobs.features import state
from jobs.features.functions import (CAMPAIGNS, DEAD_LETTERS, REGISTRY, USERS, AdWindow, Decode, Publish,
                                     UserWindow)
from jobs.features.settings import FeaturesSettings
from jobs.common.kafka_tables import (bytes_row_type, kafka_sink_table, kafka_source_table, timed_bytes_row_type,
                                      timed_table)

SOURCES = (("served", "served_in"), ("event", "events_in"), ("conversion", "conversions_in"),
           ("feedback", "feedback_in"), ("ad", "ads_in"), ("campaign", "campaigns_in"), ("deletion", "deletions_in"))
SIDE_INPUTS = frozenset({"conversion", "feedback", "ad", "campaign", "deletion"})
FROM_THE_START = frozenset({"deletion"})  # every request in force, whatever the job's own start


def _topic(settings: FeaturesSettings, kind: str) -> str:
    t = settings.topics
    return {"served": t.served, "event": t.events, "conversion": t.conversions, "feedback": t.feedback,
            "ad": t.ads, "campaign": t.campaigns, "deletion": t.deletions}[kind]


def build(t_env, settings: FeaturesSettings) -> None:
    """Wire the job graph onto t_env's environment (no execution)."""
    from pyflink.common import Types

    kafka = settings.kafka
    for kind, table in SOURCES:
        if kind in SIDE_INPUTS:
            source = dataclasses.replace(kafka, startup_mode="earliest-offset") if kind in FROM_THE_START else kafka
            kafka_source_table(t_env, table, _topic(settings, kind), source, idle_timeout_ms=settings.idle_timeout_ms,
                               side_input=True)
        else:
            kafka_source_table(t_env, table, _topic(settings, kind), kafka,
                               out_of_orderness_ms=settings.out_of_orderness_ms)
    kafka_sink_table(t_env, "features_out", settings.topics.features, kafka, with_timestamp=True)
    kafka_sink_table(t_env, "registry_out", settings.topics.registry, kafka, with_timestamp=True)
    kafka_sink_table(t_env, "dead_letters_out", settings.topics.dead_letters, kafka)
    raw = t_env.sql_query("\n        UNION ALL\n".join(
        f"SELECT '{kind}' AS kind, `topic`, `partition`, `offset`, ts, k, v FROM {table}" for kind, table in SOURCES))

    user_features = bool(settings.redis_url)
    decoded = (t_env.to_data_stream(raw).process(Decode(user_features), output_type=state.AD_INPUT)
               .name("decode served log, beacons, conversions, feedback, ads, campaigns"))
    windows = (decoded.key_by(lambda r: r.ad_id, key_type=Types.LONG())
               .process(AdWindow(settings.windows, settings.kafka.tripwire_file), output_type=state.PUBLISH_INPUT)
               .name("window per ad").uid("window-per-ad"))
    published = (windows.union(decoded.get_side_output(CAMPAIGNS)).key_by(lambda r: 0, key_type=Types.INT())
                 .process(Publish(settings.estimates, settings.windows, settings.snapshot_dir,
                                  settings.keep_snapshots), output_type=timed_bytes_row_type())
                 .name("estimate every ad, publish the snapshot").uid("publish-snapshot").set_parallelism(1))
    rejected = decoded.get_side_output(DEAD_LETTERS).union(windows.get_side_output(DEAD_LETTERS))
    if user_features:
        # UserWindow writes to Redis and emits no record; its (empty) output joins the dead letters so the
        # graph has a sink behind it.
        users = (decoded.get_side_output(USERS).key_by(lambda r: r.user_id, key_type=Types.STRING())
                 .process(UserWindow(settings.windows, settings.redis_url, settings.user_ttl_ms),
                          output_type=bytes_row_type()).name("window per consented user, features to Redis")
                 .uid("window-per-user"))
        rejected = rejected.union(users)

    statements = t_env.create_statement_set()
    statements.add_insert("features_out", timed_table(t_env, published))
    statements.add_insert("registry_out", timed_table(t_env, published.get_side_output(REGISTRY)))
    statements.add_insert("dead_letters_out", t_env.from_data_stream(rejected))
    statements.attach_as_datastream()
