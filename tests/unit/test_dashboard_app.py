"""The dashboard's handlers over an in-memory board and a scripted pacing store (no Kafka, Redis or Prometheus):
what each endpoint answers, 400 naming the parameter, 404 for an unknown campaign, and the fleet without a
Prometheus or with one that fails."""
from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest

from schemas import topics
from serving.dashboard.app import NO_PROMETHEUS, DashboardServer, panel_series
from serving.dashboard.board import PacingBoard
from serving.dashboard.panels import PANELS, panel
from streams.pacing_store import PacingDay, PacingPoint

DAY = "2026-03-10"


def campaign(campaign_id: int, advertiser_id: int, status: str = "ACTIVE", version: int = 1) -> dict:
    return {"campaign_id": campaign_id, "advertiser_id": advertiser_id, "version": version, "status": status,
            "daily_budget_micros": 100_000_000, "timezone": "UTC"}


def state(campaign_id: int, committed: int, target: int, event_time: int = 1_000, kind: str = "OPEN",
          limit: str | None = None) -> dict:
    return {"campaign_id": campaign_id, "event_time": event_time, "budget_day": DAY, "state": kind,
            "participation_probability": 0.5, "daily_budget_micros": 100_000_000, "billed_spend_micros": committed,
            "committed_spend_micros": committed, "remaining_micros": 100_000_000 - committed,
            "target_spend_micros": target, "delivery_limit": limit}


def board() -> PacingBoard:
    b = PacingBoard()
    b.apply([(topics.SERVING_CAMPAIGNS, campaign(1, 10), 0), (topics.SERVING_CAMPAIGNS, campaign(2, 20, "PAUSED"), 0),
             (topics.BUDGET_STATE, state(1, 20_000_000, 40_000_000, limit="BID"), 0),
             (topics.BUDGET_STATE, state(2, 40_000_000, 40_000_000), 0)])
    return b


def read_day(campaign_id: int) -> PacingDay | None:
    if campaign_id != 1:
        return None
    points = [PacingPoint(601, 30, 25, 0.6, "OPEN"), PacingPoint(600, 20, 15, 0.5, "OPEN")]
    return PacingDay(1, DAY, 100, "OPEN", 0.6, 30, 25, 20, 1_000, points)


def call(server: DashboardServer, path: str) -> tuple[int, dict | str]:
    async def run():
        client = TestClient(TestServer(server.app()))
        await client.start_server()
        try:
            response = await client.get(path)
            body = await response.json() if response.content_type == "application/json" else await response.text()
            return response.status, body
        finally:
            await client.close()
    return asyncio.run(run())


def test_the_list_answers_the_rows_of_the_board_and_their_count():
    status, body = call(DashboardServer(board(), read_day), "/v1/pacing/campaigns?sort=campaign_id&order=desc")
    assert status == 200 and body["total"] == 2
    assert [(r["campaign_id"], r["under_delivery"]) for r in body["campaigns"]] == [(2, "paused"), (1, "bid")]


def test_filters_reach_the_rows():
    status, body = call(DashboardServer(board(), read_day), "/v1/pacing/campaigns?advertiser_id=10&pace=under")
    assert (status, [r["campaign_id"] for r in body["campaigns"]], body["total"]) == (200, [1], 1)


def test_a_bad_parameter_is_a_400_naming_it():
    status, body = call(DashboardServer(board(), read_day), "/v1/pacing/campaigns?state=RUNNING")
    assert status == 400 and body["field"] == "state" and body["error"].startswith("state:")


def test_a_campaign_answers_its_row_and_its_minute_series_in_minute_order():
    status, body = call(DashboardServer(board(), read_day), "/v1/pacing/campaigns/1")
    assert status == 200 and body["campaign"]["campaign_id"] == 1
    assert {k: body["series"][k] for k in ("minutes", "target", "committed", "p")} == \
        {"minutes": [600, 601], "target": [20, 30], "committed": [15, 25], "p": [0.5, 0.6]}


def test_a_campaign_without_a_pacing_day_has_an_empty_series():
    status, body = call(DashboardServer(board(), read_day), "/v1/pacing/campaigns/2")
    assert status == 200 and body["series"]["minutes"] == []


def test_an_unknown_campaign_is_a_404_and_a_bad_id_a_400():
    server = DashboardServer(board(), read_day)
    assert call(server, "/v1/pacing/campaigns/99")[0] == 404
    status, body = call(server, "/v1/pacing/campaigns/abc")
    assert status == 400 and body["field"] == "campaign_id"


