"""Schemathesis against the ad server, the tracker, the prediction service and the dashboard, each in this
process on a free loopback port over in-memory stand-ins for Kafka and Redis (tests/api_fuzz.py): no
generated request, fitting the service's OpenAPI description or breaking it, gets a 5xx or an answer its
own description does not allow. (The advertiser API needs PostgreSQL: tests/integration/test_advertiser_fuzz.py.)"""
from __future__ import annotations

from typing import Any

import pytest

from core.errors import BadRequest
from core.tokens import ClickIdClaims, TokenClaims, TokenKeys
from schemas import topics
from serving.adserver.app import AdServer, ServerConfig
from serving.adserver.offloop import ServedLog
from serving.adserver.request import parse_ad_request
from serving.adserver.state import ServingState
from serving.dashboard.app import DashboardServer
from serving.dashboard.board import PacingBoard
from serving.frequency_store import UserStore
from serving.model.predictor import ModelPredictor
from serving.model.service import PredictionService, parse_score_request
from serving.tracker import Tracker
from streams.pacing_store import PacingDay, PacingPoint
from tests.api_fuzz import LiveApp, fuzz
from tests.redis_doubles import Pipelined
from tests.tiny_model import tiny_model

PLACEMENT = "fuzz"
KEYS = TokenKeys({"k1": b"1" * 32}, "k1")
NOW_MS = 1_800_000_000_000


class EmptyRedis(Pipelined):
    """The user store's Redis: no profile and no frequency record for anyone."""

    async def hgetall(self, key: str) -> dict:
        return {}

    async def close(self) -> None:
        return None


