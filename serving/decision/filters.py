"""Filters on retrieved ads, vectorised over the candidate rows.

In order: campaign known and ACTIVE; in flight; in a daypart (advertiser's
time zone); budget OPEN, or METERED with a slice held (STOPPED never);
frequency caps against the user's record (missing record: nothing capped;
unavailable record: every capped campaign excluded); advertisers the user
hid; then the pacing coin, one flip per campaign per request, entering with
probability p (the p is returned, to be logged). Pure: now and the random
generator are parameters."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from core.frequency import day_number, is_capped
from core.schedule import week_slot
from serving.decision import filter_kernels as fk
from serving.decision.campaigns import ACTIVE, METERED, OPEN, CampaignTable
from serving.decision.index import BID_TYPE_CODE
from serving.decision.index import TargetingIndex


class _Unavailable:
    def __repr__(self) -> str:
        return "FREQUENCY_RECORD_UNAVAILABLE"


FREQUENCY_RECORD_UNAVAILABLE = _Unavailable()
_NO_IDS = np.zeros(0, dtype=np.int64)
_SCRATCH = threading.local()
_NO_FLAGS = np.zeros(0, dtype=np.bool_)


@dataclass
class FilterContext:
    now_ms: int
    frequency_record: Mapping[tuple[int, int], int] | None | _Unavailable = None  # None: the user has none
    hidden_advertisers: frozenset[int] = frozenset()


@dataclass
class Filtered:
    rows: np.ndarray  # surviving index rows
    campaign_rows: np.ndarray  # their campaign rows
    participation: np.ndarray  # p each survivor entered with
    dropped: dict[str, int] = field(default_factory=dict)  # why candidates left, for metrics
    eligible_campaigns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # before budget+coin
    slices_wanted: dict[int, int] = field(default_factory=dict)  # metered, no slice here: campaign -> top bid


def apply_filters(rows: np.ndarray, index: TargetingIndex, campaigns: CampaignTable, context: FilterContext,
                  rng: np.random.Generator) -> Filtered:
    """The candidates that pass every filter, with the p each entered with and why the others left. One compiled
    pass over the candidates for the checks (serving.decision.filter_kernels), one for the coin and the budget:
    the same result, counts and random stream as `reference_filters`, the array form of the same rules."""
    crow = campaigns.rows_of(index.campaign_id.data[rows])
    hot = campaigns.hot.array
    now = context.now_ms
    record = context.frequency_record
    if record is FREQUENCY_RECORD_UNAVAILABLE:
        mode, capped = fk.FREQUENCY_UNAVAILABLE, _NO_IDS
    elif record:
        mode, capped = fk.FREQUENCY_RECORD, np.sort(_capped_campaigns(record, campaigns, now))
    else:
        mode, capped = fk.FREQUENCY_NONE, _NO_IDS
    hidden = np.sort(np.fromiter(context.hidden_advertisers, dtype=np.int64)) if context.hidden_advertisers \
        else _NO_IDS
    daypart_ok = _in_daypart(crow, campaigns, now) if campaigns.dayparts else _NO_FLAGS
    keep, coin = np.empty(len(rows), dtype=np.bool_), np.empty(len(rows), dtype=np.int32)
    counts = np.zeros(fk.CHECKS, dtype=np.int64)
    campaign_rows, eligible = fk.static_checks(crow, hot, ACTIVE, (now, daypart_ok, mode, capped, hidden),
                                               _slot_scratch(len(hot)), (keep, coin, counts))
    uniforms = rng.random(len(campaign_rows))  # one coin per campaign per request
    served, short = np.empty(len(rows), dtype=np.bool_), np.empty(len(rows), dtype=np.bool_)
    refused_budget, lost_coin = fk.coin_and_budget(crow, keep, coin, uniforms, hot, (OPEN, METERED), served, short)
    dropped = {"unknown_campaign": int(counts[fk.UNKNOWN]), "status": int(counts[fk.STATUS]),
               "flight": int(counts[fk.FLIGHT])}
    if campaigns.dayparts:
        dropped["daypart"] = int(counts[fk.DAYPART])
    if mode == fk.FREQUENCY_UNAVAILABLE:
        dropped["frequency_unavailable"] = int(counts[fk.FREQUENCY])
    elif mode == fk.FREQUENCY_RECORD:
        dropped["frequency_cap"] = int(counts[fk.FREQUENCY])
    if context.hidden_advertisers:
        dropped["hidden_advertiser"] = int(counts[fk.HIDDEN])
    dropped["budget"], dropped["pacing"] = int(refused_budget), int(lost_coin)
    wanting = _slices_wanted(index, rows[short]) if short.any() else {}
    served_crow = crow[served]
    return Filtered(rows[served], served_crow, campaigns.participation.data[served_crow], dropped, eligible, wanting)


def _slot_scratch(campaign_rows: int) -> np.ndarray:
    """This thread's scratch of one int32 per campaign row, all -1 (static_checks leaves it so), grown with the
    campaign table: a request finds its campaigns' coin positions without a search or an allocation per row."""
    scratch = getattr(_SCRATCH, "slot_of", None)
    if scratch is None or len(scratch) < campaign_rows:
        scratch = np.full(max(campaign_rows, 1024), -1, dtype=np.int32)
        _SCRATCH.slot_of = scratch
    return scratch


