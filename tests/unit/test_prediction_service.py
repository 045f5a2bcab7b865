"""The prediction service on a tiny trained model (no mocks of the model): batched scoring in process
(predict_many), the HTTP service with dynamic batching and a canary, and RemotePredictor, the ad server's
side, which answers or raises within its deadline.

Each service runs in this process on its own event loop (ServiceThread) on a free loopback port."""
from __future__ import annotations

import dataclasses
import http.client
import json
import socket
import threading
import time

import numpy as np
import pytest

from core.errors import BadRequest
from serving.decision.prediction import PredictionRequest, PredictionTimeout
from serving.model.canary import routes_to_candidate
from serving.model.predictor import ModelPredictor
from serving.model.remote import PredictionServiceError, RemotePredictor
from serving.model.service import (PredictionService, ServiceConfig, ServiceThread,
                                   parse_score_request)
from tests.tiny_model import tiny_model

CLOCK = time.perf_counter


@pytest.fixture(scope="module")
def trained():
    return tiny_model("click-tiny-1")


@pytest.fixture(scope="module")
def predictor(trained):
    return ModelPredictor(*trained)


@pytest.fixture(scope="module")
def candidate(trained):
    """The same network under another version (the canary arm's answers must carry its version)."""
    model, snapshot = trained
    return ModelPredictor(dataclasses.replace(model, metadata={**model.metadata, "model_version": "click-tiny-2"}),
                          snapshot)


@pytest.fixture
def service(predictor):
    with ServiceThread(PredictionService(predictor)) as running:
        yield running


def ask(snapshot, candidates: int, positions=(1, 2), *, seed: int = 0, **overrides) -> PredictionRequest:
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(snapshot), candidates)
    fields = dict(rows=rows, ctr_prior=snapshot.ctr_prior[rows].astype(np.float64), positions=list(positions),
                  placement="feed", user_features={"emb_0": float(rng.normal()), "activity": float(rng.normal()),
                                                   "age": 30.0}, ad_ids=snapshot.ad_id[rows], country="US",
                  device="ios")
    fields.update(overrides)
    return PredictionRequest(**fields)