class MemoryProducer:
    """A confluent_kafka.Producer stand-in that keeps what it is given (the served log's thread encodes first)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes]] = []

    def produce(self, topic: str, key: bytes, value: bytes, **kwargs: Any) -> None:
        self.records.append((topic, key, value))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0


def serving_state() -> ServingState:
    """One active CPM campaign with two ads on the fuzz placement, one of them only for US iOS users."""
    state = ServingState("fuzz")
    state.apply(topics.SERVING_CAMPAIGNS, {
        "campaign_id": 1, "advertiser_id": 1, "version": 1, "event_time": 1_000, "status": "ACTIVE",
        "bid_type": "CPM", "daily_budget_micros": 10**9, "currency": "USD", "timezone": "UTC", "flight_start": None,
        "flight_end": None, "dayparts": [], "cap_per_day": 3, "cap_per_week": None, "cpa_target_micros": None},
        2_000)
    for ad_id, targeting in ((10, []), (11, [{"attribute": "country", "values": ["US"], "excluded": False},
                                             {"attribute": "device", "values": ["ios"], "excluded": False}])):
        state.apply(topics.SERVING_ADS, {
            "ad_id": ad_id, "campaign_id": 1, "advertiser_id": 1, "version": 1, "event_time": 1_000,
            "removed": False, "bid_type": "CPM", "bid_micros": 5_000_000, "quality_prior": 0.0,
            "creative_ref": f"creative-{ad_id}", "landing_url": "https://shop.example/landing", "static_score": 1.0,
            "targeting": [{"attribute": "placement", "values": [PLACEMENT], "excluded": False}, *targeting]}, 2_000)
    return state


def test_the_ad_server_answers_every_generated_request_within_its_description():
    store = UserStore("127.0.0.1", 1)
    store.redis = EmptyRedis()  # type: ignore[assignment]

    async def record_served(*args: Any, **kwargs: Any) -> int:
        return 1
    store._record = record_served  # type: ignore[assignment]
    log_errors: list[str] = []
    served_log = ServedLog(MemoryProducer(), on_error=log_errors.append)  # encodes each record like in production
    # a deadline no loaded test machine misses: a 503 here would be the machine's, not the server's
    server = AdServer(ServerConfig(server_id="fuzz", deadline_ms=60_000), serving_state(), store, KEYS,
                      served_log=served_log, ready=lambda: True)
    try:
        with LiveApp(server.app) as live:
            failures = fuzz(live.url)
    finally:
        served_log.close()
    assert not failures, "\n\n".join(failures)
    assert not log_errors, "an accepted request's ad.served record did not encode"
    assert served_log.producer.records, "no generated request was served"


def dashboard_board() -> PacingBoard:
    board = PacingBoard()
    campaign = {"campaign_id": 1, "advertiser_id": 10, "version": 1, "status": "ACTIVE",
                "daily_budget_micros": 100_000_000, "timezone": "UTC"}
    state = {"campaign_id": 1, "event_time": 1_000, "budget_day": "2026-03-10", "state": "OPEN",
             "participation_probability": 0.5, "daily_budget_micros": 100_000_000, "billed_spend_micros": 10,
             "committed_spend_micros": 20, "remaining_micros": 99_999_980, "target_spend_micros": 40,
             "delivery_limit": None}
    board.apply([(topics.SERVING_CAMPAIGNS, campaign, 0), (topics.BUDGET_STATE, state, 0),
                 (topics.SERVING_CAMPAIGNS, {**campaign, "campaign_id": 2, "status": "PAUSED"}, 0)])
    return board


def pacing_day(campaign_id: int) -> PacingDay | None:
    if campaign_id != 1:
        return None
    return PacingDay(1, "2026-03-10", 100, "OPEN", 0.6, 30, 25, 20, 1_000,
                     [PacingPoint(600, 20, 15, 0.5, "OPEN"), PacingPoint(601, 30, 25, 0.6, "OPEN")])


def test_the_dashboard_answers_every_generated_request_within_its_description():
    server = DashboardServer(dashboard_board(), pacing_day)
    with LiveApp(server.app) as live:
        failures = fuzz(live.url)
    assert not failures, "\n\n".join(failures)


def test_the_tracker_answers_every_generated_beacon_within_its_description():
    kept: list[tuple[str, bytes, bytes]] = []
    tracker = Tracker(KEYS, lambda topic, key, value: kept.append((topic, key, value)), clock=lambda: NOW_MS / 1000)
    token = KEYS.sign(TokenClaims("fuzz-request:1", 10, 1, 5_000, "IMPRESSION", "https://shop.example/landing?a=1",
                                  NOW_MS + 3_600_000, served_ms=NOW_MS - 1_000))
    click_id = KEYS.sign_click_id(ClickIdClaims("fuzz-request:1", 10, 1, NOW_MS - 1_000, NOW_MS - 500,
                                                expires_ms=NOW_MS + 86_400_000))
    valid = {"query": {"t": token}}  # generated requests reach past the signature with the serve's own token
    with LiveApp(tracker.app) as live:
        failures = fuzz(live.url, fixed={"GET /v1/impression": valid, "GET /v1/click": valid,
                                         "GET /v1/feedback": valid, "GET /v1/conversion": {"query": {"c": click_id}}})
    assert not failures, "\n\n".join(failures)
    accepted = sum(sample.value for metric in tracker.events.collect() for sample in metric.samples
                   if sample.name.endswith("_total"))
    assert kept and len(kept) == accepted, "an answered beacon was not kept, or a kept one not counted"


@pytest.fixture(scope="module")
def scoring_model():
    return tiny_model("click-fuzz-1")


def test_the_prediction_service_answers_every_generated_request_within_its_description(scoring_model):
    service = PredictionService(ModelPredictor(*scoring_model))
    service.batcher.start()
    try:
        with LiveApp(service.app) as live:
            # 504 is the answer to a deadline that passed before the score (a generated deadline_ms of 1e-300
            # passes at once): the caller falls back on its priors; every other 5xx is a failure
            failures = fuzz(live.url, allowed_server_errors={504})
    finally:
        service.batcher.stop()
    assert not failures, "\n\n".join(failures)


# What the fuzzer found, kept as literal cases (a bounded run may not draw them again)

def test_a_score_request_with_numbers_beyond_what_the_model_holds_is_a_400_naming_the_field():
    valid = {"request_id": "r1", "placement": "feed", "ad_ids": [1], "positions": [1], "deadline_ms": 5}
    for change, field in (({"ad_ids": [-2**63 - 1]}, "ad_ids[0]"), ({"positions": [2**31]}, "positions[0]"),
                          ({"user_features": {"age": 10**400}}, "user_features.age"),
                          ({"deadline_ms": 10**400}, "deadline_ms")):
        with pytest.raises(BadRequest) as refused:
            parse_score_request({**valid, **change})
        assert refused.value.field == field


def test_a_slot_position_the_served_log_cannot_hold_is_a_400_naming_it():
    with pytest.raises(BadRequest) as refused:
        parse_ad_request({"placement": PLACEMENT, "slots": [{"position": 1}, {"position": 2**31}]})
    assert refused.value.field == "slots[1].position"
