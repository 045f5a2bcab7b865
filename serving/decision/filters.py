"""Filters on retrieved ads, vectorised over the candidate rows.

In order: campaign known and ACTIVE; in flight; in a daypart (advertiser's
time zone); budget OPEN, or METERED with a slice held (STOPPED never);
frequency caps against the user's record (missing record: nothing capped;
unavailable record: every capped campaign excluded); advertisers the user
hid; then the pacing coin, one flip per campaign per request, entering with
probability p (the p is returned, to be logged). Pure: now and the random
generator are parameters."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from core.frequency import day_number, is_capped
from core.schedule import week_slot
from serving.decision.campaigns import ACTIVE, METERED, OPEN, CampaignTable
from serving.decision.index import TargetingIndex


class _Unavailable:
    def __repr__(self) -> str:
        return "FREQUENCY_RECORD_UNAVAILABLE"


FREQUENCY_RECORD_UNAVAILABLE = _Unavailable()


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


def apply_filters(rows: np.ndarray, index: TargetingIndex, campaigns: CampaignTable, context: FilterContext,
                  rng: np.random.Generator) -> Filtered:
    dropped: dict[str, int] = {}

    def keep(mask: np.ndarray, reason: str) -> None:
        nonlocal rows, crow
        dropped[reason] = int(len(mask) - mask.sum())
        rows, crow = rows[mask], crow[mask]

    crow = campaigns.rows_of(index.campaign_id.data[rows])
    keep(crow >= 0, "unknown_campaign")
    keep(campaigns.status.data[crow] == ACTIVE, "status")
    now = context.now_ms
    keep((campaigns.flight_start.data[crow] <= now) & (now < campaigns.flight_end.data[crow]), "flight")
    if campaigns.dayparts:
        ok = np.ones(len(rows), dtype=bool)
        for c in np.intersect1d(crow, np.fromiter(campaigns.dayparts, dtype=np.int64)):
            slot = week_slot(now, campaigns.zones[campaigns.timezone.data[c]])
            if not campaigns.dayparts[int(c)][slot]:
                ok &= crow != c
        keep(ok, "daypart")
    state = campaigns.budget_state.data[crow]
    keep((state == OPEN) | ((state == METERED) & campaigns.slice_held.data[crow]), "budget")
    capped = (campaigns.cap_per_day.data[crow] > 0) | (campaigns.cap_per_week.data[crow] > 0)
    record = context.frequency_record
    if record is FREQUENCY_RECORD_UNAVAILABLE:
        keep(~capped, "frequency_unavailable")
    elif record:
        today = day_number(now)
        over = np.zeros(len(rows), dtype=bool)
        for c in np.unique(crow[capped]):
            cid = int(campaigns.campaign_id.data[c])
            if is_capped(record, cid, today, int(campaigns.cap_per_day.data[c]),  # type: ignore[arg-type]
                         int(campaigns.cap_per_week.data[c])):
                over |= crow == c
        keep(~over, "frequency_cap")
    if context.hidden_advertisers:
        hidden = np.fromiter(context.hidden_advertisers, dtype=np.int64)
        keep(~np.isin(campaigns.advertiser_id.data[crow], hidden), "hidden_advertiser")
    unique, inverse = np.unique(crow, return_inverse=True)
    p = campaigns.participation.data[unique]
    entered = rng.random(len(unique)) < p  # one coin per campaign per request
    participation = p[inverse]
    mask = entered[inverse]
    dropped["pacing"] = int(len(mask) - mask.sum())
    return Filtered(rows[mask], crow[mask], participation[mask], dropped)
