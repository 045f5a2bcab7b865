"""From beacons to a bill: deduplication, invalid-traffic rules and billing windows. Pure.

Shared by the Flink job `click_aggregator` (which runs the per-event rules in
Flink SQL generated from the constants here, and calls `CampaignBill` on the
reduced 10 s windows) and the Beam pipeline `nightly_recount` (which runs every
rule here on the archived events), so the two can only disagree where the
streaming path lost or double-counted something.

Rules (docs/billing.md):

* Deduplication: one event per (impression id, event type), the first one
  (earliest event time, then smallest event id). Duplicates are remembered for
  `DEDUPE_HORIZON_MS` = the token's lifetime plus the allowed lateness: a beacon
  later than that no longer verifies at the tracker.
* Invalid traffic (tagged, never billed, its value credited back to the
  budget):
  - `bot_agent`: the user agent names a known automated client
    (`BOT_AGENT_MARKERS`, matched case-insensitively as substrings);
  - `too_soon`: a click less than `MIN_CLICK_DELAY_MS` after the ad was served
    (the token's served time, so also a click before it): no person sees, decides
    and clicks that fast;
  - `expired`: a click more than `TOKEN_LIFETIME_MS` after the ad was served: its
    token no longer verifies, so only a record made outside the tracker (a foreign
    producer, a replayed archive) can carry it, and it is never billed;
  - `user_burst` / `ip_burst`: a click that makes more than
    `MAX_CLICKS_PER_MINUTE` clicks from one user, or one IP address, in one
    event-time minute (counting that user's deduplicated clicks up to and
    including its millisecond, so ties are counted together and the rule does
    not depend on arrival order).
  The first rule that matches names the reason.
* Join: a billable, valid click is joined to its impression when the impression's
  beacon (deduplicated) arrived from `TOKEN_LIFETIME_MS` before the click to
  `ALLOWED_LATENESS_MS` after it (`joins`); billed totals count joined clicks,
  so clicks on impressions never reported rendered stand out.
* Billable: the event named by the token's billing type (an impression for
  impression billing, a click for click billing), valid, at the price signed
  into the token.
* Billing: per campaign and budget day (the campaign's time zone, by the
  event's time), in 10 s event-time windows, billed up to the window's limit
  (core.billing.DayBill); the rest is absorbed overspend. Totals are cumulative
  for the day, so a repeated record changes nothing for its readers.
* The limit (`billing_limit`): the highest budget in force at any instant from
  `PROMISE_MS` before the window's end to its end. Every event of the window was
  served inside that span (a token older than that no longer verifies), so an
  event is always billable up to the budget in force when it was served: a
  later cut stops new serving but does not erase what was served, and toggling
  a budget to 0 around window ends bills what was served. A cut takes full
  effect on billing `PROMISE_MS` after it; the limit never exceeds the highest
  budget of that span.

Times are int epoch milliseconds; money is int micros."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from core.billing import DayBill
from core.errors import InvalidArgument
from core.pacing import local_day
from core.tokens import TOKEN_LIFETIME_MS

ALLOWED_LATENESS_MS = 10 * 60_000  # an event this late (behind the job's clock) is still billed, on arrival
DEDUPE_HORIZON_MS = TOKEN_LIFETIME_MS + ALLOWED_LATENESS_MS
MIN_CLICK_DELAY_MS = 1_000
MAX_CLICKS_PER_MINUTE = 5
# the span before a window's end in which its events may have been served: a bill's limit is the highest budget
# in force in it (billing_limit)
PROMISE_MS = DEDUPE_HORIZON_MS
MAX_VERSIONS = 256  # budget versions a bill keeps at most; older ones go first (the API rate-limits budget edits)
MINUTE_MS = 60_000
WINDOW_MS = 10_000  # billed totals go out once per 10 s of event time
BOT_AGENT_MARKERS = ("bot", "crawler", "spider", "slurp", "headless", "phantomjs", "python-requests",
                     "python-urllib", "curl/", "wget/", "scrapy", "httpclient")
REASONS = ("bot_agent", "too_soon", "expired", "user_burst", "ip_burst")


def dedupe_key(event: Mapping[str, Any]) -> tuple[str, str]:
    return str(event["impression_id"]), str(event["event_type"])


def first_of(duplicates: Iterable[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The event that counts among copies of one (impression id, event type): earliest, then smallest id."""
    return min(duplicates, key=lambda e: (int(e["event_time"]), str(e["event_id"])))


