"""Flink job `click_aggregator`: ad.events -> deduplicated, tagged, billed up to the budget ->
billing.billed_spend (per campaign, every 10 s of event time). On event time.

Per-event work stays in the JVM: the project's Java decoder (jobs/jvm/DecodeAdEvent), SQL flags, one
keyed exchange by impression id into the project's operator FirstSeen (jobs/jvm/FirstSeen), then SQL on
the clicks alone (~2 % of events):

  decode            each ad.events record (a record that does not decode takes the Python path)
  flags             billable, and an impression's invalid reason (core.clicks rules generated as SQL)
  deduplicate       FirstSeen: first copy per (impression id, event type), remembered for the token's
                    lifetime plus the allowed lateness (state TTL)
  impressions       FirstSeen: summed per campaign and 10 s window, out when the watermark passes
  burst counts      per user and per IP, each click's count of clicks in its event-time minute
                    (RANGE OVER windows: ties counted together, so replays give the same counts)
  tag               core.clicks.invalid_reason, generated as SQL from the same constants
  join              a valid billable click with its impression's beacon (core.clicks.joins bounds):
                    counted in the click's window when FirstSeen saw the impression first, else an
                    interval join with the impression FirstSeen passes on when it arrives
  10 s windows      clicks per campaign: billable value and count, invalid value, joined clicks
                    (one-phase; a click already behind the watermark there takes the late path); with
                    FirstSeen's impressions of the same window, up to two rows per campaign and window
  key by shard      jobs/jvm/ByCampaign: campaign id modulo --shards (default 16), in PyFlink's keyed
                    shape (no Python key function per row)

Python sees only the reduced windows, the campaign records (a side input,
keyed in the JVM by the campaign id jobs/jvm/LeadingCampaignId reads), the rare
late joins, late or undecodable events (only records the JVM cannot read pass a
Python decoder first, for their campaign id), and calls
core.clicks.CampaignBill: bill
up to the budget in force (core.billing), absorb the rest, credit invalid
traffic. Every window it emits the campaign's cumulative totals for its budget
day; being cumulative they are idempotent, so the sink is at-least-once
(visible at once) while the state that makes them is exactly-once
(checkpointed with the Kafka offsets): a restart re-emits the same totals,
never a second bill.

Late events (behind the job's clock, e.g. a tracker that reconnected) are
deduplicated with the rest, then billed on arrival in the Python path, in their
event time's window and day, with the reason SQL gave them (late already at
deduplication: bot and too-soon rules apply, burst counts and the join do not;
late only at a window: all of them). Corrupt records ->
dead.letters, counted (`corrupt_records`), and the job keeps running.

Deploy: adserve jobs deploy click_aggregator"""
from __future__ import annotations

import argparse
import json
import logging
from typing import Sequence

from core import clicks
from jobs.flink_io import (DeadLetterDecoder, KafkaJobSettings, add_common_arguments, add_shards_argument,
                           by_campaign_shard, bytes_row_type, check_shards, create_environment, kafka_sink_table,
                           kafka_source_table, parse, settings_from_args, timed_bytes_row_type, timed_table)

JOB_NAME = "click_aggregator"
LOG = logging.getLogger(f"adserve.jobs.{JOB_NAME}")

ROW_FIELDS = ["kind", "campaign_id", "billable", "impressions", "clicks", "invalid", "invalid_events", "joined",
              "topic", "part", "off", "k", "v", "event"]

SHARDS = 16  # the bill's keys: campaigns by campaign id modulo this (fixed for the life of the job's state)

LATE_FIELDS = ("event_id", "impression_id", "event_type", "event_time", "served_time", "campaign_id",
               "price_micros", "billing_type", "user_id", "ip_address", "user_agent")


def _row_type():
    from pyflink.common import Types

    return Types.ROW_NAMED(ROW_FIELDS, [
        Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG(), Types.LONG(), Types.LONG(), Types.LONG(),
        Types.LONG(), Types.STRING(), Types.INT(), Types.LONG(), Types.PRIMITIVE_ARRAY(Types.BYTE()),
        Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.STRING()])


