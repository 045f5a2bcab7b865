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
the state (`sim.pacing_jobs`: `deploy_jobs`, `BudgetFeed`).

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

import json
import logging
import math
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from core.errors import RunFailed
from schemas.topics import SERVING_ADS, SERVING_CAMPAIGNS, record_type
from sim.pacing_billing import CLOCK_CAMPAIGN, close_billing, job_bill
from sim.pacing_fleet import DayTraffic, SimServer, last_week
from sim.pacing_jobs import BudgetFeed, DayRun, deploy_jobs, drain, stop_jobs
from sim.pacing_scenario import (COUNTRIES, DAY0_MS, DAY_MS, DOLLAR, FULL_DAY_REQUESTS, FULL_DAY_SERVERS,
                                 PLACEMENTS, RESERVE_MICROS, SIM_DAY, SLOTS, SPIKE, CampaignDay, Event, JobBill,
                                 SimCampaign, curves, script, traffic)

__all__ = ["CHANGE_TRANSIT_S", "CLOCK_CAMPAIGN", "COUNTRIES", "DAY0_MS", "DAY_MS", "DOLLAR", "FULL_DAY_REQUESTS",
           "FULL_DAY_SERVERS", "PLACEMENTS", "REQUEST_COST_S", "RESERVE_MICROS", "SECOND_COST_S", "SIM_DAY", "SLOTS",
           "SPIKE", "BudgetFeed", "CampaignDay", "DayProgress", "DaySettings", "Event", "JobBill", "OnStart",
           "SimCampaign", "SimServer", "curves", "job_bill", "last_week", "run_day", "run_topics", "script",
           "traffic", "work_model"]

LOG = logging.getLogger("sim.pacing_day")
SERVING_AD, SERVING_CAMPAIGN = (record_type(topic) for topic in (SERVING_ADS, SERVING_CAMPAIGNS))
# Wall seconds the day stands still after a campaign record is published. The day runs ~100 simulated seconds
# per wall second, so without it a record's second or so of transit to the jobs would be minutes of event time:
# the click aggregator would close the windows after a budget cut before the cut reached it and bill them
# under the old budget (in service the record arrives long before those windows close).
CHANGE_TRANSIT_S = 2.0


@dataclass(frozen=True)
class DaySettings:
    """The day asked for: `requests` ad requests over the day (every budget scales with them, see `script`)
    through `servers` simulated ad servers, each at most `lead_s` seconds of event time ahead of the newest budget
    state; traffic, clicks and campaigns drawn from `seed`; the budget job at `parallelism`."""

    requests: int
    seed: int
    servers: int
    lead_s: int
    parallelism: int = 2


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


def run_day(platform, settings: DaySettings, *, out_dir: Path, progress: Callable[[DayProgress], None] | None = None,
            on_start: OnStart | None = None, log: Callable[[str], None] = LOG.info) -> dict[str, Any]:
    """The day `settings` asks for on the platform `platform`: its topics, its jobs, the simulated fleet, the
    billing's close and the recount. Budgets scale with `settings.requests` (see `script`). `progress` hears where
    the day stands every simulated minute; `on_start` (see OnStart) starts whatever should watch the day; `log`
    hears the steps."""
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
        TopicSpec(t, key="campaign id", schema="", partitions=settings.parallelism if n == "spend" else 1,
                  compacted=n in ("campaigns", "ads", "state")) for n, t in topics.items()))
    base_id = 9_000_000 + int(run[:5], 16) % 900_000 * 100
    budget_scale = settings.requests / FULL_DAY_REQUESTS
    campaigns, events = script(base_id, settings.seed, budget_scale)
    out_dir.mkdir(parents=True, exist_ok=True)
    log("last week's market: the fleet's auctions on a sample of its requests ...")
    market = last_week(campaigns, platform.kafka_bootstrap, topics["spend"], seed=settings.seed,
                       day_requests=settings.requests)
    curves_path = out_dir / "curves.json"
    curves_path.write_text(json.dumps(curves(campaigns, market)))
    codec = AvroCodec()
    producer = kafka.producer(platform.kafka_bootstrap, **{"linger.ms": 2})
    for c in campaigns:
        if not c.launch_s:
            producer.produce(topics["campaigns"], key=str(c.campaign_id).encode(),
                             value=codec.encode(SERVING_CAMPAIGN, c.record(DAY0_MS - 60_000)),
                             timestamp=DAY0_MS - 60_000)
            _publish_ads(c, producer, codec, topics["ads"], DAY0_MS - 60_000)
    producer.flush(30)
    log(f"deploying budget_pacing and click_aggregator on the run's topics (sim.{run}.*) ...")
    job_id, billing_id = deploy_jobs(platform, topics, run, curves_path, settings.parallelism)
    feed = BudgetFeed(platform.kafka_bootstrap, [topics["state"], topics["leases"], topics["billed"]])
    feed.start()
    export = FleetExport(platform.prometheus_targets_dir)  # the fleet's /metrics, up until the day's end
    try:
        deploy.wait_running(platform.flink_rest_url, job_id)
        deploy.wait_running(platform.flink_rest_url, billing_id)
        on_end = on_start(topics, platform.redis_url) if on_start is not None else None
        result = _simulate(DayRun(platform, topics, feed, producer, codec, export), campaigns, events, settings,
                           progress, log)
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
        stop_jobs(platform, job_id, billing_id)
    return result




