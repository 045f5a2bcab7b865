"""A simulated day for the learning loop: a world whose TRUE click and conversion probabilities are known
(their formulas in docs/learning.md, "A simulated day with known click probabilities"), served through the
real DecisionEngine and logged as the ad server logs it, with the beacons and conversions those probabilities
draw. Budgets are open all day (pacing is `adserve simulate`'s business). Pure and seeded apart from write_day."""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

from core import training
from core.campaigns import static_score
from core.targeting import compile_targeting, request_terms
from serving.decision.prediction import position_effect
from serving.model.ad_features import AdFeatureSnapshot
from schemas import topics
from serving.served_log import BILLING_OF, ServedRequest, served_record
from sim.synthetic import diurnal  # the same day shape as the pacing simulation

DAY = "2026-03-11"
DIM = 8
CATEGORIES = 10
AFFINITY = 3.0
RENDER_RATE = 0.93
DUPLICATE_CLICK_RATE = 0.05
RESERVE_MICROS = 10_000  # $0.01 of total value per impression
PLACEMENTS = {"feed": (0.5, 0.0, (1, 2, 3)), "article": (0.3, -0.3, (1, 2)), "video": (0.2, 0.3, (1,))}
COUNTRIES = {"US": 0.45, "GB": 0.2, "DE": 0.2, "CA": 0.15}
DEVICES = {"ios": (0.35, 0.1), "android": (0.4, 0.0), "desktop": (0.25, -0.3)}  # share, logit effect
BID_TYPES = (("CPC", 0.6), ("CPM", 0.3), ("CPA", 0.1))
USER_FEATURES = tuple(f"emb_{i}" for i in range(DIM)) + ("activity", "age")
CVR_BASE = 0.05  # the mean conversion rate of a click (the pre-ranker's constant prior is the same)
CVR_AFFINITY = 1.5
CVR_DEVICE = {"ios": 0.2, "android": -0.1, "desktop": 0.3}
DUPLICATE_CONVERSION_RATE = 0.03


def _logit(p):
    return np.log(p) - np.log1p(-p)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@dataclass
class World:
    """Ads and users with everything the true click probability depends on (columns)."""

    seed: int
    ad_id: np.ndarray
    campaign_id: np.ndarray
    bid_type: np.ndarray  # "CPC" | "CPM" | "CPA"
    bid_micros: np.ndarray
    quality_micros: np.ndarray
    category: np.ndarray
    base_ctr: np.ndarray
    ad_embedding: np.ndarray  # (ads, DIM)
    ad_placements: list[tuple[str, ...]]
    ad_countries: list[tuple[str, ...]]
    user_embedding: np.ndarray  # (users, DIM)
    user_device: np.ndarray
    user_country: np.ndarray
    user_activity: np.ndarray
    user_age: np.ndarray
    ctr_prior: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cvr_logit: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per ad: base + category + ad noise

    @property
    def ads(self) -> int:
        return len(self.ad_id)

    @property
    def users(self) -> int:
        return len(self.user_device)

    def true_ctr(self, user: int, ad_rows: np.ndarray, placement: str, position: int) -> np.ndarray:
        """The true click probability of one user on ad rows at a slot position."""
        logit = (_logit(self.base_ctr[ad_rows]) + PLACEMENTS[placement][1] + DEVICES[str(self.user_device[user])][1]
                 + AFFINITY * (self.ad_embedding[ad_rows] @ self.user_embedding[user])
                 + 0.4 * self.user_activity[user] - 0.01 * (self.user_age[user] - 40)
                 + math.log(float(position_effect([position])[0])))
        return _sigmoid(logit)

    def true_cvr(self, user: int, ad_rows: np.ndarray) -> np.ndarray:
        """The true probability that a click of one user on ad rows converts."""
        logit = (self.cvr_logit[ad_rows] + CVR_AFFINITY * (self.ad_embedding[ad_rows] @ self.user_embedding[user])
                 + 0.02 * (self.user_age[user] - 40) + CVR_DEVICE[str(self.user_device[user])])
        return _sigmoid(logit)

    def user_features(self, user: int) -> dict[str, float]:
        """The model's user features exactly as the served log holds them (32-bit floats)."""
        values = np.concatenate([self.user_embedding[user], [self.user_activity[user], self.user_age[user]]])
        return dict(zip(USER_FEATURES, values.astype(np.float32).tolist()))

    def snapshot(self, version: int) -> AdFeatureSnapshot:
        codes = {"CPM": 0, "CPC": 1, "CPA": 2}
        return AdFeatureSnapshot(
            version, self.ad_id.astype(np.int64), self.campaign_id.astype(np.int64),
            np.array([codes[b] for b in self.bid_type], dtype=np.int8), self.bid_micros.astype(np.int64),
            self.ctr_prior.astype(np.float32), (self.quality_micros / 1e4).astype(np.float32),
            self.category.astype(np.int32), self.ad_embedding.astype(np.float32))


