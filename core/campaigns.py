"""Advertiser objects: validating what the advertiser API accepts, the review rules, and compiling the
campaign store's rows into the flat serving records the ad servers index. Pure.

Campaign payload (POST /v1/campaigns; PATCH takes any subset of the mutable fields):
    {"name": "Winter sale", "bid_type": "CPC", "daily_budget_micros": 50000000, "currency": "USD",
     "timezone": "America/New_York", "flight_start": "2026-12-01T00:00:00Z", "flight_end": null,
     "dayparts": [{"day_of_week": 1, "start_minute": 480, "end_minute": 1200}],
     "cap_per_day": 3, "cap_per_week": 10, "cpa_target_micros": null, "exclusion_category": 0, "status": "ACTIVE"}
Ad payload (POST /v1/campaigns/{id}/ads; PATCH takes any subset):
    {"creative_ref": "cdn://x/1.png", "landing_url": "https://shop.example/", "bid_micros": 2000000,
     "targeting": {"location": ["US"], "interest": ["hiking"]}, "status": "ACTIVE"}

Advertisers set only what is theirs. The quality term and the review state are the platform's: a payload that
names them is refused, like the ids, versions and times the store keeps. What each writable field does in the
auction, the pacing and the billing, and the guard on it, is in docs/campaign-changes.md. A new ad waits for
review (PENDING), and a change to what review approved (creative, landing URL, targeting) sends it back.
A campaign's competitive-exclusion category (0: none) is the advertiser's declaration; its ads carry it into
their serving records, and the auction never puts two ads of one nonzero category on a page.

Every problem raises InvalidField naming the field, with a message an advertiser can act on."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Mapping
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core.errors import AdserveError, InvalidField
from core.reserves import reserve_serving_record, rule_key
from core.targeting import InvalidTargeting, compile_targeting

BID_TYPES = ("CPM", "CPC", "CPA")
CAMPAIGN_STATUSES = ("ACTIVE", "PAUSED", "ENDED", "REMOVED")
AD_STATUSES = ("ACTIVE", "PAUSED", "REMOVED")
REVIEW_STATUSES = ("PENDING", "APPROVED", "REJECTED")
REVIEW_DECISIONS = ("APPROVED", "REJECTED")
REVIEWED_FIELDS = ("creative_ref", "landing_url", "targeting")  # a change to any sends the ad back to review
MAX_MICROS = 10**15
# A bid of $100,000 per event is far above any real one; the cap keeps every product of a bid with the budget
# job's multiplier (x 10,000) exact in int64.
MAX_BID_MICROS = 10**11
# Bids, budgets and charges are micros of one currency, the platform's: the auction compares bids and the click
# aggregator bills them without conversion, so a campaign in another currency would buy at the wrong price.
PLATFORM_CURRENCY = "USD"
MAX_REVIEWER_LEN = 200
# Priors for the static score (expected value per impression before any model): a click rate and a
# conversion rate typical of a new ad.
CTR_PRIOR = 0.01
CVR_PRIOR = 0.05
# Competitive-exclusion categories are Avro ints on serving.ads and int32 in the servers' index.
MAX_EXCLUSION_CATEGORY = 2**31 - 1
# Budget changes a campaign may make in any hour. Billing honours every budget in force while an event may have
# been served (core.clicks.billing_limit), so churn cannot make serving free; the limit keeps the change stream
# and each bill's version history small.
BUDGET_EDITS_PER_HOUR = 30
BUDGET_EDIT_WINDOW_S = 3_600
CAMPAIGN_FIELDS = ("name", "bid_type", "daily_budget_micros", "currency", "timezone", "flight_start", "flight_end",
                   "dayparts", "cap_per_day", "cap_per_week", "cpa_target_micros", "exclusion_category", "status")
AD_FIELDS = ("creative_ref", "landing_url", "bid_micros", "targeting", "status")
FIXED_CAMPAIGN_FIELDS = {"bid_type": "how the campaign bids and is billed",
                         "timezone": "the day its daily budget, pacing curve and billing run on"}
# What only the platform writes: refused by name, so a client that read an object and sent it back learns why.
PLATFORM_FIELDS = {
    "quality_prior": "the quality term is the platform's estimate of the user experience, not the advertiser's",
    "review_status": "review belongs to the platform: new and changed ads wait for an operator's approval",
    "reviewed_by": "review belongs to the platform", "reviewed_at": "review belongs to the platform",
    "review_note": "review belongs to the platform",
}
STORE_FIELDS = ("campaign_id", "ad_id", "advertiser_id", "version", "updated_at")  # kept by the store
# What an ad shows of its campaign but never sets itself.
CAMPAIGN_OWNED_AD_FIELDS = {
    "exclusion_category": "an ad carries its campaign's competitive-exclusion category; change it on the campaign",
}


def _micros(value: Any, field: str, *, positive: bool = False, maximum: int = MAX_MICROS) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidField(field, "must be an integer number of micros (1 USD = 1000000)")
    if value < 0 or (positive and value == 0):
        raise InvalidField(field, "must be positive" if positive else "must not be negative")
    if value > maximum:
        raise InvalidField(field, f"must be at most {maximum}")
    return value


def _refuse_foreign_fields(payload: dict[str, Any], allowed: tuple[str, ...], what: str) -> None:
    """400 for a field the advertiser may not write: the platform's own, the store's, or one that does not
    exist."""
    for name in sorted(payload):
        if name in allowed:
            continue
        if name in PLATFORM_FIELDS:
            raise InvalidField(name, f"is set by the platform, not by advertisers: {PLATFORM_FIELDS[name]}")
        if name in STORE_FIELDS:
            raise InvalidField(name, "is kept by the campaign store and cannot be written")
        if name in CAMPAIGN_OWNED_AD_FIELDS:
            raise InvalidField(name, f"is the campaign's: {CAMPAIGN_OWNED_AD_FIELDS[name]}")
        raise InvalidField(name, f"unknown field; {what} have {list(allowed)}")


EARLIEST_TIME_MS = 0  # 1970-01-01T00:00:00Z
LATEST_TIME_MS = 7_258_118_400_000  # 2200-01-01T00:00:00Z


def _timestamp_ms(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidField(field, "must be an ISO-8601 time like 2026-12-01T00:00:00Z, or null")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidField(field, f"{value!r} is not an ISO-8601 time like 2026-12-01T00:00:00Z") from None
    if parsed.tzinfo is None:
        raise InvalidField(field, "needs a UTC offset or Z, e.g. 2026-12-01T00:00:00Z")
    ms = int(parsed.timestamp() * 1000)
    if not EARLIEST_TIME_MS <= ms < LATEST_TIME_MS:  # a time the store, the jobs and every time zone can hold
        raise InvalidField(field, f"{value!r} is outside 1970-01-01 to 2199-12-31 (UTC)")
    return ms


def _cap(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1000:
        raise InvalidField(field, "must be an integer from 1 to 1000, or null for no cap")
    return value


def _exclusion_category(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_EXCLUSION_CATEGORY:
        raise InvalidField("exclusion_category", f"must be an integer from 0 (no competitive exclusion) to "
                                                 f"{MAX_EXCLUSION_CATEGORY}")
    return value


def _choice(value: Any, field: str, options: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.upper() not in options:
        raise InvalidField(field, f"must be one of {list(options)}")
    return value.upper()


def validate_campaign(payload: Any, *, existing: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The columns to write for a new campaign (existing=None) or a change to one (only the given fields).
    Times come back as epoch ms."""
    if not isinstance(payload, dict):
        raise InvalidField("body", "must be a JSON object")
    _refuse_foreign_fields(payload, CAMPAIGN_FIELDS, "campaigns")
    creating = existing is None
    if creating:
        for required in ("name", "bid_type", "daily_budget_micros", "timezone"):
            if required not in payload:
                raise InvalidField(required, "is required")
    else:
        for name, why in FIXED_CAMPAIGN_FIELDS.items():
            if name in payload and payload[name] != existing[name]:
                raise InvalidField(name, f"cannot change after creation ({why}); create a new campaign")
    out = _campaign_basics(payload, existing)
    if "dayparts" in payload:
        out["dayparts"] = _dayparts(payload["dayparts"])
    for name in ("cap_per_day", "cap_per_week"):
        if name in payload:
            out[name] = _cap(payload[name], name)
    if "cpa_target_micros" in payload:
        value = payload["cpa_target_micros"]
        out["cpa_target_micros"] = None if value is None else _micros(value, "cpa_target_micros", positive=True)
    bid_type = out.get("bid_type", (existing or {}).get("bid_type"))
    cpa_target = out.get("cpa_target_micros", (existing or {}).get("cpa_target_micros"))
    if bid_type == "CPA" and not cpa_target:
        raise InvalidField("cpa_target_micros", "a CPA campaign needs a target cost per conversion")
    if "exclusion_category" in payload:
        out["exclusion_category"] = _exclusion_category(payload["exclusion_category"])
    if "status" in payload:
        out["status"] = _choice(payload["status"], "status", CAMPAIGN_STATUSES)
    if creating:
        out.setdefault("currency", "USD")
        out.setdefault("status", "ACTIVE")
        out.setdefault("dayparts", [])
        out.setdefault("exclusion_category", 0)
    return out


