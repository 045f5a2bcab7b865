"""`adserve simulate`: a compressed day of traffic through the real budget job and the ad servers' money path.

What runs for real: the platform (Kafka, Redis, Flink), the Flink jobs
`budget_pacing` and `click_aggregator` (deployed to the platform's cluster on
topics of their own for this run), and per simulated ad server the serving
code that decides and spends: ServingState (campaign table, budget states,
lease book, the 60 s silence rule), the DecisionEngine (retrieval, filters
with the pacing coin, pre-ranker, auction), the SpendAccumulator and the
SpendReporter producing to Kafka once a simulated second. Every ad served
sends its impression beacon and every click drawn its click beacon to the
run's ad.events, as the tracker does; the click aggregator deduplicates, tags
and bills them up to each budget and publishes billed totals every 10 s, which
the budget job reads and the report takes its money figures from. At the end
the same beacons are billed again in one process by core.clicks.recount (the
nightly recount's rule) and compared with what the job billed; the job's billed
totals are landed into the campaign store's report tables by report_landing
and every campaign's daily report is compared with the same recount
(sim.day_reports). The pacing dashboard watches the run's topics while the
day runs (sim.day_watch, started through `on_start`). What is simulated:
users and requests on a diurnal curve with a live event tripling traffic at
20:00, and clicks drawn from known true click probabilities. The
HTTP layer, the tracker's token checks, the user store and the served log are
left out: they are not on the money path.

Time: every record carries simulated event time (2026-03-10, UTC). The
servers run at most `--lead-s` seconds of event time ahead of the newest
budget state they have received, so the loop delay is bounded however fast
the machine is; the controller itself steps every 10 s of event time inside
the job. The wall time is mostly that loop: the step at T runs once the job's
watermark passes T, that is once the reports of second T + 2 are in (2 s of
out-of-orderness), and with a lead of 15 s the servers need its state at
second T + 6, so each of the day's 8,640 steps waits for one round trip
servers -> Kafka -> budget job -> Kafka -> servers, whatever the traffic. On
the 2 shared cores that round trip takes 80-120 ms: about half until the
step's timer runs in the job's Python operator (the Kafka source, its
watermark, the JVM's spend windows, the pacer taking the step's windows),
then the Python step of every campaign of a subtask's shards (their states
leave together when the bundle ends), then ~7 ms back to the servers. The
waits on the loop are short: the job's watermarks every 5 ms, its Python
bundles at most 5 ms, its network buffers flushed at once, no linger in the
Kafka producers on the loop, and the servers woken the moment the feed hears
the state (`_deploy_jobs`, `BudgetFeed`).

Size: the full-size day (`--full`) is FULL_DAY_REQUESTS requests through
FULL_DAY_SERVERS servers. A smaller day keeps the same campaigns, script and
traffic curve with every budget scaled by its requests / FULL_DAY_REQUESTS,
so each campaign meets the same share of its demand; its size classes stay
those of the full-size budgets. Fewer clicks a campaign make its day's
billing luck, and so its hourly curve error, larger.

The day's script: campaigns from $20 a day with $2 clicks to $50,000 a day;
a budget raised at 14:00, one lowered below its spend at 16:00, one paused
from 12:00 to 15:00, a new campaign launched at 15:00 (no history: its
placement's shape and a forecast first p), an ad server killed holding slices
at 21:30 and replaced.

Last week, as the budget job's curve document (`curves`) carries it: the
diurnal shape for every campaign that ran then and every placement, and per
placement the values to beat (core.pacing.value_to_beat quantiles) and the
value of a micro of bid by bid type (core.pacing.value_per_bid_samples) from
the same fleet's auctions on a sample of last week's requests, each campaign
entering at the p its budget allowed against its demand (`last_week`).

Output: per budget-size class, delivery where traffic allowed, absorbed
overspend in money and percent, hourly spend-to-curve error; an HTML picture
of spend against the target curve and p over the day for a few campaigns;
`--json` prints the figures as one JSON object."""
from __future__ import annotations

import heapq
import json
import logging
import math
import queue
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from core import clicks
from core.campaigns import static_score
from core.errors import RunFailed
from core.targeting import request_terms
from schemas.topics import BUDGET_LEASES, BUDGET_STATE, SERVING_ADS, SERVING_CAMPAIGNS
from sim.synthetic import diurnal

LOG = logging.getLogger("sim.pacing_day")
DAY_MS = 86_400_000
SIM_DAY = "2026-03-10"
DAY0_MS = int(datetime(2026, 3, 10, tzinfo=timezone.utc).timestamp() * 1000)
DOLLAR = 1_000_000
PLACEMENTS = {"feed": (0.5, 4.0), "article": (0.3, 3.0), "video": (0.2, 5.0)}  # share, pCTR multiplier
COUNTRIES = {"US": 0.5, "GB": 0.2, "DE": 0.2, "CA": 0.1}
SLOTS = (1, 2)
SPIKE = (20 * 3600, 22 * 3600, 3.0)  # the live event: from, to (seconds of the day), traffic factor
RESERVE_MICROS = 20_000  # every placement's reserve: $0.02 of total value per impression (a lone bidder pays it)
# Wall seconds the day stands still after a campaign record is published. The day runs ~100 simulated seconds
# per wall second, so without it a record's second or so of transit to the jobs would be minutes of event time:
# the click aggregator would close the windows after a budget cut before the cut reached it and bill them
# under the old budget (in service the record arrives long before those windows close).
CHANGE_TRANSIT_S = 2.0
# The full-size day: the requests and servers its budgets are written for. A smaller day (`adserve simulate`'s
# default) scales every budget by requests / FULL_DAY_REQUESTS, so each campaign meets the same share of its
# demand (the same p, the same throttling) in fewer requests.
FULL_DAY_REQUESTS = 200_000
FULL_DAY_SERVERS = 3


