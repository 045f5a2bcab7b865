"""`adserve bench decision`: the decision engine on synthetic ads with the design's shape.

Ads: ~48 targeting terms each (1-3 countries or regions or cities of 30
countries, age bands, gender, languages, devices, 1-3 of 10 placements, 35-65
of 2,000 interests on 75 % of ads, custom audiences on 10 % of ads, audience
exclusions on 15 %), static scores, CTR priors, 8-d embeddings, one campaign
per 10 ads (30 % capped). Requests: ~30 terms (location at three levels, age,
gender, 1-2 languages, device, placement, 15-25 interests, 5-10 audiences).

Figures (--json names; per-size figures are objects keyed by ad count):
  build_s, index_bytes_per_ad (index: postings, partitions, term arena; serving columns; campaign table),
  retrieval_p50_ms / retrieval_p99_ms, retrieved_median (ads per request),
  decision_p50_ms / decision_p99_ms (filters + pre-rank + prediction baseline + auction, after retrieval),
  whole_decision_p50_ms / whole_decision_p99_ms (retrieval + the rest, per request),
  decision_candidates_median (candidates after filters),
  baseline_retrieval_p50_ms / baseline_retrieval_p99_ms: a scan of every ad's compiled expression with
  core.targeting.matches (the definition), measured at the smallest size only, and only when that is at
  most 2,000,000 ads (a Python expression per ad: 10 M of them do not fit in 23.5 GiB)."""
from __future__ import annotations

import gc
import random
import time
from typing import Any

import numpy as np

from core.targeting import Targeting, matches, request_terms
from serving.decision.campaigns import CampaignTable
from serving.decision.engine import DecisionEngine, EngineConfig, RequestContext
from serving.decision.filters import FilterContext
from serving.decision.index import TargetingIndex

COUNTRIES = [f"C{i:02d}" for i in range(30)]
REGIONS_PER_COUNTRY, CITIES_PER_REGION = 5, 4
AGE_BANDS = ["13-17", "18-24", "25-34", "35-44", "45-54", "55-64", "65+"]
GENDERS = ["female", "male", "other"]
LANGUAGES = [f"l{i}" for i in range(15)]
DEVICES = ["ios", "android", "desktop", "tablet", "ctv"]
PLACEMENTS = [f"p{i}" for i in range(10)]
INTERESTS = 2_000
INTEREST_STEP = 7  # coprime with 2,000: an ad's interests are distinct
NOW_MS = 1_800_316_800_000 + 15 * 3_600_000


def _country_weights() -> np.ndarray:
    w = 1.0 / np.arange(1, len(COUNTRIES) + 1)
    return w / w.sum()


class Vocabulary:
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