def make_world(seed: int = 7, campaigns: int = 100, ads_per_campaign: int = 4, users: int = 20_000) -> World:
    """A world of ads and users; the same seed gives the same world (days differ by their own seed)."""
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    n = campaigns * ads_per_campaign
    campaign_of = np.repeat(np.arange(1, campaigns + 1) + 5_000, ads_per_campaign)
    types = np.array([b for b, _ in BID_TYPES])
    campaign_type = rng.choice(types, size=campaigns, p=[s for _, s in BID_TYPES])
    # bids set so every type wins its share: each type wins a fair share of slots
    bid_of_type = {"CPC": lambda: int(rng.uniform(0.5, 3.0) * 1e6), "CPM": lambda: int(rng.uniform(20, 100) * 1e6),
                   "CPA": lambda: int(rng.uniform(5, 25) * 1e6)}
    campaign_bid = [bid_of_type[t]() for t in campaign_type]
    placements, countries = [], []
    for _ in range(campaigns):
        placements.append(tuple(sorted(pick.sample(tuple(PLACEMENTS), pick.randint(1, 3)))))
        countries.append(tuple(sorted(pick.sample(tuple(COUNTRIES), pick.randint(2, 4)))))
    c = np.repeat(np.arange(campaigns), ads_per_campaign)
    world = World(
        seed=seed, ad_id=campaign_of * 100 + np.tile(np.arange(ads_per_campaign), campaigns),
        campaign_id=campaign_of, bid_type=campaign_type[c],
        bid_micros=np.array([campaign_bid[i] for i in c], dtype=np.int64),
        quality_micros=np.round(rng.normal(0, 1_500, n)).astype(np.int64),
        category=rng.integers(0, CATEGORIES, n), base_ctr=np.clip(np.exp(rng.normal(math.log(0.012), 0.5, n)), 1e-3, 0.2),
        ad_embedding=rng.normal(0, 1 / math.sqrt(DIM), (n, DIM)),
        ad_placements=[placements[i] for i in c], ad_countries=[countries[i] for i in c],
        user_embedding=rng.normal(0, 1 / math.sqrt(DIM), (users, DIM)),
        user_device=rng.choice(list(DEVICES), size=users, p=[s for s, _ in DEVICES.values()]),
        user_country=rng.choice(list(COUNTRIES), size=users, p=list(COUNTRIES.values())),
        user_activity=rng.normal(0, 1, users), user_age=rng.integers(18, 71, users).astype(np.float64))
    # The prior: each ad's true mean click rate at the top of an average-effect placement, over the users.
    sample = rng.choice(users, size=min(users, 4_000), replace=False)
    logit = (_logit(world.base_ctr)[None, :]
             + np.array([DEVICES[d][1] for d in world.user_device[sample]])[:, None]
             + AFFINITY * world.user_embedding[sample] @ world.ad_embedding.T
             + (0.4 * world.user_activity[sample] - 0.01 * (world.user_age[sample] - 40))[:, None])
    world.ctr_prior = _sigmoid(logit).mean(axis=0)
    cvr_rng = np.random.default_rng(seed + 1_000)  # its own stream: the click world stays as it was
    category_effect = cvr_rng.normal(0, 0.6, CATEGORIES)
    world.cvr_logit = float(_logit(CVR_BASE)) + category_effect[world.category] + cvr_rng.normal(0, 0.2, n)
    return world


def placement_multipliers() -> dict[str, float]:
    """The engine's per-placement click-rate multiplier (what the priors know of a placement)."""
    return {p: float(math.exp(effect)) for p, (_, effect, _) in PLACEMENTS.items()}