def traffic(second: float) -> float:
    start, end, factor = SPIKE
    return diurnal(second) * (factor if start <= second < end else 1.0)


# ------------------------------------------------------------------ the script


@dataclass
class SimCampaign:
    campaign_id: int
    name: str
    budget_micros: int
    bid_type: str
    bid_micros: int
    placements: tuple[str, ...]
    countries: tuple[str, ...]
    ads: int = 2
    version: int = 1
    status: str = "ACTIVE"
    planned_budget_micros: int = 0  # the full-size day's starting budget: the size class it is reported under
    launch_s: int = 0  # second of the day it is created (0: it ran last week and starts the day)
    history: list[dict[str, Any]] = field(default_factory=list)  # its records published during the day

    def __post_init__(self) -> None:
        self.planned_budget_micros = self.planned_budget_micros or self.budget_micros

    def record(self, at_ms: int) -> dict[str, Any]:
        return {"campaign_id": self.campaign_id, "advertiser_id": self.campaign_id, "version": self.version,
                "event_time": at_ms, "status": self.status, "bid_type": self.bid_type,
                "daily_budget_micros": self.budget_micros, "currency": "USD", "timezone": "UTC",
                "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None,
                "cap_per_week": None, "cpa_target_micros": None}

    def ad_records(self, at_ms: int) -> list[dict[str, Any]]:
        clauses = [{"attribute": "placement", "values": sorted(self.placements), "excluded": False},
                   {"attribute": "location", "values": sorted(self.countries), "excluded": False}]
        return [{"ad_id": self.campaign_id * 100 + i, "campaign_id": self.campaign_id,
                 "advertiser_id": self.campaign_id, "version": 1, "event_time": at_ms, "removed": False,
                 "bid_type": self.bid_type, "bid_micros": self.bid_micros, "quality_prior": 0.0,
                 "creative_ref": f"creative-{self.campaign_id}-{i}", "landing_url": f"https://sim.example/{self.campaign_id}",
                 "static_score": static_score(self.bid_type, self.bid_micros, 0.0), "targeting": clauses}
                for i in range(self.ads)]


@dataclass
class Event:
    second: int
    kind: str  # raise | lower | pause | resume | launch | kill
    campaign_id: int = 0
    factor: float = 1.0


def script(base_id: int, seed: int, budget_scale: float = 1.0) -> tuple[list[SimCampaign], list[Event]]:
    """The day's campaigns and changes. Budgets are written for the full-size day; `budget_scale` (requests /
    FULL_DAY_REQUESTS) scales each, and each keeps its full-size budget as the size class it is reported under
    (a $10,000 campaign of a day at 30 % is still a large campaign with 30 % of the traffic)."""
    rng = random.Random(seed)
    every = tuple(PLACEMENTS)
    campaigns = [SimCampaign(base_id, "large-50k", 50_000 * DOLLAR, "CPC", 45 * DOLLAR, every, ("US", "CA", "GB")),
                 SimCampaign(base_id + 1, "large-10k-a", 10_000 * DOLLAR, "CPC", 20 * DOLLAR, every, ("US", "DE")),
                 SimCampaign(base_id + 2, "large-10k-b", 10_000 * DOLLAR, "CPM", 1_200 * DOLLAR, ("video", "feed"),
                             ("US", "GB", "DE", "CA"))]
    for i in range(10):
        placements = tuple(sorted(rng.sample(every, rng.randint(1, 3))))
        countries = tuple(sorted(rng.sample(tuple(COUNTRIES), rng.randint(1, 4))))
        budget = rng.choice([500, 1_000, 2_000, 3_000, 5_000]) * DOLLAR
        if i % 3 == 2:
            campaigns.append(SimCampaign(base_id + 10 + i, f"medium-{i}", budget, "CPM",
                                         rng.randint(300, 600) * DOLLAR, placements, countries))
        else:
            campaigns.append(SimCampaign(base_id + 10 + i, f"medium-{i}", budget, "CPC",
                                         rng.randint(8, 15) * DOLLAR, placements, countries))
    for i in range(16):
        placements = tuple(sorted(rng.sample(every, rng.randint(1, 2))))
        countries = tuple(sorted(rng.sample(tuple(COUNTRIES), rng.randint(1, 3))))
        budget = rng.choice([20, 20, 30, 50, 100]) * DOLLAR
        campaigns.append(SimCampaign(base_id + 30 + i, f"small-{i}", budget, "CPC", 2 * DOLLAR, placements,
                                     countries))
    # $300 from 15:00 on video in the US and GB at $15 a click: about half of what p = 1 would spend there
    launched = SimCampaign(base_id + 50, "launched-15h", 300 * DOLLAR, "CPC", 15 * DOLLAR, ("video",),
                           ("US", "GB"), launch_s=15 * 3600)
    campaigns.append(launched)
    for c in campaigns:
        c.planned_budget_micros, c.budget_micros = c.budget_micros, int(c.budget_micros * budget_scale)
    events = [Event(12 * 3600, "pause", base_id + 11), Event(15 * 3600, "resume", base_id + 11),
              Event(launched.launch_s, "launch", launched.campaign_id),
              Event(14 * 3600, "raise", base_id + 10, 1.5), Event(16 * 3600, "lower", base_id + 12, 0.5),
              Event(21 * 3600 + 1800, "kill")]
    return campaigns, sorted(events, key=lambda e: e.second)


def curves(campaigns: list[SimCampaign], market: dict[str, Any]) -> dict[str, Any]:
    """The curve document the budget job starts the day with (pipelines.traffic_curves' form): last week's
    hourly request volume (the same diurnal shape; the live event is news to it) for every campaign that ran
    then and every placement, and last week's market (`last_week`)."""
    shape = [round(diurnal(h * 3600 + 1800), 6) for h in range(24)]
    return {"default": shape, "campaigns": {str(c.campaign_id): shape for c in campaigns if not c.launch_s},
            "placements": {p: shape for p in PLACEMENTS}, "values_to_beat": market["values_to_beat"],
            "value_per_bid": market["value_per_bid"]}


