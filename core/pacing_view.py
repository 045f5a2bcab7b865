"""What the pacing dashboard shows of a campaign: its row (state, spend against target, forecast, pace, why it
under-delivers), the list query over rows (filter, sort, page) and its minute series. Pure.

A row is a function of two records only: the campaign's serving record (serving.campaigns) and its latest
budget state (budget.state). It reads no clock and no store, so a server keeps one row per campaign, rebuilt
when either record changes, and answers a list query from memory. The rules (forecast, pace band, reasons)
are explained in docs/dashboard.md; this module must never do I/O."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from operator import attrgetter
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from core.errors import InvalidArgument
from core.pacing import p_moves_by_hour

STATES = ("OPEN", "METERED", "STOPPED")
PACES = ("under", "on", "over")
ORDERS = ("asc", "desc")
# Spend within 10 % of the target by now is on pace: the controller corrects only a share of each minute's
# error, so a campaign that follows its curve wanders a few per cent around it; 90 % is also where the budget
# job starts naming a delivery limit (docs/pacing.md).
PACE_BAND = (0.9, 1.1)
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


class InvalidQuery(InvalidArgument):
    """A list query parameter outside its domain; `field` names the parameter (the API answers 400)."""

    def __init__(self, field: str, problem: str):
        self.field = field
        super().__init__(f"{field}: {problem}")


@dataclass(frozen=True)
class CampaignInfo:
    """What the dashboard keeps of a serving.campaigns record."""

    campaign_id: int
    advertiser_id: int
    status: str  # ACTIVE, PAUSED, ENDED, REMOVED
    daily_budget_micros: int
    timezone: str


@dataclass(frozen=True)
class BudgetWord:
    """What the dashboard keeps of a budget.state record (schemas/budget_state.avsc)."""

    campaign_id: int
    event_time_ms: int
    budget_day: str
    state: str  # OPEN, METERED, STOPPED
    participation_probability: float
    daily_budget_micros: int
    billed_spend_micros: int
    committed_spend_micros: int
    remaining_micros: int
    target_spend_micros: int
    delivery_limit: str | None  # BID, AUDIENCE or None


class MinutePoint(Protocol):
    """One minute of a pacing day (streams.pacing_store.PacingPoint has this shape)."""

    minute: int
    target_micros: int
    committed_micros: int
    participation_probability: float
    state: str


@dataclass(frozen=True)
class CampaignRow:
    """One campaign as the dashboard lists it; every amount in micros, *_ms epoch milliseconds UTC.

    state is None (and the amounts 0) while the budget job has not stepped the campaign; advertiser_id and
    status are None while its serving record is unknown."""

    campaign_id: int
    advertiser_id: int | None
    status: str | None
    timezone: str | None
    budget_day: str | None
    state: str | None
    participation_probability: float | None
    daily_budget_micros: int
    target_micros: int
    committed_micros: int
    billed_micros: int
    remaining_micros: int
    forecast_micros: int
    pace_ratio: float | None
    pace: str
    under_delivery: str | None
    delivery_limit: str | None
    updated_ms: int | None

    def as_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in COLUMNS}


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(CampaignRow))


@dataclass(frozen=True)
class ListQuery:
    """A list request: filters (None: any), the sort column and order, and the page."""

    advertiser_id: int | None = None
    state: str | None = None
    pace: str | None = None
    sort: str = "campaign_id"
    order: str = "asc"
    limit: int = DEFAULT_LIMIT
    offset: int = 0


@dataclass(frozen=True)
class MinuteSeries:
    """A campaign's day by local minute: what the curve asked for by then, committed spend and p."""

    campaign_id: int
    day: str
    minutes: list[int]
    target_micros: list[int]
    committed_micros: list[int]
    participation_probability: list[float]
    states: list[str]

    def as_json(self) -> dict[str, Any]:
        return {"campaign_id": self.campaign_id, "day": self.day, "minutes": self.minutes,
                "target": self.target_micros, "committed": self.committed_micros,
                "p": self.participation_probability, "states": self.states,
                "p_moves_by_hour": p_moves_by_hour(self.minutes, self.participation_probability)}


