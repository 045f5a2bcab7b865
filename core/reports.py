"""Advertiser reports: the request's range, the hour and day buckets, and the report rows. Pure.

A report gives, per campaign, billed impressions, billed clicks, conversions and billed spend (integer micros)
by UTC hour or by budget day. The billed figures are the click aggregator's own cumulative totals
(billing.billed_spend, one campaign-day per record): the landing job keeps, per campaign, budget day and hour,
the newest record of that hour (`core.clicks.progress_key`), and an hour's figures are the growth of the
cumulative totals since the previous hour of the same budget day. A budget day's figures are its newest
record, the one the nightly recount compares with, so report and recount agree by construction
(docs/reporting.md). Conversions come from ad.conversions, one per converting impression.

Never reads a clock or a database: the landing job and the advertiser API bring the rows."""
from __future__ import annotations

import base64
import binascii
import re
from operator import itemgetter
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any, Iterable, Mapping, Sequence

from core import clicks
from core.errors import InvalidArgument, InvalidField
from core.pacing import local_day

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
GRANULARITIES = ("hour", "day")
MAX_HOURLY_RANGE_DAYS = 92  # an hourly report covers at most this many days (2,208 rows per campaign)
MAX_DAILY_RANGE_DAYS = 732  # a daily report at most two years
# A budget day spans at most 25 UTC hours (a daylight-saving day), so the hour before a report's first hour
# that carries the same budget day's previous cumulative totals lies within this much before it.
LOOKBACK_MS = 48 * HOUR_MS
MAX_CAMPAIGN_IDS = 500
FORMATS = ("json", "csv")
DEFAULT_PAGE_ROWS = 10_000  # a JSON page's rows when `limit` is not given; CSV streams the whole range
MAX_PAGE_ROWS = 100_000
METRICS = ("billed_impressions", "billed_clicks", "conversions", "billed_spend_micros")
BILLED_METRICS = ("billed_impressions", "billed_clicks", "billed_spend_micros")
# Every cumulative BilledSpend field the landing keeps (the report shows BILLED_METRICS of them).
CUMULATIVE_FIELDS = ("billed_spend_micros", "billed_impressions", "billed_clicks", "absorbed_overspend_micros",
                     "invalid_credit_micros", "joined_clicks")

# The landing tables (serving/advertiser/migrations/004_reports.sql), named once for the job and the API.
BILLED_HOURLY_TABLE = "report_billed_hourly"
BILLED_DAILY_TABLE = "report_billed_daily"
CONVERSIONS_TABLE = "report_conversions"
CONVERSIONS_HOURLY_TABLE = "report_conversions_hourly"
HOURLY_REPORT_TABLE = "report_hourly"  # (campaign, hour) -> the hour's figures, as hourly_rows computes them
OFFSETS_TABLE = "report_landing_offsets"

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_PLUS_AS_SPACE = re.compile(r" (\d{2}:\d{2})$")  # an offset's "+" left unescaped in a URL arrives as a space


# ------------------------------------------------------------------------------------------ the request
@dataclass(frozen=True)
class ReportRequest:
    """A validated report request. `from_ms`/`to_ms`: the UTC range [from, to) (day granularity: midnights UTC
    of the budget days `from_day` to `to_day`, exclusive). `campaign_ids`: the campaigns asked for, () for all
    of the caller's."""

    granularity: str
    from_ms: int
    to_ms: int
    campaign_ids: tuple[int, ...] = ()
    format: str = "json"  # FORMATS
    limit: int = DEFAULT_PAGE_ROWS  # rows a JSON page holds at most
    after: tuple[int, int] | None = None  # the page starts after this (campaign id, bucket start ms): `cursor`

    @property
    def from_day(self) -> str:
        return iso_day(self.from_ms)

    @property
    def to_day(self) -> str:
        return iso_day(self.to_ms)


def iso_day(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc).date().isoformat()


