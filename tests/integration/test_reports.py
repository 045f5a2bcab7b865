"""GET /v1/reports on the real platform: billed records in the click aggregator's exact topic format (made by
its own pure functions, tests/billed_feed.py, rather than a Flink run) and conversions go to Kafka, the landing
job (`python -m serving.report_landing`) lands them in PostgreSQL, and the advertiser API's reports equal
core.clicks.recount of the same beacons; landing them again, or the same records sent twice, changes nothing."""
from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import re
import subprocess
import sys
import uuid
from datetime import date, datetime
from decimal import Decimal

import aiohttp
import psycopg
import psycopg.rows
import pytest

from core import clicks, reports
from infra.platform.topics import TopicSpec, ensure_topics
from serving.report_landing.main import land
from serving.report_landing.settings import ReportLandingSettings
from schemas import topics
from schemas.codec import AvroCodec
from serving.advertiser.api import start_advertiser_api
from serving.advertiser.store import migrate
from streams import kafka
from tests import billed_feed as feed

START_MS = feed.T0 + 2 * feed.HOUR_MS  # 02:00 UTC: 22:00 of the day before in New York
HOURS = 6
BILLED_TYPE, CONVERSION_TYPE = topics.record_type(topics.BILLED_SPEND), topics.record_type(topics.AD_CONVERSIONS)


class Api:
    def __init__(self, platform):
        self.platform = platform

    async def __aenter__(self):
        self.runner, port, self.store = await start_advertiser_api(self.platform.postgres_dsn, port=0)
        self.base, self.http = f"http://127.0.0.1:{port}", aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc):
        await self.http.close()
        await self.runner.cleanup()
        await self.store.close()

    async def advertiser(self) -> dict[str, str]:
        _, key = await self.store.create_advertiser(f"adv-reports-{uuid.uuid4().hex[:8]}")
        return {"Authorization": f"Bearer {key}"}

    async def call(self, method: str, path: str, auth: dict, body=None, params=None) -> tuple[int, dict]:
        async with self.http.request(method, self.base + path, json=body, headers=auth, params=params) as r:
            return r.status, await r.json()


def _produce(platform, topic: str, record_type: str, records: list[dict], key_field: str) -> None:
    codec = AvroCodec()
    kafka.produce_all(platform.kafka_bootstrap, topic, [
        (str(r[key_field]).encode(), codec.encode(record_type, r), int(r["event_time"])) for r in records])


def _land_with_the_command(platform, settings: ReportLandingSettings) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "serving.report_landing", "--bootstrap", platform.kafka_bootstrap,
         "--postgres-dsn", platform.postgres_dsn, "--billed-topic", settings.billed_topic,
         "--conversions-topic", settings.conversions_topic, "--dead-letter-topic", settings.dead_letter_topic,
         "--group-id", settings.group_id, "--until-caught-up"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


@pytest.fixture(scope="module")
def world(platform):
    """Two advertisers' campaigns in the store, their billed records and conversions on fresh topics."""
    migrate(platform.postgres_dsn)
    suffix = uuid.uuid4().hex[:8]
    names = {n: f"test.reports.{n}.{suffix}" for n in ("billed", "conversions", "dead")}
    ensure_topics(platform.kafka_bootstrap, tuple(
        TopicSpec(t, key="test", schema="", partitions=1 if n == "dead" else 2) for n, t in names.items()))

    async def setup():
        async with Api(platform) as api:
            mine, other = await api.advertiser(), await api.advertiser()
            made = []
            for auth, timezone, bid_type, budget in ((mine, "UTC", "CPC", 40), (mine, "America/New_York", "CPC", 3),
                                                     (mine, "UTC", "CPM", 500), (other, "UTC", "CPC", 50)):
                status, c = await api.call("POST", "/v1/campaigns", auth, {
                    "name": f"r-{uuid.uuid4().hex[:6]}", "bid_type": bid_type, "timezone": timezone,
                    "daily_budget_micros": budget * feed.DOLLAR})
                assert status == 201, c
                made.append(c)
            return mine, other, made

    mine, other, made = asyncio.run(setup())
    versions = [feed.campaign_version(c["campaign_id"], c["daily_budget_micros"], c["timezone"],
                                      bid_type=c["bid_type"]) for c in made]
    billing = {c["campaign_id"]: "IMPRESSION" if c["bid_type"] == "CPM" else "CLICK" for c in made}
    events = feed.beacons(billing, hours=HOURS, per_hour=30, start_ms=START_MS)
    billed = feed.billed_stream(events, versions)
    conversions = feed.conversions(events)
    _produce(platform, names["billed"], BILLED_TYPE, billed, "campaign_id")
    _produce(platform, names["conversions"], CONVERSION_TYPE, conversions, "impression_id")
    kafka.produce_all(platform.kafka_bootstrap, names["billed"], [(b"1", b"\x00not avro", START_MS)])
    settings = ReportLandingSettings(platform.kafka_bootstrap, platform.postgres_dsn, names["billed"],
                                     names["conversions"], names["dead"], f"test-reports-{suffix}",
                                     max_batch_records=100, until_caught_up=True)
    log = _land_with_the_command(platform, settings)
    return {"mine": mine, "other": other, "campaigns": made, "events": events, "versions": versions,
            "billed": billed, "conversions": conversions, "settings": settings, "names": names, "log": log,
            "recount": clicks.recount(events, versions)}


