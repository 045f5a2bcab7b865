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

Without --model a small model is trained first on synthetic impressions (learning.synthetic, a few
seconds); its size, not its quality, is what the figures depend on. With --model, --ad-features is the
snapshot folder (the newest snapshot is used).

Figures (--json names):
  scores_per_s   candidate x slot scores per second at the best concurrency
  p50_ms, p99_ms per request, one thread
  by_concurrency {threads: {requests_per_s, scores_per_s, p50_ms, p99_ms}}
  baseline_scores_per_s, baseline_p50_ms, baseline_p99_ms  PriorPredictor (numpy), one thread
  batched        {requests per call: scores_per_s}: ModelPredictor.predict_many on k requests at once, one
                 thread (what the service's dynamic batches buy in the graph alone)
  model          version, parameters, where it came from; buckets of the fixed signature
  service        the prediction service (null with --no-service):
    transport      how it was reached (HTTP/1.1 keep-alive, JSON, loopback; the service in its own process)
    max_wait_ms    the service's batching wait
    scores_per_s   candidate x slot scores per second at the best client count
    p50_ms, p99_ms per request, one client (RemotePredictor.predict: encode, HTTP, batch wait, score, decode)
    by_clients     {clients: {requests_per_s, scores_per_s, p50_ms, p99_ms, errors, mean_batch_requests}}
    start_s        the service's start (process, TensorFlow, model load and warm-up) until /healthz answers

The service part starts `python -m adserve serve prediction` on a free loopback port over the same model
and snapshot (the synthetic one is saved to a temporary folder first) and sends the same requests through
RemotePredictor from N client threads (--service-clients 1,4,16), each with its own keep-alive connection, a
1 s deadline per request (a miss counts in errors). Client and service share this machine's cores, as an ad
server and a prediction service on one host would."""
from __future__ import annotations

import os
import platform as host
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from bench.common import percentiles_ms
from core.errors import InvalidSettings, RunFailed


def machine() -> dict[str, Any]:
    """The machine's details (bench.common.machine, without its Java line when Java is not installed)."""
    try:
        from bench.common import machine as platform_machine

        details = platform_machine()
    except (OSError, ImportError):
        details = {"cpu": "unknown", "cores": os.cpu_count(), "python": sys.version.split()[0],
                   "os": host.platform()}
    import tensorflow as tf

    details["tensorflow"] = tf.__version__
    details["tf_devices"] = [d.device_type for d in tf.config.list_logical_devices()]
    return details


def _synthetic_model(log):
    from learning import synthetic
    from learning.network import TrainConfig
    from learning.trainer import train_click_model

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


def measure(predictor, requests: list, threads: int, deadline_s: float = float("inf")) -> dict[str, float]:
    """Every request once, split over `threads` threads sharing the predictor; each request has deadline_s
    (a request that raises counts in errors, not in the latencies)."""
    from core.errors import AdserveError

    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors = [0] * threads

    def work(k: int) -> None:
        clock = time.perf_counter
        for request in requests[k::threads]:
            began = clock()
            try:
                predictor.predict(request, deadline=began + deadline_s, clock=clock)
            except AdserveError:
                errors[k] += 1
                continue
            latencies[k].append(clock() - began)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    began = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - began
    scores = sum(len(r.rows) * len(r.positions) for r in requests) * (1 - sum(errors) / len(requests))
    p50, p99 = percentiles_ms(np.asarray([x for part in latencies for x in part] or [float("nan")]) * 1000)
    step = {"requests_per_s": round(len(requests) / wall, 1), "scores_per_s": round(scores / wall),
            "p50_ms": p50, "p99_ms": p99}
    if sum(errors):
        step["errors"] = sum(errors)
    return step


# ------------------------------------------------------------------------------------------ the service

REMOTE_DEADLINE_S = 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batch_counts(url: str) -> tuple[float, float]:
    """(requests scored in batches, batches) from the service's /metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        text = response.read().decode()

    def value(name: str) -> float:
        found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
        return float(found.group(1)) if found else 0.0
    return value("adserve_prediction_batch_requests_sum"), value("adserve_prediction_batch_requests_count")


def start_service(model_dir: Path, ad_features_dir: Path, *, max_wait_ms: float,
                  timeout_s: float = 180.0) -> tuple[subprocess.Popen, str, float]:
    """`python -m adserve serve prediction` on a free loopback port; (process, URL, seconds to /healthz)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    began = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "adserve", "serve", "prediction", "--model", str(model_dir),
                                "--ad-features", str(ad_features_dir), "--port", str(port), "--max-wait-ms",
                                str(max_wait_ms), "--snapshot-refresh-s", "0"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               cwd=Path(__file__).resolve().parents[1])
    while time.perf_counter() - began < timeout_s:
        if process.poll() is not None:
            raise RunFailed(f"the prediction service exited: {process.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as response:
                if response.status == 200:
                    return process, url, time.perf_counter() - began
        except OSError:
            time.sleep(0.2)
    process.terminate()
    raise RunFailed(f"the prediction service did not answer /healthz within {timeout_s:.0f} s")


def measure_service(model, snapshot, model_dir: Path | None, ad_features_dir: Path | None, batch: list,
                    clients: list[int], max_wait_ms: float, log) -> dict[str, Any]:
    """The same requests through RemotePredictor against the service in its own process."""
    from serving.model.click_model import save_versioned
    from serving.model.remote import RemotePredictor

    with tempfile.TemporaryDirectory(prefix="bench-model-") as scratch:
        if model_dir is None:  # the synthetic model and snapshot, saved for the service's process
            model_dir = save_versioned(model, Path(scratch) / "models", export_saved_model=False)
            ad_features_dir = Path(scratch) / "ad-features"
            snapshot.write(ad_features_dir)
        log("starting the prediction service (python -m adserve serve prediction) ...")
        process, url, start_s = start_service(model_dir, ad_features_dir, max_wait_ms=max_wait_ms)
        try:
            remote = RemotePredictor(url)
            measure(remote, batch[: min(50, len(batch))], 1, REMOTE_DEADLINE_S)  # warm: connections, first batches
            figures: dict[str, Any] = {
                "transport": "HTTP/1.1 keep-alive, JSON, loopback; the service in its own process",
                "max_wait_ms": max_wait_ms, "start_s": round(start_s, 1), "by_clients": {}}
            for n in clients:
                before = _batch_counts(url)
                step = measure(remote, batch, n, REMOTE_DEADLINE_S)
                after = _batch_counts(url)
                batches = after[1] - before[1]
                step["mean_batch_requests"] = round((after[0] - before[0]) / batches, 2) if batches else None
                step.setdefault("errors", 0)
                figures["by_clients"][str(n)] = step
                log(f"  service, {n} client(s): {step['scores_per_s']:,} scores/s, p50 {step['p50_ms']} ms, p99 "
                    f"{step['p99_ms']} ms, {step['mean_batch_requests']} requests per batch, {step['errors']} errors")
        finally:
            process.terminate()
            process.wait(30)
    single = figures["by_clients"].get("1") or next(iter(figures["by_clients"].values()))
    figures["scores_per_s"] = max(s["scores_per_s"] for s in figures["by_clients"].values())
    figures["p50_ms"], figures["p99_ms"] = single["p50_ms"], single["p99_ms"]
    return figures


class Workload(NamedTuple):
    """What is scored: `requests` requests of `candidates` candidates x `slots` slot positions."""

    requests: int = 2_000
    candidates: int = 200
    slots: int = 2


def run(*, model_dir: Path | None = None, ad_features_dir: Path | None = None, workload: Workload = Workload(),
        concurrency: list[int] | None = None, service_clients: list[int] | None = None, max_wait_ms: float = 1.0,
        log=print) -> dict[str, Any]:
    """The figures (names in the module docstring); service_clients=[] skips the prediction service."""
    from serving.decision.prediction import PriorPredictor
    from serving.model import ad_features
    from serving.model.click_model import ClickModel, parameter_count
    from serving.model.predictor import ModelPredictor

    requests, candidates, slots = workload
    concurrency = concurrency or [1, 2, 4]
    figures: dict[str, Any] = {"benchmark": "model", "machine": machine(), "requests": requests,
                               "candidates": candidates, "slots": slots}
    if model_dir is not None:
        if ad_features_dir is None:
            raise InvalidSettings("--model needs --ad-features (the snapshot folder the model scores against)")
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
    figures["batched"] = {}
    for k in (1, 4, 8):
        began = time.perf_counter()
        for i in range(0, len(batch), k):
            predictor.predict_many(batch[i: i + k])
        figures["batched"][str(k)] = round(sum(len(r.rows) * len(r.positions) for r in batch)
                                           / (time.perf_counter() - began))
    log(f"  predict_many, scores/s by requests per call: {figures['batched']}")
    log("baseline: PriorPredictor on the same requests ...")
    baseline = measure(PriorPredictor(), batch, 1)
    figures["baseline_scores_per_s"] = baseline["scores_per_s"]
    figures["baseline_p50_ms"], figures["baseline_p99_ms"] = baseline["p50_ms"], baseline["p99_ms"]
    service_clients = [1, 4, 16] if service_clients is None else service_clients
    figures["service"] = measure_service(model, snapshot, model_dir, ad_features_dir, batch, service_clients,
                                         max_wait_ms, log) if service_clients else None
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
    lines.append("  predict_many (1 thread), scores/s by requests per call: "
                 + ", ".join(f"{k}: {v:,}" for k, v in f.get("batched", {}).items()))
    lines.append(f"  baseline PriorPredictor (numpy, 1 thread): {f['baseline_scores_per_s']:,} scores/s, "
                 f"p50 {f['baseline_p50_ms']} ms, p99 {f['baseline_p99_ms']} ms")
    service = f.get("service")
    if service is None:
        lines.append("  prediction service: not measured (--no-service)")
        return "\n".join(lines)
    lines.append(f"  prediction service ({service['transport']}; batching wait {service['max_wait_ms']} ms; started "
                 f"in {service['start_s']} s), through RemotePredictor:")
    for clients, s in service["by_clients"].items():
        lines.append(f"    {clients:>2} client(s): {s['scores_per_s']:>10,} scores/s  {s['requests_per_s']:>8,} "
                     f"requests/s  p50 {s['p50_ms']} ms  p99 {s['p99_ms']} ms  {s['mean_batch_requests']} requests "
                     f"per batch  {s['errors']} errors")
    return "\n".join(lines)