def last_week(campaigns: list[SimCampaign], bootstrap: str, spend_topic: str, *, seed: int, day_requests: int,
              samples: int = 2_000) -> dict[str, Any]:
    """Last week's market as the curve pipeline would have read it from the served log: by placement the
    values to beat and by bid type the value of a micro of bid (its median), from this fleet's auctions on
    `samples` requests; also the p each campaign ran at. First every campaign that ran last week enters at
    p = 1 (its demand: expected cost a request x `day_requests`), then each at min(1, budget / demand), and
    those auctions are recorded."""
    from core.pacing import VALUE_QUANTILES, value_per_bid_samples, value_per_bid_table, value_to_beat
    from core.replay import loser_record

    ran = [c for c in campaigns if not c.launch_s]
    server = SimServer("last-week", ran, bootstrap, spend_topic, seed + 7, DAY0_MS - 7 * DAY_MS)
    rng = np.random.default_rng(seed + 7)
    placements, p_weights = list(PLACEMENTS), [w for w, _ in PLACEMENTS.values()]
    countries, c_weights = list(COUNTRIES), list(COUNTRIES.values())
    requests = [(placements[int(rng.choice(len(placements), p=p_weights))],
                 countries[int(rng.choice(len(countries), p=c_weights))]) for _ in range(samples)]
    at = DAY0_MS - 7 * DAY_MS + 12 * 3_600_000
    demand: dict[int, int] = {c.campaign_id: 0 for c in ran}
    for i, (placement, country) in enumerate(requests):
        for w in server.decide(f"w{i}", placement, country, at).winners:
            demand[w.campaign_id] += w.expected_cost_micros
    p_ran = {c.campaign_id: min(1.0, c.budget_micros / max(1.0, demand[c.campaign_id] * day_requests / samples))
             for c in ran}
    for campaign_id, p in p_ran.items():
        server.state.budget[campaign_id] = ("OPEN", p)
        server.state._apply_budget(campaign_id, at)
    values: dict[str, list[int]] = {p: [] for p in PLACEMENTS}
    per_bid: dict[str, list[float]] = {}
    for i, (placement, country) in enumerate(requests):
        decision = server.decide(f"v{i}", placement, country, at)
        values[placement].append(value_to_beat(len(SLOTS), [w.total_value_micros for w in decision.winners],
                                               RESERVE_MICROS))
        record = {"placement": placement, "sampled_losers": [loser_record(l) for l in decision.sampled_losers],
                  "winners": [{"bid_type": w.explanation["bid_type"], "bid_micros": w.explanation["bid_micros"],
                               "quality_micros": w.explanation["quality_micros"],
                               "total_value_micros": w.total_value_micros} for w in decision.winners]}
        for key, ratio in value_per_bid_samples(record):
            per_bid.setdefault(key, []).append(ratio)
    server.reporter.close()
    value_per_bid = value_per_bid_table({k: round(float(np.median(r)), 8) for k, r in per_bid.items()})
    quantiles = np.linspace(0, 100, VALUE_QUANTILES)
    return {"values_to_beat": {p: [int(x) for x in np.percentile(v, quantiles, method="lower")]
                               for p, v in values.items() if v},
            "value_per_bid": value_per_bid, "p": {str(k): round(v, 4) for k, v in p_ran.items()}}


# ------------------------------------------------------------------ one ad server's money path


class SimServer:
    def __init__(self, server_id: str, campaigns: list[SimCampaign], bootstrap: str, spend_topic: str,
                 seed: int, now_ms: int, export: Any = None):
        """export: the fleet's sim.fleet_export.FleetExport, which serves this server's metrics (None: kept,
        not served)."""
        from core.spend import SpendAccumulator
        from serving.adserver.app import Metrics
        from serving.adserver.offloop import SpendReporter
        from serving.adserver.state import ServingState
        from core.reserves import ReserveBook
        from serving.decision.engine import DecisionEngine, EngineConfig

        self.server_id = server_id
        self.state = ServingState(server_id)
        for c in campaigns:
            if c.launch_s and DAY0_MS + c.launch_s * 1000 > now_ms:
                continue  # not created yet: the launch event brings it
            self.state.apply(SERVING_CAMPAIGNS, c.record(now_ms), now_ms)
            for ad in c.ad_records(now_ms):
                self.state.apply(SERVING_ADS, ad, now_ms)
        self.engine = DecisionEngine(self.state.index, self.state.campaigns, config=EngineConfig(
            exploration_share=0.0, placement_ctr_multiplier={p: m for p, (_, m) in PLACEMENTS.items()}),
            reserves=ReserveBook.fixed(RESERVE_MICROS))
        self.spend = SpendAccumulator(server_id)
        # linger 0: a second's reports go out as soon as they are made (the budget job's next step waits on them)
        self.reporter = SpendReporter(self.spend, bootstrap, self.state.lease_ids, topic=spend_topic,
                                      producer_overrides={"linger.ms": 0})
        self.rng, self.np_rng = random.Random(seed), np.random.default_rng(seed)
        self.metrics = Metrics()  # the ad server's own, served to Prometheus by `export`
        self.metrics.index_lag.set(0)  # the state is applied in process, at the instant it changes
        for outcome in ("overloaded", "not_ready", "deadline"):  # a simulated server refuses nothing: say 0
            self.metrics.requests.labels(outcome)
        self.export = export
        self.export_port = export.serve("adserver", self.metrics.registry) if export is not None else None

    def decide(self, request_id: str, placement: str, country: str, now_ms: int):
        from serving.decision.engine import RequestContext
        from serving.decision.filters import FilterContext

        context = RequestContext(request_id, placement, SLOTS, request_terms(location=[country], placement=placement),
                                 FilterContext(now_ms), country=country)
        return self.engine.decide(context, clock=time.perf_counter, deadline=time.perf_counter() + 10.0,
                                  rng=self.rng, np_rng=self.np_rng)

    def serve(self, request_id: str, placement: str, country: str, now_ms: int):
        from serving.adserver.app import account_served, count_served

        began = time.perf_counter()
        decision = self.decide(request_id, placement, country, now_ms)
        account_served(self.spend, self.state, decision, now_ms)
        self.metrics.latency.observe(time.perf_counter() - began)
        count_served(self.metrics, len(SLOTS), len(decision.winners), decision.scored_by_fallback)
        return decision

    def second(self, now_ms: int) -> None:
        self.reporter.tick(now_ms)
        self.state.expire_leases(now_ms)
        self.state.check_budget_silence(now_ms)
        self.metrics.commit_lag.set(self.state.commit_lag_s)
        self.metrics.ads.set(len(self.state.index))