def _reports(platform, auth, queries: list[dict]) -> list[tuple[int, dict]]:
    async def run():
        async with Api(platform) as api:
            return [await api.call("GET", "/v1/reports", auth, params=q) for q in queries]
    return asyncio.run(run())


def _days(world) -> list[str]:
    return sorted({day for (_, day) in world["recount"]})


def _daily_queries(world) -> list[dict]:
    return [{"from": day, "to": reports.next_day(day)} for day in _days(world)]


HOURLY = {"from": "2026-03-09T12:00:00Z", "to": "2026-03-11T00:00:00Z", "granularity": "hour"}


def _mine(world) -> list[int]:
    return [c["campaign_id"] for c in world["campaigns"][:3]]


def test_every_budget_days_report_equals_the_recount_for_every_campaign(platform, world):
    assert len(_days(world)) == 2  # the New York campaign's beacons span two of its budget days
    answers = _reports(platform, world["mine"], _daily_queries(world))
    for day, (status, body) in zip(_days(world), answers):
        assert status == 200, body
        assert [c["campaign_id"] for c in body["campaigns"]] == _mine(world)
        recount = {str(c): t for (c, d), t in world["recount"].items() if d == day}
        assert reports.recount_differences(body, recount) == []
    capped = world["campaigns"][1]["campaign_id"]
    assert sum(t["absorbed_overspend_micros"] for (c, _), t in world["recount"].items() if c == capped) > 0


def test_hourly_rows_add_up_to_the_recount_and_count_each_converting_impression_once(platform, world):
    (status, body), = _reports(platform, world["mine"], [HOURLY])
    assert status == 200, body
    for campaign in body["campaigns"]:
        cid = campaign["campaign_id"]
        for name in reports.BILLED_METRICS:
            expected = sum(t[name] for (c, _), t in world["recount"].items() if c == cid)
            assert campaign["totals"][name] == expected == sum(r[name] for r in campaign["rows"]), (cid, name)
        converted = {c["impression_id"] for c in world["conversions"] if c["campaign_id"] == cid}
        assert campaign["totals"]["conversions"] == len(converted)
        assert len(campaign["rows"]) >= HOURS
    assert sum(c["totals"]["conversions"] for c in body["campaigns"]) > 0


def _reference_report(platform, ids: list[int], query: dict) -> dict:
    """The report as core.reports' Python statement of the rules computes it from the landing tables."""
    request = reports.parse_report_query(query)
    with psycopg.connect(platform.postgres_dsn) as conn:
        if request.granularity == "hour":
            billed = conn.execute(
                f"SELECT {', '.join(reports.HOURLY_BILLED_COLUMNS)} FROM {reports.BILLED_HOURLY_TABLE} "
                "WHERE campaign_id = ANY(%s) AND hour_start_ms >= %s AND hour_start_ms < %s",
                (ids, request.from_ms - reports.LOOKBACK_MS, request.to_ms)).fetchall()
            conversions = conn.execute(
                f"SELECT campaign_id, hour_start_ms, sum(conversions) FROM {reports.CONVERSIONS_HOURLY_TABLE} "
                "WHERE campaign_id = ANY(%s) GROUP BY 1, 2", (ids,)).fetchall()
            rows = reports.hourly_rows(billed, conversions, request.from_ms, request.to_ms)
        else:
            conn.row_factory = psycopg.rows.dict_row
            billed = conn.execute(f"SELECT * FROM {reports.BILLED_DAILY_TABLE} WHERE campaign_id = ANY(%s) "
                                  "AND budget_day >= %s::date AND budget_day < %s::date",
                                  (ids, request.from_day, request.to_day)).fetchall()
            conversions = conn.execute(
                f"SELECT campaign_id, budget_day, sum(conversions) AS conversions FROM "
                f"{reports.CONVERSIONS_HOURLY_TABLE} WHERE campaign_id = ANY(%s) AND budget_day >= %s::date "
                "AND budget_day < %s::date GROUP BY 1, 2", (ids, request.from_day, request.to_day)).fetchall()
            rows = reports.daily_rows([{**r, "budget_day": r["budget_day"].isoformat()} for r in billed],
                                      [{**r, "budget_day": r["budget_day"].isoformat()} for r in conversions])
    return reports.report_body(request, ids, rows)


