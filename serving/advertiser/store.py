"""The campaign store in PostgreSQL: migrations, API keys, versioned writes of campaigns and ads, the review of
ads, and the operators' reserve rules.

Every write is one transaction that commits before the call returns; an
update bumps the row's `version`, which travels with the change through
Debezium and the index builder to the ad servers (an older version never
overwrites a newer one there). An ad carries two of its campaign's columns:
the bid type (fixed) and the exclusion category, which the store copies onto
the campaign's ads whenever it changes. An advertiser's reads and writes are
scoped to that advertiser: another advertiser's row is simply not found. Review
decisions, key revocation and reserve rules are operator calls; the rules they
apply are core.campaigns' and core.reserves'."""
from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import psycopg
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb

from core.campaigns import (BUDGET_EDIT_WINDOW_S, InvalidField, check_budget_edit, check_cpa_bid,
                            review_after_change, review_decision)
from core.reports import MAX_PAGE_ROWS, ReportRequest, decode_cursor
from core.reserves import ANY, merged_rule
from serving.advertiser.report_queries import report_csv, report_page

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


KEY_PREFIX_LEN = 10  # "ak_" and 7 characters: enough to tell an advertiser's keys apart, useless to an attacker


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def new_key() -> str:
    return "ak_" + secrets.token_urlsafe(24)


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
        key = new_key()

        async def tx(conn):
            row = await (await conn.execute(
                "INSERT INTO advertisers (name) VALUES (%s) ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name "
                "RETURNING advertiser_id", (name,))).fetchone()
            await self._insert_key(conn, row["advertiser_id"], key)
            return row["advertiser_id"]
        return await self._run(tx), key

    @staticmethod
    async def _insert_key(conn, advertiser_id: int, key: str) -> int:
        row = await (await conn.execute(
            "INSERT INTO api_keys (key_hash, advertiser_id, key_prefix) VALUES (%s, %s, %s) RETURNING key_id",
            (hash_key(key), advertiser_id, key[:KEY_PREFIX_LEN]))).fetchone()
        return row["key_id"]

    async def list_keys(self, advertiser_id: int) -> list[dict[str, Any]]:
        """An advertiser's keys (never the keys themselves: an id, their first characters, when and by whom)."""
        async def tx(conn):
            return await (await conn.execute(
                "SELECT key_id, key_prefix, created_at, revoked_at, revoked_by FROM api_keys "
                "WHERE advertiser_id = %s ORDER BY key_id", (advertiser_id,))).fetchall()
        return await self._run(tx)

    async def revoke_keys(self, advertiser_id: int, revoked_by: str, key_id: int | None = None) -> list[int]:
        """Revoke one of an advertiser's keys (or all of them); returns the ids revoked now. A revoked key is
        refused from the next request on."""
        async def tx(conn):
            if await self._advertiser(conn, advertiser_id) is None:
                raise InvalidField("advertiser_id", f"no advertiser {advertiser_id}")
            rows = await (await conn.execute(
                "UPDATE api_keys SET revoked_at = now(), revoked_by = %s WHERE advertiser_id = %s "
                "AND revoked_at IS NULL AND (%s::bigint IS NULL OR key_id = %s) RETURNING key_id",
                (revoked_by, advertiser_id, key_id, key_id))).fetchall()
            if key_id is not None and not rows:
                raise InvalidField("key_id", f"advertiser {advertiser_id} has no active key {key_id}")
            return [r["key_id"] for r in rows]
        return await self._run(tx)

    async def rotate_key(self, advertiser_id: int, rotated_by: str) -> tuple[int, str, list[int]]:
        """A fresh key for an advertiser, every older one revoked in the same transaction: (key id, key,
        revoked ids)."""
        key = new_key()

        async def tx(conn):
            if await self._advertiser(conn, advertiser_id) is None:
                raise InvalidField("advertiser_id", f"no advertiser {advertiser_id}")
            revoked = await (await conn.execute(
                "UPDATE api_keys SET revoked_at = now(), revoked_by = %s WHERE advertiser_id = %s "
                "AND revoked_at IS NULL RETURNING key_id", (rotated_by, advertiser_id))).fetchall()
            return await self._insert_key(conn, advertiser_id, key), [r["key_id"] for r in revoked]
        key_id, revoked = await self._run(tx)
        return key_id, key, revoked

    @staticmethod
    async def _advertiser(conn, advertiser_id: int) -> dict[str, Any] | None:
        return await (await conn.execute("SELECT advertiser_id, name FROM advertisers WHERE advertiser_id = %s",
                                         (advertiser_id,))).fetchone()

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
        """A change to a campaign; a new exclusion category is written on its ads too (below)."""
        async def tx(conn):
            if "daily_budget_micros" in fields:
                await self._count_budget_edit(conn, advertiser_id, campaign_id, int(fields["daily_budget_micros"]))
            row = await self._write(conn, "campaigns", "campaign_id", campaign_id, fields,
                                    advertiser_id=advertiser_id)
            if row is not None and "exclusion_category" in fields:
                await self._copy_category_to_ads(conn, campaign_id, row["exclusion_category"])
            if row is not None and row["bid_type"] == "CPA" and row["cpa_target_micros"]:
                await self._cap_cpa_bids(conn, campaign_id, int(row["cpa_target_micros"]))
            return row
        return await self._run(tx)

    @staticmethod
    async def _count_budget_edit(conn, advertiser_id: int, campaign_id: int, budget_micros: int) -> None:
        """A change of the campaign's budget is recorded in its transaction, or refused past the hourly limit
        (core.campaigns.check_budget_edit raises TooManyBudgetEdits). The campaign's row lock serialises two
        changes of one campaign; the same budget written again is no change."""
        current = await (await conn.execute(
            "SELECT daily_budget_micros FROM campaigns WHERE campaign_id = %s AND advertiser_id = %s FOR UPDATE",
            (campaign_id, advertiser_id))).fetchone()
        if current is None or int(current["daily_budget_micros"]) == budget_micros:
            return
        ages = await (await conn.execute(
            "SELECT extract(epoch FROM now() - edited_at)::float8 AS age_s FROM campaign_budget_edits "
            "WHERE campaign_id = %s AND edited_at > now() - make_interval(secs => %s)",
            (campaign_id, BUDGET_EDIT_WINDOW_S))).fetchall()
        check_budget_edit([float(r["age_s"]) for r in ages])
        await conn.execute("DELETE FROM campaign_budget_edits WHERE campaign_id = %s AND edited_at < now() - "
                           "interval '1 day'", (campaign_id,))
        await conn.execute("INSERT INTO campaign_budget_edits (campaign_id) VALUES (%s)", (campaign_id,))

    @staticmethod
    async def _cap_cpa_bids(conn, campaign_id: int, target_micros: int) -> None:
        """A CPA campaign's target lowered below some of its ads' bids lowers those bids to the target, with new
        versions, in the campaign's transaction (core.campaigns.check_cpa_bid is the rule for new bids)."""
        await conn.execute(
            "UPDATE ads SET bid_micros = %s, version = version + 1, updated_at = now() "
            "WHERE campaign_id = %s AND bid_type = 'CPA' AND bid_micros > %s",
            (target_micros, campaign_id, target_micros))

    @staticmethod
    async def _copy_category_to_ads(conn, campaign_id: int, category: int) -> None:
        """Every ad of the campaign takes its new exclusion category with a new version, in the campaign's
        transaction: the ad's serving record carries the category, so each ad goes through CDC and the index
        builder again and no server keeps serving the old one."""
        await conn.execute(
            "UPDATE ads SET exclusion_category = %s, version = version + 1, updated_at = now() "
            "WHERE campaign_id = %s AND exclusion_category <> %s", (category, campaign_id, category))

    @staticmethod
    async def _write(conn, table: str, key: str, row_id: int, fields: dict[str, Any], extra_sets: tuple[str, ...] = (),
                     advertiser_id: int | None = None) -> dict[str, Any] | None:
        """One versioned update of a row (of that advertiser, when given); the row after it, or None if absent."""
        values = _to_db(fields)
        sets = ", ".join([f"{c} = %s" for c in values] + list(extra_sets) +
                         ["version = version + 1", "updated_at = now()"])
        scope = "" if advertiser_id is None else " AND advertiser_id = %s"
        return await (await conn.execute(
            f"UPDATE {table} SET {sets} WHERE {key} = %s{scope} RETURNING *",
            [*values.values(), row_id, *([] if advertiser_id is None else [advertiser_id])])).fetchone()

    # ---------------------------------------------------------------- ads
    async def create_ad(self, advertiser_id: int, campaign_id: int, fields: dict[str, Any]) -> dict[str, Any] | None:
        values = _to_db(fields)

        async def tx(conn):
            # FOR SHARE: a concurrent change of the campaign's category waits for this ad, or this ad for it
            campaign = await (await conn.execute(
                "SELECT bid_type, exclusion_category, cpa_target_micros FROM campaigns "
                "WHERE campaign_id = %s AND advertiser_id = %s FOR SHARE", (campaign_id, advertiser_id))).fetchone()
            if campaign is None:
                return None
            check_cpa_bid(campaign["bid_type"], int(fields["bid_micros"]), campaign["cpa_target_micros"])
            columns = ["campaign_id", "advertiser_id", "bid_type", "exclusion_category", *values]
            return await (await conn.execute(
                f"INSERT INTO ads ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) RETURNING *",
                [campaign_id, advertiser_id, campaign["bid_type"], campaign["exclusion_category"],
                 *values.values()])).fetchone()
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
        """An advertiser's change to an ad; one to what review approved sends it back to review
        (core.campaigns.review_after_change), decided on the row as it is under the lock."""
        async def tx(conn):
            # the campaign first (as a change of the campaign locks it, then its ads), then the ad
            campaign = await (await conn.execute(
                "SELECT c.bid_type, c.cpa_target_micros FROM campaigns c JOIN ads a USING (campaign_id) "
                "WHERE a.ad_id = %s AND a.advertiser_id = %s FOR SHARE OF c", (ad_id, advertiser_id))).fetchone()
            existing = await (await conn.execute(
                "SELECT * FROM ads WHERE ad_id = %s AND advertiser_id = %s FOR UPDATE",
                (ad_id, advertiser_id))).fetchone()
            if existing is None or campaign is None:
                return None
            if "bid_micros" in fields:
                check_cpa_bid(campaign["bid_type"], int(fields["bid_micros"]), campaign["cpa_target_micros"])
            return await self._write(conn, "ads", "ad_id", ad_id, {**fields, **review_after_change(existing, fields)})
        return await self._run(tx)

    # ---------------------------------------------------------------- review (operators)
    async def ads_for_review(self, status: str = "PENDING", limit: int = 100) -> list[dict[str, Any]]:
        """Ads in a review state, oldest change first, with their advertiser's name."""
        async def tx(conn):
            return await (await conn.execute(
                "SELECT a.ad_id, a.version, a.campaign_id, a.advertiser_id, v.name AS advertiser, a.creative_ref, "
                "a.landing_url, a.targeting, a.status, a.review_status, a.reviewed_by, a.reviewed_at, "
                "a.review_note, a.updated_at FROM ads a JOIN advertisers v USING (advertiser_id) "
                "WHERE %s = 'ALL' OR a.review_status = %s ORDER BY a.updated_at, a.ad_id LIMIT %s",
                (status, status, limit))).fetchall()
        return await self._run(tx)

    async def review_ad(self, ad_id: int, decision: str, reviewer: str, *, seen_version: int | None = None,
                        note: str | None = None) -> dict[str, Any]:
        """An operator's decision on an ad (core.campaigns.review_decision), recorded with who and when on the ad
        and in ad_reviews. Raises InvalidField, ReviewConflict."""
        async def tx(conn):
            ad = await (await conn.execute("SELECT * FROM ads WHERE ad_id = %s FOR UPDATE", (ad_id,))).fetchone()
            if ad is None:
                raise InvalidField("ad_id", f"no ad {ad_id}")
            columns = review_decision(ad, decision, reviewer, seen_version=seen_version, note=note)
            row = await self._write(conn, "ads", "ad_id", ad_id, columns, ("reviewed_at = now()",))
            await conn.execute(
                "INSERT INTO ad_reviews (ad_id, ad_version, decision, reviewer, note, decided_at) "
                "VALUES (%s, %s, %s, %s, %s, %s)", (ad_id, ad["version"], columns["review_status"],
                                                    columns["reviewed_by"], columns["review_note"],
                                                    row["reviewed_at"]))
            return row
        return await self._run(tx)

    async def review_history(self, ad_id: int) -> list[dict[str, Any]]:
        async def tx(conn):
            return await (await conn.execute(
                "SELECT * FROM ad_reviews WHERE ad_id = %s ORDER BY review_id", (ad_id,))).fetchall()
        return await self._run(tx)

    # ---------------------------------------------------------------- reserve rules (operators)
    async def set_reserve(self, fields: dict[str, Any], set_by: str, *, remove: bool = False) -> dict[str, Any]:
        """Set (or, with remove, retire) a reserve rule; validated fields from core.reserves.validate_rule. A
        value not given keeps the rule's current one (core.reserves.merged_rule)."""
        async def tx(conn):
            existing = await (await conn.execute(
                "SELECT * FROM reserves WHERE placement = %s AND country = %s FOR UPDATE",
                (fields["placement"], fields["country"]))).fetchone()
            if remove:
                if existing is None or existing["removed"]:
                    raise InvalidField("placement", f"no rule for placement {fields['placement']!r} and country "
                                                    f"{fields['country']!r}")
                columns = {"removed": True, "set_by": set_by}
            else:
                columns = {**merged_rule(existing, fields), "removed": False, "set_by": set_by}
            if existing is None:
                names = ["placement", "country", *columns]
                return await (await conn.execute(
                    f"INSERT INTO reserves ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))}) "
                    "RETURNING *", [fields["placement"], fields["country"], *columns.values()])).fetchone()
            sets = ", ".join([f"{c} = %s" for c in columns] + ["version = version + 1", "updated_at = now()"])
            return await (await conn.execute(
                f"UPDATE reserves SET {sets} WHERE placement = %s AND country = %s RETURNING *",
                [*columns.values(), fields["placement"], fields["country"]])).fetchone()
        return await self._run(tx)

    async def list_reserves(self, include_removed: bool = False) -> list[dict[str, Any]]:
        async def tx(conn):
            return await (await conn.execute(
                "SELECT * FROM reserves WHERE %s OR NOT removed ORDER BY placement = %s, placement, country = %s, "
                "country", (include_removed, ANY, ANY))).fetchall()
        return await self._run(tx)

    # ---------------------------------------------------------------- reports
    async def report(self, advertiser_id: int, request: ReportRequest) -> bytes | None:
        """A page of the advertiser's report as JSON (`report_of`); None when a campaign asked for is not the
        advertiser's."""
        async def tx(conn):
            return await report_of(conn, advertiser_id, request)
        return await self._run(tx)

    async def report_csv(self, advertiser_id: int, request: ReportRequest, start) -> bool:
        """Stream the advertiser's whole report as CSV (report_queries.report_csv): `start()` is awaited once the
        campaigns are known to be the advertiser's and returns the writer the chunks go to (`await
        writer.write(chunk)`). False, with nothing started, when a campaign asked for is not the advertiser's."""
        async def tx(conn):
            ids = await owned_report_campaigns(conn, advertiser_id, request)
            if ids is None:
                return False
            writer = await start()
            async for chunk in report_csv(conn, ids, request):
                await writer.write(chunk)
            return True
        return await self._run(tx)

    # ---------------------------------------------------------------- bulk
    async def bulk_load(self, advertiser_id: int, campaigns: Iterable[dict[str, Any]],
                        ads_per_campaign: Iterable[list[dict[str, Any]]], *,
                        approved_by: str | None = None) -> tuple[int, int]:
        """Many campaigns and their ads in one transaction (COPY for the ads); returns the counts. The ads wait
        for review unless an operator loading them names themself as their reviewer (`approved_by`), which is
        recorded on every ad like any approval."""
        review = "APPROVED" if approved_by else "PENDING"
        reviewed_by = approved_by or None
        reviewed_at = datetime.now(timezone.utc) if approved_by else None

        async def tx(conn):
            n_campaigns = n_ads = 0
            for fields, ads in zip(campaigns, ads_per_campaign):
                values = _to_db(fields)
                columns = ["advertiser_id", *values]
                row = await (await conn.execute(
                    f"INSERT INTO campaigns ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
                    "RETURNING campaign_id, bid_type, exclusion_category",
                    [advertiser_id, *values.values()])).fetchone()
                n_campaigns += 1
                async with conn.cursor().copy(
                        "COPY ads (campaign_id, advertiser_id, bid_type, exclusion_category, bid_micros, creative_ref, "
                        "landing_url, targeting, status, review_status, reviewed_by, reviewed_at) FROM STDIN") as copy:
                    for ad in ads:
                        await copy.write_row((row["campaign_id"], advertiser_id, row["bid_type"],
                                              row["exclusion_category"], ad["bid_micros"], ad["creative_ref"],
                                              ad["landing_url"], json.dumps(ad["targeting"]),
                                              ad.get("status", "ACTIVE"), review, reviewed_by, reviewed_at))
                        n_ads += 1
            return n_campaigns, n_ads
        return await self._run(tx)


