"""Flink job `budget_pacing`: spend reports, campaign and ad records and billed totals -> budget states,
slices and the dashboards' pacing curves. Keyed by campaign, on event time.

Per-item work stays in the JVM. budget.spend (one item per server, campaign
and second) is decoded, deduplicated by (server, sequence, campaign) and summed
per campaign in 10 s event-time windows by one project operator chained to the
Kafka source (jobs/jvm/SpendWindows: no per-report row crosses an exchange);
reports that draw on a slice or ask for one also leave once per server and 1 s
window. Python sees only those reduced rows, plus the
low-volume serving.campaigns, serving.ads and billing.billed_spend records, and
calls the pure rules of core.budget / core.pacing:

  reduced windows, campaigns, ads, billed -> keyed by campaign shard -> core.budget.on_*
  event-time timer every 10 s        -> core.budget.step per campaign (controller, budget state, day rollover)

The rows are keyed in the JVM (jobs/jvm/ByCampaign) by the campaign's shard,
campaign id modulo --shards (default 16), and the states of a shard's
campaigns are one map state: PyFlink writes each key's changed state back to
the JVM once per bundle and waits for it, so fewer keys mean fewer round
trips. Campaign, ad and billing records get their campaign id in the JVM too
(jobs/jvm/LeadingCampaignId) and are keyed where they stand, so the spend
behind a campaign record cannot overtake it. Only the rows the JVM cannot key
(late spend reports, records of another contract version or corrupt ones) pass
a Python decoder first.

Outputs: budget.state (compacted; p, OPEN/METERED/STOPPED, remaining), budget.leases
(slices for metered campaigns), Redis `pacing:{campaign}` (streams.pacing_store),
dead.letters for anything that does not decode, counted (`corrupt_records`).

Curves (--curves, pipelines.traffic_curves' document, core.pacing.Curves): a
campaign's own traffic shape, else the average shape of the placements its
live ads may serve on (kept from serving.ads, so a new campaign gets its
placements' shape for the rest of its day), else the default; and the values
to beat by placement, from which a campaign with no p to start its day from
forecasts its first one (core.pacing.forecast_participation).

Event time: budget.spend's Kafka timestamps (the servers' report instants)
with a 2 s bound on disorder; every server sends a heartbeat to every
partition each second, so event time advances even where nothing is spent.
The campaign, ad and billing topics are side inputs: their watermarks run ahead
of their records and quiet partitions go idle, so they never hold the job's
clock back (billed totals come only every ~10 s). A report that arrives after its
window closed (a resend after a long broker outage) is not dropped: it takes
the Python path and is added on arrival (counting a resend whose original did
arrive twice, the safe direction: spend over-counted pauses early, never
overspends).

State: one PacerState Avro record (schemas/pacer_state.avsc) per campaign, in
its shard's map, checkpointed with the Kafka offsets, so a restart from a
checkpoint neither loses nor double-counts spend. The shard count is fixed for
the life of that state: a restore with another count fails (ShardCountChanged).

Deploy: adserve jobs deploy budget_pacing"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Sequence

from core import budget
from core.pacing import Curves
from jobs.flink_io import (DeadLetterDecoder, KafkaJobSettings, add_common_arguments, add_shards_argument,
                           by_campaign_shard, bytes_row_type, check_shards, create_environment, kafka_sink_table,
                           kafka_source_table, parse, settings_from_args)

JOB_NAME = "budget_pacing"
LOG = logging.getLogger(f"adserve.jobs.{JOB_NAME}")
REDIS_FLUSH_POINTS = 256
REDIS_FLUSH_S = 0.5
END_OF_INPUT = 2**63 - 1 - 86_400_000  # watermarks this high mean a bounded input has ended
SERVER_WINDOW_MS = 1000  # metered reports reach the pacer per server once a second of event time
SHARDS = 16  # the pacer's keys: campaigns by campaign id modulo this (fixed for the life of the job's state)

ROW_FIELDS = ["kind", "campaign_id", "server_id", "lease_id", "spend", "served", "eligible", "price", "servers",
              "wants", "topic", "part", "off", "k", "v"]


def _row_type():
    from pyflink.common import Types

    return Types.ROW_NAMED(ROW_FIELDS, [
        Types.STRING(), Types.LONG(), Types.STRING(), Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG(),
        Types.LONG(), Types.LONG(), Types.BOOLEAN(), Types.STRING(), Types.INT(), Types.LONG(),
        Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.PRIMITIVE_ARRAY(Types.BYTE())])


def load_curves(path: str) -> Curves:
    """The curve pipeline's document (pipelines/traffic_curves); no curves (flat, no forecast) without one."""
    if not path or not Path(path).exists():
        return Curves()
    return Curves.from_document(json.loads(Path(path).read_text()))