def _wait_for_budget(feed, now_ms: int, second: int, lead_s: int) -> float:
    """Hold the servers at most lead_s of event time ahead of the budget states they have heard; seconds held."""
    wait_began = time.monotonic()
    if second <= lead_s:
        return 0.0
    with feed.advanced:
        if not feed.advanced.wait_for(lambda: feed.progress_ms >= now_ms - lead_s * 1000, timeout=120):
            raise RunFailed(f"the budget job stopped answering at {_clock(feed.progress_ms)}")
    return time.monotonic() - wait_began


def _end_of_second(second: int, traffic_state: DayTraffic, lowered: dict[int, int]) -> None:
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



def _simulate(run: DayRun, campaigns: list[SimCampaign], events: list[Event], settings: DaySettings,
              progress: Callable[[DayProgress], None] | None, log: Callable[[str], None]) -> dict[str, Any]:
    from streams.pacing_store import PacingStore

    feed, seed, lead_s = run.feed, settings.seed, settings.lead_s
    rng = np.random.default_rng(seed)
    fleet = [SimServer(f"sim-s{i}", campaigns, run.platform.kafka_bootstrap, run.topics["spend"], seed + i, DAY0_MS,
                       export=run.export) for i in range(settings.servers)]
    days = {c.campaign_id: CampaignDay(c, [(0, c.budget_micros)]) for c in campaigns}
    versions = [c.record(DAY0_MS - 60_000) for c in campaigns if not c.launch_s]  # for the recount
    true_ctr_factor = {ad["ad_id"]: float(np.exp(rng.normal(0, 0.15) - 0.15 ** 2 / 2))
                       for c in campaigns for ad in c.ad_records(DAY0_MS)}
    day_traffic = DayTraffic(rng, fleet, days, run.producer, run.codec, run.topics["events"], true_ctr_factor,
                             run.export)
    rate_scale = settings.requests / sum(traffic(s) for s in range(0, 86_400, 10)) / 10
    pending_events = list(events)
    waited_s = 0.0
    lowered: dict[int, int] = {}
    work = work_model(settings.requests)
    began = time.monotonic()
    for second in range(86_400):
        now_ms = DAY0_MS + second * 1000
        waited_s += _wait_for_budget(feed, now_ms, second, lead_s)
        drain(feed, fleet, now_ms)
        while pending_events and pending_events[0].second <= second:
            _apply_event(pending_events.pop(0), run, day_traffic, campaigns, now_ms, seed, lowered)
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
    billing = close_billing(run, days, day_traffic.beacons, versions)
    store = PacingStore(run.platform.redis_url)
    pacing = {c.campaign_id: store.read(c.campaign_id) for c in campaigns}
    store.close()
    return {"days": days, "pacing": pacing, "requests": day_traffic.served_requests,
            "filled_slots": day_traffic.filled_slots, "billing": billing,
            "wall_s": time.monotonic() - began, "day_wall_s": day_wall_s, "waited_s": waited_s, "lead_s": lead_s,
            "servers": len(fleet)}


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%H:%M:%S") if ms else "the start"



def _publish_ads(c: SimCampaign, producer, codec, topic: str, at_ms: int) -> None:
    """The campaign's ads on the run's serving.ads: the pacer learns where they serve and what they are worth."""
    for ad in c.ad_records(at_ms):
        producer.produce(topic, key=str(ad["ad_id"]).encode(), value=codec.encode(SERVING_AD, ad), timestamp=at_ms)


def _apply_event(event: Event, run: DayRun, day_traffic: DayTraffic, campaigns: list[SimCampaign], now_ms: int,
                 seed: int, lowered: dict[int, int]) -> None:
    """One change of the day's script at `now_ms`: a server killed and replaced, a campaign launched, or a
    campaign's budget or status changed; each published to the run's topics and applied on every server."""
    fleet, days, producer, codec, topics = day_traffic.fleet, day_traffic.days, run.producer, run.codec, run.topics
    if event.kind == "kill":
        # The server dies with its unreported second and its slices; a replacement boots with the catalog
        # and the budget states it reads from the compacted topic (here: the survivors' view).
        dead = fleet.pop()
        if dead.export is not None:  # a dead server's /metrics goes with it
            dead.export.stop(dead.export_port)
        replacement = SimServer(f"{dead.server_id}-replacement", campaigns, run.platform.kafka_bootstrap,
                                topics["spend"], seed + 99, now_ms, export=dead.export)
        for campaign_id, (state, p) in fleet[0].state.budget.items():
            replacement.state.budget[campaign_id] = (state, p)
            replacement.state._apply_budget(campaign_id, now_ms)
        replacement.state.budget_heard_ms = fleet[0].state.budget_heard_ms
        fleet.append(replacement)
        LOG.info("%s killed holding %d slices; %s joins", dead.server_id, len(dead.state.lease_ids(now_ms)),
                 replacement.server_id)
        return
    c = days[event.campaign_id].campaign
    if event.kind == "launch":  # created now: the record, then its ads, as the index builder sends them
        c.history.append(c.record(now_ms))
        producer.produce(topics["campaigns"], key=str(c.campaign_id).encode(), timestamp=now_ms,
                         value=codec.encode(SERVING_CAMPAIGN, c.record(now_ms)))
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
                     value=codec.encode(SERVING_CAMPAIGN, c.record(now_ms)))
    for server in fleet:  # what the index builder would deliver within about a second
        server.state.apply(SERVING_CAMPAIGNS, c.record(now_ms), now_ms)
    producer.flush(30)
    time.sleep(CHANGE_TRANSIT_S)