# ------------------------------------------------------------------------------------------ reports
async def owned_report_campaigns(conn: psycopg.AsyncConnection, advertiser_id: int, request: ReportRequest
                                 ) -> list[int] | None:
    """The campaigns a report of the advertiser covers (those asked for, else all of the advertiser's), sorted;
    None when one asked for is not the advertiser's."""
    owned = [r[0] for r in await (await conn.cursor(row_factory=tuple_row).execute(
        "SELECT campaign_id FROM campaigns WHERE advertiser_id = %s ORDER BY campaign_id",
        (advertiser_id,))).fetchall()]
    if request.campaign_ids and not set(request.campaign_ids) <= set(owned):
        return None
    return list(request.campaign_ids or owned)


async def report_of(conn: psycopg.AsyncConnection, advertiser_id: int, request: ReportRequest) -> bytes | None:
    """A page of the advertiser's report as JSON (serving.advertiser.report_queries.report_page), or None when a
    campaign asked for is not the advertiser's. Each query is a range scan of one primary key, leading with the
    campaign id."""
    ids = await owned_report_campaigns(conn, advertiser_id, request)
    return None if ids is None else await report_page(conn, ids, request)


async def campaigns_report(conn: psycopg.AsyncConnection, ids: list[int], request: ReportRequest
                           ) -> dict[str, Any]:
    """The whole report of these campaigns as one `GET /v1/reports` body, every page read and joined (operators,
    the simulated day and the benchmarks call this; `request.campaign_ids` is not read, and no owner is
    checked)."""
    ids, report, request = sorted(ids), None, replace(request, after=None, limit=MAX_PAGE_ROWS)
    while True:
        page = json.loads(await report_page(conn, ids, request))
        if report is None:
            report = page
        else:
            by_id = {c["campaign_id"]: c for c in report["campaigns"]}
            for campaign in page["campaigns"]:
                if campaign["campaign_id"] in by_id:
                    by_id[campaign["campaign_id"]]["rows"].extend(campaign["rows"])
                else:
                    report["campaigns"].append(campaign)
        if page["next_cursor"] is None:
            report["next_cursor"] = None
            return report
        request = replace(request, after=decode_cursor(page["next_cursor"]))