def _reduce_spend(t_env, header_hex: str, window_s: int, headers: dict[str, str]) -> None:
    """The JVM part: budget.spend decoded, deduplicated and summed by the project's operator
    io.adserve.flink.SpendWindows (jobs/jvm), chained to the Kafka source; campaign, ad and billing records get
    their campaign id (`headers`: their record types' single-object headers, hex). View `reduced`."""
    from pyflink.datastream import DataStream
    from pyflink.table import Schema
    from pyflink.util.java_utils import invoke_method

    spend = t_env.to_data_stream(t_env.from_path("spend_in"))
    windows = invoke_method(None, "io.adserve.flink.SpendWindows", "apply",
                            [spend._j_data_stream, f"{header_hex},{window_s * 1000},{SERVER_WINDOW_MS}"],
                            ["org.apache.flink.streaming.api.datastream.DataStream", "java.lang.String"])
    t_env.create_temporary_view("spend_reduced", t_env.from_data_stream(
        DataStream(windows), Schema.new_builder().column_by_metadata("rt", "TIMESTAMP_LTZ(3)", "rowtime")
        .watermark("rt", "SOURCE_WATERMARK()").build()))
    nulls = ", ".join(["CAST(NULL AS BIGINT)"] * 5)
    t_env.execute_sql(f"""
        CREATE TEMPORARY VIEW reduced AS
        SELECT kind, campaign_id, server_id, lease_id, spend, served, eligible, price, servers, wants, `topic`,
               part, off, k, v, rt
        FROM spend_reduced
        UNION ALL
        SELECT 'campaign', campaign_of(v, X'{headers["ServingCampaign"]}'), CAST(NULL AS STRING),
               CAST(NULL AS STRING), {nulls}, CAST(NULL AS BOOLEAN), `topic`, `partition`, `offset`, k, v, ts
        FROM campaigns_in
        UNION ALL
        SELECT 'billed', campaign_of(v, X'{headers["BilledSpend"]}'), CAST(NULL AS STRING), CAST(NULL AS STRING),
               {nulls}, CAST(NULL AS BOOLEAN), `topic`, `partition`, `offset`, k, v, ts
        FROM billed_in
        UNION ALL
        SELECT 'ad', campaign_of(v, X'{headers["ServingAd"]}', 1), CAST(NULL AS STRING), CAST(NULL AS STRING),
               {nulls}, CAST(NULL AS BOOLEAN), `topic`, `partition`, `offset`, k, v, ts
        FROM ads_in""")