def _campaign_basics(payload: dict[str, Any], existing: Mapping[str, Any] | None) -> dict[str, Any]:
    """The name, bid type, budget, currency, time zone and flight of a campaign payload, checked."""
    out: dict[str, Any] = {}
    if "name" in payload:
        out["name"] = _text(payload["name"], "name", 200)
    if "bid_type" in payload:
        out["bid_type"] = _choice(payload["bid_type"], "bid_type", BID_TYPES)
    if "daily_budget_micros" in payload:
        out["daily_budget_micros"] = _micros(payload["daily_budget_micros"], "daily_budget_micros")
    if "currency" in payload:
        currency = payload["currency"]
        if not isinstance(currency, str) or currency.upper() != PLATFORM_CURRENCY:
            raise InvalidField("currency", f"must be {PLATFORM_CURRENCY}: bids, budgets and charges are micros of "
                                           "the platform's currency, compared and billed without conversion")
        out["currency"] = currency.upper()
    if "timezone" in payload:
        try:
            ZoneInfo(str(payload["timezone"]))
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidField("timezone", f"{payload['timezone']!r} is not an IANA time zone such as "
                                           "America/New_York") from None
        out["timezone"] = str(payload["timezone"])
    for name in ("flight_start", "flight_end"):
        if name in payload:
            out[name] = _timestamp_ms(payload[name], name)
    start = out.get("flight_start", (existing or {}).get("flight_start"))
    end = out.get("flight_end", (existing or {}).get("flight_end"))
    if start is not None and end is not None and end <= start:
        raise InvalidField("flight_end", "must be after flight_start")
    return out


