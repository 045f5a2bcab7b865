"""The pacer's Flink functions: short adapters that turn rows into core.budget_events events, load the campaign's
state, call `apply` and emit. Top-level classes, so PyFlink pickles them by reference. They must never hold a
rule: a decision made here could only be tested on a cluster."""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from pyflink.common import Row
from pyflink.datastream import KeyedProcessFunction, OutputTag, RuntimeContext

from core import budget
from core.budget_events import (AdsChange, Billed, CampaignChange, LateReport, Market, ServerSpend, SpendWindow, Tick,
                                apply, apply_held, change_instant_ms, new_state, window_end_ms)
from core.dead_letters import SourcePosition, dead_letter
from core.errors import InvalidSettings, SchemaMismatch
from core.monitoring import LIMITS, LimitedCampaigns
from core.pacing import Curves
from core.spend import report_key, spend_items
from jobs.budget_pacing import state as pacer_state
from jobs.common.dead_letters import DeadLetterDecoder, dead_letter_row
from jobs.common.kafka_tables import bytes_row_type
from jobs.common.routing import DEAD_LETTERS, DecodeOrDeadLetter
from jobs.common.shards import check_shards
from jobs.side_files import read_side_file
from jobs.tripwire import Tripwire
from schemas import topics

JOB_NAME = "budget_pacing"
LOG = logging.getLogger(f"adserve.jobs.{JOB_NAME}")
ROW_FIELDS = ["kind", "campaign_id", "server_id", "lease_id", "spend", "served", "eligible", "price", "servers",
              "wants", "topic", "part", "off", "k", "v", "released"]  # the JVM's rows (SpendWindows.OUTPUT_FIELDS)
# The record type of each row kind: its topic's (schemas.topics)
RECORD_TYPES = {kind: topics.record_type(topic) for kind, topic in (
    ("spend_raw", topics.BUDGET_SPEND), ("campaign", topics.SERVING_CAMPAIGNS), ("billed", topics.BILLED_SPEND),
    ("ad", topics.SERVING_ADS))}
SPEND_REPORT, BUDGET_STATE_TYPE, BUDGET_LEASE = (topics.record_type(topic) for topic in (
    topics.BUDGET_SPEND, topics.BUDGET_STATE, topics.BUDGET_LEASES))
SHARDS = 16  # the pacer's keys: campaigns by campaign id modulo this (fixed for the life of the job's state)
END_OF_INPUT = 2**63 - 1 - 86_400_000  # watermarks this high mean a bounded input has ended
REDIS_FLUSH_POINTS = 256
REDIS_FLUSH_S = 0.5
LEASES = OutputTag("leases", bytes_row_type())


@dataclass(frozen=True)
class PacerSettings:
    """What the pacer function needs of the job's settings."""

    shards: int
    heartbeat_ms: int = budget.HEARTBEAT_MS
    curves_path: str = ""
    redis_url: str = ""
    tripwire_file: str = ""  # jobs.tripwire (restart tests only)


CURVES_SETTING = "--curves / ADSERVE_CURVES"


def load_curves(uri: str) -> Curves:
    """The curve pipeline's document (pipelines/traffic_curves) from a local path, file:// or object-storage URL
    (jobs.side_files); flat curves and no forecast only when `uri` is empty. A given URI that is missing,
    unreadable or not a curves document raises InvalidSettings naming --curves / ADSERVE_CURVES."""
    document = read_side_file(uri, CURVES_SETTING)
    if document is None:
        return Curves()
    try:
        return Curves.from_document(json.loads(document))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:  # not JSON, or not the pipeline's layout
        raise InvalidSettings(f"{CURVES_SETTING}: {uri} is not a traffic curves document "
                              f"(pipelines/traffic_curves): {type(exc).__name__}: {exc}") from exc


def keyed_row(kind: str, campaign_id: int, row, value: bytes | None = None) -> Row:
    """A row of the JVM's layout for a record decoded here: its kind, campaign and coordinates, and its value
    (`value` when given: a spend report split out of a batch)."""
    values = {"kind": kind, "campaign_id": campaign_id, "topic": row.topic, "part": row.part, "off": row.off,
              "k": row.k, "v": row.v if value is None else value}
    return Row(*[values.get(name) for name in ROW_FIELDS])


def campaign_reports(record: dict) -> list[dict]:
    """A SpendReport's reports of a campaign (core.spend.spend_items), whole or not at all: columns that do not
    fit raise SchemaMismatch."""
    return [r for r in spend_items(record) if int(r["campaign_id"]) > 0]


