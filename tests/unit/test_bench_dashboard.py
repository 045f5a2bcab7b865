"""`adserve bench dashboard`: how its figures are shaped and judged against the targets, and the records it lands
(valid against the topics' schemas, cumulative per budget day as the click aggregator emits them)."""
from __future__ import annotations

import pytest

from adserve.cli import build_parser
from bench import dashboard
from core.errors import RunFailed
from core.reports import LandingBatch, hourly_rows
from schemas import topics
from schemas.codec import AvroCodec

SERVING_CAMPAIGN = topics.record_type(topics.SERVING_CAMPAIGNS)
BUDGET_STATE = topics.record_type(topics.BUDGET_STATE)


def test_latency_figures_name_the_api_and_its_baseline_percentiles():
    figures = dashboard.latency_figures("pacing", [float(n) for n in range(1, 101)], [1.0] * 100)
    assert set(figures) == {"pacing_api_p50_ms", "pacing_api_p99_ms", "pacing_baseline_p50_ms",
                            "pacing_baseline_p99_ms"}
    assert figures["pacing_api_p50_ms"] == 50.5
    assert figures["pacing_api_p99_ms"] == 99.01
    assert figures["pacing_baseline_p99_ms"] == 1.0


def test_a_run_without_samples_fails_rather_than_report_nothing():
    with pytest.raises(RunFailed, match="report"):
        dashboard.latency_figures("report", [], [1.0])
    with pytest.raises(RunFailed, match="page"):
        dashboard.page_figures([], [])


def test_the_page_figure_is_the_median_load_with_the_first_and_slowest_beside_it():
    figures = dashboard.page_figures([900.0, 300.0, 320.0, 310.0], [20.0, 30.0, 10.0])
    assert figures == {"page_load_ms": 315.0, "page_load_max_ms": 900.0, "page_load_first_ms": 900.0,
                       "page_baseline_ms": 20.0, "page_loads": 4}


def test_each_measured_figure_is_judged_against_its_target_and_a_skipped_one_is_not():
    verdicts = dashboard.verdicts({"pacing_api_p99_ms": 50.0, "report_api_p99_ms": 100.5})
    assert verdicts == {"pacing_api_p99_ms": {"target": 50.0, "met": True},
                        "report_api_p99_ms": {"target": 100.0, "met": False}}


def test_requests_alternate_with_the_baseline():
    assert dashboard.interleave(["/a", "/b"], "/ready") == ["/a", "/ready", "/b", "/ready"]


def test_the_pacing_records_are_valid_serving_campaigns_and_budget_states():
    codec = AvroCodec()
    serving, states = dashboard.pacing_records(1_000, 50)
    assert [r["campaign_id"] for r in serving] == [s["campaign_id"] for s in states] == list(range(1_000, 1_050))
    for record in serving:
        assert codec.decode(codec.encode(SERVING_CAMPAIGN, record), SERVING_CAMPAIGN)["campaign_id"]
    for record in states:
        assert record["committed_spend_micros"] <= record["daily_budget_micros"]
        assert codec.decode(codec.encode(BUDGET_STATE, record), BUDGET_STATE)["campaign_id"]


def test_the_report_range_is_thirty_days():
    assert dashboard.report_range() == ("2026-02-01", "2026-03-03")


def test_billed_records_are_one_per_campaign_hour_cumulative_within_each_budget_day():
    codec = AvroCodec()
    records = dashboard.billed_records([5, 6], "2026-01-31", 2)
    assert len(records) == 2 * 2 * 24
    for record in records:
        codec.encode(topics.record_type(topics.BILLED_SPEND), record)
    days = {}
    for record in records:
        days.setdefault((record["campaign_id"], record["budget_day"]), []).append(record)
    assert set(days) == {(5, "2026-01-31"), (5, "2026-02-01"), (6, "2026-01-31"), (6, "2026-02-01")}
    for day in days.values():
        for earlier, later in zip(day, day[1:]):
            assert later["event_time"] - earlier["event_time"] == dashboard.HOUR_MS
            assert later["billed_clicks"] >= earlier["billed_clicks"]
            assert later["billed_spend_micros"] >= earlier["billed_spend_micros"]


def test_landed_hourly_rows_add_up_to_each_days_last_record():
    records = dashboard.billed_records([5], "2026-02-01", 1)
    batch = LandingBatch()
    for record in records:
        batch.add_billed(record)
    assert len(batch.hourly) == 24  # every record lands in an hour of its own
    tuples = [(c, day, hour, r["billed_impressions"], r["billed_clicks"], r["billed_spend_micros"])
              for (c, day, hour), r in batch.hourly.items()]
    rows = hourly_rows(tuples, [], 0, 10**15)
    assert sum(row["billed_clicks"] for row in rows[5]) == records[-1]["billed_clicks"]


def test_conversions_fall_inside_their_hour_and_name_distinct_impressions():
    codec = AvroCodec()
    billed = dashboard.billed_records([5], "2026-02-01", 1)
    conversions = dashboard.conversion_records(billed)
    assert len({c["impression_id"] for c in conversions}) == len(conversions) > 0
    ends = {r["event_time"] for r in billed}
    for conversion in conversions:
        codec.encode(topics.record_type(topics.AD_CONVERSIONS), conversion)
        assert any(end - dashboard.HOUR_MS <= conversion["event_time"] < end for end in ends)


def test_render_says_whether_each_target_is_met():
    figures = {"machine": {"cpu": "x", "cores": 2, "memory_gib": 8}, "load_average": [3.1, 4.2],
               "pacing_campaigns": 10_000, "pacing_requests": 10, "pacing_api_p50_ms": 5.0,
               "pacing_api_p99_ms": 70.0, "pacing_baseline_p50_ms": 0.5, "pacing_baseline_p99_ms": 1.0}
    figures["targets"] = dashboard.verdicts(figures)
    text = dashboard.render(figures)
    assert "p99 70.0 ms (target <= 50 ms: NOT met)" in text
    assert "load 3.1 before, 4.2 after" in text


def test_the_bench_is_an_adserve_bench_subcommand():
    args = build_parser().parse_args(["bench", "dashboard", "--json", "--report-campaigns", "20"])
    assert args.report_campaigns == 20 and args.json and args.campaigns == 10_000
