"""The report tables' writes: one batch (core.reports.LandingBatch) and the offsets after it, in one
PostgreSQL transaction, so a batch is landed exactly when its offsets are. Every write is idempotent on its
own as well: a billed row is replaced only by a newer record (core.clicks.progress_key) and a conversion is
inserted once per impression, so a batch landed twice (two instances, a lost offset row) changes nothing."""
from __future__ import annotations

from datetime import date
from typing import Any, Iterable, Mapping

import psycopg

from core import clicks
from core.reports import (BILLED_DAILY_TABLE, BILLED_HOURLY_TABLE, CONVERSIONS_HOURLY_TABLE, CONVERSIONS_TABLE,
                          CUMULATIVE_FIELDS, OFFSETS_TABLE, LandingBatch)

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
