"""Campaign schedule rules: flight dates and dayparting in the advertiser's time zone.

Dayparts are compiled to a week of 15-minute slots (672 bits): a slot is on
when any daypart window overlaps it at all. Pure: `now` is a parameter."""
from __future__ import annotations

from datetime import datetime, timezone
from functools import lru_cache
from typing import Iterable, Mapping
from zoneinfo import ZoneInfo

import numpy as np

from core.errors import InvalidArgument

SLOT_MINUTES = 15
SLOTS_PER_WEEK = 7 * 24 * 60 // SLOT_MINUTES  # 672


@lru_cache(maxsize=1024)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def week_slot(now_ms: int, tz: str) -> int:
    """The 15-minute slot of the local week (Monday 00:00 = 0) at this instant in this time zone."""
    local = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc).astimezone(_zone(tz))
    return (local.isoweekday() - 1) * (24 * 60 // SLOT_MINUTES) + (local.hour * 60 + local.minute) // SLOT_MINUTES


def daypart_mask(dayparts: Iterable[Mapping[str, int]]) -> np.ndarray | None:
    """Boolean mask of the week's slots in which the campaign may serve; None when it serves all week."""
    windows = list(dayparts)
    if not windows:
        return None
    mask = np.zeros(SLOTS_PER_WEEK, dtype=bool)
    for w in windows:
        day = int(w["day_of_week"]) - 1
        if not (0 <= day < 7 and 0 <= w["start_minute"] < w["end_minute"] <= 1440):
            raise InvalidArgument(f"invalid daypart {dict(w)}: day_of_week 1-7, 0 <= start_minute < end_minute <= 1440")
        first = day * 96 + int(w["start_minute"]) // SLOT_MINUTES
        last = day * 96 + (int(w["end_minute"]) - 1) // SLOT_MINUTES
        mask[first: last + 1] = True
    return mask


def in_flight(now_ms: int, start_ms: int | None, end_ms: int | None) -> bool:
    return (start_ms is None or now_ms >= start_ms) and (end_ms is None or now_ms < end_ms)