def _first_seen(t_env, source: str, name: str) -> None:
    """`name`: the reduced stream of `source` (the decoded events, columns FirstSeen.INPUT_FIELDS then the
    rowtime `ts`) after the project's JVM operator io.adserve.flink.FirstSeen (jobs/jvm): deduplicated by
    impression, impressions summed per campaign and 10 s window, clicks, late events and undecodable records passed on.
    Rowtime and watermarks kept."""
    from pyflink.datastream import DataStream
    from pyflink.table import Schema
    from pyflink.util.java_utils import invoke_method

    stream = t_env.to_data_stream(t_env.from_path(source))
    reduced = invoke_method(None, "io.adserve.flink.FirstSeen", "apply",
                            [stream._j_data_stream, f"{clicks.DEDUPE_HORIZON_MS},{clicks.WINDOW_MS}"],
                            ["org.apache.flink.streaming.api.datastream.DataStream", "java.lang.String"])
    t_env.create_temporary_view(name, t_env.from_data_stream(
        DataStream(reduced), Schema.new_builder().column_by_metadata("rt", "TIMESTAMP_LTZ(3)", "rowtime")
        .watermark("rt", "SOURCE_WATERMARK()").build()))


def _create_windows(t_env, clicks_view: str, name: str) -> None:
    """View `name`: per campaign and 10 s window, billable value and counts, invalid value, joined clicks, in up
    to two rows: FirstSeen sums the impressions, and the clicks (`clicks_view`, tagged after two OVER
    aggregations) are summed in their own window. Python bills each part as it comes (billing a window's two
    parts one after the other bills exactly what billing their sum would: min(a + b, what remains)).

    A cascaded window used to merge the parts in the JVM. It dropped rows without a trace: the parts reach it by
    two paths, and when the source went from idle to active the click path's watermark could pass the
    merge window before the impressions' rows came (the simulated day lost a campaign's first window that way,
    and a burst of beacons right after the job started could lose every window)."""
    seconds = clicks.WINDOW_MS // 1000
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW {name} AS
        SELECT campaign_id, billable, impressions, clicks, invalid, invalid_events, CAST(0 AS BIGINT) AS joined, rt
        FROM first_seen WHERE kind = 'window'
        UNION ALL
        SELECT campaign_id,
               SUM(CASE WHEN billable AND reason IS NULL THEN price_micros ELSE 0 END) AS billable,
               SUM(CASE WHEN billable AND reason IS NULL AND event_type = 'IMPRESSION' THEN 1 ELSE 0 END)
                 AS impressions,
               SUM(CASE WHEN billable AND reason IS NULL AND event_type = 'CLICK' THEN 1 ELSE 0 END) AS clicks,
               SUM(CASE WHEN billable AND reason IS NOT NULL THEN price_micros ELSE 0 END) AS invalid,
               SUM(CASE WHEN reason IS NOT NULL THEN 1 ELSE 0 END) AS invalid_events,
               SUM(CASE WHEN joined THEN 1 ELSE 0 END) AS joined, window_time AS rt
        FROM TABLE(TUMBLE(TABLE {clicks_view}, DESCRIPTOR(ts), INTERVAL '{seconds}' SECOND))
        GROUP BY window_start, window_end, window_time, campaign_id""")


def _aggregate_sql(t_env, header_hex: str, campaign_header_hex: str) -> None:
    """The JVM part: decode, deduplicate and sum impressions (FirstSeen), count click bursts, tag, window, join;
    campaign records get their campaign id (jobs/jvm LeadingCampaignId) where they stand, so the bill sees them in
    the order they came."""
    # One-phase windows: the lateness check just before a window is then made against the same watermark the
    # window holds (a local/global split let a partial arrive at the global half after its window fired).
    t_env.get_config().set("table.optimizer.agg-phase-strategy", "ONE_PHASE")
    fields = ("event_id, impression_id, event_type, event_time, served_time, campaign_id, price_micros, "
              "billing_type, user_id, ip_address, user_agent")
    # Decoded once per record (a table function: a scalar one would run again for every field read), with the
    # flags an impression is billed by: billable, and its invalid reason (no burst counts: those are for
    # clicks, which SQL tags again below after counting them).
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW events_decoded AS
        SELECT CASE WHEN ok THEN NULL ELSE `topic` END AS `topic`, `partition`, `offset`,
               CASE WHEN ok THEN NULL ELSE k END AS k, CASE WHEN ok THEN NULL ELSE v END AS v, ok, {fields},
               event_type = billing_type AS billable,
               {clicks.invalid_reason_sql(lowered_agent="agent_lower")} AS reason, ts FROM (
          SELECT `topic`, `partition`, `offset`, ts, k, v, d.*, CAST(0 AS BIGINT) AS user_n,
                 CAST(0 AS BIGINT) AS ip_n
          FROM events_in LEFT JOIN LATERAL TABLE(decode_event(v, X'{header_hex}')) AS d ON TRUE)""")
    _first_seen(t_env, "events_decoded", "first_seen")
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW clicks_on_time AS
        SELECT {fields}, impression_ts, ts_ms, FLOOR(rt TO MINUTE) AS click_minute, rt AS ts
        FROM first_seen WHERE kind = 'click'""")
    t_env.execute_sql("""
        CREATE TEMPORARY VIEW clicks_by_user AS
        SELECT *, COUNT(*) OVER (PARTITION BY user_id, click_minute ORDER BY ts
                                 RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS user_n
        FROM clicks_on_time""")
    t_env.execute_sql("""
        CREATE TEMPORARY VIEW clicks_counted AS
        SELECT *, COUNT(*) OVER (PARTITION BY ip_address, click_minute ORDER BY ts
                                 RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS ip_n
        FROM clicks_by_user""")
    lifetime, lateness = clicks.TOKEN_LIFETIME_MS, clicks.ALLOWED_LATENESS_MS
    # Tagged, with a lateness check right before the window: a row behind the watermark here would be dropped
    # by the window without a trace, so it takes the late path instead (its reason already decided).
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW tagged_clicks AS
        SELECT *, billable AND reason IS NULL AND impression_ts IS NOT NULL
                  AND {clicks.joins_sql("ts_ms", "impression_ts")} AS joined FROM (
          SELECT {fields}, impression_ts, ts_ms, event_type = billing_type AS billable,
                 {clicks.invalid_reason_sql()} AS reason, ts,
                 (CURRENT_WATERMARK(ts) IS NULL OR ts > CURRENT_WATERMARK(ts)) AS on_time
          FROM clicks_counted)""")
    t_env.execute_sql("CREATE TEMPORARY VIEW tagged_clicks_on_time AS SELECT * FROM tagged_clicks WHERE on_time")
    # A valid billable click joined to its impression's beacon (the impression from the token's lifetime before
    # the click to the allowed lateness after it; core.clicks.joins). When FirstSeen had seen the impression
    # first (the click carries its time) the click is `joined` above and counted in its window; when the
    # impression comes after its click (FirstSeen passes such impressions on), the pair is joined here and
    # leaves as its own row. Every first copy of an impression counts, also one behind the job's clock: the
    # recount joins with every impression too.
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW clicks_joined AS
        SELECT c.campaign_id AS campaign_id, c.ts AS ts
        FROM tagged_clicks c, (SELECT impression_id, rt AS its FROM first_seen WHERE kind = 'impression') i
        WHERE c.impression_id = i.impression_id AND c.billable AND c.reason IS NULL AND c.impression_ts IS NULL
          AND i.its BETWEEN c.ts - INTERVAL '{lifetime // 60_000}' MINUTE
                        AND c.ts + INTERVAL '{lateness // 60_000}' MINUTE""")
    _create_windows(t_env, "tagged_clicks_on_time", "windows")
    raw = ", ".join(["CAST(NULL AS BIGINT)"] * 6 + ["`topic`", "part", "off", "k", "v", "CAST(NULL AS STRING)"])

    def late(reason: str) -> str:
        """A late event reaches Python as its decoded fields (JSON), with the reason when SQL decided one."""
        as_json = ", ".join(f"'{f.strip()}' VALUE {f.strip()}" for f in fields.split(",") + reason.split(",")
                            if f)
        return ", ".join(["CAST(NULL AS BIGINT)"] * 6 + ["CAST(NULL AS STRING)", "CAST(NULL AS INT)",
                                                         "CAST(NULL AS BIGINT)", "CAST(NULL AS BYTES)",
                                                         "CAST(NULL AS BYTES)", f"JSON_OBJECT({as_json})"])
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW reduced AS
        SELECT 'window' AS kind, campaign_id, billable, impressions, clicks, invalid, invalid_events, joined,
               CAST(NULL AS STRING) AS `topic`, CAST(NULL AS INT) AS part, CAST(NULL AS BIGINT) AS off,
               CAST(NULL AS BYTES) AS k, CAST(NULL AS BYTES) AS v, CAST(NULL AS STRING) AS event, rt
        FROM windows
        UNION ALL
        SELECT 'late', campaign_id, {late("reason")}, rt FROM first_seen WHERE kind = 'late'
        UNION ALL
        SELECT 'late', campaign_id, {late("reason,joined")}, ts FROM tagged_clicks WHERE NOT on_time
        UNION ALL
        SELECT 'joined', campaign_id, CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), CAST(1 AS BIGINT),
               {", ".join(["CAST(NULL AS BIGINT)"] * 3)}, CAST(NULL AS STRING), CAST(NULL AS INT),
               CAST(NULL AS BIGINT), CAST(NULL AS BYTES), CAST(NULL AS BYTES), CAST(NULL AS STRING), ts
        FROM clicks_joined
        UNION ALL
        SELECT 'raw', CAST(NULL AS BIGINT), {raw}, rt FROM first_seen WHERE kind = 'raw'
        UNION ALL
        SELECT 'campaign', campaign_of(v, X'{campaign_header_hex}'), {", ".join(["CAST(NULL AS BIGINT)"] * 6)},
               `topic`, `partition`, `offset`, k, v, CAST(NULL AS STRING), ts FROM campaigns_in""")