# ------------------------------------------------------------------ what comes back from the job


class BudgetFeed(threading.Thread):
    """Reads the run's budget.state and budget.leases topics and queues what it reads for the servers; keeps
    the click aggregator's billed totals (the third topic) for the report. `advanced` is notified whenever
    `progress_ms` (the newest budget state's event time) moves, so the servers wake the moment it does."""

    def __init__(self, bootstrap: str, topics: list[str]):
        super().__init__(name="budget-feed", daemon=True)
        from schemas.codec import AvroCodec
        from streams import kafka

        self.codec = AvroCodec()
        self.consumer = kafka.consumer(bootstrap, group_id=f"adserve-simulate-{uuid.uuid4().hex[:8]}",
                                       **{"auto.offset.reset": "earliest", "fetch.wait.max.ms": 10})
        self.advanced = threading.Condition()
        self.consumer.subscribe(topics)
        self.state_topic, self.billed_topic = topics[0], topics[2] if len(topics) > 2 else None
        self.inbox: queue.Queue = queue.Queue()
        self.progress_ms = 0
        self.billed: list[dict[str, Any]] = []
        self.billed_progress_ms = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            # poll returns with the first record; consume(timeout=...) would wait out its timeout for a full batch
            first = self.consumer.poll(0.05)
            if first is None:
                continue
            for message in [first, *self.consumer.consume(500, timeout=0)]:
                if message.error() is not None:
                    continue
                record = self.codec.decode(message.value())
                if message.topic() == self.billed_topic:
                    self.billed.append(record)
                    self.billed_progress_ms = max(self.billed_progress_ms, int(record["event_time"]))
                    continue
                kind = BUDGET_STATE if message.topic() == self.state_topic else BUDGET_LEASES
                self.inbox.put((kind, record))
                if kind == BUDGET_STATE and int(record["event_time"]) > self.progress_ms:
                    with self.advanced:
                        self.progress_ms = int(record["event_time"])
                        self.advanced.notify_all()
        self.consumer.close()


# ------------------------------------------------------------------ the day


@dataclass
class JobBill:
    """What the click aggregator billed a campaign for the day (its last BilledSpend totals), and what of it
    went above the budget in force when it was billed (checked at every total it published: must be 0)."""

    budget_micros: int
    billed_micros: int = 0
    absorbed_micros: int = 0
    billed_above_micros: int = 0
    billed_clicks: int = 0
    billed_impressions: int = 0


@dataclass
class CampaignDay:
    campaign: SimCampaign
    budgets: list[tuple[int, int]]  # (from ms, daily budget): the budget in force over the day
    bill: JobBill | None = None  # the click aggregator's, once the day is over
    served_by_minute: np.ndarray = field(default_factory=lambda: np.zeros(1440, dtype=np.int64))
    expected_by_minute: np.ndarray = field(default_factory=lambda: np.zeros(1440, dtype=np.int64))
    billed_by_minute: np.ndarray = field(default_factory=lambda: np.zeros(1440, dtype=np.int64))
    p_by_minute: np.ndarray = field(default_factory=lambda: np.full(1440, np.nan))
    state_by_minute: list[str] = field(default_factory=lambda: [""] * 1440)
    clicks: int = 0  # clicks drawn (the aggregator's billed count is bill.billed_clicks)
    last_served_s: int = -1
    stopped_after_lower_s: int | None = None


@dataclass(frozen=True)
class DayProgress:
    """Where the day stands, for a progress bar: the simulated second reached, the requests served so far, and
    the work done and to do in expected wall seconds (`work_model`), which is what an ETA should divide."""
    second: int
    requests: int
    work_done: float
    work_total: float


# What a simulated second and a request cost in wall seconds on 2 busy cores, as measured: a second is the
# budget job's loop (spend reports, windows, controller steps, states back to the servers), a request the
# fleet's decision, its beacons and their billing. Only the ratio matters to an ETA; the busy evening costs
# more than the night because it holds more requests.
SECOND_COST_S = 0.0053
REQUEST_COST_S = 0.007


def work_model(requests: int) -> np.ndarray:
    """Expected wall seconds of the day done by the end of each simulated second (cumulative, 86,400 values):
    every second's fixed cost plus its share of `requests` on the day's traffic curve."""
    shape = np.array([traffic(s) for s in range(86_400)])
    per_second = SECOND_COST_S + REQUEST_COST_S * requests * shape / shape.sum()
    return np.cumsum(per_second)


# The hook a caller starts something with at the beginning of the day (a dashboard on the run's topics, say):
# called once the run's topics exist and its jobs run, before the first simulated second, with the run's topic
# names (spend, campaigns, ads, events, billed, state, leases, dead, conversions) and the Redis URL the budget
# job writes pacing:{campaign} to. What it returns, if callable, is called with the day's result once the day is over
# and its reports are checked (while the jobs still run) and before run_day returns: the place for a last
# screenshot.
OnStart = Callable[[dict[str, str], str], "Callable[[dict[str, Any]], None] | None"]


