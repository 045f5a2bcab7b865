"""core.reports: the report request's rules (each wrong parameter named), the hour and day buckets, and reports
built from the aggregator's billed records that equal core.clicks.recount of the same beacons, in any landing
order and after a replay."""
from __future__ import annotations

import random

import pytest

from core import clicks, reports
from core.errors import InvalidArgument, InvalidField
from tests import billed_feed as feed

HOUR = reports.HOUR_MS


def _field_of(query: dict) -> str:
    with pytest.raises(InvalidField) as caught:
        reports.parse_report_query(query)
    return caught.value.field


# ------------------------------------------------------------------------------------------ the request
def test_a_daily_report_of_budget_days_is_the_default():
    request = reports.parse_report_query({"from": "2026-03-10", "to": "2026-03-12"})
    assert (request.granularity, request.from_day, request.to_day, request.campaign_ids) == (
        "day", "2026-03-10", "2026-03-12", ())


def test_an_hourly_report_takes_whole_hours_with_a_zone_or_dates():
    request = reports.parse_report_query({"from": "2026-03-10T13:00:00Z", "to": "2026-03-10T16:00:00+01:00",
                                          "granularity": "hour", "campaign_id": "7,3,7"})
    assert request.from_ms == feed.T0 + 13 * HOUR and request.to_ms == feed.T0 + 15 * HOUR
    assert request.campaign_ids == (3, 7)
    unescaped = reports.parse_report_query({"from": "2026-03-10T14:00:00 01:00", "to": "2026-03-11",
                                            "granularity": "hour"})
    assert unescaped.from_ms == feed.T0 + 13 * HOUR  # a "+" not escaped in the URL arrives as a space
    assert reports.parse_report_query({"from": "2026-03-10", "to": "2026-03-11", "granularity": "hour"}).to_ms \
        == feed.T0 + 24 * HOUR


@pytest.mark.parametrize("query, field", [
    ({"to": "2026-03-11"}, "from"),
    ({"from": "2026-03-10"}, "to"),
    ({"from": "yesterday", "to": "2026-03-11"}, "from"),
    ({"from": "2026-02-30", "to": "2026-03-11"}, "from"),
    ({"from": "2026-03-10", "to": "2026-03-11", "granularity": "week"}, "granularity"),
    ({"from": "2026-03-11", "to": "2026-03-10"}, "to"),
    ({"from": "2026-03-10", "to": "2026-03-10"}, "to"),
    ({"from": "2026-03-10T13:30:00Z", "to": "2026-03-11", "granularity": "hour"}, "from"),
    ({"from": "2026-03-10T13:00:00", "to": "2026-03-11", "granularity": "hour"}, "from"),
    ({"from": "2026-03-10", "to": "2026-03-11T00:00:00Z"}, "to"),
    ({"from": "2026-01-01", "to": "2026-06-01", "granularity": "hour"}, "to"),
    ({"from": "2020-01-01", "to": "2026-06-01"}, "to"),
    ({"from": "2026-03-10", "to": "2026-03-11", "campaign_id": "12,x"}, "campaign_id"),
    ({"from": "2026-03-10", "to": "2026-03-11", "campaign_id": "-4"}, "campaign_id"),
])
def test_a_malformed_request_names_the_parameter(query, field):
    assert _field_of(query) == field


def test_thirty_days_hourly_is_within_the_limit():
    request = reports.parse_report_query({"from": "2026-03-01", "to": "2026-03-31", "granularity": "hour"})
    assert (request.to_ms - request.from_ms) // HOUR == 720


# ------------------------------------------------------------------------------------------ buckets
def test_a_record_stamped_on_the_hour_counts_in_the_hour_it_ends():
    assert reports.hour_of_interval_end(feed.T0 + 13 * HOUR) == feed.T0 + 12 * HOUR
    assert reports.hour_of_interval_end(feed.T0 + 13 * HOUR + 10_000) == feed.T0 + 13 * HOUR
    assert reports.hour_of_instant(feed.T0 + 13 * HOUR) == feed.T0 + 13 * HOUR


def test_a_conversion_counts_in_its_campaigns_local_day():
    assert reports.conversion_day(feed.T0 + 2 * HOUR, "America/New_York") == "2026-03-09"
    assert reports.conversion_day(feed.T0 + 2 * HOUR, "UTC") == "2026-03-10"


