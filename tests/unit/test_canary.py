"""The canary: requests routed to the candidate by a hash of the request id, and the promotion check on
literal served records and labelled examples (calibration within 0.95-1.05 and revenue per request not more
than 2 % below the current model's, or hold; too few clicks: not enough data)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from serving.decision.prediction import PredictionRequest, PriorPredictor
from learning.canary import PromotionRule, canary_report
from serving.model.canary import (HOLD, NOT_ENOUGH_DATA, PROMOTE, CanaryPredictor, canary_hash, routes_to_candidate,
                                  routing_key)

RULE = PromotionRule(min_clicks=40)  # literal days are small: 40 clicks stand in for the default 1,600


def served(request_id: str, version: str | None, cost_micros: int = 1_000) -> dict:
    """One request with one winner (impression `{request_id}:1`) whose expected cost is cost_micros."""
    return {"request_id": request_id, "model_version": version, "scored_by_fallback": version is None,
            "winners": [{"impression_id": f"{request_id}:1", "expected_cost_micros": cost_micros}]}


def example(request_id: str, label: int, logged_pctr: float, *, weight: float | None = None,
            placement: str = "feed", country: str | None = "US", billing_type: str = "CLICK") -> dict:
    return {"impression_id": f"{request_id}:1", "request_id": request_id, "label": label,
            "sample_weight": weight if weight is not None else (1.0 if label else 10.0), "logged_pctr": logged_pctr,
            "placement": placement, "country": country, "billing_type": billing_type, "scored_by_fallback": False}


def arm(version: str, prefix: str, *, requests: int, clicks: int, kept_non_clicks: int, pctr: float,
        cost_micros: int = 1_000) -> tuple[list[dict], list[dict]]:
    """`requests` requests of one version; the first `clicks` were clicked, the next `kept_non_clicks` were
    not (kept at w = 0.1, weight 10), every impression logged at `pctr`."""
    records = [served(f"{prefix}{i}", version, cost_micros) for i in range(requests)]
    labelled = [example(f"{prefix}{i}", 1, pctr) for i in range(clicks)]
    labelled += [example(f"{prefix}{i}", 0, pctr) for i in range(clicks, clicks + kept_non_clicks)]
    return records, labelled


def day(candidate_pctr: float, candidate_cost_micros: int = 1_000, candidate_clicks: int = 40):
    """The current model: 800 impressions (40 clicks, 76 kept non-clicks x 10) at 5 %, predicted 40 clicks,
    1,000 micros a request. The candidate: the same traffic at its own pCTR and revenue."""
    current = arm("click-v1", "a", requests=900, clicks=40, kept_non_clicks=76, pctr=0.05)
    candidate = arm("click-v2", "b", requests=800, clicks=candidate_clicks, kept_non_clicks=76, pctr=candidate_pctr,
                    cost_micros=candidate_cost_micros)
    return current[0] + candidate[0], current[1] + candidate[1]


# ------------------------------------------------------------------------------------------ routing

def test_routing_is_a_deterministic_hash_of_the_request_id_below_the_share():
    ids = [f"request-{i}" for i in range(20_000)]
    chosen = [rid for rid in ids if routes_to_candidate(rid, 0.01)]
    assert 0.008 < len(chosen) / len(ids) < 0.012
    assert chosen == [rid for rid in ids if routes_to_candidate(rid, 0.01)]
    assert all(canary_hash(rid) < 0.01 for rid in chosen)
    assert not any(routes_to_candidate(rid, 0.0) for rid in ids[:1000])
    assert set(chosen) <= {rid for rid in ids if routes_to_candidate(rid, 0.05)}  # a larger share keeps the slice


def test_the_canary_predictor_scores_each_request_on_the_arm_the_rule_picks():
    canary = CanaryPredictor(PriorPredictor(version="click-v1"), PriorPredictor(version="click-v2"), share=0.3)
    versions = []
    for i in range(200):
        request = PredictionRequest(rows=np.arange(3), ctr_prior=np.full(3, 0.02), positions=[1], placement="feed",
                                    user_features={"age": float(i)}, ad_ids=np.array([1, 2, 3]))
        answer = canary.predict(request, deadline=1.0, clock=lambda: 0.0)
        assert answer.model_version == ("click-v2" if routes_to_candidate(routing_key(request), 0.3) else "click-v1")
        assert canary.predict(request, deadline=1.0, clock=lambda: 0.0).model_version == answer.model_version
        versions.append(answer.model_version)
    assert 30 < versions.count("click-v2") < 90


def test_the_pre_rankers_affinity_comes_from_the_arm_that_will_score_the_request():
    class WithAffinity(PriorPredictor):
        def affinity(self, request):
            return np.full(len(request.rows), 1.0 if self.version == "click-v2" else -1.0)

    canary = CanaryPredictor(WithAffinity(version="click-v1"), WithAffinity(version="click-v2"), share=0.3)
    for i in range(50):
        request = PredictionRequest(rows=np.arange(2), ctr_prior=np.full(2, 0.02), positions=[1], placement="feed",
                                    user_features={"age": float(i)}, ad_ids=np.array([1, 2]))
        expected = 1.0 if routes_to_candidate(routing_key(request), 0.3) else -1.0
        assert np.array_equal(canary.affinity(request), [expected, expected])
    without = CanaryPredictor(PriorPredictor(version="click-v1"), PriorPredictor(version="click-v2"), share=0.3)
    assert without.affinity(request) is None  # arms without a student: the pre-ranker's own defaults


def test_a_request_that_carries_its_id_is_routed_by_it():
    request = PredictionRequest(rows=np.arange(1), ctr_prior=np.ones(1), positions=[1], placement="feed",
                                user_features={})
    request.request_id = "r-42"  # type: ignore[attr-defined] - a caller's PredictionRequest with a request id
    assert routing_key(request) == "r-42"


# ------------------------------------------------------------------------------------------ promotion

def test_a_calibrated_candidate_that_earns_as_much_is_promoted():
    records, examples = day(candidate_pctr=0.05, candidate_cost_micros=990)  # -1 %: inside the 2 % tolerance
    report = canary_report(records, examples, rule=RULE)
    assert (report["current"], report["candidate"], report["verdict"]) == ("click-v1", "click-v2", PROMOTE)
    v2 = report["versions"]["click-v2"]
    assert v2["requests"] == 800 and v2["revenue_per_request_micros"] == 990 and v2["clicks"] == 40
    assert v2["calibration"] == pytest.approx(1.0)
    assert report["versions"]["click-v1"]["revenue_per_request_micros"] == 1_000


def test_a_miscalibrated_candidate_is_held():
    records, examples = day(candidate_pctr=0.07)  # predicts 56 clicks for 40
    report = canary_report(records, examples, rule=RULE)
    assert report["verdict"] == HOLD
    assert report["versions"]["click-v2"]["calibration"] == pytest.approx(1.4)
    assert any("calibration 1.4" in reason and "outside 0.95-1.05" in reason for reason in report["reasons"])


def test_a_candidate_that_earns_more_than_2_percent_less_per_request_is_held():
    records, examples = day(candidate_pctr=0.05, candidate_cost_micros=975)
    report = canary_report(records, examples, rule=RULE)
    assert report["verdict"] == HOLD
    assert report["reasons"] == ["revenue per request 975 micros is 2.5 % below the current model's 1,000 "
                                 "(tolerance 2 %)"]


def test_too_few_clicks_is_not_enough_data_and_says_how_many_are_needed():
    records, examples = day(candidate_pctr=0.07, candidate_clicks=10)
    report = canary_report(records, examples, rule=RULE)
    assert report["verdict"] == NOT_ENOUGH_DATA
    assert "10 labelled clicks" in report["reasons"][0] and "needs 40 (30 more" in report["reasons"][0]
    default = canary_report(*day(candidate_pctr=0.05))
    assert default["verdict"] == NOT_ENOUGH_DATA and "needs 1,600" in default["reasons"][0]


def with_conversions(records: list[dict], examples: list[dict], version: str, *, clicked: int, converted: int,
                     pcvr: float) -> tuple[list[dict], list[dict]]:
    """The first `clicked` clicked impressions of `version` become CPA winners logged at `pcvr`, each with a
    conversion example; the first `converted` of them converted."""
    mine = {r["request_id"] for r in records if r["model_version"] == version}
    clicks = [e for e in examples if e["label"] == 1 and e["request_id"] in mine][:clicked]
    chosen = {e["impression_id"] for e in clicks}
    records = [{**r, "winners": [{**w, "bid_type": "CPA", "pcvr": pcvr} if w["impression_id"] in chosen else w
                                 for w in r["winners"]]} for r in records]
    conversions = [{**e, "task": "CONVERSION", "label": int(i < converted), "sample_weight": 1.0}
                   for i, e in enumerate(clicks)]
    return records, examples + conversions


def test_conversion_bids_are_judged_on_their_pcvr_once_there_are_enough_conversions():
    rule = PromotionRule(min_clicks=40, min_conversions=10)
    records, examples = day(candidate_pctr=0.05)
    over = with_conversions(records, examples, "click-v2", clicked=40, converted=10, pcvr=0.4)  # 16 for 10
    report = canary_report(*over, rule=rule)
    v2 = report["versions"]["click-v2"]
    assert (v2["conversion_clicks"], v2["conversions"], v2["predicted_conversions"]) == (40, 10, 16.0)
    assert report["verdict"] == HOLD and "pCVR calibration 1.6" in report["reasons"][0]
    assert report["versions"]["click-v2"]["clicks"] == 40  # conversion examples do not count as clicks
    right = with_conversions(records, examples, "click-v2", clicked=40, converted=10, pcvr=0.25)
    report = canary_report(*right, rule=rule)
    assert report["verdict"] == PROMOTE and "pCVR calibration 1.0 over 10 conversions" in report["reasons"][0]
    few = with_conversions(records, examples, "click-v2", clicked=40, converted=5, pcvr=0.4)
    report = canary_report(*few, rule=rule)
    assert report["verdict"] == PROMOTE and "pCVR not judged: 5 conversions" in report["reasons"][0]


def test_calibration_is_reported_per_placement_country_and_billing_type():
    records = [served("a1", "click-v1"), served("a2", "click-v1"), served("b1", "click-v2")]
    examples = [example("a1", 1, 0.5, placement="feed", country="US"),
                example("a2", 0, 0.1, weight=5.0, placement="video", country=None, billing_type="IMPRESSION"),
                example("b1", 1, 0.8)]
    figures = canary_report(records, examples, rule=RULE)["versions"]["click-v1"]
    assert figures["segments"] == [
        {"placement": "feed", "country": "US", "billing_type": "CLICK", "impressions": 1.0, "clicks": 1,
         "predicted_clicks": 0.5, "calibration": 0.5},
        {"placement": "video", "country": None, "billing_type": "IMPRESSION", "impressions": 5.0, "clicks": 0,
         "predicted_clicks": 0.5, "calibration": None}]
    assert figures["calibration"] == pytest.approx(1.0)  # (0.5 + 0.1 x 5) / 1 click


def test_a_candidate_calibrated_overall_but_off_in_a_segment_with_enough_clicks_is_held():
    current = arm("click-v1", "a", requests=900, clicks=40, kept_non_clicks=76, pctr=0.05)
    # the candidate's 80 clicks: half in feed/US at 0.07 (predicts 1.4 x), half in video/GB at 0.03 (0.6 x)
    records = current[0] + [served(f"b{i}", "click-v2") for i in range(1_600)]
    examples = list(current[1])
    for offset, (placement, country, pctr) in enumerate((("feed", "US", 0.07), ("video", "GB", 0.03))):
        ids = [f"b{offset * 800 + i}" for i in range(800)]
        examples += [example(r, 1, pctr, placement=placement, country=country) for r in ids[:40]]
        examples += [example(r, 0, pctr, placement=placement, country=country) for r in ids[40:116]]
    overall_only = canary_report(records, examples, current="click-v1", candidate="click-v2",
                                 rule=PromotionRule(min_clicks=40, min_segment_clicks=1_000))
    assert overall_only["versions"]["click-v2"]["calibration"] == pytest.approx(1.0)
    assert overall_only["verdict"] == PROMOTE and overall_only["segments_judged"] == []
    per_segment = canary_report(records, examples, current="click-v1", candidate="click-v2",
                                rule=PromotionRule(min_clicks=40, min_segment_clicks=40))
    assert per_segment["verdict"] == HOLD
    assert per_segment["segments_judged"] == [
        {"segment": "feed/US/CLICK", "clicks": 40, "calibration": pytest.approx(1.4)},
        {"segment": "video/GB/CLICK", "clicks": 40, "calibration": pytest.approx(0.6)}]
    assert sum("feed/US/CLICK over 40 clicks" in r for r in per_segment["reasons"]) == 1
    assert sum("video/GB/CLICK over 40 clicks" in r for r in per_segment["reasons"]) == 1


def test_fallback_requests_and_repeats_judge_no_model():
    records = [served("a1", "click-v1", 500), served("a1", "click-v1", 500), served("f1", None, 9_000),
               served("b1", "click-v2", 700)]
    report = canary_report(records, [example("f1", 1, 0.3) | {"scored_by_fallback": True}, example("zz", 1, 0.1)],
                           rule=RULE)
    assert report["versions"]["click-v1"]["requests"] == 1 and report["versions"]["click-v1"]["revenue_micros"] == 500
    assert (report["fallback_requests"], report["fallback_examples"], report["unmatched_examples"]) == (1, 1, 1)


def test_without_a_second_version_there_is_nothing_to_judge():
    report = canary_report([served("a1", "click-v1")], [], rule=RULE)
    assert report["verdict"] == NOT_ENOUGH_DATA and report["candidate"] is None


# ------------------------------------------------------------------------------------------ the command

def _full_served(record: dict) -> dict:
    """A literal record completed with the ServedRecord fields the file format requires."""
    winners = [{"impression_id": w["impression_id"], "slot_position": 1, "ad_id": 1, "campaign_id": 1,
                "billing_type": "CLICK", "bid_micros": 1_000_000, "pctr": 0.05, "quality_micros": 0,
                "total_value_micros": 50_000, "runner_up_total_value_micros": 0, "price_micros": 20_000,
                "expected_cost_micros": w["expected_cost_micros"], "participation_probability": 1.0}
               for w in record["winners"]]
    return {"request_id": record["request_id"], "event_time": 1_800_000_000_000, "server_id": "s1",
            "placement": "feed", "ad_snapshot_version": 1, "model_version": record["model_version"],
            "scored_by_fallback": record["scored_by_fallback"], "winners": winners}


def _write_day(folder: Path, records: list[dict], examples: list[dict]) -> list[str]:
    """The day as served.avro and examples.avro in `folder`; the --served and --examples arguments."""
    import fastavro

    from schemas import topics
    from schemas.codec import default_registry, plain_timestamps
    from learning.dataset import write_examples

    folder.mkdir(parents=True, exist_ok=True)
    schema = fastavro.parse_schema(plain_timestamps(default_registry().schema(topics.record_type(topics.AD_SERVED))))
    with open(folder / "served.avro", "wb") as f:
        fastavro.writer(f, schema, [_full_served(r) for r in records])
    full = [{**e, "event_time": 1_800_000_060_000, "served_time": 1_800_000_000_000, "ad_id": 1, "campaign_id": 1,
             "slot_position": 1, "device": "ios", "user_features": {}, "ad_snapshot_version": 1, "exploration": False}
            for e in examples]
    write_examples(folder / "examples.avro", full)
    return ["--served", str(folder / "served.avro"), "--examples", str(folder / "examples.avro")]


def test_canary_report_command_reads_the_files_and_exits_on_the_verdict(tmp_path: Path, capsys):
    from adserve.cli import main

    args = ["model", "canary-report", *_write_day(tmp_path, *day(candidate_pctr=0.07)), "--min-clicks", "40"]
    assert main([*args, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == HOLD and report["versions"]["click-v2"]["calibration"] == pytest.approx(1.4)
    assert main(args) == 1
    assert "HOLD" in capsys.readouterr().out
    assert main(["model", "canary-report", "--served", str(tmp_path / "nothing.avro"), "--examples",
                 str(tmp_path / "examples.avro")]) == 2


def test_a_canary_is_promoted_only_when_its_report_says_promote(tmp_path: Path, capsys):
    """`adserve model promote` against a running prediction service (a tiny trained model as click-v1, the
    same network as the canary click-v2): a "hold" day changes nothing, a "promote" day makes click-v2 the
    current model, and the service itself refuses a report for other versions or another verdict."""
    import dataclasses
    import http.client

    from adserve.cli import main
    from serving.model.predictor import ModelPredictor
    from serving.model.service import PredictionService, ServiceConfig, ServiceThread
    from tests.tiny_model import tiny_model

    model, snapshot = tiny_model("click-v1")
    current = ModelPredictor(model, snapshot)
    candidate = ModelPredictor(dataclasses.replace(model, metadata={**model.metadata, "model_version": "click-v2"}),
                               snapshot)

    def ask(url: str, method: str, path: str, body=None) -> tuple[int, dict]:
        host, port = url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            connection.request(method, path, body=None if body is None else json.dumps(body).encode(),
                               headers={"Content-Type": "application/json"})
            answer = connection.getresponse()
            return answer.status, json.loads(answer.read())
        finally:
            connection.close()

    held = _write_day(tmp_path / "hold", *day(candidate_pctr=0.07))
    passed = _write_day(tmp_path / "promote", *day(candidate_pctr=0.05))
    with ServiceThread(PredictionService(current, candidate, ServiceConfig(canary_share=0.01))) as running:
        promote = ["model", "promote", "--service", running.url, "--min-clicks", "40", "--json"]
        assert main([*promote, *held]) == 1
        outcome = json.loads(capsys.readouterr().out)
        assert (outcome["promoted"], outcome["report"]["verdict"], outcome["service_answer"]) == (False, HOLD, None)
        assert ask(running.url, "GET", "/v1/model")[1]["canary"]["model_version"] == "click-v2"

        promoting = canary_report(*day(candidate_pctr=0.05), rule=RULE)
        for wrong, reason in (({**promoting, "current": "click-v0"}, "judges current"),
                              ({**promoting, "verdict": HOLD}, "verdict")):
            status, answer = ask(running.url, "POST", "/v1/promote", {"model_version": "click-v2", "report": wrong})
            assert status == 409 and reason in answer["error"]
        status, answer = ask(running.url, "POST", "/v1/promote", {"model_version": "click-v3", "report": promoting})
        assert status == 409 and "not click-v3" in answer["error"]

        assert main([*promote, *passed]) == 0
        outcome = json.loads(capsys.readouterr().out)
        assert outcome["promoted"] and outcome["service_answer"] == {"promoted": "click-v2", "previous": "click-v1"}
        described = ask(running.url, "GET", "/v1/model")[1]
        assert (described["model_version"], described["canary"], described["canary_share"]) == ("click-v2", None, 0.0)
        assert main([*promote, *passed]) == 1  # nothing left to promote

