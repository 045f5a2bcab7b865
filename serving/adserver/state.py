"""What an ad server holds: the index and campaign table built from the compacted topics, the reserve rules,
the budget word per campaign and the slices it holds; and the thread that follows those topics.

`ServingState` is plain data plus apply functions (no I/O). `TopicFollower` reads serving.ads, serving.campaigns,
serving.reserves and budget.state from the beginning (they are compacted: the latest record per key is the state) and
budget.leases from the instant the follower began (a slice is the incarnation's that asked for it: a worker restarted
under the same server id never takes up a slice its predecessor may have spent), decodes the records and hands them,
in batches, to a callback that the server runs on its event loop, so the index never changes under a request. A record
that cannot be decoded goes to dead.letters and is counted.

Readiness: the server is ready once every partition of the four state topics was read to its end once, and stays ready
while the follower is within 5 s of their heads (`lag_s`) or, when behind, while the latest change it applied was
committed less than a minute before (`commit_lag_s`, measured per record from the commit time the index builder
carries)."""
from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
from confluent_kafka import KafkaError, TopicPartition

from core.dead_letters import from_corrupt
from core.errors import CapacityExceeded, CorruptRecord, TopicMissing
from core.leases import LeaseBook
from core.reserves import ReserveBook, reserve_rule, rule_key
from core.targeting import Targeting
from schemas import topics
from schemas.codec import AvroCodec
from serving.decision.campaigns import CampaignRecord, CampaignTable
from serving.decision.index import (BID_TYPE_CODE, MAX_TERMS_PER_ROW, AdColumns, AdRecord, TargetingColumns,
                                    TargetingIndex)
from streams import kafka

LOG = logging.getLogger("adserve.adserver.state")
STATE_TOPICS = (topics.SERVING_ADS, topics.SERVING_CAMPAIGNS, topics.SERVING_RESERVES, topics.BUDGET_STATE)
# compiled from the campaign store
CHANGE_TOPICS = (topics.SERVING_ADS, topics.SERVING_CAMPAIGNS, topics.SERVING_RESERVES)
LEASE_TOPIC = topics.BUDGET_LEASES
BUDGET_SILENCE_MS = 60_000
READY_LAG_S = 5.0


def ad_record(r: dict[str, Any]) -> AdRecord:
    """A serving.ads record as the index holds it; one written before the record had an exclusion category
    (decoded with its own schema) has none."""
    return AdRecord(ad_id=int(r["ad_id"]), campaign_id=int(r["campaign_id"]), version=int(r["version"]),
                    bid_type=r["bid_type"], bid_micros=int(r["bid_micros"]),
                    quality_micros=int(round(r["quality_prior"])), static_score=float(r["static_score"]),
                    targeting=Targeting.from_clauses(r["targeting"]), creative_ref=r["creative_ref"],
                    landing_url=r["landing_url"], exclusion_category=int(r.get("exclusion_category", 0)),
                    removed=bool(r["removed"]))


def campaign_record(r: dict[str, Any]) -> CampaignRecord:
    return CampaignRecord(campaign_id=int(r["campaign_id"]), advertiser_id=int(r["advertiser_id"]),
                          version=int(r["version"]), status=r["status"], timezone=r["timezone"],
                          flight_start=r["flight_start"], flight_end=r["flight_end"], dayparts=r["dayparts"],
                          cap_per_day=r["cap_per_day"], cap_per_week=r["cap_per_week"],
                          daily_budget_micros=int(r["daily_budget_micros"]))