class Route(DecodeOrDeadLetter):
    """The rows the JVM could not key (late or undecodable spend reports, records of another contract version)
    decoded for their campaign id. A spend record leaves as one spend_raw row per campaign it carries, each a
    single-campaign SpendReport keyed by its own campaign (a batch is split here); corrupt ones -> dead letters
    (counted), late heartbeats dropped."""

    job_name, record_types, coordinates = JOB_NAME, RECORD_TYPES, ("part", "off")

    def emit(self, record: dict, row, ctx):
        if row.kind != "spend_raw":
            yield keyed_row(row.kind, int(record["campaign_id"]), row)
        else:
            yield from self._spend(record, row)

    def _spend(self, record: dict, row):
        try:
            reports = campaign_reports(record)
        except SchemaMismatch as error:
            self.corrupt.inc()
            yield DEAD_LETTERS, dead_letter_row(dead_letter(
                JOB_NAME, SourcePosition(row.topic or "?", row.part, row.off), timestamp_ms=None, key=row.k,
                value=row.v, reason=str(error), error_type=type(error).__name__), self.codec)
            return
        if len(reports) == 1 and record.get("campaigns") is None:  # a single-campaign record: as it came
            yield keyed_row(row.kind, int(record["campaign_id"]), row)
            return
        for report in reports:  # none for a late heartbeat
            yield keyed_row(row.kind, int(report["campaign_id"]), row,
                            self.codec.encode(SPEND_REPORT, dict(report, campaigns=None)))


