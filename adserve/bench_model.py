"""`adserve bench model`: the click model scoring requests in process, beside the priors-only baseline
measured in the same run on the same requests.

A request is what the decision engine sends after the pre-ranker: 200 candidates (random ads of the
snapshot), 2 slot positions (--slots), one user's features and a placement, country and device drawn from
the model's vocabularies. ModelPredictor tiles the candidates over the positions (400 input rows), pads to
its fixed bucket and runs the traced tf.function; the figures include the numpy work around it (ad rows,
tiling, the down-sampling correction, the segment calibration).

Concurrency: N threads (--concurrency 1,2,4) share one ModelPredictor and each sends its share of the
requests back to back; TensorFlow runs the calls concurrently (its own intra-op thread pool; the Python
parts hold the GIL). A request's latency is its own predict call; throughput is all scores over the wall
time of the step.

Without --model a small model is trained first on synthetic impressions (serving.model.synthetic, a few
seconds); its size, not its quality, is what the figures depend on. With --model, --ad-features is the
snapshot folder (the newest snapshot is used).

Figures (--json names):
  scores_per_s   candidate x slot scores per second at the best concurrency
  p50_ms, p99_ms per request, one thread
  by_concurrency {threads: {requests_per_s, scores_per_s, p50_ms, p99_ms}}
  baseline_scores_per_s, baseline_p50_ms, baseline_p99_ms  PriorPredictor (numpy), one thread
  model          version, parameters, where it came from; buckets of the fixed signature
  service        null: the prediction service's figures (over the network, batched) belong here"""
from __future__ import annotations

import os
import platform as host
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np


def machine() -> dict[str, Any]:
    """The machine's details (adserve.bench.machine, without its Java line when Java is not installed)."""
    try:
        from adserve.bench import machine as platform_machine

        details = platform_machine()
    except (OSError, ImportError):
        details = {"cpu": "unknown", "cores": os.cpu_count(), "python": sys.version.split()[0],
                   "os": host.platform()}
    import tensorflow as tf

    details["tensorflow"] = tf.__version__
    details["tf_devices"] = [d.device_type for d in tf.config.list_logical_devices()]
    return details


def _synthetic_model(log):
    from serving.model import synthetic
    from serving.model.click_model import TrainConfig
    from serving.model.trainer import train_click_model

    log("training a small model on synthetic impressions (no --model given) ...")
    day = synthetic.make_day(60_000, seed=11)
    model = train_click_model(day.examples, {day.snapshot.version: day.snapshot}, day.keep_rate,
                              TrainConfig(epochs=4), log=lambda line: log(f"  {line}"))
    model.metadata["model_version"] = "click-synthetic"
    return model, day.snapshot


def make_requests(spec, snapshot, count: int, candidates: int, slots: int, seed: int = 5) -> list:
    from serving.decision.prediction import PredictionRequest

    rng = np.random.default_rng(seed)
    mean, scale = np.asarray(spec.user_mean), np.asarray(spec.user_scale)
    requests = []
    for _ in range(count):
        rows = rng.choice(len(snapshot), size=candidates, replace=len(snapshot) < candidates)
        values = rng.normal(mean, scale)
        requests.append(PredictionRequest(
            rows=rows, ctr_prior=snapshot.ctr_prior[rows].astype(np.float64), positions=list(range(1, slots + 1)),
            placement=str(rng.choice(spec.placements)) if spec.placements else "feed",
            user_features={n: float(v) for n, v in zip(spec.user_features, values)},
            ad_ids=snapshot.ad_id[rows], country=str(rng.choice(spec.countries)) if spec.countries else None,
            device=str(rng.choice(spec.devices)) if spec.devices else None))
    return requests


def _percentiles(samples_s: list[float]) -> tuple[float, float]:
    ms = np.asarray(samples_s) * 1000
    return round(float(np.percentile(ms, 50)), 3), round(float(np.percentile(ms, 99)), 3)


def measure(predictor, requests: list, threads: int) -> dict[str, float]:
    """Every request once, split over `threads` threads sharing the predictor."""
    latencies: list[list[float]] = [[] for _ in range(threads)]
    far = float("inf")

    def work(k: int) -> None:
        clock = time.perf_counter
        for request in requests[k::threads]:
            began = clock()
            predictor.predict(request, deadline=far, clock=clock)
            latencies[k].append(clock() - began)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    began = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - began
    scores = sum(len(r.rows) * len(r.positions) for r in requests)
    p50, p99 = _percentiles([x for part in latencies for x in part])
    return {"requests_per_s": round(len(requests) / wall, 1), "scores_per_s": round(scores / wall),
            "p50_ms": p50, "p99_ms": p99}


