"""The report tables' writes: one batch (core.reports.LandingBatch), the hourly report rows it changes
(report_hourly) and the offsets after it, in one PostgreSQL transaction, so a batch is landed exactly when its
offsets are. Every write is idempotent on its
own as well: a billed row is replaced only by a newer record (core.clicks.progress_key) and a conversion is
inserted once per impression, so a batch landed twice (two instances, a lost offset row) changes nothing."""
from __future__ import annotations

from datetime import date
from typing import Any, Iterable, Mapping

import psycopg

from core import clicks
from core.reports import (BILLED_DAILY_TABLE, BILLED_HOURLY_TABLE, CONVERSIONS_HOURLY_TABLE, CONVERSIONS_TABLE,
                          CUMULATIVE_FIELDS, HOURLY_REPORT_TABLE, OFFSETS_TABLE, LandingBatch)

_TOTALS = ", ".join(CUMULATIVE_FIELDS)
_PROGRESS = "event_time_ms, progress_money, progress_count"


def _newer_upsert(table: str, key: tuple[str, ...]) -> str:
    """INSERT of one record's totals that replaces the row only with a newer record (progress_key order)."""
    columns = (*key, "event_time_ms", *CUMULATIVE_FIELDS, "progress_money", "progress_count")
    updated = ("event_time_ms", *CUMULATIVE_FIELDS, "progress_money", "progress_count")
    return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
            f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET "
            + ", ".join(f"{c} = EXCLUDED.{c}" for c in updated)
            + f" WHERE ({', '.join('EXCLUDED.' + c for c in _PROGRESS.split(', '))}) > "
              f"({', '.join(f'{table}.{c}' for c in _PROGRESS.split(', '))})")


HOURLY_UPSERT = _newer_upsert(BILLED_HOURLY_TABLE, ("campaign_id", "hour_start_ms", "budget_day"))
DAILY_UPSERT = _newer_upsert(BILLED_DAILY_TABLE, ("campaign_id", "budget_day"))
CONVERSIONS_INSERT = (
    f"WITH landed AS (INSERT INTO {CONVERSIONS_TABLE} "
    "(impression_id, campaign_id, budget_day, hour_start_ms, event_time_ms) "
    "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::date[], %s::bigint[], %s::bigint[]) "
    "ON CONFLICT (impression_id) DO NOTHING RETURNING campaign_id, hour_start_ms, budget_day) "
    f"INSERT INTO {CONVERSIONS_HOURLY_TABLE} (campaign_id, hour_start_ms, budget_day, conversions) "
    "SELECT campaign_id, hour_start_ms, budget_day, count(*) FROM landed GROUP BY 1, 2, 3 "
    "ON CONFLICT (campaign_id, hour_start_ms, budget_day) DO UPDATE "
    f"SET conversions = {CONVERSIONS_HOURLY_TABLE}.conversions + EXCLUDED.conversions")
# report_hourly's rows for the hours a batch touched, computed again from the tables the batch changed (in the
# same transaction, after its writes). Touched: every hour of each (campaign, budget day) that got a billed row
# (a row changes its own hour's growth and the next hour's of that day), and each (campaign, hour) that got
# conversions. An hour's row sums every budget day in it, so the growth of each day with a row in a touched hour
# is computed, each from the previous hour of its own day.
HOURLY_REPORT_REFRESH = f"""
WITH touched AS (
    SELECT campaign_id, hour_start_ms FROM {BILLED_HOURLY_TABLE}
    WHERE (campaign_id, budget_day) IN (SELECT * FROM unnest(%(day_campaigns)s::bigint[], %(days)s::date[]))
    UNION
    SELECT * FROM unnest(%(hour_campaigns)s::bigint[], %(hours)s::bigint[])),
days AS (
    SELECT DISTINCT b.campaign_id, b.budget_day
    FROM {BILLED_HOURLY_TABLE} b JOIN touched t USING (campaign_id, hour_start_ms)),
growth AS (
    SELECT campaign_id, hour_start_ms,
           b.billed_impressions - coalesce(lag(b.billed_impressions) OVER day, 0) AS impressions,
           b.billed_clicks - coalesce(lag(b.billed_clicks) OVER day, 0) AS clicks,
           b.billed_spend_micros - coalesce(lag(b.billed_spend_micros) OVER day, 0) AS spend
    FROM {BILLED_HOURLY_TABLE} b JOIN days USING (campaign_id, budget_day)
    WINDOW day AS (PARTITION BY campaign_id, budget_day ORDER BY hour_start_ms)),
billed AS (
    SELECT campaign_id, hour_start_ms, sum(impressions) AS impressions, sum(clicks) AS clicks, sum(spend) AS spend
    FROM growth JOIN touched USING (campaign_id, hour_start_ms) GROUP BY 1, 2),
converted AS (
    SELECT campaign_id, hour_start_ms, sum(conversions) AS conversions
    FROM {CONVERSIONS_HOURLY_TABLE} JOIN touched USING (campaign_id, hour_start_ms) GROUP BY 1, 2)
INSERT INTO {HOURLY_REPORT_TABLE} (campaign_id, hour_start_ms, billed_impressions, billed_clicks, conversions,
                                   billed_spend_micros)
SELECT campaign_id, hour_start_ms, coalesce(b.impressions, 0), coalesce(b.clicks, 0), coalesce(c.conversions, 0),
       coalesce(b.spend, 0)
FROM billed b FULL JOIN converted c USING (campaign_id, hour_start_ms)
ON CONFLICT (campaign_id, hour_start_ms) DO UPDATE SET
    billed_impressions = EXCLUDED.billed_impressions, billed_clicks = EXCLUDED.billed_clicks,
    conversions = EXCLUDED.conversions, billed_spend_micros = EXCLUDED.billed_spend_micros"""