def _record(campaign_id: int, at_ms: int, spend: int, day: str = "2026-03-10", clicks_n: int = 0) -> dict:
    return {"campaign_id": campaign_id, "event_time": at_ms, "budget_day": day, "billed_spend_micros": spend,
            "billed_impressions": 0, "billed_clicks": clicks_n, "absorbed_overspend_micros": 0,
            "invalid_credit_micros": 0, "joined_clicks": 0}


def test_each_hour_keeps_its_newest_record_whatever_the_order():
    records = [_record(1, feed.T0 + 10_000, 100), _record(1, feed.T0 + 20_000, 300),
               _record(1, feed.T0 + 20_000, 250), _record(1, feed.T0 + HOUR + 10_000, 900)]
    batches = []
    for order in (records, records[::-1], records + records):
        batch = reports.LandingBatch()
        for r in order:
            batch.add_billed(r)
        batches.append(batch)
    assert all(b.hourly == batches[0].hourly and b.daily == batches[0].daily for b in batches)
    assert batches[0].hourly[(1, "2026-03-10", feed.T0)]["billed_spend_micros"] == 300
    assert batches[0].daily[(1, "2026-03-10")]["billed_spend_micros"] == 900


def test_a_record_with_a_bad_budget_day_is_refused():
    with pytest.raises(InvalidArgument):
        reports.LandingBatch().add_billed(_record(1, feed.T0, 5, day="10/03/2026"))


def test_an_hour_shows_what_its_budget_day_grew_by_since_the_previous_hour():
    rows = [(1, "2026-03-10", feed.T0 + h * HOUR, 0, n, spend) for h, n, spend in ((1, 2, 200), (3, 5, 700),
                                                                                   (4, 5, 900))]
    conversions = [(1, feed.T0 + 3 * HOUR, 2)]
    hourly = reports.hourly_rows(rows, conversions, feed.T0 + 2 * HOUR, feed.T0 + 5 * HOUR)
    assert hourly == {1: [
        {"hour": "2026-03-10T03:00:00Z", "billed_impressions": 0, "billed_clicks": 3, "conversions": 2,
         "billed_spend_micros": 500},
        {"hour": "2026-03-10T04:00:00Z", "billed_impressions": 0, "billed_clicks": 0, "conversions": 0,
         "billed_spend_micros": 200}]}


# ------------------------------------------------------------------------------------------ pages and formats
def test_a_report_is_json_in_pages_of_ten_thousand_rows_unless_asked_otherwise():
    request = reports.parse_report_query({"from": "2026-03-10", "to": "2026-03-12"})
    assert (request.format, request.limit, request.after) == ("json", reports.DEFAULT_PAGE_ROWS, None)
    request = reports.parse_report_query({"from": "2026-03-10", "to": "2026-03-12", "format": "csv", "limit": "7"})
    assert (request.format, request.limit) == ("csv", 7)


@pytest.mark.parametrize("query, field", [
    ({"format": "xlsx"}, "format"), ({"limit": "0"}, "limit"), ({"limit": "-3"}, "limit"),
    ({"limit": str(reports.MAX_PAGE_ROWS + 1)}, "limit"), ({"limit": "1e3"}, "limit"), ({"limit": "²"}, "limit"),
    ({"cursor": "bm90IGEgY3Vyc29y"}, "cursor"), ({"cursor": "%%%"}, "cursor"), ({"cursor": "MDo1"}, "cursor"),
    ({"cursor": "x" * 100}, "cursor"), ({"cursor": "é"}, "cursor")])
def test_a_wrong_format_limit_or_cursor_is_refused_naming_it(query, field):
    assert _field_of({"from": "2026-03-10", "to": "2026-03-12", **query}) == field


def test_a_cursor_reads_back_as_the_row_it_was_made_after():
    for after in ((1, 0), (12, 1_773_100_800_000), (2**63 - 1, -5)):
        cursor = reports.encode_cursor(*after)
        assert cursor.isascii() and "=" not in cursor
        assert reports.decode_cursor(cursor) == after
        assert reports.parse_report_query({"from": "2026-03-10", "to": "2026-03-12", "cursor": cursor}).after == after