def post(url: str, body) -> tuple[int, dict]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("POST", "/v1/score", body=body if isinstance(body, bytes) else json.dumps(body).encode(),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def get(url: str, path: str) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def score_body(snapshot, request_id: str = "r1", candidates: int = 20, deadline_ms: float = 5_000) -> dict:
    return {"request_id": request_id, "placement": "feed", "country": "US", "device": "ios",
            "user_features": {"emb_0": 0.3}, "ad_ids": snapshot.ad_id[:candidates].tolist(), "positions": [1, 2],
            "deadline_ms": deadline_ms}


# ------------------------------------------------------------------------------------------ in process

def test_predict_many_scores_a_batch_exactly_as_predict_scores_each_request(predictor, trained):
    snapshot = trained[1]
    mixed = [ask(snapshot, 200, (1, 2), seed=1),
             ask(snapshot, 37, (3,), seed=2, placement="video", country=None, device="desktop"),
             ask(snapshot, 1, (1, 2, 3, 4), seed=3, placement="article", country="DE"),
             ask(snapshot, 900, (1, 2, 3, 4), seed=4, placement="a-placement-never-seen"),  # 3,600 rows: two calls
             ask(snapshot, 5, (2,), seed=5, ad_ids=np.array([snapshot.ad_id[0], 987_654_321, 1, 2, 3]))]
    batched = predictor.predict_many(mixed)
    for request, together in zip(mixed, batched):
        alone = predictor.predict(request, deadline=float("inf"), clock=CLOCK)
        assert together.pctr.shape == (len(request.ad_ids), len(request.positions))
        np.testing.assert_allclose(together.pctr, alone.pctr, rtol=1e-6, atol=1e-9)
        np.testing.assert_array_equal(together.pcvr, alone.pcvr)
        assert together.model_version == alone.model_version == "click-tiny-1"


def test_the_batch_buckets_go_up_to_3200_rows_traced_at_load(predictor):
    assert predictor.buckets[-1] == 3_200 and set(predictor._score) == set(predictor.buckets)  # noqa: SLF001


# ------------------------------------------------------------------------------------------ the body

def test_a_score_request_body_is_parsed_into_the_models_request(trained):
    parsed = parse_score_request(score_body(trained[1], candidates=3))
    assert parsed.request_id == "r1" and parsed.deadline_ms == 5_000 and parsed.rows == 6
    assert parsed.prediction.ad_ids.tolist() == trained[1].ad_id[:3].tolist()
    assert (parsed.prediction.placement, parsed.prediction.country, parsed.prediction.device) == ("feed", "US", "ios")


@pytest.mark.parametrize("change, field", [
    ({"ad_ids": "1,2"}, "ad_ids"), ({"ad_ids": [1, "2"]}, "ad_ids[1]"), ({"positions": [0]}, "positions[0]"),
    ({"positions": []}, "positions"), ({"deadline_ms": None}, "deadline_ms"), ({"deadline_ms": -1}, "deadline_ms"),
    ({"placement": 3}, "placement"), ({"request_id": None}, "request_id"),
    ({"user_features": {"age": "old"}}, "user_features.age")])
def test_a_malformed_body_is_refused_naming_the_field(trained, change, field):
    with pytest.raises(BadRequest) as refused:
        parse_score_request({**score_body(trained[1]), **change})
    assert refused.value.field == field


# ------------------------------------------------------------------------------------------ over HTTP

def test_the_service_answers_with_the_models_scores_and_version(service, predictor, trained):
    remote = RemotePredictor(service.url)
    request = ask(trained[1], 200, (1, 2), seed=7)
    answer = remote.predict(request, deadline=CLOCK() + 5, clock=CLOCK)
    local = predictor.predict(request, deadline=float("inf"), clock=CLOCK)
    np.testing.assert_allclose(answer.pctr, local.pctr, rtol=1e-6, atol=1e-9)
    assert answer.model_version == "click-tiny-1"
    again = remote.predict(ask(trained[1], 3, (1,), seed=8), deadline=CLOCK() + 5, clock=CLOCK)  # keep-alive
    assert again.pctr.shape == (3, 1)
    status, model = get(service.url, "/v1/model")
    assert status == 200 and json.loads(model)["model_version"] == "click-tiny-1"
    assert json.loads(model)["snapshot_version"] == trained[1].version and json.loads(model)["canary"] is None
    assert get(service.url, "/healthz")[0] == 200
    status, metrics = get(service.url, "/metrics")
    assert b'adserve_prediction_requests_total{model_version="click-tiny-1",outcome="scored"} 2.0' in metrics


def test_a_malformed_body_gets_a_400_with_a_clear_message(service, trained):
    status, answer = post(service.url, {**score_body(trained[1]), "positions": ["first"]})
    assert status == 400 and answer["field"] == "positions[0]" and "integer" in answer["error"]
    status, answer = post(service.url, b"{not json")
    assert status == 400 and answer["field"] == "body"


def test_a_request_past_its_deadline_gets_a_504(service, trained):
    status, answer = post(service.url, score_body(trained[1], deadline_ms=0.001))
    assert status == 504 and "deadline" in answer["error"]
    assert b"adserve_prediction_deadline_misses_total" in get(service.url, "/metrics")[1]


def test_concurrent_requests_are_scored_together_in_one_batch(predictor, trained):
    """Requests that arrive while others wait for companions (here up to 200 ms) share a scoring call."""
    with ServiceThread(PredictionService(predictor, config=ServiceConfig(max_wait_ms=200))) as running:
        answers: list[tuple[int, dict]] = []
        threads = [threading.Thread(target=lambda i=i: answers.append(post(running.url, score_body(
            trained[1], f"c{i}", candidates=100)))) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [status for status, _ in answers] == [200] * 6
    assert max(a["batch_requests"] for _, a in answers) > 1
    first = np.asarray(answers[0][1]["pctr"])
    assert all(np.allclose(a["pctr"], first, rtol=1e-6) for _, a in answers)  # the same scores, whatever the batch


def test_the_canary_scores_the_requests_its_share_routes_to_it(predictor, candidate, trained):
    config = ServiceConfig(canary_share=0.5)
    with ServiceThread(PredictionService(predictor, candidate, config)) as running:
        ids = [f"req-{i}" for i in range(12)]
        versions = {rid: post(running.url, score_body(trained[1], rid))[1]["model_version"] for rid in ids}
        described = json.loads(get(running.url, "/v1/model")[1])
    assert versions == {rid: "click-tiny-2" if routes_to_candidate(rid, 0.5) else "click-tiny-1" for rid in ids}
    assert set(versions.values()) == {"click-tiny-1", "click-tiny-2"}
    assert described["canary"] == {"model_version": "click-tiny-2", "snapshot_version": trained[1].version,
                                   "share": 0.5}


def test_a_candidate_with_the_current_version_is_refused(predictor):
    with pytest.raises(ValueError, match="tell the arms apart"):
        PredictionService(predictor, predictor, ServiceConfig(canary_share=0.01))


# ------------------------------------------------------------------------------------------ failures

def test_with_the_service_stopped_the_remote_predictor_raises_within_its_deadline(predictor, trained):
    running = ServiceThread(PredictionService(predictor)).start()
    remote = RemotePredictor(running.url)
    remote.predict(ask(trained[1], 10), deadline=CLOCK() + 5, clock=CLOCK)  # a kept-alive connection
    running.stop()
    for _ in range(3):
        began = CLOCK()
        with pytest.raises((PredictionServiceError, PredictionTimeout)):
            remote.predict(ask(trained[1], 10), deadline=began + 0.035, clock=CLOCK)
        assert CLOCK() - began < 0.035


def test_a_service_that_never_answers_times_out_at_the_deadline(trained):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections (the kernel does) and never answers
    try:
        remote = RemotePredictor(f"http://127.0.0.1:{silent.getsockname()[1]}")
        began = CLOCK()
        with pytest.raises(PredictionTimeout):
            remote.predict(ask(trained[1], 10), deadline=began + 0.03, clock=CLOCK)
        assert CLOCK() - began < 0.03 + 0.01  # the socket timeout's granularity
    finally:
        silent.close()


def test_a_restarted_service_is_reached_again_on_a_new_connection(predictor, trained):
    first = ServiceThread(PredictionService(predictor)).start()
    port = int(first.url.rsplit(":", 1)[1])
    remote = RemotePredictor(first.url)
    remote.predict(ask(trained[1], 10), deadline=CLOCK() + 5, clock=CLOCK)
    first.stop()
    with ServiceThread(PredictionService(predictor), port=port):
        answer = remote.predict(ask(trained[1], 10), deadline=CLOCK() + 5, clock=CLOCK)
    assert answer.model_version == "click-tiny-1"


def test_the_engine_falls_back_to_the_pre_rankers_scores_when_the_service_is_down(trained):
    from core.targeting import compile_targeting, request_terms
    from serving.decision.campaigns import CampaignRecord, CampaignTable
    from serving.decision.engine import DecisionEngine, RequestContext
    from serving.decision.filters import FilterContext
    from serving.decision.index import AdRecord, TargetingIndex
    import random

    snapshot = trained[1]
    ads = [AdRecord(ad_id=int(snapshot.ad_id[i]), campaign_id=int(snapshot.campaign_id[i]), version=1, bid_type="CPC",
                    bid_micros=1_000_000, quality_micros=0, static_score=1.0,
                    targeting=compile_targeting({"placement": ["feed"]}), creative_ref="c", landing_url="https://x",
                    ctr_prior=float(snapshot.ctr_prior[i]), embedding=[0.0] * 8) for i in range(12)]
    campaigns = CampaignTable()
    for cid in {a.campaign_id for a in ads}:
        campaigns.upsert(CampaignRecord(campaign_id=cid, advertiser_id=cid, version=1))
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = closed.getsockname()[1]  # nothing listens here once the socket is closed
    engine = DecisionEngine(TargetingIndex.build(ads), campaigns, RemotePredictor(f"http://127.0.0.1:{nobody}"))
    context = RequestContext("r1", "feed", [1, 2], request_terms(placement=["feed"]), FilterContext(now_ms=0),
                             country="US", user_features={}, device="ios")
    # a first request compiles the index's kernels (numba, once per process): not what the deadline is about
    engine.decide(context, clock=CLOCK, deadline=CLOCK() + 10, rng=random.Random(0), np_rng=np.random.default_rng(0))
    began = CLOCK()
    decision = engine.decide(context, clock=CLOCK, deadline=began + 0.1, rng=random.Random(1),
                             np_rng=np.random.default_rng(1))
    assert decision.scored_by_fallback and decision.model_version is None and len(decision.winners) == 2
    assert CLOCK() - began < 0.1


def test_a_newer_ad_feature_snapshot_in_the_folder_is_swapped_in(trained, tmp_path):
    import asyncio

    from tests.tiny_model import snapshot_for

    model, snapshot = trained
    snapshot.write(tmp_path)
    service = PredictionService(ModelPredictor(model, snapshot), config=ServiceConfig(ad_features_dir=tmp_path))
    assert asyncio.run(service.refresh_snapshot()) is None  # nothing newer than v1
    newer = snapshot_for([5_000_001, 5_000_002], snapshot, version=snapshot.version + 1)
    newer.write(tmp_path)
    assert asyncio.run(service.refresh_snapshot()) == newer.version
    assert service.describe()["snapshot_version"] == newer.version
    scored = service.current.predict_many([ask(newer, 2, (1,), ad_ids=newer.ad_id)])[0]
    unknown = service.current.predict_many([ask(newer, 2, (1,), ad_ids=np.array([-5, -6]))])[0]
    assert not np.allclose(scored.pctr, unknown.pctr)  # the new ads are known to the swapped-in table
