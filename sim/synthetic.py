"""Every synthetic world the simulators and benchmarks run on: the day's traffic shape, campaign-store
campaigns and ads, their serving records, ad events and spend reports, the serving demo's catalogue, and the
columnar catalogue and requests of the decision-engine benchmarks. The same draws for the same seed (random
event ids aside); times are passed in, never read here; no I/O."""
from __future__ import annotations

import math
import random
import uuid
from typing import Any

import numpy as np

from core.campaigns import ad_serving_record, campaign_serving_record, validate_ad, validate_campaign
from core.targeting import Targeting, request_terms
from schemas.codec import AvroCodec
from schemas.topics import BUDGET_SPEND, SERVING_ADS, SERVING_CAMPAIGNS, record_type
from serving.decision.campaigns import CampaignTable
from serving.decision.index import AdColumns, TargetingColumns, TargetingIndex

DAY_START_MS = 1_800_316_800_000  # 2027-01-19T00:00:00Z
SERVING_AD, SERVING_CAMPAIGN, SPEND_REPORT = (record_type(topic) for topic in (
    SERVING_ADS, SERVING_CAMPAIGNS, BUDGET_SPEND))


def diurnal(second: float) -> float:
    """Relative request rate over the day (no live event): a night trough, a late-morning and an evening peak."""
    hour = second / 3600
    return 0.15 + 0.5 * math.exp(-((hour - 11) / 3.5) ** 2) + 1.0 * math.exp(-((hour - 20.5) / 2.5) ** 2)


# ------------------------------------------------------------------ campaign-store campaigns and ads

STORE_COUNTRIES = ["US", "GB", "DE", "FR", "CA", "BR", "IN", "JP", "AU", "ES"]
STORE_AGE_BANDS = ["18-24", "25-34", "35-44", "45-54", "55-64", "65+"]
STORE_DEVICES = ["ios", "android", "desktop"]
STORE_PLACEMENTS = ["feed", "story", "article", "video"]


def synthetic_targeting(rng: random.Random) -> dict[str, Any]:
    """An ad's realistic targeting: a few countries, an age range, placements, often interests, sometimes devices."""
    lo = rng.randrange(len(STORE_AGE_BANDS) - 1)
    targeting: dict[str, Any] = {"location": rng.sample(STORE_COUNTRIES, rng.randint(1, 3)),
                                 "age_band": STORE_AGE_BANDS[lo: lo + rng.randint(1, 3)],
                                 "placement": rng.sample(STORE_PLACEMENTS, rng.randint(1, 3))}
    if rng.random() < 0.7:
        targeting["interest"] = [f"topic{rng.randrange(500)}" for _ in range(rng.randint(3, 20))]
    if rng.random() < 0.3:
        targeting["device"] = rng.sample(STORE_DEVICES, rng.randint(1, 2))
    return targeting