def run(*, model_dir: Path | None = None, ad_features_dir: Path | None = None, requests: int = 2_000,
        candidates: int = 200, slots: int = 2, concurrency: list[int] | None = None, log=print) -> dict[str, Any]:
    from serving.decision.prediction import PriorPredictor
    from serving.model import ad_features
    from serving.model.click_model import ClickModel, parameter_count
    from serving.model.predictor import ModelPredictor

    concurrency = concurrency or [1, 2, 4]
    figures: dict[str, Any] = {"benchmark": "model", "machine": machine(), "requests": requests,
                               "candidates": candidates, "slots": slots}
    if model_dir is not None:
        if ad_features_dir is None:
            raise ValueError("--model needs --ad-features (the snapshot folder the model scores against)")
        model, snapshot = ClickModel.load(model_dir), ad_features.load(ad_features_dir)
        source = str(model_dir)
    else:
        model, snapshot = _synthetic_model(log)
        source = "synthetic (trained by the benchmark)"
    began = time.perf_counter()
    predictor = ModelPredictor(model, snapshot)
    figures["model"] = {"version": model.version, "parameters": parameter_count(model), "source": source,
                        "snapshot_version": snapshot.version, "snapshot_ads": len(snapshot),
                        "buckets": list(predictor.buckets), "load_and_warm_up_s": round(time.perf_counter() - began, 2)}
    batch = make_requests(model.spec, snapshot, requests, candidates, slots)
    log(f"warming up, then {requests:,} requests of {candidates} candidates x {slots} slots ...")
    measure(predictor, batch[: min(50, requests)], 1)
    figures["by_concurrency"] = {}
    for threads in concurrency:
        figures["by_concurrency"][str(threads)] = step = measure(predictor, batch, threads)
        log(f"  {threads} thread(s): {step['scores_per_s']:,} scores/s, p50 {step['p50_ms']} ms, "
            f"p99 {step['p99_ms']} ms")
    single = figures["by_concurrency"].get("1") or measure(predictor, batch, 1)
    figures["scores_per_s"] = max(s["scores_per_s"] for s in figures["by_concurrency"].values())
    figures["p50_ms"], figures["p99_ms"] = single["p50_ms"], single["p99_ms"]
    log("baseline: PriorPredictor on the same requests ...")
    baseline = measure(PriorPredictor(), batch, 1)
    figures["baseline_scores_per_s"] = baseline["scores_per_s"]
    figures["baseline_p50_ms"], figures["baseline_p99_ms"] = baseline["p50_ms"], baseline["p99_ms"]
    figures["service"] = None  # the prediction service (over the network, dynamic batching): not built yet
    return figures


def render(f: dict[str, Any]) -> str:
    m, model = f["machine"], f["model"]
    lines = [f"adserve bench model on {m.get('cpu', '?')}, {m.get('cores', '?')} cores, Python {m.get('python')}, "
             f"TensorFlow {m.get('tensorflow')} ({', '.join(m.get('tf_devices', []))})",
             f"  model {model['version']} ({model['parameters']:,} parameters, {model['source']}), snapshot "
             f"v{model['snapshot_version']} of {model['snapshot_ads']:,} ads, buckets {model['buckets']}, load and "
             f"warm-up {model['load_and_warm_up_s']} s",
             f"  {f['requests']:,} requests of {f['candidates']} candidates x {f['slots']} slots, in process:"]
    for threads, s in f["by_concurrency"].items():
        lines.append(f"    {threads:>2} thread(s): {s['scores_per_s']:>10,} scores/s  {s['requests_per_s']:>8,} "
                     f"requests/s  p50 {s['p50_ms']} ms  p99 {s['p99_ms']} ms")
    lines.append(f"  baseline PriorPredictor (numpy, 1 thread): {f['baseline_scores_per_s']:,} scores/s, "
                 f"p50 {f['baseline_p50_ms']} ms, p99 {f['baseline_p99_ms']} ms")
    lines.append("  prediction service: not measured here yet" if f.get("service") is None
                 else f"  prediction service: {f['service']}")
    return "\n".join(lines)