def iso_hour(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def day_start_ms(day: str) -> int:
    d = date.fromisoformat(day)
    return int(datetime(d.year, d.month, d.day, tzinfo=timezone.utc).timestamp() * 1000)


def _instant(name: str, text: str | None, granularity: str) -> int:
    """`text` as epoch ms: a date (YYYY-MM-DD, midnight UTC) or, for hourly reports, an ISO-8601 instant on a
    whole hour (2026-03-10T13:00:00Z, or with an offset)."""
    if text is None or not text.strip():
        raise InvalidField(name, "is required: a date (YYYY-MM-DD) or, for hourly reports, an ISO-8601 hour "
                                 "such as 2026-03-10T13:00:00Z")
    text = _PLUS_AS_SPACE.sub(r"+\1", text.strip())
    if _DATE.match(text):
        try:
            return day_start_ms(text)
        except ValueError:
            raise InvalidField(name, f"{text!r} is not a calendar date") from None
    if granularity == "day":
        raise InvalidField(name, f"a daily report takes budget days (YYYY-MM-DD), not {text!r}")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidField(name, f"{text!r} is neither a date (YYYY-MM-DD) nor an ISO-8601 instant") from None
    if moment.tzinfo is None:
        raise InvalidField(name, f"{text!r} has no time zone: end it with Z (UTC) or an offset")
    epoch_ms = int(moment.timestamp() * 1000)
    if epoch_ms % HOUR_MS:
        raise InvalidField(name, f"{text!r} is not on a whole hour")
    return epoch_ms


def _campaign_ids(text: str | None) -> tuple[int, ...]:
    if text is None or not text.strip():
        return ()
    ids = []
    for part in text.split(","):
        part = part.strip()
        # ASCII digits only: str.isdigit() also takes '²', which int() refuses; 19 digits hold every bigint
        if not (part.isascii() and part.isdigit() and len(part) <= 19) or not 0 < int(part) < 1 << 63:
            raise InvalidField("campaign_id", f"{part!r} is not a campaign id (comma-separated positive integers)")
        ids.append(int(part))
    if len(ids) > MAX_CAMPAIGN_IDS:
        raise InvalidField("campaign_id", f"names {len(ids)} campaigns; at most {MAX_CAMPAIGN_IDS} per report")
    return tuple(sorted(set(ids)))


def parse_report_query(query: Mapping[str, str]) -> ReportRequest:
    """The query of `GET /v1/reports` (`from`, `to`, `granularity` = hour|day, default day; `campaign_id`:
    comma-separated, default every campaign of the caller) as a ReportRequest; raises InvalidField naming the
    parameter that is wrong."""
    granularity = (query.get("granularity") or "day").strip()
    if granularity not in GRANULARITIES:
        raise InvalidField("granularity", f"{granularity!r} is not one of {', '.join(GRANULARITIES)}")
    from_ms = _instant("from", query.get("from"), granularity)
    to_ms = _instant("to", query.get("to"), granularity)
    if to_ms <= from_ms:
        raise InvalidField("to", f"must be after from ({query.get('from')}); the range is [from, to)")
    limit_days = MAX_HOURLY_RANGE_DAYS if granularity == "hour" else MAX_DAILY_RANGE_DAYS
    if to_ms - from_ms > limit_days * DAY_MS:
        kind = "an hourly" if granularity == "hour" else "a daily"
        raise InvalidField("to", f"the range spans more than {limit_days} days, the most {kind} report covers")
    report_format = (query.get("format") or "json").strip()
    if report_format not in FORMATS:
        raise InvalidField("format", f"{report_format!r} is not one of {', '.join(FORMATS)}")
    return ReportRequest(granularity, from_ms, to_ms, _campaign_ids(query.get("campaign_id")), report_format,
                         _limit(query.get("limit")), decode_cursor(query.get("cursor")))


def _limit(text: str | None) -> int:
    if text is None or not text.strip():
        return DEFAULT_PAGE_ROWS
    text = text.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 7) or not 1 <= int(text) <= MAX_PAGE_ROWS:
        raise InvalidField("limit", f"{text!r}: rows per page, an integer from 1 to {MAX_PAGE_ROWS:,}")
    return int(text)


# ------------------------------------------------------------------------------------------ pages
def encode_cursor(campaign_id: int, bucket_ms: int) -> str:
    """The opaque `cursor` of the page after the row (campaign id, bucket start ms): URL-safe base64 of
    "campaign:bucket"; the client hands back what `next_cursor` said and never builds one."""
    return base64.urlsafe_b64encode(f"{campaign_id}:{bucket_ms}".encode()).decode().rstrip("=")


