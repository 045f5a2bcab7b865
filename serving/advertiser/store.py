"""The campaign store in PostgreSQL: migrations, API keys, and versioned writes of campaigns and ads.

Every write is one transaction that commits before the call returns; an
update bumps the row's `version`, which travels with the change through
Debezium and the index builder to the ad servers (an older version never
overwrites a newer one there). Reads and writes are scoped to one advertiser:
another advertiser's row is simply not found."""
from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

MIGRATIONS = Path(__file__).with_name("migrations")
TIME_COLUMNS = ("flight_start", "flight_end")


def migrate(dsn: str) -> list[str]:
    """Apply the migrations not applied yet, each in its own transaction; returns their names."""
    applied_now = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, "
                     "applied_at timestamptz NOT NULL DEFAULT now())")
        done = {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}
        for path in sorted(MIGRATIONS.glob("*.sql")):
            if path.name in done:
                continue
            with conn.transaction():
                conn.execute(path.read_text())
                conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (path.name,))
            applied_now.append(path.name)
    return applied_now


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _to_db(fields: dict[str, Any]) -> dict[str, Any]:
    out = dict(fields)
    for name in TIME_COLUMNS:
        if name in out and out[name] is not None:
            out[name] = datetime.fromtimestamp(out[name] / 1000, tz=timezone.utc)
    for name in ("dayparts", "targeting"):
        if name in out:
            out[name] = Jsonb(out[name])
    return out


def with_ms_times(row: dict[str, Any]) -> dict[str, Any]:
    """A campaigns row with its flight times as epoch ms, as core.campaigns.validate_campaign compares them."""
    return {**row, **{k: int(row[k].timestamp() * 1000) for k in TIME_COLUMNS
                      if isinstance(row.get(k), datetime)}}