def synthetic_campaign(rng: random.Random, n_ads: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A validated campaign and its `n_ads` validated ads, as an advertiser would create them in the store."""
    bid_type = rng.choices(["CPM", "CPC", "CPA"], [0.3, 0.6, 0.1])[0]
    campaign = validate_campaign({
        "name": f"synthetic-{rng.randrange(10**9)}", "bid_type": bid_type,
        "daily_budget_micros": rng.choice([20, 100, 1_000, 10_000, 50_000]) * 1_000_000,
        "timezone": rng.choice(["UTC", "America/New_York", "Europe/Berlin", "Asia/Tokyo"]),
        "cap_per_day": rng.choice([None, None, 3, 5]),
        "cpa_target_micros": rng.randint(5, 80) * 1_000_000 if bid_type == "CPA" else None})
    ads = []
    for _ in range(n_ads):
        targeting = synthetic_targeting(rng)
        bid = {"CPM": rng.randint(500_000, 20_000_000), "CPC": rng.randint(100_000, 3_000_000),
               "CPA": rng.randint(5_000_000, 80_000_000)}[bid_type]
        ads.append(validate_ad({"creative_ref": f"cdn://synthetic/{rng.randrange(10**9)}.png",
                                "landing_url": f"https://advertiser{rng.randrange(10**6)}.example/",
                                "bid_micros": bid, "targeting": targeting}, creating=True))
    return campaign, ads


def synthetic_serving_records(n: int, seed: int = 5) -> dict[str, list[dict[str, Any]]]:
    """`n` approved live ads (the platform's quality) and their campaigns, as serving.ads and serving.campaigns
    carry them: twenty store campaigns of 100 ads each, repeated under fresh ids."""
    rng = random.Random(seed)
    campaigns, ads = [], []
    base = 9_000_000_000_000
    per = 100
    templates = [synthetic_campaign(rng, per) for _ in range(20)]
    for c in range(max(1, n // per)):
        fields, ad_fields = templates[c % len(templates)]
        cid = base + c
        campaigns.append(campaign_serving_record({**fields, "campaign_id": cid, "advertiser_id": cid,
                                                  "version": 1}, 1))
        for j, a in enumerate(ad_fields):  # as the store holds an approved ad, with the platform's quality
            ads.append(ad_serving_record({**a, "ad_id": cid * 1000 + j, "campaign_id": cid, "advertiser_id": cid,
                                          "bid_type": fields["bid_type"], "version": 1, "quality_prior": 0.0,
                                          "review_status": "APPROVED"}, 1))
    return {SERVING_CAMPAIGNS: campaigns, SERVING_ADS: ads[:n]}


# ------------------------------------------------------------------ ad events

def ad_events(seed: int, *, events: int, campaigns: int = 40, minutes: int = 30,
              start_ms: int = DAY_START_MS) -> list[dict[str, Any]]:
    """Impressions with about 2 % clicks for `campaigns` campaigns over `minutes` of event time,
    slightly out of order (up to 2 s), deterministic for a seed."""
    rng = random.Random(seed)
    plans = []
    for c in range(campaigns):
        billing = "CLICK" if rng.random() < 0.4 else "IMPRESSION"
        price = rng.randint(200_000, 3_000_000) if billing == "CLICK" else rng.randint(500, 8_000)
        plans.append((10_000 + c, billing, price, rng.random() + 0.2))
    weights = [p[3] for p in plans]
    span_ms = minutes * 60_000
    out = []
    for n in range(events):
        campaign_id, billing, price, _ = rng.choices(plans, weights)[0]
        nominal = start_ms + n * span_ms // events
        event_time = max(start_ms, nominal - rng.randint(0, 2_000))
        out.append({
            "event_id": f"e-{seed}-{n}", "impression_id": f"i-{seed}-{n}",
            "event_type": "CLICK" if rng.random() < 0.02 else "IMPRESSION",
            "event_time": event_time, "served_time": event_time - rng.randint(100, 5_000),
            "campaign_id": campaign_id, "ad_id": campaign_id * 10 + rng.randint(0, 4),
            "price_micros": price, "billing_type": billing,
            "user_id": f"u{rng.randint(0, 5_000)}", "ip_address": f"198.51.100.{rng.randint(1, 254)}",
            "user_agent": "Mozilla/5.0", "token_key_id": "k1",
        })
    return out


# ------------------------------------------------------------------ the serving demo's catalogue

DEMO_COUNTRIES = ["US", "GB", "DE", "FR", "CA"]
DEMO_PLACEMENTS = ["feed", "story", "article"]
DEMO_DEVICES = ["ios", "android", "desktop"]
DEMO_INTERESTS = [f"topic{i}" for i in range(40)]


def demo_catalogue(run: int, rng: random.Random, campaigns: int, ads_per_campaign: int, now: int):
    """The serving demo's campaigns and ads as (key, ServingCampaign/ServingAd bytes, timestamp) records, with
    each campaign's frequency cap and each ad's landing URL: ids from `run` on, stamped `now` (epoch ms)."""
    codec = AvroCodec()
    camp_records, ad_records, caps, landing = [], [], {}, {}
    for c in range(campaigns):
        cid = run + c
        bid_type = "CPM" if c % 3 == 0 else "CPC"
        cap = rng.choice([None, None, 1, 2, 3])
        caps[cid] = cap
        camp_records.append((str(cid).encode(), codec.encode(SERVING_CAMPAIGN, {
            "campaign_id": cid, "advertiser_id": run + c // 2, "version": 1, "event_time": now, "status": "ACTIVE",
            "bid_type": bid_type, "daily_budget_micros": 50_000_000, "currency": "USD", "timezone": "UTC",
            "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": cap, "cap_per_week": None,
            "cpa_target_micros": None}), now))
        for a in range(ads_per_campaign):
            aid = run + c * 100 + a
            targeting = [{"attribute": "location", "values": rng.sample(DEMO_COUNTRIES, rng.randint(1, 3)),
                          "excluded": False},
                         {"attribute": "placement", "values": rng.sample(DEMO_PLACEMENTS, rng.randint(1, 2)),
                          "excluded": False}]
            if rng.random() < 0.5:
                targeting.append({"attribute": "interest", "values": rng.sample(DEMO_INTERESTS, 5), "excluded": False})
            if rng.random() < 0.3:
                targeting.append({"attribute": "device", "values": rng.sample(DEMO_DEVICES, 2), "excluded": False})
            landing[aid] = f"https://advertiser{cid}.example/landing/{aid}"
            ad_records.append((str(aid).encode(), codec.encode(SERVING_AD, {
                "ad_id": aid, "campaign_id": cid, "advertiser_id": run + c // 2, "version": 1, "event_time": now,
                "removed": False, "bid_type": bid_type,
                "bid_micros": (rng.randint(1_000_000, 20_000_000) if bid_type == "CPM"
                               else rng.randint(200_000, 3_000_000)),
                "quality_prior": float(rng.randint(-1_000, 1_000)), "creative_ref": f"creative/{aid}",
                "landing_url": landing[aid], "static_score": rng.random(), "targeting": targeting}), now))
    return camp_records, ad_records, caps, landing


# ------------------------------------------------------------------ event and spend-report streams

BOT = "Mozilla/5.0 (compatible; bingbot/2.0)"


def billing_events(count: int, campaigns: int, seed: int, start_ms: int, per_second: int, clock=None):
    """(campaign id, AdEvent) in event-time order: impressions, their clicks (~2 %), repeated beacons (~3 %),
    bots (~0.5 %). `clock`: a function giving the event time (real time for the latency part)."""
    rng = random.Random(seed)
    n = 0
    while n < count:
        at = clock() if clock else start_ms + n * 1000 // per_second
        campaign = rng.randint(1, campaigns)
        billing = "CLICK" if campaign % 2 else "IMPRESSION"
        impression = f"{seed}-{n}"
        event = {"event_id": uuid.uuid4().hex, "impression_id": impression, "event_type": "IMPRESSION",
                 "event_time": at, "served_time": at - rng.randint(200, 3000), "campaign_id": campaign,
                 "ad_id": campaign * 10, "price_micros": 2_000_000 if billing == "CLICK" else 5_000,
                 "billing_type": billing, "user_id": f"u{rng.randint(1, 200_000)}",
                 "ip_address": f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
                 "user_agent": BOT if rng.random() < 0.005 else "Mozilla/5.0", "token_key_id": "k1"}
        yield campaign, event
        n += 1
        if rng.random() < 0.03 and n < count:
            yield campaign, dict(event, event_id=uuid.uuid4().hex)
            n += 1
        if rng.random() < 0.02 and n < count:
            yield campaign, dict(event, event_id=uuid.uuid4().hex, event_type="CLICK",
                                 served_time=event["served_time"] - 2000)
            n += 1


def spend_reports(items: int, servers: int, campaigns: int, seed: int, start_ms: int):
    """(key, value, timestamp, partition|None) spend reports, second by second, with per-partition heartbeats."""
    codec = AvroCodec()
    rng = random.Random(seed)
    sequence = [0] * servers
    produced = second = 0
    while produced < items:
        now = start_ms + second * 1000
        for server in range(servers):
            sequence[server] += 1
            for campaign in rng.sample(range(1, campaigns + 1), min(campaigns, 50)):
                if produced >= items:
                    break
                produced += 1
                yield (str(campaign).encode(), codec.encode(SPEND_REPORT, {
                    "server_id": f"bench-{server}", "sequence": sequence[server], "campaign_id": campaign,
                    "event_time": now, "interval_start": now - 1000, "expected_spend_micros": rng.randint(1, 5000),
                    "served_ads": 1, "eligible_requests": 3, "lease_id": None, "max_price_micros": 2_000_000,
                    "wants_slice": False}), now, None)
        second += 1
        for partition in range(4):
            yield b"0", codec.encode(SPEND_REPORT, {
                "server_id": "bench-hb", "sequence": second, "campaign_id": 0, "event_time": now,
                "interval_start": now, "expected_spend_micros": 0, "served_ads": 0, "eligible_requests": 0,
                "lease_id": None, "max_price_micros": 0, "wants_slice": False}), now, partition


def spend_batches(items: int, servers: int, campaigns: int, seed: int, start_ms: int, partitions: int = 4):
    """(key, value, timestamp, partition, items in it) spend reports as ad servers send them: second by second,
    each server's campaigns of the second in one record per partition (core.spend.batch_records), so every
    server's records are also every partition's heartbeats."""
    import numpy as np

    from core.spend import Partitioner, SpendCut, batch_records

    codec = AvroCodec()
    rng = random.Random(seed)
    partitioner = Partitioner(partitions)
    sequence = [0] * servers
    produced = second = 0
    while produced < items:
        now = start_ms + second * 1000
        for server in range(servers):
            sequence[server] += 1
            chosen = sorted(rng.sample(range(1, campaigns + 1), min(campaigns, 50, items - produced)))
            n = len(chosen)
            produced += n
            cut = SpendCut(f"bench-{server}", sequence[server], now - 1000, now, np.array(chosen, np.int64),
                           np.array([rng.randint(1, 5000) for _ in range(n)], np.int64), np.ones(n, np.int32),
                           np.full(n, 3, np.int32), np.full(n, 2_000_000, np.int64))
            for partition, record in batch_records(cut, partitions, partitioner):
                count = len(record["campaigns"]["campaign_id"]) // 8
                yield str(partition).encode(), codec.encode(SPEND_REPORT, record), now, partition, count
            if produced >= items:
                break
        second += 1


# ------------------------------------------------------------------ the columnar catalogue (design's shape)

COUNTRIES = [f"C{i:02d}" for i in range(30)]
REGIONS_PER_COUNTRY, CITIES_PER_REGION = 5, 4
AGE_BANDS = ["13-17", "18-24", "25-34", "35-44", "45-54", "55-64", "65+"]
GENDERS = ["female", "male", "other"]
LANGUAGES = [f"l{i}" for i in range(15)]
DEVICES = ["ios", "android", "desktop", "tablet", "ctv"]
PLACEMENTS = [f"p{i}" for i in range(10)]
INTERESTS = 2_000
INTEREST_STEP = 7  # coprime with 2,000: an ad's interests are distinct


def country_weights() -> np.ndarray:
    """Zipf-like country shares: a few large markets, a long tail."""
    w = 1.0 / np.arange(1, len(COUNTRIES) + 1)
    return w / w.sum()


class Vocabulary:
    """Every targeting term of the catalogue, numbered: locations at three levels, demographics, interests,
    custom audiences (included, then excluded)."""

    def __init__(self, audiences: int):
        self.keys: list[tuple[str, str, bool]] = []
        self.ids: dict[tuple[str, str, bool], int] = {}
        self.audiences = audiences
        for c in COUNTRIES:
            self.add("location", c)
            for r in range(REGIONS_PER_COUNTRY):
                self.add("location", f"{c}/R{r}")
                for k in range(CITIES_PER_REGION):
                    self.add("location", f"{c}/R{r}/T{k}")
        for attribute, values in (("age_band", AGE_BANDS), ("gender", GENDERS), ("language", LANGUAGES),
                                  ("device", DEVICES), ("placement", PLACEMENTS)):
            for v in values:
                self.add(attribute, v)
        self.interest0 = len(self.keys)
        for i in range(INTERESTS):
            self.add("interest", f"i{i}")
        self.audience0 = len(self.keys)
        for a in range(audiences):
            self.add("audience", f"a{a}")
        self.excluded0 = len(self.keys)
        for a in range(audiences):
            self.add("audience", f"a{a}", True)

    def add(self, attribute: str, value: str, excluded: bool = False) -> None:
        self.ids[(attribute, value, excluded)] = len(self.keys)
        self.keys.append((attribute, value, excluded))

    def id(self, attribute: str, value: str, excluded: bool = False) -> int:
        return self.ids[(attribute, value, excluded)]


def _choose(rng: np.random.Generator, n: int, options: int, low: int, high: int, share: float,
            contiguous: bool = False) -> np.ndarray:
    """(n, high) matrix of option indexes, -1 padded: `share` of rows pick low..high options."""
    out = np.full((n, high), -1, dtype=np.int32)
    counts = np.where(rng.random(n) < share, rng.integers(low, high + 1, n), 0)
    start = rng.integers(0, options, n)
    step = 1 if contiguous else max(1, options // high)
    for j in range(high):
        out[:, j] = np.where(j < counts, (start + j * step) % options, -1)
    return out


def _locations(rng: np.random.Generator, m: int) -> np.ndarray:
    """Location terms: 70 % of ads target countries (1-3), 20 % regions (1-2), 10 % cities (1-3)."""
    level = rng.random(m)
    country = rng.choice(len(COUNTRIES), size=(m, 3), p=country_weights())
    how_many = rng.integers(1, 4, m)
    loc = np.full((m, 3), -1, dtype=np.int32)
    per_country = 1 + REGIONS_PER_COUNTRY * (1 + CITIES_PER_REGION)
    region = rng.integers(0, REGIONS_PER_COUNTRY, (m, 3))
    city = rng.integers(0, CITIES_PER_REGION, (m, 3))
    for j in range(3):
        base = country[:, j] * per_country
        region_id = base + 1 + region[:, j] * (1 + CITIES_PER_REGION)
        value = np.where(level < 0.7, base, np.where(level < 0.9, region_id, region_id + 1 + city[:, j]))
        loc[:, j] = np.where(j < how_many, value, -1)
    return loc


def _term_chunk(rng: np.random.Generator, m: int, vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """`m` ads' targeting terms: (terms per ad, the terms flat)."""
    columns = [_locations(rng, m)]
    for attribute, values, low, high, share, contiguous in (
            ("age_band", AGE_BANDS, 2, 4, 0.8, True), ("gender", GENDERS, 1, 1, 0.3, False),
            ("language", LANGUAGES, 1, 2, 0.9, False), ("device", DEVICES, 1, 3, 0.5, False),
            ("placement", PLACEMENTS, 1, 3, 0.95, False)):
        offset = vocab.id(attribute, values[0])
        chosen = _choose(rng, m, len(values), low, high, share, contiguous=contiguous)
        columns.append(np.where(chosen >= 0, chosen + offset, -1))
    interests = np.full((m, 65), -1, dtype=np.int32)
    icount = np.where(rng.random(m) < 0.75, rng.integers(35, 66, m), 0)
    istart = rng.integers(0, INTERESTS, m)
    for j in range(65):
        interests[:, j] = np.where(j < icount, vocab.interest0 + (istart + j * INTEREST_STEP) % INTERESTS, -1)
    columns.append(interests)
    columns.append(np.where((a := _choose(rng, m, vocab.audiences, 1, 3, 0.10)) >= 0, a + vocab.audience0, -1))
    columns.append(np.where((a := _choose(rng, m, vocab.audiences, 1, 2, 0.15)) >= 0, a + vocab.excluded0, -1))
    matrix = np.concatenate(columns, axis=1)
    present = matrix >= 0
    return present.sum(axis=1).astype(np.uint16), matrix[present].astype(np.uint32)


def _campaign_table(rng: np.random.Generator, campaigns_n: int) -> CampaignTable:
    capped = rng.random(campaigns_n) < 0.3
    return CampaignTable.from_columns(
        campaign_id=np.arange(1, campaigns_n + 1, dtype=np.int64),
        advertiser_id=rng.integers(1, max(2, campaigns_n // 2), campaigns_n),
        cap_per_day=np.where(capped, 3, 0), cap_per_week=np.where(capped, 10, 0),
        participation=rng.uniform(0.3, 1.0, campaigns_n).astype(np.float32))


def synthesize(n: int, seed: int = 1, chunk: int = 1_000_000) -> tuple[TargetingIndex, CampaignTable, Vocabulary]:
    """`n` ads of ~48 targeting terms each in the serving index's columns, one campaign per 10 ads (30 % capped)."""
    rng = np.random.default_rng(seed)
    vocab = Vocabulary(audiences=max(1_000, n // 50))
    parts = [_term_chunk(rng, min(chunk, n - begin), vocab) for begin in range(0, n, chunk)]
    term_counts = np.concatenate([counts for counts, _ in parts])
    terms_flat = np.concatenate([flat for _, flat in parts])
    del parts
    campaigns_n = max(1, n // 10)
    campaign_of_ad = rng.integers(0, campaigns_n, n)
    bid_type = rng.choice(3, n, p=[0.3, 0.6, 0.1]).astype(np.int8)
    bid = np.where(bid_type == 0, rng.integers(1_000_000, 30_000_000, n),
                   np.where(bid_type == 1, rng.integers(100_000, 5_000_000, n), rng.integers(5_000_000, 80_000_000, n)))
    ctr = rng.beta(2, 150, n).astype(np.float32)
    index = TargetingIndex.from_columns(AdColumns(
        ad_id=np.arange(1, n + 1, dtype=np.int64), campaign_id=campaign_of_ad + 1, version=np.ones(n, np.int64),
        bid_type=bid_type, bid_micros=bid, quality_micros=rng.integers(-2_000, 2_000, n),
        static_score=np.sort(rng.random(n).astype(np.float32))[::-1], ctr_prior=ctr,
        embedding=rng.normal(0, 0.3, (n, 8)).astype(np.float16),
        exclusion_category=np.where(rng.random(n) < 0.05, rng.integers(1, 20, n), 0)),
        TargetingColumns(term_keys=vocab.keys, term_counts=term_counts, terms_flat=terms_flat))
    return index, _campaign_table(rng, campaigns_n), vocab


def random_request(rng: random.Random, vocab: Vocabulary) -> dict[str, frozenset[str]]:
    """A request's ~30 terms: a city, age, gender, 1-2 languages, device, placement, interests, audiences."""
    weights = country_weights()
    country = COUNTRIES[int(np.searchsorted(np.cumsum(weights), rng.random()))]
    location = f"{country}/R{rng.randrange(REGIONS_PER_COUNTRY)}/T{rng.randrange(CITIES_PER_REGION)}"
    return request_terms(
        location=[location], age_band=rng.choice(AGE_BANDS), gender=rng.choice(GENDERS),
        language=rng.sample(LANGUAGES, rng.randint(1, 2)), device=rng.choice(DEVICES),
        placement=rng.choice(PLACEMENTS), interest=[f"i{rng.randrange(INTERESTS)}" for _ in range(rng.randint(15, 25))],
        audience=[f"a{rng.randrange(vocab.audiences)}" for _ in range(rng.randint(5, 10))])


def targeting_of(index: TargetingIndex, row: int) -> Targeting:
    """The targeting expression an index row was built from (for baselines that evaluate the definition)."""
    start, count = int(index.term_start.data[row]), int(index.term_count.data[row])
    include: dict[str, set[str]] = {}
    exclude: dict[str, set[str]] = {}
    for term in index.term_arena.data[start: start + count]:
        attribute, value, excluded = index.terms.keys[int(term)]
        (exclude if excluded else include).setdefault(attribute, set()).add(value)
    return Targeting({a: frozenset(v) for a, v in include.items()}, {a: frozenset(v) for a, v in exclude.items()})


def user_profiles(users: int, audiences: int, seed: int = 11):
    """(user id, profile hash) of `users` personalised users on the catalogue's vocabulary, for Redis."""
    rng = random.Random(seed)
    for u in range(users):
        yield f"bench-{u}", {
            "age_band": rng.choice(AGE_BANDS), "gender": rng.choice(GENDERS),
            "interests": ",".join(f"i{rng.randrange(INTERESTS)}" for _ in range(rng.randint(15, 25))),
            "audiences": ",".join(f"a{rng.randrange(audiences)}" for _ in range(rng.randint(5, 10))),
            "embedding": ",".join(f"{rng.gauss(0, 0.3):.3f}" for _ in range(8))}


def ad_request_bodies(count: int, seed: int, users: int) -> list[dict[str, Any]]:
    """POST /v1/ads bodies from the profiled users: a city, a placement, a device, languages, two slots."""
    rng = random.Random(seed)
    cumulative = np.cumsum(country_weights())
    out = []
    for i in range(count):
        country = COUNTRIES[int(np.searchsorted(cumulative, rng.random()))]
        out.append({
            "request_id": f"bench-{seed}-{i}", "user_id": f"bench-{rng.randrange(users)}",
            "consent": {"personalization": True}, "placement": rng.choice(PLACEMENTS),
            "slots": [{"position": 1}, {"position": 2}], "device": rng.choice(DEVICES),
            "language": rng.sample(LANGUAGES, rng.randint(1, 2)),
            "location": f"{country}/R{rng.randrange(REGIONS_PER_COUNTRY)}/T{rng.randrange(CITIES_PER_REGION)}",
        })
    return out