def _text(value: Any, field: str, max_len: int) -> str:
    """A trimmed, non-empty, printable string (no control characters: PostgreSQL's text refuses NUL, and no
    record or report should carry a line break or escape in a name)."""
    if not isinstance(value, str) or not value.strip() or len(value) > max_len:
        raise InvalidField(field, f"must be a non-empty string of at most {max_len} characters")
    if not value.isprintable():
        raise InvalidField(field, "must not hold control characters (NUL, line breaks, escapes)")
    return value.strip()


def check_cpa_bid(bid_type: str, bid_micros: int, cpa_target_micros: int | None) -> None:
    """A CPA ad bids at most its campaign's target cost per conversion: the target is what the advertiser said
    a conversion is worth, and a bid far above it (a $100,000 bid on a $5 target) would outbid every rival with
    money the campaign never meant to pay. Raises InvalidField naming bid_micros."""
    if bid_type == "CPA" and cpa_target_micros and bid_micros > cpa_target_micros:
        raise InvalidField("bid_micros", f"{bid_micros:,} is above the campaign's cpa_target_micros "
                                         f"({cpa_target_micros:,}): a CPA bid is at most its campaign's target")


def _dayparts(value: Any) -> list[dict[str, int]]:
    if not isinstance(value, list) or len(value) > 7 * 24:
        raise InvalidField("dayparts", "must be a list of {day_of_week, start_minute, end_minute}")
    out = []
    for i, part in enumerate(value):
        field = f"dayparts[{i}]"
        if not isinstance(part, dict):
            raise InvalidField(field, "must be an object {day_of_week, start_minute, end_minute}")
        day, start, end = part.get("day_of_week"), part.get("start_minute"), part.get("end_minute")
        if not isinstance(day, int) or not 1 <= day <= 7:
            raise InvalidField(f"{field}.day_of_week", "must be 1 (Monday) to 7 (Sunday)")
        if not isinstance(start, int) or not 0 <= start <= 1439:
            raise InvalidField(f"{field}.start_minute", "must be 0 to 1439")
        if not isinstance(end, int) or not start < end <= 1440:
            raise InvalidField(f"{field}.end_minute", "must be after start_minute and at most 1440")
        out.append({"day_of_week": day, "start_minute": start, "end_minute": end})
    return out


