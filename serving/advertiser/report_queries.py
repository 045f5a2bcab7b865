"""Advertiser reports straight from PostgreSQL: the buckets are aggregated and written as JSON or CSV by the
database, so a report of tens of thousands of rows never becomes Python objects.

The rules are core.reports': an hour's billed figures are the growth of its budget day's cumulative totals since
the previous hour of that day, which serving.report_landing keeps in report_hourly as it lands the records (a window
`lag` over (campaign, budget day) in hour order); a budget day's are its newest record. core.reports.hourly_rows
and daily_rows state the same rules in Python, and the integration tests hold these reports equal to them on the
same tables.

A JSON report comes in pages of at most `request.limit` rows in (campaign, bucket) order; `next_cursor` names
the page after. Every campaign asked for appears with its totals over the whole range. CSV streams the whole
range in one response (COPY), with money in currency units."""
from __future__ import annotations

from typing import Any, AsyncIterator

import psycopg
from psycopg.rows import tuple_row

from core.reports import (BILLED_DAILY_TABLE, CONVERSIONS_HOURLY_TABLE, DAY_MS, HOURLY_REPORT_TABLE, ReportRequest,
                          encode_cursor, iso_hour, page_campaigns)

# (campaign_id, bucket, impressions, clicks, conversions, spend): one row per campaign and bucket in the range,
# bucket = the hour's or the budget day's start in epoch ms (a budget day as its date at midnight UTC). Hours
# come as the landing keeps them (report_hourly: the growth since the previous hour of each budget day, already
# summed), so an hourly report is one range scan of a key in the order it is written out.
_HOURLY_BUCKETS = f"""
    buckets AS (
        SELECT campaign_id, hour_start_ms AS bucket, billed_impressions AS impressions, billed_clicks AS clicks,
               conversions, billed_spend_micros AS spend
        FROM {HOURLY_REPORT_TABLE}
        WHERE campaign_id = ANY(%(ids)s) AND hour_start_ms >= %(from_ms)s AND hour_start_ms < %(to_ms)s)"""
_DAILY_BUCKETS = f"""
    parts AS (
        SELECT campaign_id, (budget_day - DATE '1970-01-01')::bigint * {DAY_MS} AS bucket,
               billed_impressions AS impressions, billed_clicks AS clicks, 0::bigint AS conversions,
               billed_spend_micros AS spend
        FROM {BILLED_DAILY_TABLE}
        WHERE campaign_id = ANY(%(ids)s) AND budget_day >= %(from_day)s::date AND budget_day < %(to_day)s::date
        UNION ALL
        SELECT campaign_id, (budget_day - DATE '1970-01-01')::bigint * {DAY_MS}, 0, 0, conversions, 0
        FROM {CONVERSIONS_HOURLY_TABLE}
        WHERE campaign_id = ANY(%(ids)s) AND budget_day >= %(from_day)s::date AND budget_day < %(to_day)s::date),
    buckets AS (
        SELECT campaign_id, bucket, sum(impressions)::bigint AS impressions, sum(clicks)::bigint AS clicks,
               sum(conversions)::bigint AS conversions, sum(spend)::bigint AS spend
        FROM parts GROUP BY campaign_id, bucket)"""
# A bucket's label from its epoch ms by arithmetic and the date's ISO output (to_char per row costs several times
# more): "YYYY-MM-DDTHH:00:00Z" for an hour, "YYYY-MM-DD" for a budget day.
_LABEL = {"hour": f"(DATE '1970-01-01' + (bucket / {DAY_MS})::integer)::text || 'T' || "
                  f"lpad((bucket %% {DAY_MS} / 3600000)::text, 2, '0') || ':00:00Z'",
          "day": f"(DATE '1970-01-01' + (bucket / {DAY_MS})::integer)::text"}


def _page_sql(granularity: str) -> str:
    hourly = granularity == "hour"
    # a row's JSON written as text: the same object json_build_object makes, at a fraction of its cost
    label = _LABEL[granularity]
    row = (f"""'{{"{granularity}": "' || {label} || '", "billed_impressions": ' || impressions || """
           """', "billed_clicks": ' || clicks || ', "conversions": ' || conversions || """
           """', "billed_spend_micros": ' || spend || '}'""")
    return f"""
WITH {_HOURLY_BUCKETS if hourly else _DAILY_BUCKETS},
    page AS (
        SELECT * FROM buckets WHERE (campaign_id, bucket) > (%(after_campaign)s, %(after_bucket)s)
        ORDER BY campaign_id, bucket LIMIT %(limit)s)
SELECT campaign_id, NULL::text AS totals, '[' || string_agg({row}, ', ' ORDER BY bucket) || ']', max(bucket),
       (SELECT count(*) FROM buckets WHERE (campaign_id, bucket) > (%(after_campaign)s, %(after_bucket)s))
FROM page GROUP BY campaign_id
UNION ALL
SELECT campaign_id, json_build_object('billed_impressions', sum(impressions)::bigint,
                                      'billed_clicks', sum(clicks)::bigint, 'conversions', sum(conversions)::bigint,
                                      'billed_spend_micros', sum(spend)::bigint)::text, NULL, NULL, NULL
FROM buckets GROUP BY campaign_id"""