def run_topics(run: str) -> dict[str, str]:
    """The run's own topics, by role."""
    return {name: f"sim.{run}.{name}" for name in ("spend", "campaigns", "ads", "events", "billed", "state",
                                                    "leases", "dead", "conversions")}


def run_day(platform, *, requests: int, seed: int, servers: int, lead_s: int, out_dir: Path, parallelism: int = 2,
            progress: Callable[[DayProgress], None] | None = None, on_start: OnStart | None = None,
            log: Callable[[str], None] = LOG.info) -> dict[str, Any]:
    """The day on the platform `platform`: its topics, its jobs, the simulated fleet, the billing's close and
    the recount. Budgets scale with `requests` (see `script`). `progress` hears where the day stands every
    simulated minute; `on_start` (see OnStart) starts whatever should watch the day; `log` hears the steps."""
    from infra.platform.topics import TopicSpec, ensure_topics
    from jobs import deploy
    from schemas.codec import AvroCodec
    from sim import day_reports
    from sim.fleet_export import FleetExport
    from streams import kafka

    run = uuid.uuid4().hex[:8]
    topics = run_topics(run)
    # budget.spend with a partition per budget job subtask: every server sends each partition a record a second
    ensure_topics(platform.kafka_bootstrap, tuple(
        TopicSpec(t, key="campaign id", schema="", partitions=parallelism if n == "spend" else 1,
                  compacted=n in ("campaigns", "ads", "state")) for n, t in topics.items()))
    base_id = 9_000_000 + int(run[:5], 16) % 900_000 * 100
    budget_scale = requests / FULL_DAY_REQUESTS
    campaigns, events = script(base_id, seed, budget_scale)
    by_id = {c.campaign_id: c for c in campaigns}
    out_dir.mkdir(parents=True, exist_ok=True)
    log("last week's market: the fleet's auctions on a sample of its requests ...")
    market = last_week(campaigns, platform.kafka_bootstrap, topics["spend"], seed=seed, day_requests=requests)
    curves_path = out_dir / "curves.json"
    curves_path.write_text(json.dumps(curves(campaigns, market)))
    codec = AvroCodec()
    producer = kafka.producer(platform.kafka_bootstrap, **{"linger.ms": 2})
    for c in campaigns:
        if not c.launch_s:
            producer.produce(topics["campaigns"], key=str(c.campaign_id).encode(),
                             value=codec.encode("ServingCampaign", c.record(DAY0_MS - 60_000)),
                             timestamp=DAY0_MS - 60_000)
            _publish_ads(c, producer, codec, topics["ads"], DAY0_MS - 60_000)
    producer.flush(30)
    log(f"deploying budget_pacing and click_aggregator on the run's topics (sim.{run}.*) ...")
    job_id, billing_id = _deploy_jobs(platform, topics, run, curves_path, parallelism)
    feed = BudgetFeed(platform.kafka_bootstrap, [topics["state"], topics["leases"], topics["billed"]])
    feed.start()
    export = FleetExport(platform.prometheus_targets_dir)  # the fleet's /metrics, up until the day's end
    try:
        deploy.wait_running(platform.flink_rest_url, job_id)
        deploy.wait_running(platform.flink_rest_url, billing_id)
        on_end = on_start(topics, platform.redis_url) if on_start is not None else None
        result = _simulate(platform, campaigns, by_id, events, topics, requests=requests, seed=seed,
                           servers=servers, lead_s=lead_s, feed=feed, producer=producer, codec=codec,
                           progress=progress, log=log, export=export)
        result.update(run=run, topics=topics, job_id=job_id, billing_job_id=billing_id, last_week=market,
                      budget_scale=budget_scale)
        log("landing the day's billed totals into the campaign store's reports and comparing each campaign's "
            "daily report with the recount ...")
        result["reports"] = day_reports.check(platform, topics, run, result["days"], day_reports.day_recount(
            result["billing"].pop("recount"), SIM_DAY), SIM_DAY)
        if callable(on_end):
            on_end(result)
    finally:
        export.close()
        feed.halt.set()
        _stop_jobs(platform, job_id, billing_id)
    return result


# The jobs' timers, short: the day waits on the loop servers -> budget job -> servers once every 10 s of event
# time, and each Python bundle, watermark interval and network buffer is a wait on that loop (20 ms each made a
# night's hours take 1.4x as long). The budget job sees a few records a second, so flushing every buffer at
# once (timeout 0) costs nothing.
BUNDLE_TIME_MS = "5"
WATERMARK_INTERVAL_MS = "5"
BUFFER_TIMEOUT_MS = "0"


