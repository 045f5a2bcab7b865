"""The prediction service as the ad server's predictor, on the real platform: a tiny click model trained here,
served by the real command (`python -m adserve serve prediction`) in its own process over an ad-feature
snapshot of this test's ads; a real ad server scores with it over HTTP (RemotePredictor). When the service
stops, the ad server keeps answering within its deadline on the pre-ranker's scores, marked as fallback in
the served log."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from infra.platform.process import wait_until
from schemas import topics
from serving.decision.engine import EngineConfig
from serving.model.click_model import save_versioned
from serving.model.remote import RemotePredictor
from tests.integration.test_ad_server import Services, _decoded, _free_port, _ids, _request, publish
from tests.tiny_model import snapshot_for, tiny_model

# The ad server's deadline and the model's share of it, wider than the design's 100 ms and 35 ms: the service,
# the ad server and the whole platform share the CI machine's two cores (a 100 ms deadline failed there on
# the user-context read), and this test is about who scored and that a stopped service costs no answer,
# not about speed (adserve bench model and bench serve measure that).
DEADLINE_MS = 1000.0
MODEL_BUDGET_S = 0.5


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=2) as response:
        return json.loads(response.read())


def test_the_ad_server_scores_with_the_prediction_service_and_falls_back_when_it_stops(platform, tmp_path: Path):
    placement = f"it-{uuid.uuid4().hex[:8]}"
    base = _ids()
    campaigns = [{"id": base + 100 * i, "bid": 2_000_000 + 500_000 * i} for i in range(4)]
    publish(platform.kafka_bootstrap, placement, campaigns)
    model, like = tiny_model()
    model_dir = save_versioned(model, tmp_path / "models", export_saved_model=False)
    snapshot_for([c["id"] + 1 for c in campaigns], like, version=int(time.time())).write(tmp_path / "ad-features")
    port = _free_port()
    service_url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "prediction-service.log", "w")
    service = subprocess.Popen([sys.executable, "-m", "adserve", "serve", "prediction", "--model", str(model_dir),
                                "--ad-features", str(tmp_path / "ad-features"), "--port", str(port)],
                               stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[2])
    try:
        wait_until(lambda: _get_json(f"{service_url}/healthz")["ok"], timeout_s=120, interval_s=0.25,
                   what="the prediction service to answer /healthz",
                   failed=lambda: None if service.poll() is None else (tmp_path / "prediction-service.log").read_text())
        described = _get_json(f"{service_url}/v1/model")
        assert described["model_version"] == "click-v1" and described["canary"] is None

        async def scenario():
            config = {"deadline_ms": DEADLINE_MS,
                      "engine": EngineConfig(model_budget_s=MODEL_BUDGET_S, recall_sample_share=1.0)}
            async with Services(platform, predictor=RemotePredictor(service_url), **config) as s:
                scored = [await s.ask(_request(placement, f"u-{i}", slots=2)) for i in range(6)]
                await s.server.server.drain()  # the recall checks after the responses, through the service
                recall = s.server.server.metrics.recall
                checked = (recall.checked, recall.hits)
                service.terminate()
                service.wait(30)
                fallback = []
                for i in range(6):
                    began = time.perf_counter()
                    answer = await s.ask(_request(placement, f"u-{i}", slots=2))
                    fallback.append((answer, time.perf_counter() - began))
                fallbacks = s.server.server.metrics.fallbacks._value.get()
            return scored, fallback, fallbacks, checked

        scored, fallback, fallbacks, checked = asyncio.run(scenario())
    finally:
        if service.poll() is None:
            service.terminate()
            service.wait(30)
        log.close()
    assert all(status == 200 and any(slot.get("ad_id") for slot in a["slots"]) for status, a in scored), scored
    assert all(status == 200 and any(slot.get("ad_id") for slot in a["slots"]) for (status, a), _ in fallback), \
        fallback
    assert max(seconds for _, seconds in fallback) < DEADLINE_MS / 1000
    assert fallbacks == len(fallback)
    assert checked == (6, 6)  # every scored request's full candidate set checked; 4 ads: the pre-ranker kept all
    served = {r["request_id"]: r for r in _decoded(platform, topics.AD_SERVED)}
    by_service = [served[a["request_id"]] for _, a in scored]
    assert [(r["model_version"], r["scored_by_fallback"]) for r in by_service] == [("click-v1", False)] * 6
    by_fallback = [served[a["request_id"]] for (_, a), _ in fallback]
    assert [(r["model_version"], r["scored_by_fallback"]) for r in by_fallback] == [(None, True)] * 6

    # `adserve explain` on the real ad.served topic reproduces the price the ad server charged
    impression = by_service[0]["winners"][0]
    done = subprocess.run([sys.executable, "-m", "adserve", "explain", impression["impression_id"], "--json"],
                          capture_output=True, text=True, timeout=120, env=os.environ | platform.as_env(),
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    explained = json.loads(done.stdout)
    assert explained["price_matches"] is True
    assert explained["logged_price_micros"] == explained["recomputed_price_micros"] == impression["price_micros"]
