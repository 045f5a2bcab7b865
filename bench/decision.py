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

from core.targeting import matches
from serving.decision.engine import DecisionEngine, EngineConfig, RequestContext
from serving.decision.filters import FilterContext
from bench.common import machine, percentiles_ms
from sim.synthetic import Vocabulary, random_request, synthesize, targeting_of

NOW_MS = 1_800_316_800_000 + 15 * 3_600_000


# The baseline holds a Python Targeting per ad: ~2.4 KB each (10 M ads ran out of this machine's 23.5 GiB).
BASELINE_MAX_ADS = 2_000_000


def _requests(engine: DecisionEngine, vocab: Vocabulary, requests: int, rng: random.Random) -> tuple[list, ...]:
    """(retrieval ms, decision-after-retrieval ms, whole ms, ads retrieved, candidates) per request, after 50
    warm-up requests."""
    np_rng = np.random.default_rng(5)
    retrieval, decision, whole, retrieved, candidates = [], [], [], [], []
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
    return retrieval, decision, whole, retrieved, candidates


def _baseline_scan(index, vocab: Vocabulary, requests: int, rng: random.Random) -> list[float]:
    """Milliseconds per request of a scan of every ad's compiled expression with core.targeting.matches."""
    expressions = [targeting_of(index, r) for r in range(index.size)]
    scan = []
    for _ in range(requests):
        terms = random_request(rng, vocab)
        began = time.perf_counter()
        sum(1 for t in expressions if matches(t, terms))
        scan.append((time.perf_counter() - began) * 1000)
    return scan


def run(sizes: list[int], requests: int = 2_000, baseline_requests: int = 20, log=print) -> dict[str, Any]:
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
        log(f"running {requests:,} requests against {n:,} ads ...")
        retrieval, decision, whole, retrieved, candidates = _requests(engine, vocab, requests, rng)
        key = str(n)
        # After the requests, as the index stands while serving.
        memory = index.memory_bytes()
        memory["campaign_table"] = campaigns.nbytes
        figures["memory_breakdown_bytes"][key] = memory
        figures["index_bytes_per_ad"][key] = round(sum(memory.values()) / n, 1)
        figures["retrieval_p50_ms"][key], figures["retrieval_p99_ms"][key] = percentiles_ms(retrieval)
        figures["decision_p50_ms"][key], figures["decision_p99_ms"][key] = percentiles_ms(decision)
        figures["whole_decision_p50_ms"][key], figures["whole_decision_p99_ms"][key] = percentiles_ms(whole)
        figures["retrieved_median"][key] = int(np.median(retrieved))
        figures["decision_candidates_median"][key] = int(np.median(candidates))
        if n == min(sizes) and n > BASELINE_MAX_ADS:
            log(f"baseline skipped: {n:,} ads of Python expressions would not fit in memory (~2.4 KB an ad); "
                f"include a size of at most {BASELINE_MAX_ADS:,} in --ads for it")
        elif n == min(sizes):
            log(f"baseline: scanning {n:,} compiled expressions per request ({baseline_requests} requests) ...")
            scan = _baseline_scan(index, vocab, baseline_requests, rng)
            figures["baseline_retrieval_p50_ms"][key], figures["baseline_retrieval_p99_ms"][key] = percentiles_ms(scan)
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