def validate_ad(payload: Any, *, creating: bool) -> dict[str, Any]:
    """The columns to write for a new ad or a change to one; targeting comes back as its validated form."""
    if not isinstance(payload, dict):
        raise InvalidField("body", "must be a JSON object")
    _refuse_foreign_fields(payload, AD_FIELDS, "ads")
    if creating:
        for required in ("creative_ref", "landing_url", "bid_micros", "targeting"):
            if required not in payload:
                raise InvalidField(required, "is required")
    out: dict[str, Any] = {}
    if "creative_ref" in payload:
        out["creative_ref"] = _text(payload["creative_ref"], "creative_ref", 500)
    if "landing_url" in payload:
        url = payload["landing_url"]
        if not isinstance(url, str) or not url.startswith(("https://", "http://")) or len(url) > 2000 \
                or any(c.isspace() for c in url) or not url.isprintable():
            raise InvalidField("landing_url", "must be an http(s) URL without spaces, at most 2000 characters")
        out["landing_url"] = url
    if "bid_micros" in payload:
        out["bid_micros"] = _micros(payload["bid_micros"], "bid_micros", positive=True, maximum=MAX_BID_MICROS)
    if "targeting" in payload:
        try:
            compile_targeting(payload["targeting"])
        except InvalidTargeting as e:
            raise InvalidField(f"targeting.{e.field}" if e.field else "targeting", str(e).split(": ", 1)[-1]) \
                from None
        out["targeting"] = payload["targeting"]
    if "status" in payload:
        out["status"] = _choice(payload["status"], "status", AD_STATUSES)
    if creating:
        out.setdefault("status", "ACTIVE")
        out["review_status"] = "PENDING"  # nothing serves before an operator approved it
    return out


# ---------------------------------------------------------------- review

class TooManyBudgetEdits(AdserveError):
    """A budget change past BUDGET_EDITS_PER_HOUR: refused (429), with when the next one is allowed."""

    field = "daily_budget_micros"

    def __init__(self, retry_after_s: int):
        self.retry_after_s = retry_after_s
        super().__init__(f"daily_budget_micros: a campaign's budget changes at most {BUDGET_EDITS_PER_HOUR} times "
                         f"an hour (BUDGET_EDITS_PER_HOUR); retry after {retry_after_s} s")