@dataclass(frozen=True)
class EngineOptions:
    """How the day's decision engine runs: its exploration share, the share of requests the pre-ranker's recall
    monitor checks, and the pre-ranker's weights (None: the engine's defaults)."""

    exploration_share: float = 0.01
    recall_share: float = 0.0
    prerank_weights: np.ndarray | None = None


def build_engine(world: World, predictor=None, options: EngineOptions = EngineOptions()):
    """The real decision engine over the world's ads (index, campaign table) with the given predictor."""
    from serving.decision.campaigns import CampaignRecord, CampaignTable
    from core.reserves import ReserveBook
    from serving.decision.engine import DecisionEngine, EngineConfig
    from serving.decision.index import AdRecord, TargetingIndex

    records = []
    for i in range(world.ads):
        bid_type = str(world.bid_type[i])
        targeting = compile_targeting({"placement": list(world.ad_placements[i]),
                                       "location": list(world.ad_countries[i])})
        records.append(AdRecord(
            ad_id=int(world.ad_id[i]), campaign_id=int(world.campaign_id[i]), version=1, bid_type=bid_type,
            bid_micros=int(world.bid_micros[i]), quality_micros=int(world.quality_micros[i]),
            static_score=static_score(bid_type, int(world.bid_micros[i]), 0.0), targeting=targeting,
            creative_ref=f"creative-{world.ad_id[i]}", landing_url=f"https://sim.example/{world.ad_id[i]}",
            ctr_prior=float(world.ctr_prior[i]), embedding=[float(v) for v in world.ad_embedding[i]]))
    campaigns = CampaignTable()
    for cid in sorted(set(int(c) for c in world.campaign_id)):
        campaigns.upsert(CampaignRecord(campaign_id=cid, advertiser_id=cid, version=1))
    index = TargetingIndex.build(records, embedding_dim=DIM)
    config = EngineConfig(exploration_share=options.exploration_share, placement_ctr_multiplier=placement_multipliers(),
                          recall_sample_share=options.recall_share, prerank_weights=options.prerank_weights)
    return DecisionEngine(index, campaigns, predictor, config, reserves=ReserveBook.fixed(RESERVE_MICROS))


def day_start_ms(day: str) -> int:
    """Midnight UTC of a day, epoch ms (also the version of the ad-feature snapshot the day is served with)."""
    return int(datetime.fromisoformat(day).replace(tzinfo=timezone.utc).timestamp() * 1000)


def request_times_ms(day_ms: int, requests: int, rng: np.random.Generator) -> np.ndarray:
    """Request instants over the day, drawn from the diurnal curve, sorted."""
    grid = np.arange(0, 86_400, 60)
    weights = np.array([diurnal(s) for s in grid])
    minutes = rng.choice(len(grid), size=requests, p=weights / weights.sum())
    return np.sort(day_ms + (grid[minutes] * 1000 + rng.integers(0, 60_000, requests)).astype(np.int64))


@dataclass
class DayLog:
    day: str
    seed: int
    served: list[dict[str, Any]]
    events: list[dict[str, Any]]
    truth: dict[str, float]
    snapshot: AdFeatureSnapshot
    counts: dict[str, int]
    prerank_samples: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    conversions: list[dict[str, Any]] = field(default_factory=list)
    conversion_truth: dict[str, float] = field(default_factory=dict)  # clicked impression id -> true pCVR


class _Request(NamedTuple):
    """Who asked, where and when: one request of the day."""

    user: int
    placement: str
    now_ms: int