OFFSETS_UPSERT = (
    f"INSERT INTO {OFFSETS_TABLE} (consumer_group, topic, partition, next_offset) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (consumer_group, topic, partition) DO UPDATE "
    f"SET next_offset = GREATEST({OFFSETS_TABLE}.next_offset, EXCLUDED.next_offset), updated_at = now()")


def _values(key: tuple[Any, ...], record: Mapping[str, Any]) -> tuple[Any, ...]:
    event_time, money, count = clicks.progress_key(record)
    return (*key, event_time, *(int(record[f]) for f in CUMULATIVE_FIELDS), money, count)


def write_batch(conn: psycopg.Connection, group_id: str, batch: LandingBatch,
                next_offsets: Mapping[tuple[str, int], int]) -> None:
    """Land one reduced batch and the offsets after it, in one transaction."""
    with conn.transaction(), conn.cursor() as cur:
        if batch.hourly:
            cur.executemany(HOURLY_UPSERT, [
                _values((c, hour, date.fromisoformat(day)), r) for (c, day, hour), r in sorted(batch.hourly.items())])
        if batch.daily:
            cur.executemany(DAILY_UPSERT, [
                _values((c, date.fromisoformat(day)), r) for (c, day), r in sorted(batch.daily.items())])
        if batch.conversions:
            rows = sorted(batch.conversions.items())
            cur.execute(CONVERSIONS_INSERT, (
                [i for i, _ in rows], [r[0] for _, r in rows], [date.fromisoformat(r[1]) for _, r in rows],
                [r[2] for _, r in rows], [r[3] for _, r in rows]))
        if batch.hourly or batch.conversions:
            days = sorted({(c, day) for (c, day, _) in batch.hourly})
            hours = sorted({(r[0], r[2]) for r in batch.conversions.values()})
            cur.execute(HOURLY_REPORT_REFRESH, {
                "day_campaigns": [c for c, _ in days], "days": [date.fromisoformat(d) for _, d in days],
                "hour_campaigns": [c for c, _ in hours], "hours": [h for _, h in hours]})
        if next_offsets:
            cur.executemany(OFFSETS_UPSERT, [(group_id, topic, partition, offset)
                                             for (topic, partition), offset in sorted(next_offsets.items())])


def stored_offsets(conn: psycopg.Connection, group_id: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the next offset to read, as the last committed batch left it."""
    rows = conn.execute(f"SELECT topic, partition, next_offset FROM {OFFSETS_TABLE} WHERE consumer_group = %s",
                        (group_id,)).fetchall()
    return {(str(t), int(p)): int(o) for t, p, o in rows}


def campaign_timezones(conn: psycopg.Connection, campaign_ids: Iterable[int]) -> dict[int, str]:
    """campaign id -> its time zone in the campaign store (a campaign the store does not hold is absent)."""
    ids = sorted(set(campaign_ids))
    if not ids:
        return {}
    rows = conn.execute("SELECT campaign_id, timezone FROM campaigns WHERE campaign_id = ANY(%s)", (ids,)).fetchall()
    return {int(c): str(tz) for c, tz in rows}