def test_the_databases_report_equals_the_python_statement_of_the_rules(platform, world):
    queries = [*_daily_queries(world), HOURLY, {"from": "2026-03-09", "to": "2026-03-12"},
               {"from": "2026-03-10T03:00:00Z", "to": "2026-03-10T05:00:00Z", "granularity": "hour"}]
    for query, (status, body) in zip(queries, _reports(platform, world["mine"], queries)):
        assert status == 200, body
        assert body.pop("next_cursor") is None
        assert body == _reference_report(platform, _mine(world), query), query


def test_a_long_report_comes_in_pages_whose_rows_join_to_the_whole_report(platform, world):
    (status, whole), = _reports(platform, world["mine"], [HOURLY])
    assert status == 200 and whole["next_cursor"] is None
    joined: dict[int, dict] = {}
    query, pages = {**HOURLY, "limit": "4"}, 0
    while True:
        (status, page), = _reports(platform, world["mine"], [query])
        assert status == 200, page
        pages += 1
        assert sum(len(c["rows"]) for c in page["campaigns"]) <= 4
        for campaign in page["campaigns"]:
            mine = joined.setdefault(campaign["campaign_id"], {**campaign, "rows": []})
            assert campaign["totals"] == mine["totals"]  # the whole range's totals on every page
            mine["rows"] += campaign["rows"]
        if page["next_cursor"] is None:
            break
        query = {**query, "cursor": page["next_cursor"]}
    assert pages >= sum(len(c["rows"]) for c in whole["campaigns"]) / 4
    assert list(joined.values()) == whole["campaigns"]
    answers = _reports(platform, world["mine"], [{**HOURLY, "cursor": "bm90IGEgY3Vyc29y"}, {**HOURLY, "limit": "0"},
                                                 {**HOURLY, "format": "xml"}])
    assert [(s, b.get("field")) for s, b in answers] == [(400, "cursor"), (400, "limit"), (400, "format")]


def _csv(platform, auth, query: dict) -> tuple[int, str, str]:
    async def run():
        async with Api(platform) as api:
            async with api.http.get(api.base + "/v1/reports", headers=auth, params={**query, "format": "csv"}) as r:
                return r.status, r.headers.get("Content-Type", ""), await r.text()
    return asyncio.run(run())


def test_a_csv_report_has_a_header_iso_dates_and_money_in_currency_units(platform, world):
    for query, label in ((HOURLY, "hour_utc"), ({"from": "2026-03-09", "to": "2026-03-12"}, "day")):
        (_, body), = _reports(platform, world["mine"], [query])
        status, content_type, text = _csv(platform, world["mine"], query)
        assert status == 200 and content_type.startswith("text/csv"), text[:300]
        table = list(csv.DictReader(io.StringIO(text)))
        assert list(table[0]) == ["campaign_id", label, "currency", "billed_impressions", "billed_clicks",
                                  "conversions", "billed_spend"]
        expected = [(c["campaign_id"], r) for c in body["campaigns"] for r in c["rows"]]
        assert len(table) == len(expected) > 0
        for line, (campaign_id, row) in zip(table, expected):
            when = line[label]
            if label == "day":
                assert date.fromisoformat(when).isoformat() == row["day"]
            else:  # "2026-03-10 13:00:00", UTC: what spreadsheets read as a date and time
                assert datetime.fromisoformat(when + "+00:00").strftime("%Y-%m-%dT%H:%M:%SZ") == row["hour"]
            assert int(line["campaign_id"]) == campaign_id and line["currency"] == "USD"
            assert Decimal(line["billed_spend"]) * 1_000_000 == row["billed_spend_micros"]
            assert re.fullmatch(r"\d+\.\d{6}", line["billed_spend"]), line["billed_spend"]
            for name in ("billed_impressions", "billed_clicks", "conversions"):
                assert int(line[name]) == row[name]
    foreign = world["campaigns"][3]["campaign_id"]
    status, _, text = _csv(platform, world["mine"], {**HOURLY, "campaign_id": str(foreign)})
    assert status == 404 and "campaign_id" in text