def pace_ratio(committed_micros: int, target_micros: int) -> float | None:
    """Committed spend over what the curve asked for by now; None before the curve asks for anything."""
    if target_micros <= 0:
        return None
    return committed_micros / target_micros


def pace_of(ratio: float | None, committed_micros: int) -> str:
    """under / on / over the target by PACE_BAND; with no target yet, on until anything is spent."""
    if ratio is None:
        return "on" if committed_micros <= 0 else "over"
    low, high = PACE_BAND
    return "under" if ratio < low else "over" if ratio > high else "on"


def forecast_micros(status: str | None, word: BudgetWord) -> int:
    """End-of-day spend if nothing changes: spend so far plus the curve's remaining share of the budget, scaled
    by the delivery ratio so far (committed / target), never above the budget.

    The target curve is shaped like the campaign's traffic, so (budget - target now) is what the rest of the day
    would bring at pace 1; a campaign at 60 % of its curve has been getting 60 % of what its traffic shape asks
    and, with the same bid, audience and p, gets about that share of the rest. A stopped or not-active campaign
    spends nothing more. Before the curve asks for anything the ratio is taken as 1."""
    committed = word.committed_spend_micros
    budget = word.daily_budget_micros
    if word.state == "STOPPED" or (status is not None and status != "ACTIVE"):
        return committed
    ratio = pace_ratio(committed, word.target_spend_micros)
    remaining_curve = max(0, budget - word.target_spend_micros)
    forecast = committed + round(remaining_curve * (1.0 if ratio is None else ratio))
    return max(committed, min(budget, forecast))


def under_delivery(status: str | None, word: BudgetWord | None) -> str | None:
    """Why the campaign does not deliver its curve, the first that holds: "paused" (the advertiser paused it),
    "ended" (ended or removed), "budget" (STOPPED, or nothing remains), "bid" / "audience" (the budget job's
    delivery limit at p = 1), else None."""
    if status == "PAUSED":
        return "paused"
    if status in ("ENDED", "REMOVED"):
        return "ended"
    if word is None:
        return None
    if word.state == "STOPPED" or word.remaining_micros <= 0:
        return "budget"
    if word.delivery_limit == "BID":
        return "bid"
    if word.delivery_limit == "AUDIENCE":
        return "audience"
    return None


def campaign_row(campaign_id: int, info: CampaignInfo | None, word: BudgetWord | None) -> CampaignRow:
    """The dashboard's row of one campaign from its serving record and latest budget state (either may be
    missing while its topic has not delivered it)."""
    status = info.status if info else None
    if word is None:
        budget = info.daily_budget_micros if info else 0
        return CampaignRow(campaign_id, info.advertiser_id if info else None, status,
                           info.timezone if info else None, None, None, None, budget, 0, 0, 0, budget, 0, None, "on",
                           under_delivery(status, None), None, None)
    ratio = pace_ratio(word.committed_spend_micros, word.target_spend_micros)
    return CampaignRow(
        campaign_id, info.advertiser_id if info else None, status, info.timezone if info else None,
        word.budget_day, word.state, word.participation_probability, word.daily_budget_micros,
        word.target_spend_micros, word.committed_spend_micros, word.billed_spend_micros, word.remaining_micros,
        forecast_micros(status, word), ratio, pace_of(ratio, word.committed_spend_micros),
        under_delivery(status, word), word.delivery_limit, word.event_time_ms)


def campaign_info(record: Mapping[str, Any]) -> CampaignInfo:
    """A serving.campaigns record (schemas/serving_campaign.avsc) as the dashboard keeps it."""
    return CampaignInfo(int(record["campaign_id"]), int(record["advertiser_id"]), str(record["status"]),
                        int(record["daily_budget_micros"]), str(record["timezone"]))


def budget_word(record: Mapping[str, Any]) -> BudgetWord:
    """A budget.state record (schemas/budget_state.avsc) as the dashboard keeps it."""
    return BudgetWord(int(record["campaign_id"]), int(record["event_time"]), str(record["budget_day"]),
                      str(record["state"]), float(record["participation_probability"]),
                      int(record["daily_budget_micros"]), int(record["billed_spend_micros"]),
                      int(record["committed_spend_micros"]), int(record["remaining_micros"]),
                      int(record["target_spend_micros"]), record.get("delivery_limit"))


