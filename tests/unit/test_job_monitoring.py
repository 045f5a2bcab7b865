"""What the jobs count for Prometheus (core.monitoring) and how their functions export it: calibration per
segment from training_join's examples, campaigns limited for an hour from budget_pacing's steps."""
from __future__ import annotations

from core import training
from core.monitoring import LimitedCampaigns, calibration_counts
from jobs.training_join.functions import Label, join_row
from tests.unit.flink_fakes import FakeContext, at_key, opened
from tests.unit.test_training_rules import SERVED_MS, beacon, served

HOUR_MS = 3_600_000


def _example(**fields) -> dict:
    return {"task": "CLICK", "sample_weight": 1.0, "placement": "feed", "country": "US", "billing_type": "CLICK",
            "logged_pctr": 0.02, "label": 0, **fields}


def test_a_down_sampled_non_click_stands_for_its_weight_in_predicted_clicks():
    counts = calibration_counts(_example(sample_weight=10.0, logged_pctr=0.02, label=0))
    assert counts == (("feed", "US", "CLICK"), 200_000, 0)


def test_a_click_counts_one_observed_click_and_its_prediction():
    assert calibration_counts(_example(logged_pctr=0.5, label=1)) == (("feed", "US", "CLICK"), 500_000, 1)


def test_an_unknown_country_is_its_own_segment_and_conversion_examples_do_not_count():
    assert calibration_counts(_example(country=None)).segment == ("feed", "", "CLICK")
    assert calibration_counts(_example(task="CONVERSION")) is None


def test_a_campaign_counts_as_limited_only_after_an_unbroken_hour():
    limited = LimitedCampaigns()
    limited.observe(7, "BID", 0)
    limited.observe(7, "BID", HOUR_MS - 10_000)
    assert limited.count("BID") == 0
    limited.observe(7, "BID", HOUR_MS)
    assert (limited.count("BID"), limited.count("AUDIENCE")) == (1, 0)


def test_a_break_or_a_change_of_limit_starts_the_hour_again():
    limited = LimitedCampaigns()
    limited.observe(7, "BID", 0)
    limited.observe(8, "AUDIENCE", 0)
    limited.observe(7, None, HOUR_MS // 2)
    limited.observe(7, "BID", HOUR_MS // 2 + 10_000)
    limited.observe(8, "BID", HOUR_MS // 2 + 10_000)
    limited.observe(9, "AUDIENCE", HOUR_MS)
    assert (limited.count("BID"), limited.count("AUDIENCE")) == (0, 0)
    limited.observe(7, "BID", 2 * HOUR_MS)
    assert limited.count("BID") == 2  # 7 and 8, each limited by bid since half past


def test_training_join_counts_a_clicked_example_on_its_segment_counters():
    label, context = opened(Label(training.JoinRules(keep_rate=1.0)))
    ctx = at_key(context, FakeContext(), "r1:1")
    for record in [training.join_records("served", served()), training.join_records("event", beacon("r1:1", "CLICK", 4_000))]:
        for joined in record:
            list(label.process_element(join_row(joined), ctx))
    list(label.on_timer(training.final_at_ms(SERVED_MS), ctx))
    clicks = {name: c.count for name, c in context.metrics.counters.items() if name.endswith(".calibration_clicks")}
    assert list(clicks.values()) == [1]
    (name,) = clicks
    assert name.startswith("placement=") and ".country=" in name and ".billing_type=" in name


def test_budget_pacing_exports_both_limited_counts_as_gauges():
    from jobs.budget_pacing.functions import Pace, PacerSettings
    from tests.unit.test_budget_pacing_job import FakeRuntimeContext

    pace, runtime = Pace(PacerSettings(shards=2)), FakeRuntimeContext()
    pace.open(runtime)
    pace.limited.observe(7, "AUDIENCE", 0)
    pace.limited.observe(7, "AUDIENCE", HOUR_MS)
    assert {name: read() for name, read in runtime.gauges.items()} == {
        "campaigns_limited_by_bid_for_an_hour": 0, "campaigns_limited_by_audience_for_an_hour": 1}