def test_landing_again_or_the_same_records_sent_twice_gives_the_same_reports(platform, world):
    queries = [*_daily_queries(world), HOURLY]
    before = _reports(platform, world["mine"], queries)
    replay = world["settings"]
    land(dataclasses.replace(replay, group_id=replay.group_id + "-replay"))  # another group: from offset 0
    _produce(platform, world["names"]["billed"], BILLED_TYPE, world["billed"], "campaign_id")
    _produce(platform, world["names"]["conversions"], CONVERSION_TYPE, world["conversions"], "impression_id")
    land(replay)  # the same group: only the resent records
    assert _reports(platform, world["mine"], queries) == before


def test_another_advertisers_campaign_is_not_found_and_a_key_is_required(platform, world):
    foreign = world["campaigns"][3]["campaign_id"]
    query = {"from": "2026-03-10", "to": "2026-03-11"}
    (status, body), = _reports(platform, world["mine"], [{**query, "campaign_id": str(foreign)}])
    assert (status, body.get("field")) == (404, "campaign_id")
    (status, body), = _reports(platform, world["other"], [query])
    assert status == 200 and [c["campaign_id"] for c in body["campaigns"]] == [foreign]
    (status, _), = _reports(platform, {}, [query])
    assert status == 401


def test_a_malformed_range_is_refused_naming_the_parameter(platform, world):
    answers = _reports(platform, world["mine"], [
        {"from": "2026-13-01", "to": "2026-03-11"}, {"from": "2026-03-10", "to": "2026-03-09"},
        {"from": "2026-03-10", "to": "2026-03-11", "granularity": "minute"}, {"to": "2026-03-11"}])
    assert [(s, b.get("field")) for s, b in answers] == [(400, "from"), (400, "to"), (400, "granularity"),
                                                          (400, "from")]


def test_a_record_that_does_not_decode_goes_to_the_dead_letters(platform, world):
    letters = [AvroCodec().decode(m.value()) for m in kafka.read_all(platform.kafka_bootstrap,
                                                                     world["names"]["dead"])]
    assert letters and {(d["job"], d["source_topic"], d["value"]) for d in letters} == {
        ("report_landing", world["names"]["billed"], b"\x00not avro")}


def test_the_report_queries_read_through_an_index(platform, world):
    with psycopg.connect(platform.postgres_dsn) as conn:
        conn.execute("SET enable_seqscan = off")
        plans = [" ".join(r[0] for r in conn.execute("EXPLAIN " + sql, args).fetchall()) for sql, args in (
            (f"SELECT * FROM {reports.HOURLY_REPORT_TABLE} WHERE campaign_id = ANY(%s) AND hour_start_ms >= %s "
             "AND hour_start_ms < %s", (_mine(world), START_MS, START_MS + 30 * reports.DAY_MS)),
            (f"SELECT * FROM {reports.BILLED_HOURLY_TABLE} WHERE campaign_id = ANY(%s) AND hour_start_ms >= %s "
             "AND hour_start_ms < %s", (_mine(world), START_MS, START_MS + 30 * reports.DAY_MS)),
            (f"SELECT * FROM {reports.CONVERSIONS_HOURLY_TABLE} WHERE campaign_id = ANY(%s) AND hour_start_ms >= %s "
             "AND hour_start_ms < %s", (_mine(world), START_MS, START_MS + 30 * reports.DAY_MS)),
            (f"SELECT * FROM {reports.BILLED_DAILY_TABLE} WHERE campaign_id = ANY(%s) AND budget_day >= %s::date",
             (_mine(world), "2026-03-01")))]
    for plan in plans:
        assert "Index" in plan and "Seq Scan" not in plan, plan