def build(env, t_env, settings: KafkaJobSettings, *, events_topic: str = "ad.events",
          campaigns_topic: str = "serving.campaigns", billed_topic: str = "billing.billed_spend",
          dead_letter_topic: str = "dead.letters", out_of_orderness_ms: int = 2000,
          idle_timeout_ms: int = 2000, shards: int = SHARDS) -> None:
    from pyflink.common import Row, Types
    from pyflink.datastream import KeyedProcessFunction, OutputTag, ProcessFunction, RuntimeContext
    from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

    from schemas.codec import AvroCodec, default_registry, schema_fingerprint

    header_hex = "c301" + schema_fingerprint(default_registry().schema("AdEvent")).hex()
    campaign_header_hex = "c301" + schema_fingerprint(default_registry().schema("ServingCampaign")).hex()
    dead_letters = OutputTag("dead-letters", bytes_row_type())
    record_types = {"raw": "AdEvent", "campaign": "ServingCampaign"}  # the rows ByCampaign cannot key

    class Route(ProcessFunction):
        """The rare rows whose campaign is inside their bytes (events and campaign records of another contract
        version, or ones the JVM could not read): decoded for their campaign id; corrupt ones -> dead letters
        (counted)."""

        def open(self, runtime_context: RuntimeContext):
            self.codec = AvroCodec()
            self.decoder = DeadLetterDecoder(JOB_NAME, self.codec,
                                             runtime_context.get_metrics_group().counter("corrupt_records"))

        def process_element(self, row, ctx):
            record, dead = self.decoder.decode(row.v, record_types[row.kind], topic=row.topic, partition=row.part,
                                               offset=row.off, key=row.k)
            if dead is not None:
                yield dead_letters, dead
                return
            if row.kind == "raw":  # another contract version: billed on the late path
                event = {name: record.get(name) for name in LATE_FIELDS}
                yield Row("late", int(record["campaign_id"]), *[None] * 11, json.dumps(event))
                return
            yield Row(row.kind, int(record["campaign_id"]), *[None] * 6, row.topic, row.part, row.off, row.k, row.v,
                      None)

    class Bill(KeyedProcessFunction):
        """Per campaign: the day's CampaignBill, fed windows in event-time order; totals out.

        Keyed by shard (campaign id modulo `shards`), the bills in a map by campaign: PyFlink writes a key's
        changed state back to the JVM once per bundle and waits for it, so one key per campaign cost one round
        trip per campaign and bundle (the operator was ~97 % busy at ~1 k rows/s); a shard's changes go in one."""

        def open(self, runtime_context: RuntimeContext):
            self.codec = AvroCodec()
            self.bills = runtime_context.get_map_state(MapStateDescriptor("bills", Types.LONG(), Types.STRING()))
            self.shard_count = runtime_context.get_state(ValueStateDescriptor("shards", Types.INT()))
            self.checked: set[int] = set()
            # Late or other-version events seen here, by (impression, type): the SQL dedupe covers the rest.
            self.seen = runtime_context.get_map_state(MapStateDescriptor("late_seen", Types.STRING(), Types.LONG()))
            metrics = runtime_context.get_metrics_group()
            self.windows, self.late = metrics.counter("billing_windows"), metrics.counter("late_events")
            self.decoder = DeadLetterDecoder(JOB_NAME, self.codec, metrics.counter("corrupt_records"))
            self.cache: dict[int, clicks.CampaignBill] = {}

        def _load(self, campaign_id: int) -> clicks.CampaignBill:
            # Decoded bills stay in memory between calls; Flink state stays the truth (written after every
            # change, checkpointed) and a restart rebuilds this operator with an empty cache.
            bill = self.cache.get(campaign_id)
            if bill is None:
                raw = self.bills.get(campaign_id)
                bill = clicks.CampaignBill(campaign_id) if raw is None else clicks.CampaignBill.from_json(raw)
                self.cache[campaign_id] = bill
            return bill

        def _save(self, bill: clicks.CampaignBill) -> None:
            self.bills.put(bill.campaign_id, bill.to_json())

        def _check_shard(self, shard: int) -> None:
            """Once per shard and run: state written with another shard count fails the job, loudly."""
            if shard not in self.checked:
                check_shards(JOB_NAME, self.shard_count.value(), shards)
                self.shard_count.update(shards)
                self.checked.add(shard)

        def process_element(self, row, ctx):
            self._check_shard(ctx.get_current_key())
            bill = self._load(row.campaign_id)
            event_ms = ctx.timestamp()
            emit_at = event_ms + 1
            if row.kind == "window":
                self.windows.inc()
                bill.add(clicks.WindowTotals(event_ms + 1, row.billable, row.impressions, row.clicks, row.invalid,
                                             row.invalid_events, row.joined))
            elif row.kind == "joined":  # a click of this campaign found its impression: counted in its window's day
                joined = clicks.WindowTotals(clicks.window_end(event_ms), joined_clicks=row.clicks)
                reported = bill.last_window_ms >= joined.end_ms
                bill.add(joined)
                emit_at = joined.end_ms
                if not reported:  # the click's window record, still to come, will carry it
                    self._save(bill)
                    return
            elif row.kind == "campaign":
                record, dead = self.decoder.decode(row.v, "ServingCampaign", topic=row.topic, partition=row.part,
                                                   offset=row.off, key=row.k)
                if dead is not None:  # its campaign id read in the JVM, the rest corrupt
                    yield dead_letters, dead
                    return
                bill.on_campaign(record)
                # Stamped at the latest window billed, not at the record's own time: a window ending before
                # that time may still come, and its totals must read as newer than these (progress_key).
                emit_at = 0
            elif row.kind == "late":
                event = json.loads(row.event)
                key = "|".join(clicks.dedupe_key(event))
                if self.seen.contains(key):
                    return
                for old in [k for k, t in self.seen.items() if t < event["event_time"] - clicks.DEDUPE_HORIZON_MS]:
                    self.seen.remove(old)
                self.seen.put(key, int(event["event_time"]))
                self.late.inc()
                # SQL names the reason: late only at its window, with the burst counts; late already at
                # deduplication, the rules that need no counts (decided before FirstSeen: an impression comes
                # without the fields to decide them again). An event of another contract version (Route) gets
                # those rules here.
                reason = event.pop("reason") if "reason" in event else clicks.invalid_reason(event)
                joined = bool(event.pop("joined", False))
                totals = clicks.WindowTotals(clicks.window_end(int(event["event_time"])))
                totals.add(event, reason, joined)
                bill.add(totals)
                emit_at = totals.end_ms
            self._save(bill)
            record = bill.record(emit_at)  # stamped no earlier than the latest window billed
            if record is not None:
                yield Row(str(bill.campaign_id).encode(), self.codec.encode("BilledSpend", record),
                          int(record["event_time"]))

    # A quiet partition (few campaigns hash to it) must not hold the clock back: idle after idle_timeout_ms.
    kafka_source_table(t_env, "events_in", events_topic, settings, out_of_orderness_ms=out_of_orderness_ms,
                       idle_timeout_ms=idle_timeout_ms)
    kafka_source_table(t_env, "campaigns_in", campaigns_topic, settings, idle_timeout_ms=idle_timeout_ms,
                       side_input=True)
    # Billed totals are cumulative for the day: a repeat after a restart changes nothing, so at-least-once.
    kafka_sink_table(t_env, "billed_out", billed_topic, settings, exactly_once=False, with_timestamp=True)
    kafka_sink_table(t_env, "dead_letters_out", dead_letter_topic, settings)
    _aggregate_sql(t_env, header_hex, campaign_header_hex)

    # Keyed by campaign shard in the JVM (io.adserve.flink.ByCampaign). Campaign records carry their campaign id
    # from the JVM (LeadingCampaignId) and are keyed where they stand, so windows behind a campaign record
    # cannot overtake it on the way to the bill. Only the rare rows the JVM cannot read (another contract
    # version, a corrupt record) pass through Python (Route) first, and may arrive a bundle later.
    routed, keyed = by_campaign_shard(t_env.to_data_stream(t_env.from_path("reduced")), _row_type(), shards,
                                      Route(), "decode campaign and other records")
    billed = keyed.process(Bill(), output_type=timed_bytes_row_type()).name("bill campaigns")
    corrupt = routed.get_side_output(dead_letters).union(billed.get_side_output(dead_letters))
    statements = t_env.create_statement_set()
    statements.add_insert("billed_out", timed_table(t_env, billed))
    statements.add_insert("dead_letters_out", t_env.from_data_stream(corrupt))
    statements.attach_as_datastream()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    # Billed spend feeds the budget loop (short bundles); the deduplication state holds every impression id of
    # the last 70 minutes, too much to write whole at every checkpoint (the changelog writes each id once).
    add_common_arguments(parser, JOB_NAME, bundle_time_ms=100, state_changelog=True)
    parser.add_argument("--events-topic", default="ad.events")
    parser.add_argument("--campaigns-topic", default="serving.campaigns")
    parser.add_argument("--billed-topic", default="billing.billed_spend")
    parser.add_argument("--dead-letter-topic", default="dead.letters")
    parser.add_argument("--out-of-orderness-ms", type=int, default=2000,
                        help="how far an event may trail the newest one and still make its window")
    parser.add_argument("--idle-timeout-ms", type=int, default=2000,
                        help="after this long without records, a partition of the event or campaign topics "
                             "stops holding event time back")
    add_shards_argument(parser, SHARDS, "bill")
    args = parse(parser, argv)
    settings = settings_from_args(args, JOB_NAME)
    logging.basicConfig(level=logging.INFO)
    LOG.info("starting %s: %s", JOB_NAME, settings.describe())
    from jobs.jvm import udf_jar

    env, t_env = create_environment(settings, extra_jars=[udf_jar()])
    # Deduplication and burst-count state lives as long as a beacon can still verify, plus the lateness.
    t_env.get_config().set("table.exec.state.ttl", f"{clicks.DEDUPE_HORIZON_MS} ms")
    t_env.create_java_temporary_system_function("decode_event", "io.adserve.flink.DecodeAdEvent")
    t_env.create_java_temporary_system_function("campaign_of", "io.adserve.flink.LeadingCampaignId")
    # Records pass between chained operators by reference, not as copies: a profile of the source chain
    # (Kafka, decode, tagging, the hop to FirstSeen) spent over a third of its time copying rows. Safe here:
    # the SQL operators are written for reuse, FirstSeen builds new rows, and Python operators get serialized
    # copies.
    env.get_config().enable_object_reuse()
    build(env, t_env, settings, events_topic=args.events_topic, campaigns_topic=args.campaigns_topic,
          billed_topic=args.billed_topic, dead_letter_topic=args.dead_letter_topic,
          out_of_orderness_ms=args.out_of_orderness_ms, idle_timeout_ms=args.idle_timeout_ms, shards=args.shards)
    env.execute(JOB_NAME)


if __name__ == "__main__":
    main()