def to_json(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A row as the API returns it (times as ISO-8601 UTC)."""
    if row is None:
        return None
    out = {}
    for k, v in row.items():
        out[k] = v.astimezone(timezone.utc).isoformat().replace("+00:00", "Z") if isinstance(v, datetime) else v
    return out


class CampaignStore:
    """Async access for the API and the CLI; a small pool of connections."""

    def __init__(self, dsn: str, size: int = 4):
        self.dsn, self.size = dsn, size
        self._pool: asyncio.Queue[psycopg.AsyncConnection] | None = None
        self._all: list[psycopg.AsyncConnection] = []

    async def open(self) -> "CampaignStore":
        self._pool = asyncio.Queue()
        for _ in range(self.size):
            conn = await psycopg.AsyncConnection.connect(self.dsn, row_factory=dict_row)
            self._all.append(conn)
            self._pool.put_nowait(conn)
        return self

    async def close(self) -> None:
        for conn in self._all:
            await conn.close()

    async def _run(self, fn):
        assert self._pool is not None, "call open() first"
        conn = await self._pool.get()
        try:
            async with conn.transaction():
                return await fn(conn)
        finally:
            self._pool.put_nowait(conn)

    # ---------------------------------------------------------------- advertisers and keys
    async def create_advertiser(self, name: str) -> tuple[int, str]:
        """A new advertiser (or the existing one of that name) and a fresh API key for it."""
        key = "ak_" + secrets.token_urlsafe(24)

        async def tx(conn):
            row = await (await conn.execute(
                "INSERT INTO advertisers (name) VALUES (%s) ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name "
                "RETURNING advertiser_id", (name,))).fetchone()
            await conn.execute("INSERT INTO api_keys (key_hash, advertiser_id) VALUES (%s, %s)",
                               (hash_key(key), row["advertiser_id"]))
            return row["advertiser_id"]
        return await self._run(tx), key

    async def advertiser_for_key(self, key: str) -> int | None:
        async def tx(conn):
            row = await (await conn.execute(
                "SELECT advertiser_id FROM api_keys WHERE key_hash = %s AND revoked_at IS NULL",
                (hash_key(key),))).fetchone()
            return row["advertiser_id"] if row else None
        return await self._run(tx)

    # ---------------------------------------------------------------- campaigns
    async def create_campaign(self, advertiser_id: int, fields: dict[str, Any]) -> dict[str, Any]:
        values = _to_db(fields)
        columns = ["advertiser_id", *values]

        async def tx(conn):
            return await (await conn.execute(
                f"INSERT INTO campaigns ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
                "RETURNING *", [advertiser_id, *values.values()])).fetchone()
        return await self._run(tx)

    async def get_campaign(self, advertiser_id: int, campaign_id: int) -> dict[str, Any] | None:
        async def tx(conn):
            return await (await conn.execute(
                "SELECT * FROM campaigns WHERE campaign_id = %s AND advertiser_id = %s",
                (campaign_id, advertiser_id))).fetchone()
        return await self._run(tx)

    async def list_campaigns(self, advertiser_id: int) -> list[dict[str, Any]]:
        async def tx(conn):
            return await (await conn.execute(
                "SELECT * FROM campaigns WHERE advertiser_id = %s ORDER BY campaign_id", (advertiser_id,))).fetchall()
        return await self._run(tx)

    async def update_campaign(self, advertiser_id: int, campaign_id: int,
                              fields: dict[str, Any]) -> dict[str, Any] | None:
        return await self._update("campaigns", "campaign_id", advertiser_id, campaign_id, fields)

    async def _update(self, table: str, key: str, advertiser_id: int, row_id: int,
                      fields: dict[str, Any]) -> dict[str, Any] | None:
        values = _to_db(fields)
        sets = ", ".join([f"{c} = %s" for c in values] + ["version = version + 1", "updated_at = now()"])

        async def tx(conn):
            return await (await conn.execute(
                f"UPDATE {table} SET {sets} WHERE {key} = %s AND advertiser_id = %s RETURNING *",
                [*values.values(), row_id, advertiser_id])).fetchone()
        return await self._run(tx)

    # ---------------------------------------------------------------- ads
    async def create_ad(self, advertiser_id: int, campaign_id: int, fields: dict[str, Any]) -> dict[str, Any] | None:
        values = _to_db(fields)

        async def tx(conn):
            campaign = await (await conn.execute(
                "SELECT bid_type FROM campaigns WHERE campaign_id = %s AND advertiser_id = %s",
                (campaign_id, advertiser_id))).fetchone()
            if campaign is None:
                return None
            columns = ["campaign_id", "advertiser_id", "bid_type", *values]
            return await (await conn.execute(
                f"INSERT INTO ads ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) RETURNING *",
                [campaign_id, advertiser_id, campaign["bid_type"], *values.values()])).fetchone()
        return await self._run(tx)

    async def get_ad(self, advertiser_id: int, ad_id: int) -> dict[str, Any] | None:
        async def tx(conn):
            return await (await conn.execute(
                "SELECT * FROM ads WHERE ad_id = %s AND advertiser_id = %s", (ad_id, advertiser_id))).fetchone()
        return await self._run(tx)

    async def list_ads(self, advertiser_id: int, campaign_id: int) -> list[dict[str, Any]]:
        async def tx(conn):
            return await (await conn.execute(
                "SELECT * FROM ads WHERE campaign_id = %s AND advertiser_id = %s ORDER BY ad_id",
                (campaign_id, advertiser_id))).fetchall()
        return await self._run(tx)

    async def update_ad(self, advertiser_id: int, ad_id: int, fields: dict[str, Any]) -> dict[str, Any] | None:
        return await self._update("ads", "ad_id", advertiser_id, ad_id, fields)

    # ---------------------------------------------------------------- bulk
    async def bulk_load(self, advertiser_id: int, campaigns: Iterable[dict[str, Any]],
                        ads_per_campaign: Iterable[list[dict[str, Any]]]) -> tuple[int, int]:
        """Many campaigns and their ads in one transaction (COPY for the ads); returns the counts."""
        async def tx(conn):
            n_campaigns = n_ads = 0
            for fields, ads in zip(campaigns, ads_per_campaign):
                values = _to_db(fields)
                columns = ["advertiser_id", *values]
                row = await (await conn.execute(
                    f"INSERT INTO campaigns ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
                    "RETURNING campaign_id, bid_type", [advertiser_id, *values.values()])).fetchone()
                n_campaigns += 1
                async with conn.cursor().copy(
                        "COPY ads (campaign_id, advertiser_id, bid_type, bid_micros, quality_prior, creative_ref, "
                        "landing_url, targeting, status, review_status) FROM STDIN") as copy:
                    for ad in ads:
                        await copy.write_row((row["campaign_id"], advertiser_id, row["bid_type"], ad["bid_micros"],
                                              ad.get("quality_prior", 0.0), ad["creative_ref"], ad["landing_url"],
                                              json.dumps(ad["targeting"]), ad.get("status", "ACTIVE"),
                                              ad.get("review_status", "APPROVED")))
                        n_ads += 1
            return n_campaigns, n_ads
        return await self._run(tx)