def check_budget_edit(recent_edit_ages_s: list[float]) -> None:
    """Allow one more budget change given the ages (seconds) of the campaign's changes in the last
    BUDGET_EDIT_WINDOW_S, or raise TooManyBudgetEdits with the wait until the oldest leaves the window."""
    recent = sorted((age for age in recent_edit_ages_s if age < BUDGET_EDIT_WINDOW_S), reverse=True)
    if len(recent) >= BUDGET_EDITS_PER_HOUR:
        oldest_that_must_leave = recent[len(recent) - BUDGET_EDITS_PER_HOUR]
        raise TooManyBudgetEdits(max(1, int(BUDGET_EDIT_WINDOW_S - oldest_that_must_leave) + 1))


class ReviewConflict(AdserveError):
    """A review decision that does not apply to the ad as it is now (it changed since, or is already decided)."""


def _same(name: str, a: Any, b: Any) -> bool:
    if name == "targeting":  # the same expression, whatever the order of its values
        try:
            return compile_targeting(_json(a)).clauses() == compile_targeting(_json(b)).clauses()
        except (InvalidTargeting, TypeError, ValueError):
            return False
    return a == b


def review_after_change(existing: Mapping[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    """The review columns an advertiser's change to an ad also writes: back to PENDING, the last decision
    cleared, when it changes what review approved (creative, landing URL or targeting); else nothing."""
    if all(name not in change or _same(name, change[name], existing.get(name)) for name in REVIEWED_FIELDS):
        return {}
    return {"review_status": "PENDING", "reviewed_by": None, "reviewed_at": None, "review_note": None}


def review_decision(ad: Mapping[str, Any], decision: str, reviewer: str, *, seen_version: int | None = None,
                    note: str | None = None) -> dict[str, Any]:
    """The columns an operator's decision on an ad writes (the store adds the time). Raises InvalidField for a
    bad decision or reviewer, ReviewConflict when the ad changed since the version the reviewer saw or the
    decision is already in force."""
    decision = _choice(decision, "decision", REVIEW_DECISIONS)
    if not isinstance(reviewer, str) or not reviewer.strip() or len(reviewer) > MAX_REVIEWER_LEN:
        raise InvalidField("reviewer", f"must name the operator (1 to {MAX_REVIEWER_LEN} characters)")
    if note is not None and (not isinstance(note, str) or len(note) > 2000):
        raise InvalidField("reason", "must be text of at most 2000 characters")
    if decision == "REJECTED" and not (note or "").strip():
        raise InvalidField("reason", "a rejection says why, so the advertiser knows what to change")
    if seen_version is not None and int(seen_version) != int(ad["version"]):
        raise ReviewConflict(f"ad {ad['ad_id']} changed since version {seen_version} (it is at version "
                             f"{ad['version']}): look at it again before deciding")
    if ad["review_status"] == decision:
        raise ReviewConflict(f"ad {ad['ad_id']} is already {decision}")
    return {"review_status": decision, "reviewed_by": reviewer.strip(), "review_note": (note or "").strip() or None}


def static_score(bid_type: str, bid_micros: int, quality_prior: float) -> float:
    """Expected value per impression in micros before any model: what orders the index's rows."""
    per_impression = {"CPM": bid_micros / 1000, "CPC": bid_micros * CTR_PRIOR,
                      "CPA": bid_micros * CTR_PRIOR * CVR_PRIOR}[bid_type]
    return per_impression + quality_prior


# ---------------------------------------------------------------- serving records from store rows

def _ms(value: Any) -> int | None:
    """A timestamp as Debezium or psycopg hands it (ISO string, datetime, epoch ms or µs) -> epoch ms."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, (int, float)):
        return int(value // 1000) if value > 10**14 else int(value)
    return int(datetime.fromisoformat(str(value)).astimezone(timezone.utc).timestamp() * 1000)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def campaign_serving_record(row: Mapping[str, Any], commit_ms: int) -> dict[str, Any]:
    """schemas/serving_campaign.avsc from a campaigns row."""
    return {
        "campaign_id": int(row["campaign_id"]), "advertiser_id": int(row["advertiser_id"]),
        "version": int(row["version"]), "event_time": int(commit_ms), "status": row["status"],
        "bid_type": row["bid_type"], "daily_budget_micros": int(row["daily_budget_micros"]),
        "currency": row["currency"], "timezone": row["timezone"],
        "flight_start": _ms(row.get("flight_start")), "flight_end": _ms(row.get("flight_end")),
        "dayparts": _json(row.get("dayparts")) or [],
        "cap_per_day": row.get("cap_per_day"), "cap_per_week": row.get("cap_per_week"),
        "cpa_target_micros": row.get("cpa_target_micros"),
    }


def ad_serving_record(row: Mapping[str, Any], commit_ms: int) -> dict[str, Any]:
    """schemas/serving_ad.avsc from an ads row: targeting compiled; removed unless active and approved; the
    campaign's exclusion category, which the row carries (0 in a change from before the row had it)."""
    targeting = compile_targeting(_json(row["targeting"]))
    return {
        "ad_id": int(row["ad_id"]), "campaign_id": int(row["campaign_id"]), "advertiser_id": int(row["advertiser_id"]),
        "version": int(row["version"]), "event_time": int(commit_ms),
        "removed": row["status"] != "ACTIVE" or row["review_status"] != "APPROVED",  # only approved ads serve
        "bid_type": row["bid_type"], "bid_micros": int(row["bid_micros"]),
        "quality_prior": float(row["quality_prior"]), "creative_ref": row["creative_ref"],
        "landing_url": row["landing_url"],
        "static_score": static_score(row["bid_type"], int(row["bid_micros"]), float(row["quality_prior"])),
        "targeting": targeting.clauses(),
        "exclusion_category": int(row.get("exclusion_category") or 0),
    }


# ---------------------------------------------------------------- Debezium change -> serving record

COMPILERS = {"ServingCampaign": campaign_serving_record, "ServingAd": ad_serving_record,
             "ServingReserve": reserve_serving_record}


def serving_key(record_type: str, record: Mapping[str, Any]) -> str:
    """The record key on its serving topic: the ad or campaign id, or placement|country for a reserve rule."""
    if record_type == "ServingReserve":
        return rule_key(record["placement"], record["country"])
    return str(record["ad_id"] if record_type == "ServingAd" else record["campaign_id"])


class BadChange(AdserveError):
    """A CDC record that cannot become a serving record (the job dead-letters it)."""


def compile_change(record_type: str, value: bytes | str | None) -> tuple[str, dict[str, Any]] | None:
    """A Debezium change (plain JSON envelope) of a campaign store row -> (record key, serving record) of
    `record_type` (a key of COMPILERS; schemas.cdc says which change topic carries which type).

    None for what produces nothing: a delete (rows are never deleted; a status change retires them) or a
    heartbeat. The record's event_time is the commit time (source.ts_ms); its version is the row's."""
    if record_type not in COMPILERS:
        raise BadChange(f"no serving record type {record_type!r}")
    if value is None:
        return None
    try:
        envelope = json.loads(value)
        after = envelope.get("after")
        commit_ms = int(envelope["source"]["ts_ms"])
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as e:
        raise BadChange(f"not a Debezium change envelope: {e}") from e
    if after is None:
        return None
    try:
        record = COMPILERS[record_type](after, commit_ms)
    except (KeyError, TypeError, ValueError, OverflowError, AdserveError) as e:  # Overflow: an infinite number
        raise BadChange(f"row cannot be compiled: {type(e).__name__}: {e}") from e
    return serving_key(record_type, record), record