_PAGE_SQL = {granularity: _page_sql(granularity) for granularity in ("hour", "day")}
_ZERO_TOTALS = '{"billed_impressions": 0, "billed_clicks": 0, "conversions": 0, "billed_spend_micros": 0}'


def _params(ids: list[int], request: ReportRequest) -> dict[str, Any]:
    after = request.after or (0, -(1 << 63))
    return {"ids": ids, "from_ms": request.from_ms, "to_ms": request.to_ms,
            "from_day": request.from_day, "to_day": request.to_day,
            "after_campaign": after[0], "after_bucket": after[1], "limit": request.limit}


async def report_page(conn: psycopg.AsyncConnection, ids: list[int], request: ReportRequest) -> bytes:
    """One page of the report of campaigns `ids` (sorted) as the JSON body of `GET /v1/reports`: granularity,
    from, to, next_cursor (null on the last page) and the page's campaigns, each with its totals over the whole
    range and its rows on this page. One statement; the rows are built by PostgreSQL."""
    cursor = conn.cursor(row_factory=tuple_row)
    await cursor.execute(_PAGE_SQL[request.granularity], _params(ids, request))  # type: ignore[arg-type]
    totals: dict[int, str] = {}
    rows: dict[int, str] = {}
    last_bucket: dict[int, int] = {}
    matched = 0
    for campaign_id, campaign_totals, campaign_rows, last, count in await cursor.fetchall():
        if campaign_totals is not None:
            totals[campaign_id] = campaign_totals
        else:
            rows[campaign_id], last_bucket[campaign_id], matched = campaign_rows, last, count
    last = None
    if matched > request.limit:  # another page follows: it starts after this page's last row
        last_campaign = max(rows)
        last = (last_campaign, last_bucket[last_campaign])
    listed = page_campaigns(ids, request.after, list(rows), last)
    hourly = request.granularity == "hour"
    head = (f'{{"granularity": "{request.granularity}", '
            f'"from": "{iso_hour(request.from_ms) if hourly else request.from_day}", '
            f'"to": "{iso_hour(request.to_ms) if hourly else request.to_day}", '
            f'"next_cursor": {"null" if last is None else chr(34) + encode_cursor(*last) + chr(34)}, "campaigns": [')
    body = ", ".join(f'{{"campaign_id": {c}, "totals": {totals.get(c, _ZERO_TOTALS)}, "rows": {rows.get(c, "[]")}}}'
                     for c in listed)
    return (head + body + "]}").encode()


CSV_COLUMNS = {"hour": ("campaign_id", "hour_utc", "currency", "billed_impressions", "billed_clicks", "conversions",
                        "billed_spend"),
               "day": ("campaign_id", "day", "currency", "billed_impressions", "billed_clicks", "conversions",
                       "billed_spend")}


def _csv_sql(granularity: str) -> str:
    hourly = granularity == "hour"
    columns = CSV_COLUMNS[granularity]
    text = ("to_char(to_timestamp(bucket / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')" if hourly
            else _LABEL["day"])
    return f"""COPY (
WITH {_HOURLY_BUCKETS if hourly else _DAILY_BUCKETS}
SELECT b.campaign_id AS {columns[0]}, {text} AS {columns[1]}, c.currency AS {columns[2]},
       impressions AS {columns[3]}, clicks AS {columns[4]}, conversions AS {columns[5]},
       (spend::numeric / 1000000)::numeric(24, 6) AS {columns[6]}
FROM buckets b JOIN campaigns c ON c.campaign_id = b.campaign_id
ORDER BY b.campaign_id, bucket) TO STDOUT WITH (FORMAT csv, HEADER)"""


_CSV_SQL = {granularity: _csv_sql(granularity) for granularity in ("hour", "day")}


async def report_csv(conn: psycopg.AsyncConnection, ids: list[int], request: ReportRequest
                     ) -> AsyncIterator[bytes]:
    """The whole report of campaigns `ids` as CSV, in chunks as PostgreSQL writes them: a header row
    (CSV_COLUMNS), then one row per campaign and hour (`hour_utc`, "YYYY-MM-DD HH:MM:SS" in UTC) or budget day
    (`day`, YYYY-MM-DD), money in the campaign's currency units with six decimals (exact: micros / 10^6)."""
    async with conn.cursor().copy(_CSV_SQL[request.granularity], _params(ids, request)) as copy:
        async for chunk in copy:
            yield bytes(chunk)