class Pace(KeyedProcessFunction):
    """Per campaign shard: each campaign's PacerState in a map, events applied by core.budget_events; one
    event-time timer per shard steps every campaign of the shard each 10 s. One key per shard, not per
    campaign: PyFlink writes a key's changed state back to the JVM once per bundle and waits for it."""

    def __init__(self, settings: PacerSettings):
        self.settings = settings

    def open(self, runtime_context: RuntimeContext):
        from schemas.codec import AvroCodec

        self.codec = AvroCodec()
        self.states = runtime_context.get_map_state(pacer_state.pacer_states())
        self.shard_count = runtime_context.get_state(pacer_state.shard_count())
        self.held = runtime_context.get_map_state(pacer_state.held_windows())
        self.ads = runtime_context.get_map_state(pacer_state.campaign_ads())
        self.late_seen = runtime_context.get_map_state(pacer_state.late_reports())
        metrics = runtime_context.get_metrics_group()
        self.steps, self.grants = metrics.counter("controller_steps"), metrics.counter("slices_granted")
        self.late = metrics.counter("late_reports")
        # Monitoring only (never state): counts of campaigns limited for an hour, for the delivery alerts.
        self.limited = LimitedCampaigns()
        for limit in LIMITS:
            metrics.gauge(f"campaigns_limited_by_{limit.lower()}_for_an_hour",
                          lambda limit=limit: self.limited.count(limit))
        self.decoder = DeadLetterDecoder(JOB_NAME, self.codec, metrics.counter("corrupt_records"))
        # In memory: after a restart the billing clock starts at 0 again, which only keeps expired slices
        # counted as spent a little longer.
        self.market = Market(load_curves(self.settings.curves_path), self.settings.heartbeat_ms)
        self.points = PointBuffer(self.settings.redis_url)
        self.cache: dict[int, budget.PacerState] = {}  # decoded states; Flink state stays the truth
        self.members: dict[Any, set[int]] = {}  # shard -> its campaigns, read from state once per run
        self.tripwire = Tripwire(self.settings.tripwire_file)

    def close(self):
        self.points.close()

    def process_element(self, row, ctx):
        self.tripwire.step()
        campaign_id, event_ms = row.campaign_id, ctx.timestamp()
        now_ms = change_instant_ms(event_ms, ctx.timer_service().current_watermark())
        members = self._campaigns(ctx.get_current_key())
        if row.kind == "window":  # held until the campaign's next step or change
            self._hold(campaign_id, SpendWindow(window_end_ms(event_ms), row.spend, row.served, row.eligible,
                                                row.servers, row.price or 0))
        else:
            # Whatever can turn a row away comes before the state is loaded: a load applies the held windows,
            # and the state must then be saved.
            event, dead = self._event(row, event_ms, now_ms)
            if dead is not None:
                yield DEAD_LETTERS, dead
            if event is None:
                return
            state, outputs = apply(self._load(campaign_id), event, self.market)
            self._save(state)
            yield from self._emit(outputs)
        self._join(campaign_id, members, ctx, now_ms)

    def on_timer(self, timestamp: int, ctx):
        for campaign_id in sorted(self._campaigns(ctx.get_current_key())):
            state, outputs = apply(self._load(campaign_id), Tick(timestamp), self.market)
            self.steps.inc()
            self.limited.observe(campaign_id, state.delivery_limit, timestamp)
            self._save(state)
            yield from self._emit(outputs)
        if ctx.timer_service().current_watermark() < END_OF_INPUT:  # a bounded run ends; no more steps
            ctx.timer_service().register_event_time_timer(budget.next_step_ms(timestamp))

    def _event(self, row, event_ms: int, now_ms: int):
        """(the row's event or None when it changes nothing, a dead-letter row or None)."""
        if row.kind == "server":
            return ServerSpend(row.server_id, row.lease_id, row.spend, bool(row.wants), row.price or 0,
                               window_end_ms(event_ms), bool(row.released)), None
        if row.kind == "spend_raw":  # decoded and split by campaign in Route
            return self._late_report(row.campaign_id, self.codec.decode(row.v, SPEND_REPORT), now_ms), None
        # its campaign id read in the JVM; the rest may still be corrupt
        record, dead = self.decoder.decode(row.v, RECORD_TYPES[row.kind], topic=row.topic, partition=row.part,
                                           offset=row.off, key=row.k)
        if dead is not None:
            return None, dead
        if row.kind == "campaign":
            return CampaignChange(record, now_ms), None
        if row.kind == "billed":
            return Billed(record), None
        return self._ads_change(row.campaign_id, record, now_ms), None

    def _late_report(self, campaign_id: int, record: dict, now_ms: int) -> LateReport | None:
        """The record's report of the row's campaign, counted once by core.spend.report_key; the keys seen expire
        by Flink's state TTL."""
        report = next((r for r in campaign_reports(record) if r["campaign_id"] == campaign_id), None)
        if report is None:
            return None
        key = pacer_state.late_report_key(report_key(report))
        if self.late_seen.contains(key):
            return None
        self.late_seen.put(key, True)
        self.late.inc()
        return LateReport(report, now_ms)

    def _ads_change(self, campaign_id: int, record: dict, now_ms: int) -> AdsChange | None:
        ads = pacer_state.ads_from_rows(self.ads.get(campaign_id))
        if not budget.apply_ad(ads, int(record["ad_id"]), record):
            return None
        self.ads.put(campaign_id, pacer_state.ads_to_rows(ads))
        return AdsChange.of_ads(ads, now_ms)

    def _campaigns(self, shard) -> set[int]:
        """The shard's campaigns; the first call of a run reads them from Flink state (after a restart the
        operator starts with nothing in memory) and checks the state's shard count."""
        members = self.members.get(shard)
        if members is None:
            check_shards(JOB_NAME, self.shard_count.value(), self.settings.shards)
            self.shard_count.update(self.settings.shards)
            members = self.members[shard] = set(self.states.keys()) | set(self.held.keys())
        return members

    def _hold(self, campaign_id: int, window: SpendWindow) -> None:
        self.held.put(campaign_id, list(self.held.get(campaign_id) or []) + [pacer_state.window_to_row(window)])

    def _load(self, campaign_id: int) -> budget.PacerState:
        """The campaign's state with its held windows applied (the caller saves it)."""
        state = self.cache.get(campaign_id)
        if state is None:
            raw = self.states.get(campaign_id)
            state = new_state(campaign_id, self.market) if raw is None else \
                budget.from_record(self.codec.decode(bytes(raw), "PacerState"))
        held = self.held.get(campaign_id)
        if held is not None:
            apply_held(state, [pacer_state.window_from_row(r) for r in held])
            self.held.remove(campaign_id)
        return state

    def _save(self, state: budget.PacerState) -> None:
        self.states.put(state.campaign_id, self.codec.encode("PacerState", budget.to_record(state)))
        self.cache[state.campaign_id] = state

    def _emit(self, outputs: list[budget.Output]):
        for kind, record in outputs:
            if kind == "state":
                yield Row(str(record["campaign_id"]).encode(), self.codec.encode(BUDGET_STATE_TYPE, record))
            elif kind == "lease":
                self.grants.inc()
                yield LEASES, Row(record["server_id"].encode(), self.codec.encode(BUDGET_LEASE, record))
            elif kind == "pacing":
                self.points.add(record)
        self.points.flush()

    @staticmethod
    def _join(campaign_id: int, members: set[int], ctx, now_ms: int) -> None:
        """A campaign new to its shard: its first step comes with the shard's next one."""
        if campaign_id not in members:
            if not members:
                ctx.timer_service().register_event_time_timer(budget.next_step_ms(now_ms))
            members.add(campaign_id)


class PointBuffer:
    """Pacing points for the dashboards (Redis `pacing:{campaign}`, streams.pacing_store), written in batches;
    nothing without a Redis URL."""

    def __init__(self, redis_url: str):
        self.store = None
        if redis_url:
            from streams.pacing_store import PacingStore

            self.store = PacingStore(redis_url)
        self.points: list[dict[str, Any]] = []
        self.flushed_at = time.monotonic()

    def add(self, point: dict[str, Any]) -> None:
        if self.store is not None:
            self.points.append(point)

    def flush(self, force: bool = False) -> None:
        if self.store is None or not self.points:
            return
        if force or len(self.points) >= REDIS_FLUSH_POINTS or time.monotonic() - self.flushed_at > REDIS_FLUSH_S:
            try:
                self.store.write(self.points)
            except Exception:  # noqa: BLE001 - dashboards only; the next flush carries newer points
                LOG.exception("writing pacing points to Redis failed")
            self.points, self.flushed_at = [], time.monotonic()

    def close(self) -> None:
        self.flush(force=True)
        if self.store is not None:
            self.store.close()