def test_a_page_lists_each_campaign_once_where_its_id_falls_and_the_cursors_only_while_its_rows_go_on():
    ids = [3, 5, 8, 13]
    assert reports.page_campaigns(ids, None, [3, 8], None) == ids  # one page: everyone
    assert reports.page_campaigns(ids, None, [3], (3, 100)) == [3]  # 3's rows go on after this page
    assert reports.page_campaigns(ids, (3, 100), [3, 8], (8, 50)) == [3, 5, 8]  # 5 has no rows: listed once here
    assert reports.page_campaigns(ids, (8, 50), [], None) == [13]  # 8 ended exactly on the last page
    assert reports.page_campaigns(ids, (8, 50), [8], None) == [8, 13]


def test_the_first_hour_of_a_budget_day_counts_from_zero():
    rows = [(1, day, feed.T0 + h * HOUR, 0, 0, spend) for day, h, spend in (("2026-03-10", 0, 300),
                                                                            ("2026-03-09", -1, 800))]
    hourly = reports.hourly_rows(rows, [], feed.T0 - HOUR, feed.T0 + HOUR)
    assert [r["billed_spend_micros"] for r in hourly[1]] == [800, 300]


# ------------------------------------------------------------------------------------------ against the recount
CAMPAIGNS = [feed.campaign_version(11, 40 * feed.DOLLAR), feed.campaign_version(12, 3 * feed.DOLLAR),
             feed.campaign_version(13, 500 * feed.DOLLAR, bid_type="CPM")]
BILLING = {11: "CLICK", 12: "CLICK", 13: "IMPRESSION"}


def _landed(records: list[dict]) -> reports.LandingBatch:
    batch = reports.LandingBatch()
    for r in records:
        batch.add_billed(r)
    return batch


def _reports_of(batch: reports.LandingBatch, day: str = "2026-03-10"):
    hourly_table = [(c, d, h, r["billed_impressions"], r["billed_clicks"], r["billed_spend_micros"])
                    for (c, d, h), r in batch.hourly.items()]
    start = reports.day_start_ms(day)
    hourly = reports.hourly_rows(hourly_table, [], start, start + reports.DAY_MS)
    request = reports.parse_report_query({"from": day, "to": reports.next_day(day)})
    daily = reports.report_body(request, [11, 12, 13], reports.daily_rows(batch.daily.values(), []))
    return hourly, daily


def test_reports_from_the_aggregators_records_equal_the_recount_in_any_order_and_after_a_replay():
    events = feed.beacons(BILLING, hours=6, per_hour=40)
    recount = {str(c): totals for (c, day), totals in clicks.recount(events, CAMPAIGNS).items()
               if day == "2026-03-10"}
    assert recount["12"]["absorbed_overspend_micros"] > 0  # the small budget is capped: the report bills the cap
    records = feed.billed_stream(events, CAMPAIGNS)
    shuffled = records * 2
    random.Random(5).shuffle(shuffled)
    for landed in (records, shuffled):
        hourly, daily = _reports_of(_landed(landed))
        assert reports.recount_differences(daily, recount) == []
        for campaign_id in (11, 12, 13):
            for name in reports.BILLED_METRICS:
                assert sum(r[name] for r in hourly[campaign_id]) == recount[str(campaign_id)][name]
        assert len(hourly[11]) == 6


def test_a_report_that_differs_from_the_recount_names_the_campaign_and_field():
    events = feed.beacons(BILLING, hours=2, per_hour=20)
    recount = {str(c): t for (c, _), t in clicks.recount(events, CAMPAIGNS).items()}
    _, daily = _reports_of(_landed(feed.billed_stream(events, CAMPAIGNS)))
    daily["campaigns"][0]["totals"]["billed_clicks"] += 1
    assert reports.recount_differences(daily, recount) == [
        {"campaign_id": 11, "field": "billed_clicks", "report": recount["11"]["billed_clicks"] + 1,
         "recount": recount["11"]["billed_clicks"]}]


def test_only_a_daily_report_of_one_day_compares_with_a_recount():
    request = reports.parse_report_query({"from": "2026-03-10", "to": "2026-03-12"})
    with pytest.raises(InvalidField):
        reports.recount_differences(reports.report_body(request, [1], {}), {})


def test_a_conversion_reported_twice_counts_once_and_the_first_report_sets_its_hour():
    batch = reports.LandingBatch()
    first = {"impression_id": "i1", "campaign_id": 4, "event_time": feed.T0 + HOUR - 1}
    batch.add_conversion({**first, "event_time": feed.T0 + HOUR + 5}, "2026-03-10")
    batch.add_conversion(first, "2026-03-10")
    assert batch.conversions == {"i1": (4, "2026-03-10", feed.T0, feed.T0 + HOUR - 1)}
