"""The Flink functions of `features`. Decode turns records into the windows' inputs (core.feature_inputs);
AdWindow keeps one ad's window and sends it to Publish at every tick (core.ad_window_events); Publish (one
key) stages the windows and estimates every ad at each tick (core.feature_events) and writes the snapshot, the
features.ads rows and the registry entry; UserWindow keeps one consented user's window and writes their
features to Redis (core.user_window_events), and forgets the window at once on a deletion request
(core.privacy). The functions only load state, call the rule, store and emit what it returns."""
from __future__ import annotations

import logging
import time
from pathlib import Path

from pyflink.common import Row
from pyflink.datastream import KeyedProcessFunction, OutputTag, RuntimeContext

from core import ad_stats, ad_window_events, feature_events, feature_inputs, privacy, user_window_events
from core.dead_letters import SourcePosition, dead_letter
from core.feature_windows import WindowRules
from jobs.features import snapshot, state
from jobs.common.dead_letters import dead_letter_row
from jobs.common.kafka_tables import timed_bytes_row_type
from jobs.common.routing import DEAD_LETTERS, DecodeOrDeadLetter
from jobs.tripwire import Tripwire
from schemas import topics
from schemas.codec import AvroCodec

JOB_NAME = "features"
LOG = logging.getLogger("adserve.jobs.features")
CAMPAIGNS = OutputTag("campaigns", state.PUBLISH_INPUT)
USERS = OutputTag("users", state.USER_INPUT)
REGISTRY = OutputTag("registry", timed_bytes_row_type())
TOPIC_OF_KIND = {"served": topics.AD_SERVED, "event": topics.AD_EVENTS, "conversion": topics.AD_CONVERSIONS,
                 "feedback": topics.AD_FEEDBACK, "ad": topics.SERVING_ADS, "campaign": topics.SERVING_CAMPAIGNS,
                 "deletion": topics.PRIVACY_DELETIONS}  # the contract each source's records follow
RECORD_TYPES = {kind: topics.record_type(topic) for kind, topic in TOPIC_OF_KIND.items()}
AD_FEATURES, REGISTRY_ENTRY = (topics.record_type(topic) for topic in (topics.FEATURES_ADS, topics.MODEL_REGISTRY))


class Decode(DecodeOrDeadLetter):
    """Raw Kafka rows (with their source's kind) -> per-ad inputs; campaigns and consented users' inputs to
    side outputs; corrupt records -> dead letters (counted, `corrupt_records`)."""

    job_name = JOB_NAME
    record_types = RECORD_TYPES

    def __init__(self, user_features: bool = True):
        super().__init__()
        self.user_features = user_features

    def emit(self, record: dict, row, ctx):
        where = (row.topic, row.partition, row.offset)
        if row.kind == "deletion":
            if self.user_features:
                request = privacy.request_of(record)
                yield USERS, state.user_deletion_row(request.user_id, request.requested_at_ms)
        elif row.kind == "campaign":
            yield CAMPAIGNS, state.campaign_row(int(record["campaign_id"]), int(record["advertiser_id"]),
                                                int(record["event_time"]))
        elif row.kind == "ad":
            yield state.ad_input_row(feature_inputs.attributes_input(record), *where)
        elif row.kind == "served":
            for found in feature_inputs.served_inputs(record):
                yield state.ad_input_row(found, *where)
            for user in feature_inputs.user_served_inputs(record) if self.user_features else ():
                yield USERS, state.user_input_row(user)
        else:
            yield state.ad_input_row(feature_inputs.beacon_input(self.record_type(row), record), *where)
            user = feature_inputs.user_beacon_input(record) if self.user_features and row.kind == "event" else None
            if user is not None:
                yield USERS, state.user_input_row(user)