def reference_filters(rows: np.ndarray, index: TargetingIndex, campaigns: CampaignTable, context: FilterContext,
                      rng: np.random.Generator) -> Filtered:
    """The filters as whole-array operations: the specification `apply_filters` must equal (rows, p, counts,
    eligible campaigns, slices wanted and the random numbers drawn), checked by the parity tests."""
    # One gather per candidate: its campaign's hot fields, copied into a compact block that every
    # check below reads (random reads into million-row tables are what costs here, not the checks).
    crow = campaigns.rows_of(index.campaign_id.data[rows])
    known = crow >= 0
    hot = campaigns.hot.gather(np.where(known, crow, 0))
    now = context.now_ms
    checks: list[tuple[str, np.ndarray]] = [
        ("unknown_campaign", known),
        ("status", hot["status"] == ACTIVE),
        ("flight", (hot["flight_start"] <= now) & (now < hot["flight_end"])),
    ]
    if campaigns.dayparts:
        checks.append(("daypart", _in_daypart(crow, campaigns, now)))
    state = hot["budget_state"]
    budget_ok = (state == OPEN) | ((state == METERED) & hot["slice_held"])
    capped = (hot["cap_per_day"] > 0) | (hot["cap_per_week"] > 0)
    record = context.frequency_record
    if record is FREQUENCY_RECORD_UNAVAILABLE:
        checks.append(("frequency_unavailable", ~capped))
    elif record:
        checks.append(("frequency_cap", ~np.isin(hot["campaign_id"], _capped_campaigns(record, campaigns, now))))
    if context.hidden_advertisers:
        hidden = np.fromiter(context.hidden_advertisers, dtype=np.int64)
        checks.append(("hidden_advertiser", ~np.isin(hot["advertiser_id"], hidden)))
    keep = np.ones(len(rows), dtype=bool)
    dropped: dict[str, int] = {}
    for reason, mask in checks:
        before = int(keep.sum())
        keep &= mask
        dropped[reason] = before - int(keep.sum())
    # What the budget job hears about: the campaigns this request could reach before budget and pacing ...
    eligible = np.unique(hot["campaign_id"][keep])
    rows, crow, participation = rows[keep], crow[keep], hot["participation"][keep]
    budget_ok, metered_short = budget_ok[keep], ((state == METERED) & ~hot["slice_held"])[keep]
    unique, first, inverse = np.unique(crow, return_index=True, return_inverse=True)
    entered = (rng.random(len(unique)) < participation[first])[inverse]  # one coin per campaign per request
    # ... and the metered ones that won their coin here but had no slice to serve from (with their top bid).
    short = entered & metered_short
    wanting = _slices_wanted(index, rows[short]) if short.any() else {}
    dropped["budget"] = int((~budget_ok).sum())
    mask = entered & budget_ok
    dropped["pacing"] = int((budget_ok & ~entered).sum())
    return Filtered(rows[mask], crow[mask], participation[mask], dropped, eligible, wanting)


def _in_daypart(crow: np.ndarray, campaigns: CampaignTable, now: int) -> np.ndarray:
    """False for candidates of a campaign with dayparts whose current week slot (in its time zone) is off."""
    ok = np.ones(len(crow), dtype=bool)
    for c in np.intersect1d(crow, np.fromiter(campaigns.dayparts, dtype=np.int64)):
        slot = week_slot(now, campaigns.zones[campaigns.timezone.data[c]])
        if not campaigns.dayparts[int(c)][slot]:
            ok &= crow != c
    return ok


def _capped_campaigns(record: Any, campaigns: CampaignTable, now: int) -> np.ndarray:
    """The campaigns at a frequency cap for this user. Walks the user's record (a few hundred fields at most),
    not the candidates (thousands)."""
    today = day_number(now)
    over = []
    for campaign_id in {c for c, _ in record}:
        row = campaigns.row_of(campaign_id)
        if row is not None and is_capped(record, campaign_id, today, int(campaigns.cap_per_day.data[row]),
                                         int(campaigns.cap_per_week.data[row])):
            over.append(campaign_id)
    return np.array(over, dtype=np.int64)


def _slices_wanted(index: TargetingIndex, short_rows: np.ndarray) -> dict[int, int]:
    """Per metered campaign that won its coin without a slice: its top per-event bid (CPM bids per impression)."""
    per_event = np.where(index.bid_type.data[short_rows] == BID_TYPE_CODE["CPM"],
                         index.bid_micros.data[short_rows] // 1000, index.bid_micros.data[short_rows])
    wanting: dict[int, int] = {}
    for campaign_id, bid in zip(index.campaign_id.data[short_rows].tolist(), per_event.tolist()):
        wanting[campaign_id] = max(bid, wanting.get(campaign_id, 0))
    return wanting