@dataclass
class ServingState:
    server_id: str
    index: TargetingIndex = field(default_factory=TargetingIndex)
    campaigns: CampaignTable = field(default_factory=CampaignTable)
    reserves: ReserveBook = field(default_factory=ReserveBook)  # the engine reads it on every request
    budget: dict[int, tuple[str, float]] = field(default_factory=dict)  # campaign -> (state, p)
    bid_multipliers: dict[int, float] = field(default_factory=dict)  # CPA campaign -> the budget job's multiplier
    snapshot_version: int = 0  # highest ad or campaign version applied
    features_version: int = 0  # the ad-feature snapshot whose learned columns the index carries (0: none yet)
    applied: int = 0
    commit_lag_s: float = 0.0  # commit -> applied lag of the latest ad, campaign or reserve record applied
    budget_heard_ms: int = 0  # event time of the newest budget.state record (0: the job never spoke)
    budget_silent: bool = False  # nothing from the budget job for BUDGET_SILENCE_MS: open counts as metered
    refused_ads: int = 0  # ads the index cannot hold (more targeting terms than a row addresses): not served

    def __post_init__(self) -> None:
        self.leases = LeaseBook(self.server_id)
        # (record type, id, version, commit -> applied lag in s) of recent changes (bench freshness)
        self.recent_lags: collections.deque[tuple[str, int | str, int, float]] = collections.deque(maxlen=100_000)

    def serve_as(self, server_id: str) -> None:
        """The state of the server `server_id`: a tier's worker takes over its parent's loaded state under its
        own id, with no slice held yet (a lease names the one server it was granted to)."""
        if server_id != self.server_id:
            self.server_id = server_id
            self.leases = LeaseBook(server_id)

    def apply(self, topic: str, record: dict[str, Any], now_ms: int) -> None:
        self.applied += 1
        if topic in CHANGE_TOPICS:
            self.commit_lag_s = max(0.0, (now_ms - int(record["event_time"])) / 1000)
            key = int(record["ad_id"]) if topic == topics.SERVING_ADS else int(record["campaign_id"]) \
                if topic == topics.SERVING_CAMPAIGNS else rule_key(record["placement"], record["country"])
            self.recent_lags.append((topic, key, int(record["version"]), self.commit_lag_s))
        if topic == topics.SERVING_RESERVES:
            self.reserves.upsert(reserve_rule(record))
        elif topic == topics.SERVING_ADS:
            ad = ad_record(record)
            try:
                self.index.upsert(ad)
            except CapacityExceeded as exc:  # one ad the index cannot hold: skipped, the rest of the batch applies
                self.refused_ads += 1
                LOG.error("serving.ads: ad %s not indexed: %s", ad.ad_id, exc)
            self.snapshot_version = max(self.snapshot_version, ad.version)
        elif topic == topics.SERVING_CAMPAIGNS:
            campaign = campaign_record(record)
            if self.campaigns.upsert(campaign):
                self.snapshot_version = max(self.snapshot_version, campaign.version)
                self._apply_budget(campaign.campaign_id, now_ms)
        elif topic == topics.BUDGET_STATE:
            self.budget[int(record["campaign_id"])] = (record["state"], float(record["participation_probability"]))
            self.bid_multipliers[int(record["campaign_id"])] = float(record.get("bid_multiplier") or 1.0)
            if int(record["event_time"]) >= now_ms - BUDGET_SILENCE_MS:  # a live word, not history replayed
                first_word = self.budget_heard_ms == 0
                self.budget_heard_ms = max(self.budget_heard_ms, int(record["event_time"]))
                if first_word:  # campaigns with no state yet are metered from now on
                    for campaign_id in self.campaigns.campaign_ids():
                        if int(campaign_id) not in self.budget:
                            self._apply_budget(int(campaign_id), now_ms)
            self._apply_budget(int(record["campaign_id"]), now_ms)
            if self.budget_silent and now_ms - self.budget_heard_ms <= BUDGET_SILENCE_MS:
                self.check_budget_silence(now_ms)
        elif topic == LEASE_TOPIC:
            if self.leases.grant(record):
                self._apply_budget(int(record["campaign_id"]), now_ms)

    def load_snapshot(self, records: Iterable[tuple[str, dict[str, Any]]], now_ms: int) -> int:
        """Bulk-build the index from a snapshot's records (campaigns first, then ads): one columnar build in
        static-score order instead of one upsert per ad. Returns the records read."""
        import array
        import gc

        ads, read = [], 0
        # Millions of small records stay alive until the build: without this the cyclic collector walks
        # them again and again (it tripled the load time at 200 k ads).
        collecting = gc.isenabled()
        gc.disable()
        try:
            for topic, record in records:
                read += 1
                if topic != topics.SERVING_ADS:
                    self.apply(topic, record, now_ms)
                elif record["removed"]:
                    continue
                elif sum(len(clause["values"]) for clause in record["targeting"]) > MAX_TERMS_PER_ROW:
                    self.refused_ads += 1  # the index cannot hold it; the snapshot's other ads still load
                    LOG.error("snapshot: ad %s not indexed: more than %s targeting terms", record["ad_id"],
                              MAX_TERMS_PER_ROW)
                else:
                    ads.append(record)
            self._build_from(ads)
        finally:
            if collecting:
                gc.enable()
        return read

    def _build_from(self, ads: list[dict[str, Any]]) -> None:
        import array

        ads.sort(key=lambda r: (-r["static_score"], r["ad_id"]))
        terms: dict[tuple[str, str, bool], int] = {}
        flat = array.array("I")
        per_ad = array.array("H")
        lookup, append = terms.get, flat.append
        for r in ads:
            count = 0
            for clause in r["targeting"]:
                attribute, excluded = clause["attribute"], bool(clause["excluded"])
                for value in clause["values"]:
                    key = (attribute, value, excluded)
                    term = lookup(key)
                    if term is None:
                        term = terms[key] = len(terms)
                    append(term)
                count += len(clause["values"])
            per_ad.append(count)
        counts = np.frombuffer(per_ad, dtype=np.uint16) if len(per_ad) else np.zeros(0, np.uint16)
        n, dim = len(ads), self.index.embedding_dim

        def column(name, dtype):
            return np.fromiter((r[name] for r in ads), dtype=dtype, count=n)
        index = TargetingIndex.from_columns(AdColumns(
            ad_id=column("ad_id", np.int64), campaign_id=column("campaign_id", np.int64),
            version=column("version", np.int64),
            bid_type=np.fromiter((BID_TYPE_CODE[r["bid_type"]] for r in ads), dtype=np.int8, count=n),
            bid_micros=column("bid_micros", np.int64),
            quality_micros=np.rint(column("quality_prior", np.float64)).astype(np.int32),
            static_score=column("static_score", np.float32), ctr_prior=np.full(n, 0.01, dtype=np.float32),
            embedding=np.zeros((n, dim), dtype=np.float16),
            exclusion_category=np.fromiter((r.get("exclusion_category", 0) for r in ads), dtype=np.int32, count=n)),
            TargetingColumns(term_keys=list(terms), term_counts=counts,
                             terms_flat=np.frombuffer(flat, dtype=np.uint32) if n else np.zeros(0, np.uint32)))
        index.strings.bulk([f"{r['creative_ref']}\n{r['landing_url']}" for r in ads])
        self.index = index
        if ads:
            self.snapshot_version = max(self.snapshot_version, max(r["version"] for r in ads))

    def budget_state(self, campaign_id: int) -> tuple[str, float]:
        """The (state, p) this server serves a campaign under. A campaign the budget job has not spoken of yet
        is metered while the job is live (it spends only from slices until its first state arrives, so a new
        or raised-from-nothing campaign cannot outrun the margin it has not been given), and open at p = 1 on
        a platform whose budget job never spoke. Open counts as metered while the job is silent."""
        known = self.budget.get(campaign_id)
        if known is None:
            return ("METERED", 1.0) if self.budget_heard_ms > 0 else ("OPEN", 1.0)
        state, p = known
        if state == "OPEN" and self.budget_silent:
            return "METERED", p  # the open margin was sized for seconds of blindness, not minutes
        return state, p

    def _apply_budget(self, campaign_id: int, now_ms: int) -> None:
        state, p = self.budget_state(campaign_id)
        self.campaigns.set_budget(campaign_id, state, p, slice_held=self.leases.held(campaign_id, now_ms),
                                  bid_multiplier=self.bid_multipliers.get(campaign_id, 1.0))

    def check_budget_silence(self, now_ms: int) -> bool:
        """Once a second: a server that has heard nothing from the budget job for 60 s treats open campaigns
        as metered, so it spends on them only from slices; the next state record lifts that. The rule is armed
        by the first live state (event time within 60 s of this server's clock when it arrives): states
        replayed from the compacted topic at boot do not arm it, so a platform without a budget job serves,
        and a server that boots during a budget-job outage serves the last known states until the job speaks
        (a known gap). Returns whether the server is in that mode."""
        silent = self.budget_heard_ms > 0 and now_ms - self.budget_heard_ms > BUDGET_SILENCE_MS
        if silent != self.budget_silent:
            self.budget_silent = silent
            LOG.warning("budget job silent for %.0f s: open campaigns now spend only from slices",
                        (now_ms - self.budget_heard_ms) / 1000) if silent else \
                LOG.info("budget job heard again: open campaigns spend freely")
            for campaign_id in self.campaigns.campaign_ids():
                self._apply_budget(int(campaign_id), now_ms)
        return silent


    def charge(self, campaign_id: int, expected_cost_micros: int, now_ms: int) -> None:
        """Spend a metered campaign's slice; when it runs out the campaign stops serving here."""
        if self.budget_state(campaign_id)[0] != "METERED":
            return
        self.leases.charge(campaign_id, expected_cost_micros, now_ms)
        if not self.leases.held(campaign_id, now_ms):
            self._apply_budget(campaign_id, now_ms)

    def expire_leases(self, now_ms: int) -> None:
        for campaign_id in self.leases.expire(now_ms):
            self._apply_budget(campaign_id, now_ms)

    def lease_ids(self, now_ms: int) -> dict[int, str]:
        return self.leases.lease_ids(now_ms)

    def release_leases(self) -> list[int]:
        """Drop every budget slice held (a draining server, after its last spend report named each slice's
        final spend and handed it back): nothing more is charged to them here. Returns the campaigns that
        held slices."""
        held = list(self.leases.lease_ids(0))
        self.leases = LeaseBook(self.server_id)
        return held