class AdWindow(KeyedProcessFunction):
    """Per ad: served slots, beacons and attributes into its window; at each tick its window totals (and its
    attributes when they changed) to the publisher (core.ad_window_events.apply). Late beacons are counted
    (`late_records`); expired ones go to dead letters (`expired_records`)."""

    def __init__(self, rules: WindowRules = WindowRules(), tripwire_file: str = ""):
        self.rules = rules
        self.tripwire = Tripwire(tripwire_file)  # jobs.tripwire (restart tests only)

    def open(self, runtime_context: RuntimeContext):
        self.codec = AvroCodec()
        states = {name: (runtime_context.get_map_state(d) if name in ("buckets", "slots", "waiting")
                         else runtime_context.get_state(d)) for name, d in state.ad_descriptors().items()}
        self.attributes, self.status = states["attributes"], states["status"]
        self.window = state.ad_window(states, self.rules)
        metrics = runtime_context.get_metrics_group()
        self.late, self.expired = metrics.counter("late_records"), metrics.counter("expired_records")

    def process_element(self, row, ctx):
        self.tripwire.step()
        event = ad_window_events.InputIn(state.ad_input_from_row(row), ctx.timer_service().current_watermark())
        yield from self._apply(event, ctx, row)

    def on_timer(self, timestamp: int, ctx):
        event = ad_window_events.Tick(ctx.get_current_key(), timestamp, ctx.timer_service().current_watermark())
        yield from self._apply(event, ctx, None)

    def _apply(self, event: ad_window_events.Event, ctx, row):
        held_attributes = state.attributes_from_row(self.attributes.value())
        held_status = state.ad_status_from_row(self.status.value())
        ad, outputs = ad_window_events.apply(ad_window_events.AdState(self.window, held_attributes, held_status),
                                             event, self.rules)
        if ad.attributes is not held_attributes:
            self.attributes.update(state.attributes_to_row(ad.attributes))
        if ad.status != held_status:
            self.status.update(state.ad_status_to_row(ad.status))
        for output in outputs:
            if isinstance(output, feature_events.TimerAt):
                ctx.timer_service().register_event_time_timer(output.at_ms)
            elif isinstance(output, feature_events.TickWindow):
                yield state.tick_window_to_row(output)
            elif isinstance(output, ad_window_events.Late):
                self.late.inc()
            else:
                self.expired.inc()
                yield DEAD_LETTERS, dead_letter_row(dead_letter(
                    JOB_NAME, SourcePosition(row.topic, row.partition, row.offset), timestamp_ms=row.event_ms,
                    key=None, value=None, error_type="LateEvent", reason=output.reason), self.codec)


class Publish(KeyedProcessFunction):
    """One key for the whole platform: every ad's latest window (staged per tick, so a tick sees exactly the
    windows of that tick); at each tick the estimates of every ad (core.feature_events.apply), then the
    snapshot file, the features.ads rows of the ads whose row changed, and the registry entry naming the file
    (`snapshots_published`, gauge `ads_in_last_snapshot`). A tick without a listed ad publishes nothing."""

    def __init__(self, rules: ad_stats.EstimateRules, window_rules: WindowRules, snapshot_dir: str,
                 keep_snapshots: int):
        self.rules = feature_events.PublishRules(rules, window_rules)
        self.folder, self.keep = Path(snapshot_dir), keep_snapshots

    def open(self, runtime_context: RuntimeContext):
        self.codec = AvroCodec()
        descriptors = state.publisher_descriptors()
        self.maps = {name: runtime_context.get_map_state(descriptors[name])
                     for name in ("ads", "staged", "advertisers", "published_rows")}
        self.version = runtime_context.get_state(descriptors["version"])
        metrics = runtime_context.get_metrics_group()
        self.published = metrics.counter("snapshots_published")
        self.ads_in_last_snapshot = 0
        metrics.gauge("ads_in_last_snapshot", lambda: self.ads_in_last_snapshot)

    def process_element(self, row, ctx):
        if row.kind == state.CAMPAIGN:
            event = feature_events.CampaignSeen(row.campaign_id, row.advertiser_id)
        else:
            event = feature_events.WindowIn(state.tick_window_from_row(row), ctx.timer_service().current_watermark())
        yield from self._apply(event, ctx)

    def on_timer(self, timestamp: int, ctx):
        yield from self._apply(feature_events.Tick(timestamp), ctx)

    def _apply(self, event: feature_events.Event, ctx):
        _, outputs = feature_events.apply(state.publisher_state(self.maps, self.version.value()), event, self.rules)
        for output in outputs:
            if isinstance(output, feature_events.TimerAt):
                ctx.timer_service().register_event_time_timer(output.at_ms)
            else:
                yield from self._publish(output)

    def _publish(self, published: feature_events.Published):
        """Write the snapshot, then emit the changed rows and the registry entry naming the snapshot."""
        version = published.version_ms
        snapshot.write_snapshot(version, published.records, self.folder, self.keep)
        self.version.update(version)
        self.published.inc()
        self.ads_in_last_snapshot = len(published.records)
        for ad_id, record in published.changed:
            yield Row(str(ad_id).encode(), self.codec.encode(AD_FEATURES, record), version)
        entry = snapshot.registry_entry(version, self.folder, len(published.records), self.rules.windows.window_ms)
        yield REGISTRY, Row(snapshot.REGISTRY_KEY, self.codec.encode(REGISTRY_ENTRY, entry), version)