def _integer(params: Mapping[str, str], name: str, default: int | None, low: int, high: int | None) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidQuery(name, f"must be an integer, got {raw!r}") from None
    if value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise InvalidQuery(name, f"must be in {bounds}, got {value}")
    return value


def _choice(params: Mapping[str, str], name: str, choices: Sequence[str], default: str | None,
            fold: Callable[[str], str] = str) -> str | None:
    """The parameter, case folded by `fold`, when it is one of `choices`."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    value = fold(raw)
    if value not in choices:
        raise InvalidQuery(name, f"must be one of {', '.join(choices)}, got {raw!r}")
    return value


def parse_query(params: Mapping[str, str]) -> ListQuery:
    """The list query of the request parameters advertiser_id, state, pace, sort, order, limit, offset (all
    optional); InvalidQuery naming the first parameter that is out of its domain, or one that is unknown."""
    known = {"advertiser_id", "state", "pace", "sort", "order", "limit", "offset"}
    for name in params:
        if name not in known:
            raise InvalidQuery(name, f"unknown parameter; known: {', '.join(sorted(known))}")
    return ListQuery(
        advertiser_id=_integer(params, "advertiser_id", None, 0, None),
        state=_choice(params, "state", STATES, None, str.upper),
        pace=_choice(params, "pace", PACES, None, str.lower),
        sort=_choice(params, "sort", COLUMNS, "campaign_id") or "campaign_id",
        order=_choice(params, "order", ORDERS, "asc", str.lower) or "asc",
        limit=_integer(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT) or DEFAULT_LIMIT,
        offset=_integer(params, "offset", 0, 0, None) or 0)


def matches(row: CampaignRow, query: ListQuery) -> bool:
    return ((query.advertiser_id is None or row.advertiser_id == query.advertiser_id)
            and (query.state is None or row.state == query.state)
            and (query.pace is None or row.pace == query.pace))


def select(rows: Iterable[CampaignRow], query: ListQuery) -> tuple[list[CampaignRow], int]:
    """(the requested page, how many rows match): filtered, sorted by the query's column (rows without a value
    in it last, whatever the order; ties by campaign id), then offset and limit."""
    filtered = query.advertiser_id is not None or query.state is not None or query.pace is not None
    found = [row for row in rows if matches(row, query)] if filtered else list(rows)
    value = attrgetter(query.sort)
    present, missing = [], []
    for row in found:
        (missing if value(row) is None else present).append(row)
    by_id = attrgetter("campaign_id")
    present.sort(key=by_id)
    if query.sort != "campaign_id" or query.order == "desc":
        present.sort(key=value, reverse=query.order == "desc")  # stable: ties stay in campaign id order
    missing.sort(key=by_id)
    ordered = present + missing
    return ordered[query.offset: query.offset + query.limit], len(found)


def minute_series(campaign_id: int, day: str, points: Iterable[MinutePoint]) -> MinuteSeries:
    """The day's minute points in minute order, as parallel lists (what the page plots)."""
    ordered = sorted(points, key=lambda point: point.minute)
    return MinuteSeries(campaign_id, day, [p.minute for p in ordered], [p.target_micros for p in ordered],
                        [p.committed_micros for p in ordered], [p.participation_probability for p in ordered],
                        [p.state for p in ordered])


@dataclass(frozen=True)
class Viewer:
    """Who reads the pacing view: an operator sees every campaign; an advertiser only its own."""

    role: str  # "operator" or "advertiser"
    advertiser_id: int | None = None

    def scoped(self, query: "ListQuery") -> "ListQuery":
        """The list query this viewer may run: an advertiser's is pinned to its own campaigns (InvalidQuery
        naming advertiser_id when it asks for another advertiser's)."""
        if self.role == "operator":
            return query
        if query.advertiser_id is not None and query.advertiser_id != self.advertiser_id:
            raise InvalidQuery("advertiser_id", "an advertiser's key reads only its own campaigns")
        return replace(query, advertiser_id=self.advertiser_id)

    def may_see(self, row: "CampaignRow") -> bool:
        return self.role == "operator" or (row.advertiser_id is not None and row.advertiser_id == self.advertiser_id)


OPERATOR = Viewer("operator")
