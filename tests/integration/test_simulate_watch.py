"""What `adserve simulate` adds around its day, over the real platform: the day's pacing dashboard (sim.day_watch)
started through run_day's on_start hook on a day's budget-state and campaigns topics answers with the day's
campaigns and leaves a PNG screenshot of its page with a campaign selected; and the day's reports check
(sim.day_reports) lands a billed topic into the campaign store, finds each campaign's daily report equal to the
recount of the same beacons, and finds a recount that differs."""
from __future__ import annotations

import random
import uuid
from types import SimpleNamespace as NS

from core import clicks
from schemas import topics
from schemas.codec import AvroCodec
from sim import day_reports
from sim.day_watch import DayWatch
from streams import kafka
from tests import billed_feed as feed
from tests.integration.dashboard_world import DashboardWorld

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BILLED_TYPE = topics.record_type(topics.BILLED_SPEND)


def test_the_days_dashboard_answers_on_the_days_topics_and_leaves_a_png_of_a_selected_campaign(
        platform, fresh_topics, tmp_path):
    world = DashboardWorld(platform, fresh_topics)
    world.publish_campaigns()
    world.publish_states(*world.initial_states())
    world.write_minutes(world.on_pace, range(600, 630))
    logged: list[str] = []
    watch = DayWatch(bootstrap=platform.kafka_bootstrap, prometheus_url=None, host="127.0.0.1", port=0,
                     out_dir=tmp_path, log=logged.append)
    try:
        on_end = watch.on_start({"state": world.state_topic, "campaigns": world.campaigns_topic}, platform.redis_url)
        assert watch.dashboard is not None
        assert f"pacing dashboard: {watch.dashboard.url}" in logged
        world.port = watch.dashboard.port  # the world's reads go to the day's dashboard
        world.wait_loaded()

        days = {c: NS(campaign=NS(budget_micros=1_000_000)) for c in world.ids}
        days[world.on_pace] = NS(campaign=NS(budget_micros=50_000_000))  # the largest: the one selected
        result: dict = {"days": days}
        on_end(result)
    finally:
        watch.close()
        world.close()

    found = result["dashboard"]
    assert found["answered"] and found["ready"]
    assert found["campaigns_listed"] == found["campaigns_with_state"] == 4
    assert found["selected_campaign"] == world.on_pace
    assert found["screenshot_error"] is None
    assert found["screenshot"] == str(tmp_path / "dashboard.png")
    assert (tmp_path / "dashboard.png").read_bytes()[:8] == PNG_MAGIC
    assert watch.dashboard is None  # stopped at the end of the day


def test_the_days_reports_equal_the_recount_of_its_beacons_and_a_different_recount_is_found(platform,
                                                                                             fresh_topics):
    billed_topic, conversions_topic, dead_topic = fresh_topics("sim-billed", "sim-conversions", "sim-dead")
    topics = {"billed": billed_topic, "conversions": conversions_topic, "dead": dead_topic}
    base = 860_000_000 + random.randrange(1_000_000) * 10
    versions = [feed.campaign_version(base + 1, 40 * feed.DOLLAR), feed.campaign_version(base + 2, 3 * feed.DOLLAR),
                feed.campaign_version(base + 3, 500 * feed.DOLLAR, bid_type="CPM")]
    events = feed.beacons({base + 1: "CLICK", base + 2: "CLICK", base + 3: "IMPRESSION"}, hours=2, per_hour=30,
                          start_ms=feed.T0 + 9 * feed.HOUR_MS)
    billed = feed.billed_stream(events, versions)
    codec = AvroCodec()
    kafka.produce_all(platform.kafka_bootstrap, billed_topic, [
        (str(r["campaign_id"]).encode(), codec.encode(BILLED_TYPE, r), int(r["event_time"])) for r in billed])
    recount = day_reports.day_recount(clicks.recount(events, versions), "2026-03-10")
    ids = [base + 1, base + 2, base + 3, base + 4]  # the last one billed nothing: zeros on both sides
    run = uuid.uuid4().hex[:8]

    checked = day_reports.check(platform, topics, run, ids, recount, "2026-03-10")
    assert checked["reports_error"] is None
    assert checked["billed_records_landed"] == len(billed)
    assert checked["report_differences"] == []
    assert checked["reports_equal_recount"] is True and checked["report_campaigns"] == 4
    assert sum(t["billed_spend_micros"] for t in recount.values()) > 0

    changed = {**recount, base + 1: {**recount[base + 1],
                                     "billed_clicks": recount[base + 1]["billed_clicks"] + 1}}
    again = day_reports.check(platform, topics, run, ids, changed, "2026-03-10")
    assert again["reports_equal_recount"] is False
    assert again["report_differences"] == [{"campaign_id": base + 1, "field": "billed_clicks",
                                            "report": recount[base + 1]["billed_clicks"],
                                            "recount": recount[base + 1]["billed_clicks"] + 1}]