class UserWindow(KeyedProcessFunction):
    """Per consented user: impressions and clicks by the ad's category over the window; at each tick the
    user's features (core.user_activity) into Redis `user:{id}` (streams.user_feature_store), batched
    (`user_feature_writes`; failed batches `user_feature_write_failures`, rewritten whole at the user's next
    tick). Beacons whose impression was not served with consent are never counted. A deletion request clears
    the user's window and any write still pending for them (`user_deletions`)."""

    FLUSH_USERS, FLUSH_S = 500, 1.0

    def __init__(self, rules: WindowRules, redis_url: str, ttl_ms: int):
        self.rules, self.redis_url, self.ttl_ms = rules, redis_url, ttl_ms

    def open(self, runtime_context: RuntimeContext):
        states = {name: (runtime_context.get_map_state(d) if name != "wrote" else runtime_context.get_state(d))
                  for name, d in state.user_descriptors().items()}
        self.wrote, self.states = states["wrote"], states
        self.window = state.user_window(states, self.rules)
        metrics = runtime_context.get_metrics_group()
        self.writes = metrics.counter("user_feature_writes")
        self.failures = metrics.counter("user_feature_write_failures")
        self.deletions = metrics.counter("user_deletions")
        self.store = self._store()
        self.pending: dict[str, dict[str, float]] = {}
        self.flushed_at = time.monotonic()

    def _store(self):
        from streams.user_feature_store import UserFeatureStore

        return UserFeatureStore(self.redis_url, self.ttl_ms)

    def process_element(self, row, ctx):
        if row.kind == state.DELETION:
            event = user_window_events.Deletion()
        else:
            event = user_window_events.InputIn(state.user_input_from_row(row), ctx.timer_service().current_watermark())
        self._apply(event, ctx)
        self._flush()
        return []

    def on_timer(self, timestamp: int, ctx):
        self._apply(user_window_events.Tick(timestamp, ctx.timer_service().current_watermark()), ctx)
        self._flush()
        return []

    def _apply(self, event: user_window_events.Event, ctx) -> None:
        held_wrote = bool(self.wrote.value())
        user, outputs = user_window_events.apply(user_window_events.UserState(self.window, held_wrote), event,
                                                 self.rules)
        for output in outputs:
            if isinstance(output, feature_events.TimerAt):
                ctx.timer_service().register_event_time_timer(output.at_ms)
            elif isinstance(output, user_window_events.Write):
                self.pending[ctx.get_current_key()] = output.features
                self.wrote.update(user.wrote)
            else:
                self._forget(ctx.get_current_key())

    def _forget(self, user_id: str) -> None:
        """Drop everything held of the user: the window's state and an unwritten write (its Redis keys go with
        the request's applier, `adserve users apply-deletions`)."""
        for held in self.states.values():
            held.clear()
        self.pending.pop(user_id, None)
        self.deletions.inc()

    def _flush(self, force: bool = False) -> None:
        if not self.pending:
            return
        if force or len(self.pending) >= self.FLUSH_USERS or time.monotonic() - self.flushed_at > self.FLUSH_S:
            try:
                self.writes.inc(self.store.write(self.pending))
            except Exception:  # noqa: BLE001 - Redis unreachable: the users' next ticks write absolute values again
                self.failures.inc()
                LOG.exception("writing %d users' features to Redis failed", len(self.pending))
            self.pending, self.flushed_at = {}, time.monotonic()

    def close(self):
        self._flush(force=True)
        self.store.close()
