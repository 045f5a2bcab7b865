"""The Python functions of `click_aggregator`: Route decodes the rare rows whose campaign is inside their
bytes; Bill keeps each campaign's core.clicks.CampaignBill and feeds it the reduced rows through
core.clicks.bill_step. The methods only turn rows into core.clicks inputs, load and save state, and emit."""
from __future__ import annotations

import json

from pyflink.common import Row, Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext

from core import clicks
from jobs.click_aggregator import state as bill_state
from jobs.click_aggregator.views import EVENT_FIELDS, REDUCED_FIELDS
from jobs.common.dead_letters import DeadLetterDecoder
from jobs.common.routing import DEAD_LETTERS, DecodeOrDeadLetter
from jobs.common.shards import check_shards
from jobs.tripwire import Tripwire
from schemas import topics
from schemas.codec import AvroCodec

JOB_NAME = "click_aggregator"
SHARDS = 16  # the bill's keys: campaigns by campaign id modulo this (fixed for the life of the job's state)
ROW_FIELDS = REDUCED_FIELDS  # the keyed rows' fields: ByCampaign shards them by their campaign_id
# the rows the JVM cannot key, by kind: the record type of their topic (schemas.topics)
RECORD_TYPES = {"raw": topics.record_type(topics.AD_EVENTS), "campaign": topics.record_type(topics.SERVING_CAMPAIGNS)}
BILLED_SPEND_TYPE = topics.record_type(topics.BILLED_SPEND)  # the bills' output


def reduced_row_type():
    """A row of the `reduced` view (views.REDUCED_FIELDS)."""
    long = Types.LONG()
    return Types.ROW_NAMED(REDUCED_FIELDS, [
        Types.STRING(), long, long, long, long, long, long, long, Types.STRING(), Types.INT(), long,
        Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.STRING()])


class Route(DecodeOrDeadLetter):
    """Rows whose campaign is inside their bytes (events and campaign records of another contract version, or
    ones the JVM could not read): decoded for their campaign id; corrupt ones -> dead letters (counted)."""

    job_name, record_types, coordinates = JOB_NAME, RECORD_TYPES, ("part", "off")

    def emit(self, record: dict, row, ctx):
        if row.kind == "raw":  # another contract version: billed on the late path
            event = {name: record.get(name) for name in EVENT_FIELDS}
            yield Row("late", int(record["campaign_id"]), *[None] * 11, json.dumps(event))
            return
        yield Row(row.kind, int(record["campaign_id"]), *[None] * 6, row.topic, row.part, row.off, row.k, row.v, None)


class Bill(KeyedProcessFunction):
    """Per shard of campaigns (campaign id modulo `shards`): each campaign's bill in a map, fed its rows in
    event-time order; the cumulative BilledSpend totals out. A shard's changes go back to the JVM in one round
    trip per bundle, where a key per campaign would cost one per campaign."""

    def __init__(self, shards: int = SHARDS, tripwire_file: str = ""):
        self.shards = shards
        self.tripwire = Tripwire(tripwire_file)  # jobs.tripwire (restart tests only)

    def open(self, runtime_context: RuntimeContext):
        self.codec = AvroCodec()
        self.bills = runtime_context.get_map_state(bill_state.bills())
        self.shard_count = runtime_context.get_state(bill_state.shard_count())
        self.seen = runtime_context.get_map_state(bill_state.late_events())
        metrics = runtime_context.get_metrics_group()
        self.windows, self.late = metrics.counter("billing_windows"), metrics.counter("late_events")
        # what each input added to the day's billed and absorbed money (the absorbed-overspend alert's ratio)
        self.billed_micros, self.absorbed_micros = metrics.counter("billed_micros"), metrics.counter("absorbed_micros")
        self.decoder = DeadLetterDecoder(JOB_NAME, self.codec, metrics.counter("corrupt_records"))
        self.checked: set[int] = set()
        # Decoded bills stay in memory between calls; Flink state stays the truth (written after every change,
        # checkpointed), and a restart rebuilds this operator with an empty cache.
        self.cache: dict[int, clicks.CampaignBill] = {}

    def process_element(self, row, ctx):
        self.tripwire.step()
        self._check_shard(ctx.get_current_key())
        event, dead = self._input(row, ctx.timestamp())
        if dead is not None:
            yield DEAD_LETTERS, dead
        if event is None:
            return
        bill = self._load(row.campaign_id)
        before = (bill.budget_day, bill.bill.billed_micros, bill.bill.absorbed_micros)
        bill, record = clicks.bill_step(bill, event)
        billed, absorbed = clicks.added_money(before, bill)
        self.billed_micros.inc(billed)
        self.absorbed_micros.inc(absorbed)
        self.bills.put(bill.campaign_id, bill_state.bill_to_row(bill))
        if record is not None:
            yield Row(str(bill.campaign_id).encode(), self.codec.encode(BILLED_SPEND_TYPE, record),
                      int(record["event_time"]))

    def _input(self, row, event_ms: int):
        """(the row as a core.clicks bill input, None), (None, a dead-letter row), or (None, None): a repeat."""
        if row.kind == "window":
            self.windows.inc()
            return clicks.WindowPart(clicks.WindowTotals(event_ms + 1, row.billable, row.impressions, row.clicks,
                                                         row.invalid, row.invalid_events, row.joined)), None
        if row.kind == "joined":
            return clicks.JoinedClicks(event_ms, row.clicks), None
        if row.kind == "campaign":  # its campaign id read in the JVM; the rest may still be corrupt
            record, dead = self.decoder.decode(row.v, RECORD_TYPES["campaign"], topic=row.topic, partition=row.part,
                                               offset=row.off, key=row.k)
            return (None, dead) if dead is not None else (clicks.CampaignVersion(record), None)
        return self._first_late(clicks.late_event(json.loads(row.event))), None

    def _first_late(self, late: clicks.LateEvent) -> clicks.LateEvent | None:
        """The late event if the bill has not seen it, else None; the keys seen expire by Flink's state TTL."""
        key = bill_state.late_event_key(late.event)
        if self.seen.contains(key):
            return None
        self.seen.put(key, True)
        self.late.inc()
        return late

    def _load(self, campaign_id: int) -> clicks.CampaignBill:
        bill = self.cache.get(campaign_id)
        if bill is None:
            raw = self.bills.get(campaign_id)
            bill = clicks.CampaignBill(campaign_id) if raw is None else bill_state.bill_from_row(raw)
            self.cache[campaign_id] = bill
        return bill

    def _check_shard(self, shard: int) -> None:
        """Once per shard and run: state written with another shard count fails the job, loudly."""
        if shard not in self.checked:
            check_shards(JOB_NAME, self.shard_count.value(), self.shards)
            self.shard_count.update(self.shards)
            self.checked.add(shard)