def simulate_day(world: World, *, day: str = DAY, requests: int = 50_000, seed: int = 1, predictor=None,
                 options: EngineOptions = EngineOptions(), collect_prerank: bool = False,
                 progress: Callable[[int], None] | None = None) -> DayLog:
    """One day of requests through the decision engine, with the beacons the true click rates produce. With
    options.recall_share, that share of requests is also checked by the pre-ranker's recall monitor (counts
    `recall_checked`, `recall_hits`); with collect_prerank too, the checked requests' candidates are kept as
    samples for refitting the pre-ranker's weights (DayLog.prerank_samples, prerank.fit_weights)."""
    from serving.decision import recall

    day_ms = day_start_ms(day)
    engine = build_engine(world, predictor, options)
    monitor = recall.RecallMonitor()
    rng, np_rng, rnd = np.random.default_rng(seed), np.random.default_rng(seed + 1), random.Random(seed)
    conversion_rng = np.random.default_rng(seed + 2)  # its own stream: the clicks stay as they were
    row_of = {int(a): i for i, a in enumerate(world.ad_id)}
    counts = {"requests": 0, "filled_slots": 0, "impressions": 0, "clicks": 0, "conversions": 0, "fallback": 0,
              "explored": 0, "recall_checked": 0, "recall_hits": 0}
    log = DayLog(day, seed, [], [], {}, world.snapshot(day_ms), counts)
    names, shares = list(PLACEMENTS), [s for s, _, _ in PLACEMENTS.values()]
    for n, now_ms in enumerate(request_times_ms(day_ms, requests, rng).tolist()):
        user = int(rng.integers(world.users))
        placement = names[int(rng.choice(len(names), p=shares))]
        context = _request_context(world, f"{day}-{seed}-{n:07d}", user, placement, now_ms)
        decision = engine.decide(context, clock=time.perf_counter, deadline=time.perf_counter() + 10.0, rng=rnd,
                                 np_rng=np_rng)
        request = ServedRequest(context.request_id, placement, context.country, f"user-{user}", context.device,
                                "en", None, context.slot_positions)
        record = served_record(decision, request, server_id="learning-sim", now_ms=now_ms,
                               user_features=context.user_features, snapshot_version=log.snapshot.version,
                               terms=decision.terms)
        log.served.append(record)
        counts["requests"] += 1
        counts["fallback"] += decision.scored_by_fallback
        counts["explored"] += decision.explored
        if decision.recall_sample is not None:  # after the response, off the request path
            monitor.record(recall.check(engine.index, decision.recall_sample, engine.predictor))
            counts["recall_checked"], counts["recall_hits"] = monitor.checked, monitor.hits
            if collect_prerank:
                log.prerank_samples.append(recall.prerank_sample(engine.index, decision.recall_sample,
                                                                 engine.predictor))
        asked = _Request(user, placement, now_ms)
        for w, logged in zip(decision.winners, record["winners"]):
            _slot_outcome(world, row_of[w.ad_id], w, logged, asked, rng, conversion_rng, log)
        if progress is not None and n % 1000 == 999:
            progress(1000)
    log.events.sort(key=lambda e: (e["event_time"], e["event_id"]))
    log.conversions.sort(key=lambda c: (c["event_time"], c["conversion_id"]))
    return log


def _request_context(world: World, request_id: str, user: int, placement: str, now_ms: int):
    """The engine's view of one user's request at a placement (the user's country, device and features)."""
    from serving.decision.engine import RequestContext
    from serving.decision.filters import FilterContext

    country, device = str(world.user_country[user]), str(world.user_device[user])
    return RequestContext(request_id, placement, PLACEMENTS[placement][2],
                          request_terms(location=[country], placement=placement), FilterContext(now_ms),
                          country=country, user_embedding=world.user_embedding[user].astype(np.float32),
                          user_features=world.user_features(user), device=device)


def _slot_outcome(world: World, row: int, w, logged: dict[str, Any], asked: _Request, rng: np.random.Generator,
                  conversion_rng: np.random.Generator, log: DayLog) -> None:
    """A filled slot's true click rate, its beacons, and the conversion its first click may bring."""
    user, placement, now_ms = asked
    log.counts["filled_slots"] += 1
    p = float(world.true_ctr(user, np.array([row]), placement, w.position)[0])
    log.truth[logged["impression_id"]] = p
    beacons = _beacons(logged, w, now_ms, user, p, rng, log.counts)
    log.events.extend(beacons)
    clicks = [b for b in beacons if b["event_type"] == "CLICK"]
    if clicks:
        c = float(world.true_cvr(user, np.array([row]))[0])
        log.conversion_truth[logged["impression_id"]] = c
        log.conversions.extend(_conversions(clicks[0], c, conversion_rng, log.counts))