def test_a_failing_store_still_answers_the_row_with_the_reason():
    def broken(campaign_id: int):
        raise ConnectionError("redis down")
    status, body = call(DashboardServer(board(), broken), "/v1/pacing/campaigns/1")
    assert status == 200 and body["series"] is None and "redis down" in body["series_error"]


def test_without_prometheus_the_fleet_is_empty_and_says_why():
    status, body = call(DashboardServer(board(), read_day), "/v1/fleet")
    assert (status, body["panels"], body["reason"]) == (200, [], NO_PROMETHEUS)


def test_an_unreachable_prometheus_gives_each_panel_an_error_not_a_crash():
    status, body = call(DashboardServer(board(), read_day, prometheus_url="http://127.0.0.1:9"), "/v1/fleet")
    assert status == 200 and [p["name"] for p in body["panels"]] == [p.name for p in PANELS]
    assert all(p["error"] and "prometheus unavailable" in p["error"] for p in body["panels"])


def test_a_prometheus_answer_becomes_series_with_the_panels_labels():
    answer = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"type": "CLICK", "job": "tracker"}, "value": [1, "2.5"]},
        {"metric": {"type": "IMPRESSION", "job": "tracker"}, "value": [1, "NaN"]}]}}
    assert panel_series(panel("tracker_events_per_second"), answer) == [
        {"labels": {"type": "CLICK"}, "value": 2.5}, {"labels": {"type": "IMPRESSION"}, "value": None}]


def test_the_page_openapi_metrics_and_ready_answer():
    server = DashboardServer(board(), read_day, ready=lambda: False)
    status, page = call(server, "/")
    assert status == 200 and "/static/app.js" in page
    assert call(server, "/static/app.js")[0] == 200
    status, spec = call(server, "/openapi.json")
    assert status == 200 and "/v1/pacing/campaigns" in spec["paths"]
    status, metrics = call(server, "/metrics")
    assert status == 200 and "adserve_dashboard_campaigns 2.0" in metrics
    status, ready = call(server, "/ready")
    assert status == 503 and ready["campaigns"] == 2


def test_a_stopped_follower_makes_the_dashboard_unready_and_not_live():
    server = DashboardServer(board(), read_day, ready=lambda: True, failure=lambda: None)
    assert call(server, "/live") == (200, {"live": True})
    stopped = DashboardServer(board(), read_day, ready=lambda: False,
                              failure=lambda: "KafkaException('broker gone')")
    status, body = call(stopped, "/live")
    assert status == 503 and body == {"live": False, "error": "KafkaException('broker gone')"}
    assert call(stopped, "/ready")[0] == 503


def test_a_topic_follower_that_stopped_on_an_error_is_never_ready_again():
    from serving.adserver.state import TopicFollower

    follower = TopicFollower("127.0.0.1:9", lambda batch: None, job="dashboard", state_topics=("t",),
                             lease_topic=None)
    follower.loaded.set()
    assert follower.ready()  # loaded, nothing behind
    follower.error = RuntimeError("consumer closed")
    assert not follower.ready()


def test_on_a_simulated_day_the_follower_measures_its_lag_in_the_days_own_time():
    from serving.adserver.state import TopicFollower

    day_s = 1_773_100_800.0  # a simulated day, months before the wall clock
    wall_s = 1_796_000_000.0  # the budget job's topic carries its writer's clock
    for event_time, ready in ((False, False), (True, True)):
        follower = TopicFollower("127.0.0.1:9", lambda batch: None, job="dashboard", state_topics=("c", "s"),
                                 lease_topic=None, event_time=event_time)
        follower.loaded.set()
        # the campaigns topic's partition 0 is still being read, 3 s of the day behind its partition 1 (at its
        # end); the state topic, at its end, carries wall-clock times
        follower._at_end.update({("c", 0): False, ("c", 1): True, ("s", 0): True})
        follower._last_ts.update({("c", 0): day_s, ("c", 1): day_s + 3, ("s", 0): wall_s})
        assert follower.ready() is ready
        if event_time:
            assert follower.lag_s() == 3.0
            follower._last_ts[("c", 1)] = day_s + 60  # a minute of the day ahead: behind, not ready
            assert follower.lag_s() == 60.0 and not follower.ready()
        else:
            assert follower.lag_s() > 86_400  # the day's times read against the wall clock