def decode_cursor(text: str | None) -> tuple[int, int] | None:
    """(campaign id, bucket start ms) of a `cursor` (None when absent); InvalidField("cursor") for anything
    `encode_cursor` did not write."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    try:
        if len(text) > 64 or not text.isascii():
            raise ValueError
        campaign, bucket = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii").split(":")
        if not (campaign.isdigit() and bucket.lstrip("-").isdigit()):
            raise ValueError
        after = (int(campaign), int(bucket))
        if not (0 < after[0] < 1 << 63 and -(1 << 63) <= after[1] < 1 << 63):
            raise ValueError
        return after
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidField("cursor", f"{text[:80]!r} is not a cursor this API gave (pass next_cursor as it "
                                     "came)") from None


def page_campaigns(campaign_ids: Sequence[int], after: tuple[int, int] | None, with_rows: Sequence[int],
                   last: tuple[int, int] | None) -> list[int]:
    """The campaigns a page lists, in id order: `campaign_ids` (sorted) from the cursor's campaign to the page's
    last row's (`last`, None when the page ends the report), the cursor's own only when rows of it continue on
    this page (`with_rows`). A campaign with nothing in the range is listed once, on the page its id falls in,
    with zero totals and no rows."""
    start = after[0] if after else 0
    end = last[0] if last else 1 << 63
    rows = set(with_rows)
    return [c for c in campaign_ids if start < c <= end or (c == start and c in rows)]


# ------------------------------------------------------------------------------------------ buckets
def hour_of_interval_end(end_ms: int) -> int:
    """The UTC hour (its start, epoch ms) of an interval that ends (exclusive) at `end_ms`: a BilledSpend record
    stamped 13:00:00 covers windows up to 12:59:59.999, so it counts in 12:00."""
    return (end_ms - 1) // HOUR_MS * HOUR_MS


def hour_of_instant(epoch_ms: int) -> int:
    return epoch_ms // HOUR_MS * HOUR_MS


# ------------------------------------------------------------------------------------------ landing
def newer(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> Mapping[str, Any]:
    """The newer of two BilledSpend records of one campaign-day (`core.clicks.progress_key`; `a` may be None)."""
    return b if a is None or clicks.progress_key(b) > clicks.progress_key(a) else a


def _checked_day(value: Any) -> str:
    try:
        return date.fromisoformat(str(value)).isoformat()
    except ValueError:
        raise InvalidArgument(f"budget_day {value!r} is not an ISO date (YYYY-MM-DD)") from None


@dataclass
class LandingBatch:
    """What one batch of records changes in the landing tables, reduced before it is written: per (campaign,
    budget day, hour) and per (campaign, budget day) the newest BilledSpend record, and the conversions with
    their buckets. Reducing first keeps writes to one row per bucket and batch; the tables keep the newer
    record on every write, so the order of batches and a replay change nothing."""

    hourly: dict[tuple[int, str, int], Mapping[str, Any]] = field(default_factory=dict)
    daily: dict[tuple[int, str], Mapping[str, Any]] = field(default_factory=dict)
    conversions: dict[str, tuple[int, str, int, int]] = field(default_factory=dict)

    def add_billed(self, record: Mapping[str, Any]) -> None:
        campaign_id, day = int(record["campaign_id"]), _checked_day(record["budget_day"])
        hour = hour_of_interval_end(int(record["event_time"]))
        self.hourly[(campaign_id, day, hour)] = newer(self.hourly.get((campaign_id, day, hour)), record)
        self.daily[(campaign_id, day)] = newer(self.daily.get((campaign_id, day)), record)

    def add_conversion(self, record: Mapping[str, Any], budget_day: str) -> None:
        """One conversion report; the first report of an impression counts (its resends do not), so the batch
        keeps the earliest (event time, conversion id) per impression, as the table does."""
        impression_id = str(record["impression_id"])
        row = (int(record["campaign_id"]), budget_day, hour_of_instant(int(record["event_time"])),
               int(record["event_time"]))
        current = self.conversions.get(impression_id)
        if current is None or row[3] < current[3]:
            self.conversions[impression_id] = row

    def __len__(self) -> int:
        return len(self.hourly) + len(self.conversions)


def conversion_day(event_time_ms: int, timezone_name: str) -> str:
    """The budget day a conversion counts in: the campaign's local date at the report's arrival, as billing
    assigns a window to the local date of its end."""
    return local_day(event_time_ms, timezone_name)[0]


# ------------------------------------------------------------------------------------------ report rows
def _zero() -> dict[str, int]:
    return {name: 0 for name in METRICS}


HOURLY_BILLED_COLUMNS = ("campaign_id", "budget_day", "hour_start_ms", "billed_impressions", "billed_clicks",
                         "billed_spend_micros")
HOURLY_CONVERSION_COLUMNS = ("campaign_id", "hour_start_ms", "conversions")


def hourly_rows(billed: Iterable[Sequence[Any]], conversions: Iterable[Sequence[Any]],
                from_ms: int, to_ms: int) -> dict[int, list[dict[str, Any]]]:
    """campaign id -> hourly rows in [from, to), oldest first, only hours with something in them.

    `billed`: rows of the hourly landing table as tuples of HOURLY_BILLED_COLUMNS (the cumulative totals),
    including up to LOOKBACK_MS before `from_ms` so each budget day's first reported hour finds its previous
    cumulative totals. An hour's billed figures are the growth since the previous hour of the same budget day
    (an hour holding two budget days of a campaign adds both days' growth). `conversions`: tuples of
    HOURLY_CONVERSION_COLUMNS. Written for 30-day hourly reports of many campaigns (tuples, not mappings: a
    report reads tens of thousands of rows): one pass in (campaign, hour) order, which visits each budget
    day's hours in order too."""
    buckets: dict[tuple[int, int], list[int]] = {}  # (campaign, hour) -> [impressions, clicks, conversions, spend]
    previous: dict[tuple[int, Any], tuple[int, int, int]] = {}
    for campaign_id, day, hour, impressions, clicks_n, spend in sorted(billed, key=itemgetter(0, 2)):
        before = previous.get((campaign_id, day), (0, 0, 0))
        previous[(campaign_id, day)] = (impressions, clicks_n, spend)
        if from_ms <= hour < to_ms:
            bucket = buckets.get((campaign_id, hour))
            if bucket is None:
                bucket = buckets[(campaign_id, hour)] = [0, 0, 0, 0]
            bucket[0] += impressions - before[0]
            bucket[1] += clicks_n - before[1]
            bucket[3] += spend - before[2]
    for campaign_id, hour, conversions_n in conversions:
        if from_ms <= hour < to_ms:
            buckets.setdefault((campaign_id, hour), [0, 0, 0, 0])[2] += int(conversions_n)
    hour_names: dict[int, str] = {}
    out: dict[int, list[dict[str, Any]]] = {}
    for (campaign_id, hour), (impressions, clicks_n, conversions_n, spend) in sorted(buckets.items()):
        name = hour_names.get(hour) or hour_names.setdefault(hour, iso_hour(hour))
        out.setdefault(campaign_id, []).append({
            "hour": name, "billed_impressions": impressions, "billed_clicks": clicks_n,
            "conversions": conversions_n, "billed_spend_micros": spend})
    return out


def daily_rows(billed: Iterable[Mapping[str, Any]], conversions: Iterable[Mapping[str, Any]]
               ) -> dict[int, list[dict[str, Any]]]:
    """campaign id -> daily rows, oldest first: `billed` is the newest BilledSpend totals per (campaign_id,
    budget_day), as the daily landing table keeps them; `conversions`: (campaign_id, budget_day, conversions)."""
    buckets: dict[tuple[int, str], dict[str, int]] = {}
    for row in billed:
        bucket = buckets.setdefault((int(row["campaign_id"]), str(row["budget_day"])), _zero())
        for name in BILLED_METRICS:
            bucket[name] = int(row[name])
    for row in conversions:
        buckets.setdefault((int(row["campaign_id"]), str(row["budget_day"])), _zero())["conversions"] += \
            int(row["conversions"])
    out: dict[int, list[dict[str, Any]]] = {}
    for (campaign_id, day), metrics in sorted(buckets.items()):
        out.setdefault(campaign_id, []).append({"day": day, **metrics})
    return out


def report_body(request: ReportRequest, campaign_ids: Sequence[int],
                rows: Mapping[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """The response of `GET /v1/reports`: every campaign asked for (rows only where there is something, and its
    totals over the range)."""
    hourly = request.granularity == "hour"
    campaigns = []
    for campaign_id in campaign_ids:
        campaign_rows = rows.get(campaign_id, [])
        totals = _zero()
        for row in campaign_rows:
            for name in METRICS:
                totals[name] += row[name]
        campaigns.append({"campaign_id": campaign_id, "totals": totals, "rows": campaign_rows})
    return {"granularity": request.granularity,
            "from": iso_hour(request.from_ms) if hourly else request.from_day,
            "to": iso_hour(request.to_ms) if hourly else request.to_day,
            "campaigns": campaigns}


# ------------------------------------------------------------------------------------------ against the recount
def recount_differences(report: Mapping[str, Any], recount: Mapping[Any, Mapping[str, Any]]
                        ) -> list[dict[str, Any]]:
    """Where a daily report of one budget day (`report_body`, granularity day, from = that day, to = the next)
    disagrees with the nightly recount of that day (`summary["recount"]`: campaign id -> totals, as
    pipelines.nightly_recount writes it, or core.clicks.recount's records of the day): one entry per campaign
    and field (campaign_id, field, report, recount). A campaign on one side only is compared with zeros; the
    report's campaigns are those it was asked for, so a recount campaign outside them is not compared. Empty:
    the report equals the recount for every campaign."""
    if report.get("granularity") != "day" or report.get("to") != next_day(str(report.get("from"))):
        raise InvalidField("granularity", "compare a daily report of one budget day with that day's recount")
    reported = {int(c["campaign_id"]): c["totals"] for c in report["campaigns"]}
    recounted = {int(k): v for k, v in recount.items() if int(k) in reported}
    out = []
    for campaign_id in sorted(reported):
        mine, theirs = reported[campaign_id], recounted.get(campaign_id, {})
        for name in BILLED_METRICS:
            if int(mine.get(name, 0)) != int(theirs.get(name, 0)):
                out.append({"campaign_id": campaign_id, "field": name, "report": mine.get(name, 0),
                            "recount": theirs.get(name, 0)})
    return out


def next_day(day: str) -> str:
    return (date.fromisoformat(day) + timedelta(days=1)).isoformat()