def is_bot_agent(user_agent: str | None) -> bool:
    agent = (user_agent or "").lower()
    return any(marker in agent for marker in BOT_AGENT_MARKERS)


def minute_of(event_time_ms: int) -> int:
    return event_time_ms // MINUTE_MS * MINUTE_MS


def invalid_reason(event: Mapping[str, Any], user_clicks_in_minute: int = 0, ip_clicks_in_minute: int = 0
                   ) -> str | None:
    """Why this deduplicated event is invalid traffic, or None. The counts are that user's / IP's deduplicated
    clicks in the event's minute up to and including its millisecond (the event itself included)."""
    if is_bot_agent(event.get("user_agent")):
        return "bot_agent"
    if event["event_type"] != "CLICK":
        return None
    if int(event["event_time"]) - int(event["served_time"]) < MIN_CLICK_DELAY_MS:
        return "too_soon"
    if int(event["event_time"]) - int(event["served_time"]) > TOKEN_LIFETIME_MS:
        return "expired"
    if event.get("user_id") and user_clicks_in_minute > MAX_CLICKS_PER_MINUTE:
        return "user_burst"
    if event.get("ip_address") and ip_clicks_in_minute > MAX_CLICKS_PER_MINUTE:
        return "ip_burst"
    return None


def burst_counts(clicks: Iterable[Mapping[str, Any]], field_name: str) -> dict[str, int]:
    """For deduplicated clicks: event id -> clicks with the same `field_name` (user_id or ip_address) in the same
    minute at or before the click's millisecond. Clicks without the field count 0."""
    by_key: dict[tuple[str, int], list[int]] = {}
    rows = []
    for c in clicks:
        value = c.get(field_name)
        if not value:
            rows.append((c["event_id"], None, 0))
            continue
        t = int(c["event_time"])
        key = (str(value), minute_of(t))
        by_key.setdefault(key, []).append(t)
        rows.append((c["event_id"], key, t))
    for times in by_key.values():
        times.sort()
    from bisect import bisect_right

    return {event_id: (bisect_right(by_key[key], t) if key else 0) for event_id, key, t in rows}


def joins_sql(click_ms: str, impression_ms: str) -> str:
    """`joins` as a Flink SQL predicate over two epoch-millisecond columns (generated from the same bounds)."""
    return f"{impression_ms} BETWEEN {click_ms} - {TOKEN_LIFETIME_MS} AND {click_ms} + {ALLOWED_LATENESS_MS}"


def joins(click_time_ms: int, impression_time_ms: int) -> bool:
    """Whether an impression beacon at `impression_time_ms` joins a click at `click_time_ms`."""
    return click_time_ms - TOKEN_LIFETIME_MS <= impression_time_ms <= click_time_ms + ALLOWED_LATENESS_MS


def is_billable(event: Mapping[str, Any]) -> bool:
    return event["event_type"] == event["billing_type"]