def test_on_a_simulated_day_the_budget_state_age_is_taken_in_the_days_own_time():
    b = PacingBoard()
    b.apply([(topics.SERVING_CAMPAIGNS, {**campaign(1, 10), "event_time": 5_000}, 0),
             (topics.BUDGET_STATE, state(1, 1, 40_000_000, event_time=3_000), 0)])
    assert (b.newest_state_ms, b.newest_event_ms) == (3_000, 5_000)
    server = DashboardServer(b, lambda campaign_id: None, clock=lambda: b.newest_event_ms / 1000)
    page = generate_latest(server.metrics.registry).decode()
    assert "adserve_dashboard_budget_state_age_seconds 2.0" in page


def test_an_older_budget_state_or_campaign_version_does_not_replace_the_newer():
    b = board()
    b.apply([(topics.BUDGET_STATE, state(1, 1, 40_000_000, event_time=500), 0),
             (topics.SERVING_CAMPAIGNS, campaign(1, 77, version=0), 0)])
    assert (b.rows[1].committed_micros, b.rows[1].advertiser_id) == (20_000_000, 10)


@pytest.mark.parametrize("name", [p.name for p in PANELS])
def test_every_panel_is_found_by_its_name(name):
    assert panel(name).name == name


def test_panel_names_are_unique():
    assert len({p.name for p in PANELS}) == len(PANELS)



OPS = "operators-token-0123456789"
KEYS = {"ak_advertiser_10": 10}


async def _lookup(key: str) -> int | None:
    return KEYS.get(key)


def call_as(server: DashboardServer, path: str, token: str | None, forwarded: str | None = None):
    async def run():
        client = TestClient(TestServer(server.app()))
        await client.start_server()
        try:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            if forwarded:
                headers["X-Forwarded-For"] = forwarded
            response = await client.get(path, headers=headers)
            return response.status, await response.json() if response.content_type == "application/json" else None
        finally:
            await client.close()
    return asyncio.run(run())


def _with_auth() -> DashboardServer:
    from serving.dashboard.auth import DashboardAuth

    return DashboardServer(board(), read_day, auth=DashboardAuth(OPS, _lookup))


def test_with_auth_the_api_answers_only_bearer_tokens_and_the_page_stays_public():
    server = _with_auth()
    assert call_as(server, "/v1/pacing/campaigns", None)[0] == 401
    assert call_as(server, "/v1/pacing/campaigns", "ak_guessed")[0] == 401
    assert call_as(server, "/ready", None)[0] == 200 and call_as(server, "/openapi.json", None)[0] == 200
    status, body = call_as(server, "/v1/pacing/campaigns", OPS)
    assert status == 200 and body["total"] == 2  # the operator sees every campaign
    assert call_as(server, "/v1/fleet", OPS)[0] == 200


def test_an_advertiser_sees_only_its_own_campaigns_and_not_the_fleet():
    server, key = _with_auth(), "ak_advertiser_10"
    status, body = call_as(server, "/v1/pacing/campaigns", key)
    assert status == 200 and [r["campaign_id"] for r in body["campaigns"]] == [1]
    assert call_as(server, "/v1/pacing/campaigns?advertiser_id=20", key)[0] == 403
    assert call_as(server, "/v1/pacing/campaigns/1", key)[0] == 200
    assert call_as(server, "/v1/pacing/campaigns/2", key)[0] == 404  # another advertiser's: not known
    assert call_as(server, "/v1/fleet", key)[0] == 403


def test_failed_tokens_are_limited_per_client_address_and_a_working_key_still_passes():
    from core.client_address import parse_trusted_proxies
    from serving.dashboard.auth import FAILED_TOKENS, DashboardAuth

    server = DashboardServer(board(), read_day, auth=DashboardAuth(
        OPS, _lookup, trusted_proxies=parse_trusted_proxies("127.0.0.0/8"), clock=lambda: 1_000.0))

    async def run():
        client = TestClient(TestServer(server.app()))
        await client.start_server()
        try:
            async def status(token: str, forwarded: str) -> int:
                r = await client.get("/v1/pacing/campaigns", headers={"Authorization": f"Bearer {token}",
                                                                      "X-Forwarded-For": forwarded})
                return r.status
            good = await status("ak_advertiser_10", "198.51.100.7")
            guesses = [await status(f"ak_guess_{n}", "198.51.100.7") for n in range(FAILED_TOKENS.burst + 2)]
            return good, guesses, await status("ak_advertiser_10", "198.51.100.7"), \
                await status("ak_guess_x", "198.51.100.8")
        finally:
            await client.close()
    good, guesses, again, elsewhere = asyncio.run(run())
    assert good == 200 and guesses[:FAILED_TOKENS.burst] == [401] * FAILED_TOKENS.burst
    assert guesses[FAILED_TOKENS.burst:] == [429, 429]
    assert again == 200 and elsewhere == 401  # the key that worked, and another client behind the same ingress