def build(env, t_env, settings: KafkaJobSettings, *, spend_topic: str = "budget.spend",
          campaigns_topic: str = "serving.campaigns", ads_topic: str = "serving.ads",
          billed_topic: str = "billing.billed_spend",
          state_topic: str = "budget.state", leases_topic: str = "budget.leases",
          dead_letter_topic: str = "dead.letters", redis_url: str = "", curves: str = "",
          out_of_orderness_ms: int = 2000, idle_timeout_ms: int = 2000,
          heartbeat_ms: int = budget.HEARTBEAT_MS, shards: int = SHARDS) -> None:
    from pyflink.common import Row, Types
    from pyflink.datastream import KeyedProcessFunction, OutputTag, ProcessFunction, RuntimeContext
    from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

    from schemas.codec import AvroCodec, default_registry, schema_fingerprint

    header_hex = ("c301" + schema_fingerprint(default_registry().schema("SpendReport")).hex())
    dead_letters = OutputTag("dead-letters", bytes_row_type())
    leases_out = OutputTag("leases", bytes_row_type())
    record_types = {"spend_raw": "SpendReport", "campaign": "ServingCampaign", "billed": "BilledSpend",
                    "ad": "ServingAd"}

    class Route(ProcessFunction):
        """The rows the JVM could not key (late or undecodable spend reports, campaign and billing records of
        another contract version or unreadable there) are decoded for their campaign id; corrupt ones -> dead
        letters (counted)."""

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
            if row.kind == "spend_raw" and int(record["campaign_id"]) <= 0:
                return  # a late heartbeat
            yield Row(row.kind, int(record["campaign_id"]), *[None] * 8, row.topic, row.part, row.off, row.k, row.v)

    class Pace(KeyedProcessFunction):
        """Per campaign: PacerState in, core.budget called, states / slices / pacing points out.

        Keyed by shard (campaign id modulo `shards`), the states in a map by campaign: PyFlink writes a key's
        changed state back to the JVM once per bundle and waits for it, so one key per campaign cost a round
        trip per campaign and bundle; a shard's changes go in one. One event-time timer per shard steps every
        campaign of the shard each 10 s."""

        def open(self, runtime_context: RuntimeContext):
            self.codec = AvroCodec()
            self.states = runtime_context.get_map_state(MapStateDescriptor(
                "pacer_states", Types.LONG(), Types.PRIMITIVE_ARRAY(Types.BYTE())))
            self.shard_count = runtime_context.get_state(ValueStateDescriptor("shards", Types.INT()))
            # 10 s windows that came since the campaign's last step (core.budget.hold_window), applied at the
            # next step or before any other change: the whole state is then encoded once per step.
            self.held = runtime_context.get_map_state(MapStateDescriptor(
                "held_windows", Types.LONG(), Types.PRIMITIVE_ARRAY(Types.BYTE())))
            # Reports that took the late path, by (campaign, server, sequence), kept an hour: a repeat counts once.
            self.late_seen = runtime_context.get_map_state(MapStateDescriptor("late_reports", Types.STRING(),
                                                                              Types.LONG()))
            metrics = runtime_context.get_metrics_group()
            self.steps, self.grants = metrics.counter("controller_steps"), metrics.counter("slices_granted")
            self.late = metrics.counter("late_reports")
            self.decoder = DeadLetterDecoder(JOB_NAME, self.codec, metrics.counter("corrupt_records"))
            # A campaign's ads as the pacer knows them (core.budget.AdSummary by ad id, JSON), by campaign:
            # written only when an ad changes; the PacerState keeps what they add up to.
            self.ads = runtime_context.get_map_state(MapStateDescriptor(
                "campaign_ads", Types.LONG(), Types.PRIMITIVE_ARRAY(Types.BYTE())))
            self.curves = load_curves(curves)
            self.shape_cache: dict[tuple[int, tuple[str, ...]], list[float] | None] = {}
            self.store = None
            if redis_url:
                from streams.pacing_store import PacingStore

                self.store = PacingStore(redis_url)
            self.points: list[dict[str, Any]] = []
            self.cache: dict[int, budget.PacerState] = {}
            # The newest billed total seen for any campaign (core.budget.step's billing clock). In memory: after
            # a restart it starts at 0 again, which only keeps expired slices counted as spent a little longer.
            self.billing_clock_ms = 0
            self.members: dict[int, set[int]] = {}  # shard -> its campaigns, read from state once per run
            self.flushed_at = time.monotonic()

        def close(self):
            self._flush(force=True)
            if self.store is not None:
                self.store.close()

        def _shape(self, campaign_id: int, placements: list[str]):
            key = (campaign_id, tuple(placements))
            if key not in self.shape_cache:
                self.shape_cache[key] = self.curves.shape(campaign_id, placements)
            return self.shape_cache[key]

        def _market(self, state: budget.PacerState) -> tuple[float, list[int]]:
            """For a new campaign's forecast: its best bid's value where its ads serve, and the values to beat."""
            return (self.curves.value(state.placements, state.bid_type, state.ad_bid_micros),
                    self.curves.values(state.placements))

        def _campaigns(self, shard: int) -> set[int]:
            """The shard's campaigns; the first call of a run reads them from Flink state (after a restart the
            operator starts with nothing in memory) and checks the state's shard count."""
            members = self.members.get(shard)
            if members is None:
                check_shards(JOB_NAME, self.shard_count.value(), shards)
                self.shard_count.update(shards)
                members = self.members[shard] = set(self.states.keys()) | set(self.held.keys())
            return members

        def _load(self, campaign_id: int) -> budget.PacerState:
            """The campaign's state with its held windows applied (the caller saves it)."""
            state = self._load_saved(campaign_id)
            held = self.held.get(campaign_id)
            if held is not None:
                budget.apply_held(state, bytes(held))
                self.held.remove(campaign_id)
            return state

        def _load_saved(self, campaign_id: int) -> budget.PacerState:
            # Decoded states are kept in memory between calls; Flink state stays the truth (written after every
            # change, checkpointed), and a restart rebuilds this operator with an empty cache.
            cached = self.cache.get(campaign_id)
            if cached is not None:
                return cached
            raw = self.states.get(campaign_id)
            if raw is None:
                state = budget.PacerState(campaign_id)
                shape = self._shape(campaign_id, [])
                if shape:
                    state.shape = list(shape)
                return state
            return budget.from_record(self.codec.decode(bytes(raw), "PacerState"))

        def _save(self, state: budget.PacerState) -> None:
            self.states.put(state.campaign_id, self.codec.encode("PacerState", budget.to_record(state)))
            self.cache[state.campaign_id] = state

        def _emit(self, outputs):
            for kind, record in outputs:
                if kind == "state":
                    yield Row(str(record["campaign_id"]).encode(), self.codec.encode("BudgetState", record))
                elif kind == "lease":
                    self.grants.inc()
                    yield leases_out, Row(record["server_id"].encode(), self.codec.encode("BudgetLease", record))
                elif kind == "pacing" and self.store is not None:
                    self.points.append(record)
            self._flush()

        def _flush(self, force: bool = False) -> None:
            if self.store is None or not self.points:
                return
            if force or len(self.points) >= REDIS_FLUSH_POINTS or time.monotonic() - self.flushed_at > REDIS_FLUSH_S:
                try:
                    self.store.write(self.points)
                except Exception:  # noqa: BLE001 - dashboards only; the next flush carries newer points
                    LOG.exception("writing pacing points to Redis failed")
                self.points, self.flushed_at = [], time.monotonic()

        def process_element(self, row, ctx):
            shard, campaign_id = ctx.get_current_key(), row.campaign_id
            members = self._campaigns(shard)
            event_ms = ctx.timestamp()
            watermark = ctx.timer_service().current_watermark()
            now_ms = max(event_ms, watermark) if watermark is not None and watermark > 0 else event_ms
            if row.kind == "window":  # held until the campaign's next step or change
                window = budget.Window(event_ms + 1, row.spend, row.served, row.eligible, row.servers)
                held = self.held.get(campaign_id)
                self.held.put(campaign_id, budget.hold_window(None if held is None else bytes(held), window,
                                                              row.price or 0))
                self._join(campaign_id, members, ctx, now_ms)
                return
            # Whatever can turn a row away comes before the state is loaded: a load applies the held windows,
            # and the state must then be saved.
            record = None
            if row.kind == "spend_raw":
                record = self.codec.decode(row.v, "SpendReport")
                key = f"{campaign_id}|{record['server_id']}|{record['sequence']}"
                if self.late_seen.contains(key):
                    return
                # (late reports are rare: tidy the hour-old ones here, never on the per-step path)
                for old_key in [k for k, t in self.late_seen.items() if t < record["event_time"] - 3_600_000]:
                    self.late_seen.remove(old_key)
                self.late_seen.put(key, record["event_time"])
                self.late.inc()
            elif row.kind in ("campaign", "billed", "ad"):
                # its campaign id read in the JVM; the rest may still be corrupt
                record, dead = self.decoder.decode(row.v, record_types[row.kind], topic=row.topic,
                                                   partition=row.part, offset=row.off, key=row.k)
                if dead is not None:
                    yield dead_letters, dead
                    return
            state = self._load(campaign_id)
            outputs = []
            if row.kind == "server":
                outputs = budget.on_server_spend(state, row.server_id, row.lease_id, row.spend, row.spend,
                                                 bool(row.wants), row.price or 0, event_ms + 1)
            elif row.kind == "spend_raw":
                budget.on_spend(state, budget.Window(now_ms, record["expected_spend_micros"], record["served_ads"],
                                                     record["eligible_requests"], 1), record["max_price_micros"])
            elif row.kind == "campaign":
                outputs = budget.on_campaign(state, record, now_ms, self._shape(campaign_id, state.placements))
            elif row.kind == "ad":
                ads = budget.ads_from_bytes(self.ads.get(campaign_id))
                if budget.apply_ad(ads, int(record["ad_id"]), record):
                    self.ads.put(campaign_id, budget.ads_to_bytes(ads))
                    placements, bid = budget.live_ads(ads)
                    budget.on_ads(state, placements, bid, now_ms, self._shape(campaign_id, placements))
            elif row.kind == "billed":
                budget.on_billed(state, record)
                self.billing_clock_ms = max(self.billing_clock_ms, int(record["event_time"]))
            self._save(state)
            self._join(campaign_id, members, ctx, now_ms)
            yield from self._emit(outputs)

        @staticmethod
        def _join(campaign_id: int, members: set[int], ctx, now_ms: int) -> None:
            """A campaign new to its shard: its first step comes with the shard's next one."""
            if campaign_id not in members:
                if not members:
                    ctx.timer_service().register_event_time_timer(budget.next_step_ms(now_ms))
                members.add(campaign_id)

        def on_timer(self, timestamp: int, ctx):
            for campaign_id in sorted(self._campaigns(ctx.get_current_key())):
                state = self._load(campaign_id)
                outputs = budget.step(state, timestamp, self._shape(campaign_id, state.placements),
                                      heartbeat_ms=heartbeat_ms,
                                      market=self._market(state) if state.forecast_pending else None,
                                      billing_clock_ms=self.billing_clock_ms)
                self.steps.inc()
                self._save(state)
                yield from self._emit(outputs)
            if ctx.timer_service().current_watermark() < END_OF_INPUT:  # a bounded run ends; no more steps
                ctx.timer_service().register_event_time_timer(budget.next_step_ms(timestamp))

    kafka_source_table(t_env, "spend_in", spend_topic, settings, out_of_orderness_ms=out_of_orderness_ms)
    kafka_source_table(t_env, "campaigns_in", campaigns_topic, settings, idle_timeout_ms=idle_timeout_ms,
                       side_input=True)
    kafka_source_table(t_env, "billed_in", billed_topic, settings, idle_timeout_ms=idle_timeout_ms,
                       side_input=True)
    kafka_source_table(t_env, "ads_in", ads_topic, settings, idle_timeout_ms=idle_timeout_ms, side_input=True)
    # States and slices are idempotent for their readers (latest state wins; a lease id counts once), so
    # at-least-once sinks: visible at once instead of at the next checkpoint.
    kafka_sink_table(t_env, "state_out", state_topic, settings, exactly_once=False)
    kafka_sink_table(t_env, "leases_out", leases_topic, settings, exactly_once=False)
    kafka_sink_table(t_env, "dead_letters_out", dead_letter_topic, settings)
    _reduce_spend(t_env, header_hex, budget.STEP_MS // 1000,
                      {name: "c301" + schema_fingerprint(default_registry().schema(name)).hex()
                       for name in ("ServingCampaign", "BilledSpend", "ServingAd")})

    # Keyed by campaign shard in the JVM (io.adserve.flink.ByCampaign). Campaign and billing records are keyed
    # where they stand (their campaign id read in the JVM): a campaign record that went its own way through
    # Python could be overtaken by the spend behind it (a metered campaign's first slice request then met a
    # campaign with no budget yet). Only late reports and records the JVM cannot read pass through Route.
    routed, keyed = by_campaign_shard(t_env.to_data_stream(t_env.from_path("reduced")), _row_type(), shards,
                                      Route(), "decode late and unreadable records")
    paced = keyed.process(Pace(), output_type=bytes_row_type()).name("pace campaigns")
    statements = t_env.create_statement_set()
    statements.add_insert("state_out", t_env.from_data_stream(paced))
    statements.add_insert("leases_out", t_env.from_data_stream(paced.get_side_output(leases_out)))
    statements.add_insert("dead_letters_out", t_env.from_data_stream(
        routed.get_side_output(dead_letters).union(paced.get_side_output(dead_letters))))
    statements.attach_as_datastream()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, JOB_NAME, bundle_time_ms=100)  # the control loop: freshness first
    env_ = os.environ
    parser.add_argument("--spend-topic", default="budget.spend")
    parser.add_argument("--campaigns-topic", default="serving.campaigns")
    parser.add_argument("--ads-topic", default="serving.ads",
                        help="the ads' serving records: where a campaign's ads serve and what they are worth")
    parser.add_argument("--billed-topic", default="billing.billed_spend")
    parser.add_argument("--state-topic", default="budget.state")
    parser.add_argument("--leases-topic", default="budget.leases")
    parser.add_argument("--dead-letter-topic", default="dead.letters")
    parser.add_argument("--redis-url", default=env_.get("ADSERVE_PACING_REDIS_URL", _default_redis_url()),
                        help="where pacing:{campaign} goes (default: the local platform's Redis; '' for none)")
    parser.add_argument("--curves", default=env_.get("ADSERVE_CURVES", ""),
                        help="traffic shapes and values to beat from pipelines.traffic_curves (JSON); default: "
                             "flat curves and no forecast until one exists")
    parser.add_argument("--out-of-orderness-ms", type=int, default=2000,
                        help="how far a spend report may trail the newest one and still make its window")
    parser.add_argument("--idle-timeout-ms", type=int, default=2000,
                        help="after this long without records, the campaign and billing topics stop holding "
                             "event time back")
    add_shards_argument(parser, SHARDS, "pacer")
    parser.add_argument("--heartbeat-ms", type=int, default=budget.HEARTBEAT_MS,
                        help="a campaign's state is re-sent at least this often even when unchanged "
                             f"(default {budget.HEARTBEAT_MS}; 10000 sends one every step)")
    args = parse(parser, argv)
    settings = settings_from_args(args, JOB_NAME)
    logging.basicConfig(level=logging.INFO)
    LOG.info("starting %s: %s", JOB_NAME, settings.describe())
    from jobs.jvm import udf_jar

    env, t_env = create_environment(settings, extra_jars=[udf_jar()])
    t_env.create_java_temporary_system_function("campaign_of", "io.adserve.flink.LeadingCampaignId")
    build(env, t_env, settings, spend_topic=args.spend_topic, campaigns_topic=args.campaigns_topic,
          ads_topic=args.ads_topic, billed_topic=args.billed_topic, state_topic=args.state_topic, leases_topic=args.leases_topic,
          dead_letter_topic=args.dead_letter_topic, redis_url=args.redis_url, curves=args.curves,
          out_of_orderness_ms=args.out_of_orderness_ms, idle_timeout_ms=args.idle_timeout_ms,
          heartbeat_ms=args.heartbeat_ms, shards=args.shards)
    env.execute(JOB_NAME)


def _default_redis_url() -> str:
    from infra.platform import PlatformSettings

    return PlatformSettings.from_env().redis_url


if __name__ == "__main__":
    main()
