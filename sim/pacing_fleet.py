"""The simulated fleet: each simulated ad server's money path (the serving code that decides and spends), the
day's request stream over the fleet with its beacons and drawn clicks, and last week's market measured from the
same fleet's auctions. Spend goes out through each server's SpendReporter and beacons to the run's ad.events;
what the jobs send back reaches the servers through sim.pacing_jobs."""
from __future__ import annotations

import heapq
import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.targeting import request_terms
from schemas.topics import AD_EVENTS, SERVING_ADS, SERVING_CAMPAIGNS, record_type
from sim.pacing_scenario import (COUNTRIES, DAY0_MS, DAY_MS, PLACEMENTS, RESERVE_MICROS, SLOTS, CampaignDay,
                                 SimCampaign)

AD_EVENT = record_type(AD_EVENTS)


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


@dataclass
class DayTraffic:
    """The day's request stream as the fleet sees it: the simulation's random draws, the beacons written to
    ad.events, the clicks still to fire, and the counts the report reads."""
    rng: np.random.Generator
    fleet: list[SimServer]
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
                              timestamp=event["event_time"], value=self.codec.encode(AD_EVENT, event))

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


def _beacon(impression_id: str, event_type: str, at_ms: int, served_ms: int, w, seq: int) -> dict[str, Any]:
    """An ad.events record for a served ad: the price and billing type its token would carry."""
    return {"event_id": f"{impression_id}-{event_type[0].lower()}", "impression_id": impression_id,
            "event_type": event_type, "event_time": at_ms, "served_time": served_ms, "campaign_id": w.campaign_id,
            "ad_id": w.ad_id, "price_micros": w.charge_per_event_micros,
            "billing_type": "IMPRESSION" if w.billing == "cpm" else "CLICK", "user_id": f"sim-user-{seq}",
            "ip_address": f"10.{seq // 65_536 % 256}.{seq // 256 % 256}.{seq % 256}", "user_agent": "Mozilla/5.0",
            "token_key_id": "sim"}


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