def _conversions(click: dict[str, Any], c: float, rng: np.random.Generator,
                 counts: dict[str, int]) -> list[dict[str, Any]]:
    """The conversion reports of one click: none, or one minutes to days later (median 20 minutes), now and
    then sent twice."""
    if rng.random() >= c:
        return []
    at_ms = int(click["event_time"]) + int(math.exp(rng.normal(math.log(1_200), 1.5)) * 1000)
    report = {"conversion_id": f"{click['impression_id']}:v", "impression_id": click["impression_id"],
              "event_time": at_ms, "served_time": click["served_time"], "click_time": click["event_time"],
              "campaign_id": click["campaign_id"], "ad_id": click["ad_id"], "token_key_id": "sim"}
    counts["conversions"] += 1
    if rng.random() < DUPLICATE_CONVERSION_RATE:
        return [report, {**report, "conversion_id": f"{click['impression_id']}:v2"}]
    return [report]


def _beacons(logged: dict[str, Any], winner, served_ms: int, user: int, p: float, rng: np.random.Generator,
             counts: dict[str, int]) -> list[dict[str, Any]]:
    if rng.random() >= RENDER_RATE:
        return []
    rendered_ms = served_ms + int(rng.uniform(300, 5_000))
    base = {"impression_id": logged["impression_id"], "served_time": served_ms, "campaign_id": winner.campaign_id,
            "ad_id": winner.ad_id, "price_micros": winner.charge_per_event_micros,
            "billing_type": BILLING_OF[winner.billing], "user_id": f"user-{user}", "ip_address": f"10.{user % 250}.0.1",
            "user_agent": "Mozilla/5.0 (learning-sim)", "token_key_id": "sim"}
    out = [{**base, "event_id": f"{logged['impression_id']}:i", "event_type": "IMPRESSION", "event_time": rendered_ms}]
    counts["impressions"] += 1
    if rng.random() < p:
        click_ms = rendered_ms + 1_000 + int(math.exp(rng.normal(2.5, 1.2)) * 1000)
        click = {**base, "event_id": f"{logged['impression_id']}:c", "event_type": "CLICK", "event_time": click_ms}
        out.append(click)
        counts["clicks"] += 1
        if rng.random() < DUPLICATE_CLICK_RATE:
            out.append(dict(click))  # the same beacon fired twice
    return out


def write_day(log: DayLog, out: Path, keep_rate: float = training.DEFAULT_KEEP_RATE) -> dict[str, Any]:
    """Write the day's files to `out`: served.avro, events.avro, conversions.avro, examples.avro (click and
    conversion examples through core.training.join at `keep_rate`), truth.json and truth_conversions.json (the
    true probabilities by impression id), ad-features/ (the snapshot served with) and day.json (what was run,
    and counts). Returns day.json's content."""
    import fastavro

    from schemas.codec import default_registry, plain_timestamps

    out.mkdir(parents=True, exist_ok=True)
    registry = default_registry()
    examples = training.join(log.served, log.events, keep_rate, log.conversions)
    for name, topic, records in (("served.avro", topics.AD_SERVED, log.served),
                                 ("events.avro", topics.AD_EVENTS, log.events),
                                 ("conversions.avro", topics.AD_CONVERSIONS, log.conversions),
                                 ("examples.avro", topics.TRAINING_EXAMPLES, examples)):
        schema = fastavro.parse_schema(plain_timestamps(registry.schema(topics.record_type(topic))))
        with open(out / name, "wb") as f:
            fastavro.writer(f, schema, records, codec="deflate")
    (out / "truth.json").write_text(json.dumps(log.truth))
    (out / "truth_conversions.json").write_text(json.dumps(log.conversion_truth))
    log.snapshot.write(out / "ad-features")
    clicks = [e for e in examples if e["task"] == training.CLICK]
    converted = [e for e in examples if e["task"] == training.CONVERSION]
    positives = sum(e["label"] for e in clicks)
    meta = {"day": log.day, "seed": log.seed, "keep_rate": keep_rate, "snapshot_version": log.snapshot.version,
            **log.counts, "examples": len(clicks), "positives": positives, "negatives_kept": len(clicks) - positives,
            "conversion_examples": len(converted), "conversions_labelled": sum(e["label"] for e in converted)}
    (out / "day.json").write_text(json.dumps(meta, indent=2))
    return meta


def read_avro(path: Path) -> list[dict[str, Any]]:
    """Records of one of the day's files, times as int epoch ms."""
    import fastavro

    from pipelines.avro_files import normalise

    with open(path, "rb") as f:
        return [normalise(r) for r in fastavro.reader(f)]