def synthesize(n: int, seed: int = 1, chunk: int = 1_000_000) -> tuple[TargetingIndex, CampaignTable, Vocabulary]:
    rng = np.random.default_rng(seed)
    vocab = Vocabulary(audiences=max(1_000, n // 50))
    counts_parts, flat_parts = [], []
    for begin in range(0, n, chunk):
        m = min(chunk, n - begin)
        columns = []
        # location: 70 % countries (1-3), 20 % regions (1-2), 10 % cities (1-3)
        level = rng.random(m)
        country = rng.choice(len(COUNTRIES), size=(m, 3), p=_country_weights())
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
        columns.append(loc)
        offset = vocab.id("age_band", AGE_BANDS[0])
        columns.append(np.where((a := _choose(rng, m, 7, 2, 4, 0.8, contiguous=True)) >= 0, a + offset, -1))
        offset = vocab.id("gender", GENDERS[0])
        columns.append(np.where((a := _choose(rng, m, 3, 1, 1, 0.3)) >= 0, a + offset, -1))
        offset = vocab.id("language", LANGUAGES[0])
        columns.append(np.where((a := _choose(rng, m, 15, 1, 2, 0.9)) >= 0, a + offset, -1))
        offset = vocab.id("device", DEVICES[0])
        columns.append(np.where((a := _choose(rng, m, 5, 1, 3, 0.5)) >= 0, a + offset, -1))
        offset = vocab.id("placement", PLACEMENTS[0])
        columns.append(np.where((a := _choose(rng, m, 10, 1, 3, 0.95)) >= 0, a + offset, -1))
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
        counts_parts.append(present.sum(axis=1).astype(np.uint16))
        flat_parts.append(matrix[present].astype(np.uint32))
        del matrix, present, columns, interests
    term_counts = np.concatenate(counts_parts)
    terms_flat = np.concatenate(flat_parts)
    del counts_parts, flat_parts
    campaigns_n = max(1, n // 10)
    campaign_of_ad = rng.integers(0, campaigns_n, n)
    bid_type = rng.choice(3, n, p=[0.3, 0.6, 0.1]).astype(np.int8)
    bid = np.where(bid_type == 0, rng.integers(1_000_000, 30_000_000, n),
                   np.where(bid_type == 1, rng.integers(100_000, 5_000_000, n), rng.integers(5_000_000, 80_000_000, n)))
    ctr = rng.beta(2, 150, n).astype(np.float32)
    index = TargetingIndex.from_columns(
        ad_id=np.arange(1, n + 1, dtype=np.int64), campaign_id=campaign_of_ad + 1, version=np.ones(n, np.int64),
        bid_type=bid_type, bid_micros=bid, quality_micros=rng.integers(-2_000, 2_000, n),
        static_score=np.sort(rng.random(n).astype(np.float32))[::-1], ctr_prior=ctr,
        embedding=rng.normal(0, 0.3, (n, 8)).astype(np.float16), term_keys=vocab.keys,
        term_counts=term_counts, terms_flat=terms_flat,
        exclusion_category=np.where(rng.random(n) < 0.05, rng.integers(1, 20, n), 0))
    capped = rng.random(campaigns_n) < 0.3
    campaigns = CampaignTable.from_columns(
        campaign_id=np.arange(1, campaigns_n + 1, dtype=np.int64),
        advertiser_id=rng.integers(1, max(2, campaigns_n // 2), campaigns_n),
        cap_per_day=np.where(capped, 3, 0), cap_per_week=np.where(capped, 10, 0),
        participation=rng.uniform(0.3, 1.0, campaigns_n).astype(np.float32))
    return index, campaigns, vocab


def random_request(rng: random.Random, vocab: Vocabulary) -> dict[str, frozenset[str]]:
    weights = _country_weights()
    country = COUNTRIES[int(np.searchsorted(np.cumsum(weights), rng.random()))]
    location = f"{country}/R{rng.randrange(REGIONS_PER_COUNTRY)}/T{rng.randrange(CITIES_PER_REGION)}"
    return request_terms(
        location=[location], age_band=rng.choice(AGE_BANDS), gender=rng.choice(GENDERS),
        language=rng.sample(LANGUAGES, rng.randint(1, 2)), device=rng.choice(DEVICES),
        placement=rng.choice(PLACEMENTS), interest=[f"i{rng.randrange(INTERESTS)}" for _ in range(rng.randint(15, 25))],
        audience=[f"a{rng.randrange(vocab.audiences)}" for _ in range(rng.randint(5, 10))])


def _targeting_of(index: TargetingIndex, row: int) -> Targeting:
    start, count = int(index.term_start.data[row]), int(index.term_count.data[row])
    include: dict[str, set[str]] = {}
    exclude: dict[str, set[str]] = {}
    for term in index.term_arena.data[start: start + count]:
        attribute, value, excluded = index.terms.keys[int(term)]
        (exclude if excluded else include).setdefault(attribute, set()).add(value)
    return Targeting({a: frozenset(v) for a, v in include.items()}, {a: frozenset(v) for a, v in exclude.items()})


def _percentiles(samples: list[float]) -> tuple[float, float]:
    return round(float(np.percentile(samples, 50)), 3), round(float(np.percentile(samples, 99)), 3)


# The baseline holds a Python Targeting per ad: ~2.4 KB each (10 M ads ran out of this machine's 23.5 GiB).
BASELINE_MAX_ADS = 2_000_000


def run(sizes: list[int], requests: int = 2_000, baseline_requests: int = 20, log=print) -> dict[str, Any]:
    from adserve.bench import machine

    figures: dict[str, Any] = {"benchmark": "decision", "machine": machine(), "requests": requests}
    for key in ("build_s", "index_bytes_per_ad", "retrieval_p50_ms", "retrieval_p99_ms", "retrieved_median",
                "decision_p50_ms", "decision_p99_ms", "whole_decision_p50_ms", "whole_decision_p99_ms",
                "decision_candidates_median", "memory_breakdown_bytes",
                "baseline_retrieval_p50_ms", "baseline_retrieval_p99_ms"):
        figures[key] = {}
    for n in sorted(sizes):
        log(f"building {n:,} synthetic ads ...")
        gc.collect()
        began = time.perf_counter()
        index, campaigns, vocab = synthesize(n)
        figures["build_s"][str(n)] = round(time.perf_counter() - began, 1)
        # As an ad server does after loading its index: move the index's objects (one bitmap per term)
        # out of the cyclic collector's reach, so a collection never walks them mid-request.
        gc.freeze()
        engine = DecisionEngine(index, campaigns, config=EngineConfig(exploration_share=0.01))
        rng = random.Random(5)
        np_rng = np.random.default_rng(5)
        retrieval, decision, whole, retrieved, candidates = [], [], [], [], []
        log(f"running {requests:,} requests against {n:,} ads ...")
        for i in range(requests + 50):
            terms = random_request(rng, vocab)
            request = RequestContext(f"r{i}", next(iter(terms["placement"])), [1, 2], terms,
                                     FilterContext(NOW_MS, {}), user_embedding=np_rng.normal(0, 0.3, 8))
            result = engine.decide(request, clock=time.perf_counter, deadline=time.perf_counter() + 0.1,
                                   rng=rng, np_rng=np_rng)
            if i < 50:
                continue  # warm-up
            retrieval.append(result.timings_ms["retrieval"])
            decision.append(sum(v for k, v in result.timings_ms.items() if k != "retrieval"))
            whole.append(sum(result.timings_ms.values()))
            retrieved.append(result.funnel["retrieved"])
            candidates.append(result.funnel["filtered"])
        key = str(n)
        # After the requests, as the index stands while serving.
        memory = index.memory_bytes()
        memory["campaign_table"] = campaigns.nbytes
        figures["memory_breakdown_bytes"][key] = memory
        figures["index_bytes_per_ad"][key] = round(sum(memory.values()) / n, 1)
        figures["retrieval_p50_ms"][key], figures["retrieval_p99_ms"][key] = _percentiles(retrieval)
        figures["decision_p50_ms"][key], figures["decision_p99_ms"][key] = _percentiles(decision)
        figures["whole_decision_p50_ms"][key], figures["whole_decision_p99_ms"][key] = _percentiles(whole)
        figures["retrieved_median"][key] = int(np.median(retrieved))
        figures["decision_candidates_median"][key] = int(np.median(candidates))
        if n == min(sizes) and n > BASELINE_MAX_ADS:
            log(f"baseline skipped: {n:,} ads of Python expressions would not fit in memory (~2.4 KB an ad); "
                f"include a size of at most {BASELINE_MAX_ADS:,} in --ads for it")
        elif n == min(sizes):
            log(f"baseline: scanning {n:,} compiled expressions per request ({baseline_requests} requests) ...")
            expressions = [_targeting_of(index, r) for r in range(index.size)]
            scan = []
            for _ in range(baseline_requests):
                terms = random_request(rng, vocab)
                began = time.perf_counter()
                sum(1 for t in expressions if matches(t, terms))
                scan.append((time.perf_counter() - began) * 1000)
            figures["baseline_retrieval_p50_ms"][key], figures["baseline_retrieval_p99_ms"][key] = _percentiles(scan)
            del expressions
        del index, campaigns, engine
        gc.unfreeze()
        gc.collect()
    return figures


def render(f: dict[str, Any]) -> str:
    m = f["machine"]
    lines = [f"adserve bench decision on {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Python {m['python']}"
             f" ({f['requests']:,} requests per size, one core)"]
    for n in f["build_s"]:
        lines.append(f"  {int(n):>11,} ads: build {f['build_s'][n]} s, {f['index_bytes_per_ad'][n]} bytes/ad; "
                     f"retrieval p50 {f['retrieval_p50_ms'][n]} ms p99 {f['retrieval_p99_ms'][n]} ms "
                     f"(median {f['retrieved_median'][n]:,} ads); decision after retrieval p50 "
                     f"{f['decision_p50_ms'][n]} ms p99 {f['decision_p99_ms'][n]} ms "
                     f"(median {f['decision_candidates_median'][n]:,} candidates); whole decision without the "
                     f"model p50 {f['whole_decision_p50_ms'][n]} ms p99 {f['whole_decision_p99_ms'][n]} ms")
    for n in f["baseline_retrieval_p99_ms"]:
        lines.append(f"  baseline at {int(n):,} ads, scan of compiled expressions: p50 "
                     f"{f['baseline_retrieval_p50_ms'][n]} ms p99 {f['baseline_retrieval_p99_ms'][n]} ms "
                     f"(index is {f['baseline_retrieval_p99_ms'][n] / max(f['retrieval_p99_ms'][n], 1e-9):,.0f}x "
                     f"faster at p99)")
    return "\n".join(lines)