def _deploy_jobs(platform, topics: dict[str, str], run: str, curves_path: Path, parallelism: int) -> tuple[str, str]:
    """The budget job and the click aggregator on the run's topics; (budget job id, aggregator job id)."""
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink
    from jobs import deploy

    job_id = deploy.deploy("budget_pacing", jobmanager=f"{platform.host}:{platform.flink_rest_port}",
                           conf_dir=Flink(platform).conf_dir,
                           job_args=["--bootstrap", platform.kafka_bootstrap,
                                     "--connector-jar", str(flink_connector_jar(platform)),
                                     "--group-id", f"adserve-simulate-{run}", "--startup-mode", "earliest-offset",
                                     "--spend-topic", topics["spend"], "--campaigns-topic", topics["campaigns"],
                                     "--ads-topic", topics["ads"],
                                     "--billed-topic", topics["billed"], "--state-topic", topics["state"],
                                     "--leases-topic", topics["leases"], "--dead-letter-topic", topics["dead"],
                                     "--redis-url", platform.redis_url, "--curves", str(curves_path),
                                     "--heartbeat-ms", "10000", "--bundle-time-ms", BUNDLE_TIME_MS,
                                     "--watermark-interval-ms", WATERMARK_INTERVAL_MS,
                                     "--buffer-timeout-ms", BUFFER_TIMEOUT_MS,
                                     "--checkpoint-interval-ms", "10000", "--parallelism", str(parallelism)])
    billing_id = deploy.deploy("click_aggregator", jobmanager=f"{platform.host}:{platform.flink_rest_port}",
                               conf_dir=Flink(platform).conf_dir,
                               job_args=["--bootstrap", platform.kafka_bootstrap,
                                         "--connector-jar", str(flink_connector_jar(platform)),
                                         "--group-id", f"adserve-simulate-billing-{run}",
                                         "--startup-mode", "earliest-offset",
                                         "--events-topic", topics["events"], "--campaigns-topic", topics["campaigns"],
                                         "--billed-topic", topics["billed"], "--dead-letter-topic", topics["dead"],
                                         "--bundle-time-ms", "20", "--watermark-interval-ms", "20",
                                         "--buffer-timeout-ms", "2", "--checkpoint-interval-ms", "10000"])
    return job_id, billing_id


def _stop_jobs(platform, job_id: str, billing_id: str) -> None:
    from jobs import deploy

    for name, running in (("budget", job_id), ("click aggregator", billing_id)):
        try:
            deploy.stop(platform.flink_rest_url, running)
        except Exception:  # noqa: BLE001 - a stuck stop must not hide the day's result
            LOG.exception("stopping the %s job failed; cancelling it", name)
            deploy.cancel(platform.flink_rest_url, running)


@dataclass
class _Traffic:
    """The day's request stream as the fleet sees it: the simulation's random draws, the beacons written to
    ad.events, the clicks still to fire, and the counts the report reads."""
    rng: np.random.Generator
    fleet: list
    days: dict[int, CampaignDay]
    producer: Any
    codec: Any
    events_topic: str
    true_ctr_factor: dict[int, float]
    export: Any = None  # sim.fleet_export.FleetExport: counts the beacons as the tracker's metrics
    beacons: list[dict[str, Any]] = field(default_factory=list)
    clicks: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # heap of (at ms, seq, beacon)
    served_requests: int = 0
    filled_slots: int = 0
    seq: int = 0

    def beacon(self, event: dict[str, Any]) -> None:
        """One ad.events record, as the tracker writes it (keyed by campaign, timestamp = event time)."""
        self.beacons.append(event)
        if self.export is not None:
            self.export.beacon(event["event_type"])
        self.producer.produce(self.events_topic, key=str(event["campaign_id"]).encode(),
                              timestamp=event["event_time"], value=self.codec.encode("AdEvent", event))

    def serve(self, second: int, now_ms: int, requests: int) -> None:
        """`requests` ad requests in this second, each on a random server, placement and country."""
        placements, p_weights = list(PLACEMENTS), [w for w, _ in PLACEMENTS.values()]
        countries, c_weights = list(COUNTRIES), list(COUNTRIES.values())
        for _ in range(requests):
            server = self.fleet[int(self.rng.integers(len(self.fleet)))]
            placement = placements[int(self.rng.choice(len(placements), p=p_weights))]
            country = countries[int(self.rng.choice(len(countries), p=c_weights))]
            decision = server.serve(f"r{second}-{self.seq}", placement, country, now_ms)
            self.seq += 1
            self.served_requests += 1
            for w in decision.winners:
                self._won(second, now_ms, w)

    def _won(self, second: int, now_ms: int, w) -> None:
        """A filled slot: counted, its impression written, its click (if the true rate draws one) scheduled."""
        self.filled_slots += 1
        day = self.days[w.campaign_id]
        minute = second // 60
        day.served_by_minute[minute] += 1
        day.expected_by_minute[minute] += w.expected_cost_micros
        day.last_served_s = second
        impression = _beacon(f"r{second}-{self.seq}-{w.slot}", "IMPRESSION", now_ms, now_ms, w, self.seq)
        self.beacon(impression)
        if w.billing != "cpm":
            pctr = w.expected_cost_micros / max(1, w.price_micros)
            if self.rng.random() < min(1.0, pctr * self.true_ctr_factor[w.ad_id]):
                at = now_ms + int(2000 + self.rng.exponential(10_000))
                heapq.heappush(self.clicks, (at, self.seq, {**impression, "event_type": "CLICK", "event_time": at,
                                                            "event_id": f"{impression['event_id']}-click"}))

    def fire_clicks(self, now_ms: int) -> None:
        while self.clicks and self.clicks[0][0] <= now_ms:
            _, _, click = heapq.heappop(self.clicks)
            self.days[int(click["campaign_id"])].clicks += 1
            self.beacon(click)


def _wait_for_budget(feed, now_ms: int, second: int, lead_s: int) -> float:
    """Hold the servers at most lead_s of event time ahead of the budget states they have heard; seconds held."""
    wait_began = time.monotonic()
    if second <= lead_s:
        return 0.0
    with feed.advanced:
        if not feed.advanced.wait_for(lambda: feed.progress_ms >= now_ms - lead_s * 1000, timeout=120):
            raise RunFailed(f"the budget job stopped answering at {_clock(feed.progress_ms)}")
    return time.monotonic() - wait_began


