"""The pacing dashboard on the real platform: budget states and campaign records on a test's own Kafka topics and
a pacing day in Redis (streams.pacing_store) come back through the API, filtered and sorted; a newer budget
state replaces the row; a bad parameter is a 400 naming it and an unknown campaign a 404."""
from __future__ import annotations

import pytest

from tests.integration.dashboard_world import BUDGET, T0_MS, dashboard_world


@pytest.fixture
def world(platform, fresh_topics):
    world = dashboard_world(platform, fresh_topics)
    yield world
    world.close()


def ids(body) -> list[int]:
    return [row["campaign_id"] for row in body["campaigns"]]


def test_the_list_shows_each_campaigns_state_spend_and_why_it_under_delivers(world):
    status, body = world.get("/v1/pacing/campaigns")
    assert status == 200 and body["total"] == 4
    rows = {row["campaign_id"]: row for row in body["campaigns"]}
    assert [(rows[c]["state"], rows[c]["pace"], rows[c]["under_delivery"]) for c in world.ids] == [
        ("OPEN", "on", None), ("OPEN", "under", "audience"), ("OPEN", "on", "paused"), ("STOPPED", "over", "budget")]
    audience = rows[world.audience]
    assert (audience["advertiser_id"], audience["committed_micros"], audience["target_micros"],
            audience["billed_micros"], audience["remaining_micros"], audience["forecast_micros"]) == \
        (world.advertiser_a, 20_000_000, 40_000_000, 18_000_000, 80_000_000, 50_000_000)
    assert rows[world.spent]["forecast_micros"] == BUDGET


def test_filters_sorting_and_pages_reach_the_rows(world):
    assert ids(world.get(f"/v1/pacing/campaigns?advertiser_id={world.advertiser_b}")[1]) == [world.paused,
                                                                                            world.spent]
    assert ids(world.get("/v1/pacing/campaigns?state=STOPPED")[1]) == [world.spent]
    assert ids(world.get("/v1/pacing/campaigns?pace=under")[1]) == [world.audience]
    by_committed = world.get("/v1/pacing/campaigns?sort=committed_micros&order=desc")[1]
    assert ids(by_committed) == [world.spent, world.on_pace, world.paused, world.audience]
    page = world.get("/v1/pacing/campaigns?sort=committed_micros&order=desc&limit=2&offset=1")[1]
    assert (ids(page), page["total"]) == ([world.on_pace, world.paused], 4)


def test_a_campaign_answers_its_row_and_the_minutes_the_budget_job_wrote(world):
    status, body = world.get(f"/v1/pacing/campaigns/{world.on_pace}")
    assert status == 200 and body["campaign"]["campaign_id"] == world.on_pace
    day = world.store.read(world.on_pace)
    series = body["series"]
    assert series["minutes"] == list(range(600, 630))
    assert (series["target"], series["committed"], series["p"]) == (
        [p.target_micros for p in day.points], [p.committed_micros for p in day.points],
        [p.participation_probability for p in day.points])


def test_a_newer_budget_state_replaces_the_campaigns_row(world):
    world.publish_states(world.state(world.audience, "METERED", 39_000_000, 40_000_000, at_ms=T0_MS + 10_000))
    row = world.wait_for("the newer state", lambda: next(
        (r for r in world.get("/v1/pacing/campaigns?state=METERED")[1]["campaigns"]), None))
    assert (row["campaign_id"], row["committed_micros"], row["pace"], row["under_delivery"]) == \
        (world.audience, 39_000_000, "on", None)


def test_a_bad_parameter_is_a_400_naming_it(world):
    answers = {field: world.get(f"/v1/pacing/campaigns?{query}") for query, field in [
        ("state=RUNNING", "state"), ("pace=slow", "pace"), ("limit=0", "limit"), ("sort=nothing", "sort"),
        ("advertiser_id=a", "advertiser_id")]}
    assert {field: (status, body["field"]) for field, (status, body) in answers.items()} == \
        {field: (400, field) for field in answers}


def test_an_unknown_campaign_is_a_404(world):
    status, body = world.get("/v1/pacing/campaigns/1")
    assert (status, body["field"]) == (404, "campaign_id")
    assert world.get("/v1/fleet")[1]["panels"] == []