class TopicFollower(threading.Thread):
    """Follows the state topics on a thread; `deliver(batch)` receives [(topic, record, timestamp_ms)]."""

    def __init__(self, bootstrap: str, deliver: Callable[[list[tuple[str, dict, int]]], None], *,
                 job: str = "adserver", clock: Callable[[], float] = time.time,
                 start_offsets: dict[str, dict[int, int]] | None = None,
                 state_topics: tuple[str, ...] = STATE_TOPICS, lease_topic: str | None = LEASE_TOPIC,
                 event_time: bool = False):
        """start_offsets: per topic and partition where to begin (a snapshot's offsets); default 0.
        state_topics: the compacted topics read from the start; lease_topic: the leases, read from the instant
        the follower began (None: none; a dashboard follows only budget.state and serving.campaigns).
        event_time: measure a partition's lag against the newest record time read from its topic instead of
        `clock`, for streams whose timestamps are not the wall clock's (a simulated or replayed day, whose
        topics may each carry another writer's clock)."""
        super().__init__(name="adserve-topic-follower", daemon=True)
        self.state_topics, self.lease_topic = state_topics, lease_topic
        self.start_offsets = start_offsets or {}
        self.bootstrap, self.deliver, self.job, self.clock = bootstrap, deliver, job, clock
        self.event_time = event_time
        self.codec = AvroCodec()
        self.corrupt_records = 0
        self.loaded = threading.Event()
        self._halt = threading.Event()
        self._at_end: dict[tuple[str, int], bool] = {}
        self._last_ts: dict[tuple[str, int], float] = {}
        self._began = clock()
        self._dead_letters = kafka.producer(bootstrap)
        self.error: Exception | None = None

    def lag_s(self) -> float:
        """How far behind the heads of the state topics (0 when every partition is at its end): the clock (or,
        with event_time, the newest record time read from the same topic) minus the time of the last record read
        from each partition still short of its end."""
        if self.event_time:
            newest: dict[str, float] = {}
            for (topic, _), ts in self._last_ts.items():
                newest[topic] = max(newest.get(topic, ts), ts)
            behind = [newest[tp[0]] - self._last_ts[tp] for tp, at_end in self._at_end.items()
                      if not at_end and tp in self._last_ts]
            return max(behind, default=0.0)
        now = self.clock()
        behind = [now - self._last_ts.get(tp, self._began) for tp, at_end in self._at_end.items()
                  if not at_end]
        return max(behind, default=0.0)

    def ready(self) -> bool:
        """Loaded, within READY_LAG_S of the heads, and still reading: a follower that stopped on an error
        serves what it had, which goes stale, so it is never ready again."""
        return self.error is None and self.loaded.is_set() and self.lag_s() <= READY_LAG_S

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # noqa: BLE001 - reported through readiness and the log
            self.error = e
            LOG.exception("topic follower stopped")

    def _run(self) -> None:
        cons = kafka.consumer(self.bootstrap, group_id=f"adserve-follower-{time.monotonic_ns()}",
                              **{"enable.partition.eof": True})
        try:
            assignment = []
            metadata = cons.list_topics(timeout=10)
            for topic in (*self.state_topics, *([self.lease_topic] if self.lease_topic else [])):
                if topic not in metadata.topics:
                    raise TopicMissing(f"topic {topic} does not exist: run `adserve up` first")
                for p in metadata.topics[topic].partitions:
                    if topic == self.lease_topic:
                        # only grants made since this incarnation began: a restarted worker keeps its server id,
                        # and a slice granted before the restart may already be spent (its reports counted it)
                        assignment.append(TopicPartition(topic, p, int(self._began * 1000)))
                    else:
                        assignment.append(TopicPartition(topic, p, self.start_offsets.get(topic, {}).get(p, 0)))
                        self._at_end[(topic, p)] = False
            leases = [tp for tp in assignment if tp.topic == self.lease_topic]
            if leases:
                found = {(tp.topic, tp.partition): tp.offset for tp in cons.offsets_for_times(leases, timeout=10)}
                for tp in assignment:
                    if tp.topic == self.lease_topic:
                        tp.offset = found.get((tp.topic, tp.partition), -1)  # -1: from the end
            cons.assign(assignment)
            while not self._halt.is_set():
                messages = cons.consume(num_messages=2000, timeout=0.1)
                batch = []
                for msg in messages:
                    key = (msg.topic(), msg.partition())
                    if msg.error():
                        if msg.error().code() == KafkaError._PARTITION_EOF:
                            if key in self._at_end:
                                self._at_end[key] = True
                            continue
                        LOG.warning("consume error: %s", msg.error())
                        continue
                    if key in self._at_end:
                        self._at_end[key] = False
                    self._last_ts[key] = msg.timestamp()[1] / 1000
                    try:
                        record = self.codec.decode(msg.value(), topic=msg.topic(), partition=msg.partition(),
                                                   offset=msg.offset())
                    except CorruptRecord as e:
                        self._dead_letter(e, msg)
                        continue
                    batch.append((msg.topic(), record, msg.timestamp()[1]))
                if batch:
                    self.deliver(batch)
                if not self.loaded.is_set() and all(self._at_end.values()):
                    self.loaded.set()
                    LOG.info("state topics read to their heads")
                self._dead_letters.poll(0)
        finally:
            cons.close()
            self._dead_letters.flush(5)

    def _dead_letter(self, error: CorruptRecord, msg: Any) -> None:
        self.corrupt_records += 1
        LOG.warning("%s", error)
        letter = from_corrupt(self.job, error, timestamp_ms=msg.timestamp()[1], key=msg.key(), value=msg.value())
        value = self.codec.encode(topics.record_type(topics.DEAD_LETTERS), letter)
        self._dead_letters.produce(topics.DEAD_LETTERS, value=value, key=msg.key())