def window_end(event_time_ms: int) -> int:
    """End (exclusive) of the 10 s billing window holding this instant."""
    return (event_time_ms // WINDOW_MS + 1) * WINDOW_MS


def billing_limit(versions: Iterable[tuple[int, int]], end_ms: int) -> int:
    """The most a campaign's day may be billed through a window ending at `end_ms`: the highest budget in force at
    any instant of [end_ms - PROMISE_MS, end_ms], from (in force from ms, budget micros) versions sorted by time;
    before the first version, the first one is in force."""
    start = end_ms - PROMISE_MS
    ordered = list(versions)
    if not ordered:
        raise InvalidArgument("a billing limit needs at least one campaign version")
    at_start = [budget for since, budget in ordered if since <= start] or [ordered[0][1]]
    later = [budget for since, budget in ordered if start < since <= end_ms]
    return max([at_start[-1], *later])


def kept_versions(versions: Iterable[tuple[int, int, str]], billed_through_ms: int
                  ) -> list[tuple[int, int, str]]:
    """A bill's (in force from, budget, time zone) versions, sorted by time, with what no later window can need
    dropped: a version equal to the one before it, and versions superseded more than two promise spans before
    the latest window billed (a late window is at most the allowed lateness behind it). At most MAX_VERSIONS."""
    ordered = sorted(versions, key=lambda v: v[0])  # stable: of two versions at one instant, the later one wins
    distinct: list[tuple[int, int, str]] = []
    for version in ordered:
        if distinct and distinct[-1][0] == version[0]:
            distinct[-1] = version
        elif not distinct or distinct[-1][1:] != version[1:]:
            distinct.append(version)
    horizon = billed_through_ms - 2 * PROMISE_MS
    first_needed = max([i for i, v in enumerate(distinct) if v[0] <= horizon], default=0)
    return distinct[first_needed:][-MAX_VERSIONS:]


@dataclass
class WindowTotals:
    """One campaign's deduplicated events of one 10 s window (what the job's SQL sums)."""

    end_ms: int
    billable_micros: int = 0  # valid billable events at their signed prices
    impressions: int = 0  # valid billable impressions
    clicks: int = 0  # valid billable clicks
    invalid_micros: int = 0  # billable events tagged invalid: credited, not billed
    invalid_events: int = 0
    joined_clicks: int = 0  # valid billable clicks joined to their impression

    def add(self, event: Mapping[str, Any], reason: str | None, joined: bool = False) -> None:
        if not is_billable(event):
            if reason:
                self.invalid_events += 1
            return
        price = int(event["price_micros"])
        if reason:
            self.invalid_micros += price
            self.invalid_events += 1
        else:
            self.billable_micros += price
            self.impressions += event["event_type"] == "IMPRESSION"
            self.clicks += event["event_type"] == "CLICK"
            self.joined_clicks += joined and event["event_type"] == "CLICK"


@dataclass
class CampaignBill:
    """One campaign's bill for its current budget day, fed windows in event-time order."""

    campaign_id: int
    timezone: str = "UTC"
    budget_micros: int | None = None  # None until the campaign's record is seen
    budget_day: str = ""
    bill: DayBill = field(default_factory=lambda: DayBill(0))
    impressions: int = 0
    clicks: int = 0
    invalid_micros: int = 0
    joined_clicks: int = 0
    pending: list[WindowTotals] = field(default_factory=list)  # windows before the first campaign record
    last_window_ms: int = 0
    # (in force from, ms; budget; time zone) of the versions received, by event time (the last MAX_VERSIONS)
    versions: list[tuple[int, int, str]] = field(default_factory=list)

    def on_campaign(self, record: Mapping[str, Any]) -> None:
        """A campaign version, in force from its event time. Every window is billed up to `billing_limit` of the
        versions received, whenever the window arrives (windows close at the watermark; a campaign record comes
        as it is written, often ahead of windows that ended before it). The first version takes the windows that
        waited for a budget. Only budget and time-zone changes are kept (`kept_versions`)."""
        self.versions = kept_versions(
            self.versions + [(int(record.get("event_time") or 0), int(record["daily_budget_micros"]),
                              str(record["timezone"]))], self.last_window_ms)
        self._apply_version(max(self.last_window_ms, self.versions[-1][0]))
        pending, self.pending = self.pending, []
        for window in pending:
            self.add(window)

    def _apply_version(self, at_ms: int) -> None:
        """The budget limit and time zone of a window ending at `at_ms`."""
        in_force = [v for v in self.versions if v[0] <= at_ms] or self.versions[:1]
        self.timezone = in_force[-1][2]
        self.budget_micros = billing_limit([(v[0], v[1]) for v in self.versions], at_ms)
        self.bill.budget_micros = self.budget_micros

    def add(self, window: WindowTotals) -> None:
        if self.budget_micros is None:
            self.pending.append(window)
            return
        if self.versions:
            self._apply_version(window.end_ms)
        day, _ = local_day(window.end_ms - 1, self.timezone)
        if day != self.budget_day:
            if self.budget_day and day < self.budget_day:
                day = self.budget_day  # a late window of yesterday: billed today rather than lost
            else:
                self.budget_day, self.bill = day, DayBill(self.budget_micros)
                self.impressions = self.clicks = self.invalid_micros = self.joined_clicks = 0
        self.bill.charge(window.billable_micros)
        self.impressions += window.impressions
        self.clicks += window.clicks
        self.invalid_micros += window.invalid_micros
        self.joined_clicks += window.joined_clicks
        self.last_window_ms = max(self.last_window_ms, window.end_ms)

    def record(self, event_time_ms: int) -> dict[str, Any] | None:
        """The BilledSpend record (schemas/billed_spend.avsc) for the day so far; None before any bill. Stamped
        no earlier than the latest window billed: totals that grew after a later window was reported (a partial
        window or a late event arriving behind it) must read as the newest (`progress_key`)."""
        if not self.budget_day:
            return None
        return {"campaign_id": self.campaign_id, "event_time": max(event_time_ms, self.last_window_ms),
                "budget_day": self.budget_day,
                "billed_spend_micros": self.bill.billed_micros, "billed_impressions": self.impressions,
                "billed_clicks": self.clicks, "absorbed_overspend_micros": self.bill.absorbed_micros,
                "invalid_credit_micros": self.invalid_micros, "joined_clicks": self.joined_clicks}


def added_money(before: tuple[str, int, int], bill: CampaignBill) -> tuple[int, int]:
    """(billed, absorbed) micros the bill gained since `before` = its (budget day, billed, absorbed) then: a new
    budget day starts from zero."""
    day, billed, absorbed = before
    if bill.budget_day != day:
        billed = absorbed = 0
    return max(0, bill.bill.billed_micros - billed), max(0, bill.bill.absorbed_micros - absorbed)


def progress_key(record: Mapping[str, Any]) -> tuple[int, int, int]:
    """Orders one campaign-day's BilledSpend records from oldest to newest: by instant, and between records of
    the same instant (a late event billed into a window already reported) by their totals, which only grow."""
    return (int(record["event_time"]),
            int(record["billed_spend_micros"]) + int(record["absorbed_overspend_micros"])
            + int(record["invalid_credit_micros"]),
            int(record["billed_impressions"]) + int(record["billed_clicks"]) + int(record.get("joined_clicks", 0)))


def bot_agent_sql(column: str, lowered: bool = False) -> str:
    """The bot-agent rule as a Flink SQL predicate over `column` (generated here so the rule exists once).
    `lowered`: the column already holds the agent lower-cased, NULL as '' (read once, not once per marker)."""
    for marker in BOT_AGENT_MARKERS:
        if "'" in marker or "%" in marker or "_" in marker:
            raise InvalidArgument(f"a bot marker must be plain text for SQL LIKE: {marker!r}")
    agent = column if lowered else f"LOWER(COALESCE({column}, ''))"
    return "(" + " OR ".join(f"{agent} LIKE '%{m}%'" for m in BOT_AGENT_MARKERS) + ")"


def invalid_reason_sql(event: str = "", lowered_agent: str | None = None) -> str:
    """`invalid_reason` as a Flink SQL CASE over the decoded event's columns (`event` prefix, e.g. "r.") and the
    burst counts `user_n` / `ip_n`: generated here from the same constants, so the rule exists once.
    `lowered_agent`: a column holding the user agent lower-cased (NULL as ''), to test the bot markers on."""
    e = event
    bot = bot_agent_sql(lowered_agent, lowered=True) if lowered_agent else bot_agent_sql(e + "user_agent")
    return (f"CASE WHEN {bot} THEN 'bot_agent' "
            f"WHEN {e}event_type <> 'CLICK' THEN CAST(NULL AS STRING) "
            f"WHEN {e}event_time - {e}served_time < {MIN_CLICK_DELAY_MS} THEN 'too_soon' "
            f"WHEN {e}event_time - {e}served_time > {TOKEN_LIFETIME_MS} THEN 'expired' "
            f"WHEN COALESCE({e}user_id, '') <> '' AND user_n > {MAX_CLICKS_PER_MINUTE} THEN 'user_burst' "
            f"WHEN COALESCE({e}ip_address, '') <> '' AND ip_n > {MAX_CLICKS_PER_MINUTE} THEN 'ip_burst' "
            "ELSE CAST(NULL AS STRING) END")


def version_at(history: list[Mapping[str, Any]], at_ms: int) -> Mapping[str, Any] | None:
    """The campaign version in force at `at_ms` from versions sorted by event time (the first one before it)."""
    in_force = [c for c in history if int(c["event_time"]) <= at_ms] or history[:1]
    return in_force[-1] if in_force else None


def bill_windows(campaign_id: int, windows: Iterable[WindowTotals], versions: Iterable[Mapping[str, Any]]
                 ) -> dict[str, dict[str, Any]]:
    """One campaign's day totals (budget day -> BilledSpend) from its windows, billed in event-time order as the
    streaming bill does: each window after every version in force by its end (and the first version, for windows
    before it), up to `billing_limit`."""
    history = sorted(versions, key=lambda c: int(c["event_time"]))
    bill = CampaignBill(campaign_id)
    out: dict[str, dict[str, Any]] = {}
    fed = 0
    for totals in sorted(windows, key=lambda w: w.end_ms):
        while fed < len(history) and (fed == 0 or int(history[fed]["event_time"]) <= totals.end_ms):
            bill.on_campaign(history[fed])
            fed += 1
        bill.add(totals)
        record = bill.record(totals.end_ms)
        if record is not None:
            out[record["budget_day"]] = record
    return out


def tag(event: Mapping[str, Any], user_clicks_in_minute: int = 0, ip_clicks_in_minute: int = 0,
        impression_time_ms: int | None = None) -> tuple[tuple[int, int], Mapping[str, Any], str | None, bool]:
    """((campaign, window end), event, invalid reason, joined) for one deduplicated event; `impression_time_ms`:
    when its impression's beacon arrived, if it did (clicks only)."""
    reason = invalid_reason(event, user_clicks_in_minute, ip_clicks_in_minute)
    joined = event["event_type"] == "CLICK" and impression_time_ms is not None and \
        joins(int(event["event_time"]), impression_time_ms)
    return (int(event["campaign_id"]), window_end(int(event["event_time"]))), event, reason, joined


def impression_times(unique: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """impression id -> when its (deduplicated) impression beacon arrived."""
    return {str(e["impression_id"]): int(e["event_time"]) for e in unique if e["event_type"] == "IMPRESSION"}


def totals_of(end_ms: int, tagged: Iterable[tuple[Mapping[str, Any], str | None, bool]]) -> WindowTotals:
    totals = WindowTotals(end_ms)
    for event, reason, joined in tagged:
        totals.add(event, reason, joined)
    return totals


def recount(events: Iterable[Mapping[str, Any]], campaigns: Iterable[Mapping[str, Any]]
            ) -> dict[tuple[int, str], dict[str, Any]]:
    """The whole bill from raw events in one process, every rule applied in batch: (campaign, budget day) ->
    BilledSpend totals. `campaigns`: campaign versions with their `event_time`. The Beam pipeline
    `nightly_recount` runs the same steps (first_of, burst_counts, impression_times, tag, totals_of,
    bill_windows) spread out."""
    firsts: dict[tuple[str, str], Mapping[str, Any]] = {}
    for e in events:
        key = dedupe_key(e)
        firsts[key] = first_of([firsts[key], e]) if key in firsts else e
    unique = list(firsts.values())
    clicks = [e for e in unique if e["event_type"] == "CLICK"]
    by_user, by_ip = burst_counts(clicks, "user_id"), burst_counts(clicks, "ip_address")
    seen = impression_times(unique)
    grouped: dict[tuple[int, int], list[tuple[Mapping[str, Any], str | None, bool]]] = {}
    for e in unique:
        key, event, reason, joined = tag(e, by_user.get(e["event_id"], 0), by_ip.get(e["event_id"], 0),
                                         seen.get(str(e["impression_id"])))
        grouped.setdefault(key, []).append((event, reason, joined))
    windows: dict[int, list[WindowTotals]] = {}
    for (campaign_id, end), tagged in grouped.items():
        windows.setdefault(campaign_id, []).append(totals_of(end, tagged))
    versions: dict[int, list[Mapping[str, Any]]] = {}
    for c in campaigns:
        versions.setdefault(int(c["campaign_id"]), []).append(c)
    out: dict[tuple[int, str], dict[str, Any]] = {}
    for campaign_id, campaign_windows in windows.items():
        for day, record in bill_windows(campaign_id, campaign_windows, versions.get(campaign_id, [])).items():
            out[(campaign_id, day)] = record
    return out


# ------------------------------------------------------------------ the streaming bill's inputs, one at a time


@dataclass(frozen=True)
class WindowPart:
    """A campaign's reduced 10 s window (or one of its two parts: FirstSeen's impressions, SQL's clicks)."""

    totals: WindowTotals


@dataclass(frozen=True)
class JoinedClicks:
    """Clicks of the campaign at `event_ms` that found their impression after their window was summed."""

    event_ms: int
    clicks: int


@dataclass(frozen=True)
class CampaignVersion:
    """A ServingCampaign record: its budget and time zone, in force from its event time."""

    record: Mapping[str, Any]


@dataclass(frozen=True)
class LateEvent:
    """A deduplicated event behind the job's clock (or of another contract version), billed on arrival. `reason`
    and `joined` as SQL decided them; `decided` False: SQL did not, and the rules that need no counts apply."""

    event: Mapping[str, Any]
    reason: str | None = None
    joined: bool = False
    decided: bool = False


BillInput = WindowPart | JoinedClicks | CampaignVersion | LateEvent


def late_event(fields: Mapping[str, Any]) -> LateEvent:
    """A late event as the job's SQL hands it over: its fields, with `reason` (and `joined`) when SQL decided."""
    event = {k: v for k, v in fields.items() if k not in ("reason", "joined")}
    return LateEvent(event, fields.get("reason"), bool(fields.get("joined", False)), "reason" in fields)


def late_totals(late: LateEvent) -> WindowTotals:
    """The late event alone in its event time's window, tagged as SQL decided, else by invalid_reason."""
    reason = late.reason if late.decided else invalid_reason(late.event)
    totals = WindowTotals(window_end(int(late.event["event_time"])))
    totals.add(late.event, reason, late.joined)
    return totals


def bill_step(bill: CampaignBill, event: BillInput) -> tuple[CampaignBill, dict[str, Any] | None]:
    """One input into the campaign's bill: (the bill, the BilledSpend record to emit now or None).

    A joined click of a window not reported yet only waits for that window's record; a campaign version's
    totals are stamped at the latest window billed (a window ending before its time may still come, and must
    read as newer: progress_key)."""
    emit_at = 0
    if isinstance(event, WindowPart):
        bill.add(event.totals)
        emit_at = event.totals.end_ms
    elif isinstance(event, JoinedClicks):
        joined = WindowTotals(window_end(event.event_ms), joined_clicks=event.clicks)
        reported = bill.last_window_ms >= joined.end_ms
        bill.add(joined)
        if not reported:
            return bill, None
        emit_at = joined.end_ms
    elif isinstance(event, CampaignVersion):
        bill.on_campaign(event.record)
    else:
        totals = late_totals(event)
        bill.add(totals)
        emit_at = totals.end_ms
    return bill, bill.record(emit_at)