def _end_of_second(second: int, traffic_state: _Traffic, lowered: dict[int, int]) -> None:
    """Each minute, every campaign's state and p as the first server sees them; and when a lowered campaign
    stopped serving."""
    days = traffic_state.days
    if second % 60 == 59:
        view = traffic_state.fleet[0].state
        for campaign_id, day in days.items():
            state, p = view.budget.get(campaign_id, ("", math.nan))
            day.p_by_minute[second // 60], day.state_by_minute[second // 60] = p, state
        traffic_state.producer.poll(0)
    for campaign_id, lowered_at in lowered.items():
        day = days[campaign_id]
        if day.stopped_after_lower_s is None and day.last_served_s < second - 30:
            day.stopped_after_lower_s = max(0, day.last_served_s - lowered_at + 1)


def _simulate(platform, campaigns, by_id, events, topics, *, requests, seed, servers, lead_s, feed, producer,
              codec, progress, log, export=None) -> dict[str, Any]:
    from streams.pacing_store import PacingStore

    rng = np.random.default_rng(seed)
    fleet = [SimServer(f"sim-s{i}", campaigns, platform.kafka_bootstrap, topics["spend"], seed + i, DAY0_MS,
                       export=export) for i in range(servers)]
    days = {c.campaign_id: CampaignDay(c, [(0, c.budget_micros)]) for c in campaigns}
    versions = [c.record(DAY0_MS - 60_000) for c in campaigns if not c.launch_s]  # for the recount
    true_ctr_factor = {ad["ad_id"]: float(np.exp(rng.normal(0, 0.15) - 0.15 ** 2 / 2))
                       for c in campaigns for ad in c.ad_records(DAY0_MS)}
    day_traffic = _Traffic(rng, fleet, days, producer, codec, topics["events"], true_ctr_factor, export)
    rate_scale = requests / sum(traffic(s) for s in range(0, 86_400, 10)) / 10
    pending_events = list(events)
    waited_s = 0.0
    lowered: dict[int, int] = {}
    work = work_model(requests)
    began = time.monotonic()
    for second in range(86_400):
        now_ms = DAY0_MS + second * 1000
        waited_s += _wait_for_budget(feed, now_ms, second, lead_s)
        _drain(feed, fleet, now_ms)
        while pending_events and pending_events[0].second <= second:
            event = pending_events.pop(0)
            _apply_event(event, by_id, days, fleet, producer, codec, topics, platform, campaigns, now_ms, seed,
                         lowered)
        day_traffic.serve(second, now_ms, rng.poisson(traffic(second) * rate_scale))
        day_traffic.fire_clicks(now_ms)
        for server in fleet:
            server.second(now_ms)
        _end_of_second(second, day_traffic, lowered)
        if progress is not None and second % 60 == 59:
            progress(DayProgress(second + 1, day_traffic.served_requests, float(work[second]), float(work[-1])))
    day_wall_s = time.monotonic() - began
    for server in fleet:
        server.reporter.close()
    log(f"the day served in {day_wall_s:.0f} s; closing its billing and recounting {len(day_traffic.beacons):,} "
        "beacons ...")
    billing = _close_billing(days, feed, producer, codec, topics["events"], day_traffic.beacons, versions, campaigns)
    store = PacingStore(platform.redis_url)
    pacing = {c.campaign_id: store.read(c.campaign_id) for c in campaigns}
    store.close()
    return {"days": days, "pacing": pacing, "requests": day_traffic.served_requests,
            "filled_slots": day_traffic.filled_slots, "billing": billing,
            "wall_s": time.monotonic() - began, "day_wall_s": day_wall_s, "waited_s": waited_s, "lead_s": lead_s,
            "servers": len(fleet)}


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%H:%M:%S") if ms else "the start"


def _beacon(impression_id: str, event_type: str, at_ms: int, served_ms: int, w, seq: int) -> dict[str, Any]:
    """An ad.events record for a served ad: the price and billing type its token would carry."""
    return {"event_id": f"{impression_id}-{event_type[0].lower()}", "impression_id": impression_id,
            "event_type": event_type, "event_time": at_ms, "served_time": served_ms, "campaign_id": w.campaign_id,
            "ad_id": w.ad_id, "price_micros": w.charge_per_event_micros,
            "billing_type": "IMPRESSION" if w.billing == "cpm" else "CLICK", "user_id": f"sim-user-{seq}",
            "ip_address": f"10.{seq // 65_536 % 256}.{seq // 256 % 256}.{seq % 256}", "user_agent": "Mozilla/5.0",
            "token_key_id": "sim"}


CLOCK_CAMPAIGN = 1  # the end-of-day beacons that carry the aggregator's event time past midnight


def _close_billing(days, feed, producer, codec, events_topic: str, beacons, versions, campaigns,
                   timeout_s: float = 180) -> dict[str, Any]:
    """End the day for the click aggregator (a beacon of no campaign after midnight moves its event time past
    the last window), wait for its last totals, take each campaign's bill from them, and bill the same beacons
    again with core.clicks.recount to compare."""
    from core.clicks import progress_key, recount

    for at in (DAY0_MS + DAY_MS + 5_000, DAY0_MS + DAY_MS + 15_000):
        producer.produce(events_topic, key=b"1", timestamp=at, value=codec.encode("AdEvent", {
            "event_id": f"clock-{at}", "impression_id": f"clock-{at}", "event_type": "IMPRESSION",
            "event_time": at, "served_time": at, "campaign_id": CLOCK_CAMPAIGN, "ad_id": CLOCK_CAMPAIGN,
            "price_micros": 0, "billing_type": "CLICK", "user_id": None, "ip_address": None, "user_agent": None,
            "token_key_id": "sim"}))
    producer.flush(30)
    # Windows close in event-time order: once the window of the last beacon is billed, every earlier one is
    # (a few seconds more for totals of other shards that closed with it).
    last_window = (max((int(b["event_time"]) for b in beacons), default=DAY0_MS) // 10_000 + 1) * 10_000
    began = time.monotonic()
    while feed.billed_progress_ms < last_window and time.monotonic() - began < timeout_s:
        time.sleep(0.5)
    closed = feed.billed_progress_ms >= last_window
    if not closed:
        LOG.warning("the click aggregator did not bill the day's last window within %.0f s", timeout_s)
    time.sleep(3.0)
    records: dict[int, list[dict[str, Any]]] = {}
    for r in list(feed.billed):
        if r["budget_day"] == SIM_DAY and int(r["campaign_id"]) in days:
            records.setdefault(int(r["campaign_id"]), []).append(r)
    for campaign_id, day in days.items():
        day.bill = job_bill(day, sorted(records.get(campaign_id, []), key=progress_key))
    versions = versions + [v for c in campaigns for v in c.history]
    reference = recount(beacons, versions)
    fields = ("billed_spend_micros", "absorbed_overspend_micros", "billed_clicks", "billed_impressions")
    mismatched = []
    for campaign_id, day in days.items():
        ref = reference.get((campaign_id, SIM_DAY), {})
        job = (day.bill.billed_micros, day.bill.absorbed_micros, day.bill.billed_clicks, day.bill.billed_impressions)
        if job != tuple(int(ref.get(f, 0)) for f in fields):
            mismatched.append({"campaign_id": campaign_id, "job": job,
                               "recount": tuple(int(ref.get(f, 0)) for f in fields)})
    return {"by": "click_aggregator", "beacons": len(beacons), "totals_read": len(feed.billed),
            "last_window_billed": closed, "recount_mismatches": mismatched,
            "recount": {key: record for key, record in reference.items() if key[0] in days}}


def job_bill(day: CampaignDay, records: list[dict[str, Any]]) -> JobBill:
    """A campaign's day from the aggregator's totals (oldest first): the last totals, billed money by minute
    (each total's growth, in the minute its window ended), and whatever growth took the billed total above the
    billing limit at that instant (core.clicks.billing_limit: the highest budget its events may have been served
    under)."""
    bill = JobBill(day.campaign.budget_micros)
    previous = 0
    for r in records:
        at = int(r["event_time"])
        billed = int(r["billed_spend_micros"])
        budget = clicks.billing_limit([(DAY0_MS + since, b) for since, b in day.budgets], at)
        bill.billed_above_micros += max(0, billed - max(previous, budget))
        minute = min(1439, max(0, (at - 1 - DAY0_MS) // 60_000))
        day.billed_by_minute[minute] += billed - previous
        previous = billed
        bill.billed_micros, bill.absorbed_micros = billed, int(r["absorbed_overspend_micros"])
        bill.billed_clicks, bill.billed_impressions = int(r["billed_clicks"]), int(r["billed_impressions"])
    return bill


def _drain(feed: BudgetFeed, fleet: list[SimServer], now_ms: int) -> None:
    while True:
        try:
            kind, record = feed.inbox.get_nowait()
        except queue.Empty:
            return
        for server in fleet:
            server.state.apply(kind, record, now_ms)


def _publish_ads(c: SimCampaign, producer, codec, topic: str, at_ms: int) -> None:
    """The campaign's ads on the run's serving.ads: the pacer learns where they serve and what they are worth."""
    for ad in c.ad_records(at_ms):
        producer.produce(topic, key=str(ad["ad_id"]).encode(), value=codec.encode("ServingAd", ad), timestamp=at_ms)


def _apply_event(event: Event, by_id, days, fleet, producer, codec, topics, platform, campaigns, now_ms, seed,
                 lowered) -> None:
    if event.kind == "kill":
        # The server dies with its unreported second and its slices; a replacement boots with the catalog
        # and the budget states it reads from the compacted topic (here: the survivors' view).
        dead = fleet.pop()
        if dead.export is not None:  # a dead server's /metrics goes with it
            dead.export.stop(dead.export_port)
        replacement = SimServer(f"{dead.server_id}-replacement", campaigns, platform.kafka_bootstrap,
                                topics["spend"], seed + 99, now_ms, export=dead.export)
        for campaign_id, (state, p) in fleet[0].state.budget.items():
            replacement.state.budget[campaign_id] = (state, p)
            replacement.state._apply_budget(campaign_id, now_ms)
        replacement.state.budget_heard_ms = fleet[0].state.budget_heard_ms
        fleet.append(replacement)
        LOG.info("%s killed holding %d slices; %s joins", dead.server_id, len(dead.state.lease_ids(now_ms)),
                 replacement.server_id)
        return
    c = by_id[event.campaign_id]
    if event.kind == "launch":  # created now: the record, then its ads, as the index builder sends them
        c.history.append(c.record(now_ms))
        producer.produce(topics["campaigns"], key=str(c.campaign_id).encode(), timestamp=now_ms,
                         value=codec.encode("ServingCampaign", c.record(now_ms)))
        _publish_ads(c, producer, codec, topics["ads"], now_ms + 1000)
        for server in fleet:
            server.state.apply(SERVING_CAMPAIGNS, c.record(now_ms), now_ms)
            for ad in c.ad_records(now_ms + 1000):
                server.state.apply(SERVING_ADS, ad, now_ms)
        producer.flush(30)
        time.sleep(CHANGE_TRANSIT_S)
        return
    if event.kind == "raise":
        c.budget_micros = int(c.budget_micros * event.factor)
    elif event.kind == "lower":
        spent = int(days[c.campaign_id].expected_by_minute.sum())
        c.budget_micros = int(spent * event.factor)
        lowered[c.campaign_id] = event.second
    elif event.kind in ("pause", "resume"):
        c.status = "PAUSED" if event.kind == "pause" else "ACTIVE"
    c.version += 1
    days[c.campaign_id].budgets.append((now_ms - DAY0_MS, c.budget_micros))
    c.history.append(c.record(now_ms))
    producer.produce(topics["campaigns"], key=str(c.campaign_id).encode(), timestamp=now_ms,
                     value=codec.encode("ServingCampaign", c.record(now_ms)))
    for server in fleet:  # what the index builder would deliver within about a second
        server.state.apply(SERVING_CAMPAIGNS, c.record(now_ms), now_ms)
    producer.flush(30)
    time.sleep(CHANGE_TRANSIT_S)
