"""Campaign state the filters read: status, schedule, caps, budget state and pacing, in numpy columns.

Fed by serving.campaigns records (versioned: an older record never overwrites
a newer one) and by the budget service's replies (budget state, p, slices
held). Pure: no I/O."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from core.schedule import daypart_mask
from serving.decision.columns import Column, IdMap, RowTable

STATUSES = ("ACTIVE", "PAUSED", "ENDED", "REMOVED")
ACTIVE = 0
OPEN, METERED, STOPPED = 0, 1, 2
BUDGET_STATES = ("OPEN", "METERED", "STOPPED")
NO_END = np.iinfo(np.int64).max


@dataclass
class CampaignRecord:
    campaign_id: int
    advertiser_id: int
    version: int
    status: str = "ACTIVE"
    timezone: str = "UTC"
    flight_start: int | None = None
    flight_end: int | None = None
    dayparts: Sequence[Mapping[str, int]] = ()
    cap_per_day: int | None = None
    cap_per_week: int | None = None
    daily_budget_micros: int = 0


class CampaignTable:
    """Campaign state in rows; the fields the filters read are stored row by row (see RowTable)."""

    def __init__(self, capacity: int = 1024):
        self.ids = IdMap()
        self.size = 0
        self.version = Column(np.int64, capacity=capacity, fill=-1)
        # CPA campaigns: the budget job's bid multiplier (1.0 for the rest); read for the ~200 candidates an
        # auction sees, so it stays out of the hot rows every filtered candidate copies
        self.bid_multiplier = Column(np.float32, capacity=capacity, fill=1.0)
        self.hot = RowTable({
            "campaign_id": (np.int64,), "advertiser_id": (np.int64,), "flight_start": (np.int64,),
            "flight_end": (np.int64, None, NO_END), "participation": (np.float32, None, 1.0),
            "cap_per_day": (np.int32,), "cap_per_week": (np.int32,), "timezone": (np.int16,),
            "status": (np.int8,), "budget_state": (np.int8,), "slice_held": (np.bool_,)}, capacity)
        for name in self.hot.fills:
            setattr(self, name, self.hot.field(name))
        self.dayparts: dict[int, np.ndarray] = {}  # row -> week mask, only for dayparted campaigns
        self.zones: list[str] = ["UTC"]

    @property
    def nbytes(self) -> int:
        return self.version.nbytes + self.bid_multiplier.nbytes + self.hot.nbytes + self.ids.nbytes

    def _zone(self, name: str) -> int:
        if name not in self.zones:
            self.zones.append(name)
        return self.zones.index(name)

    def upsert(self, r: CampaignRecord) -> bool:
        """Apply a campaign record if newer than what is held; True if applied."""
        row = self.ids.get(r.campaign_id)
        if row is not None and r.version <= self.version.data[row]:
            return False
        if row is None:
            row = self.size
            self.size += 1
            self.version.ensure(self.size)
            self.bid_multiplier.ensure(self.size)
            self.hot.ensure(self.size)
            self.ids.put(r.campaign_id, row)
        self.campaign_id.data[row] = r.campaign_id
        self.advertiser_id.data[row] = r.advertiser_id
        self.version.data[row] = r.version
        self.status.data[row] = STATUSES.index(r.status)
        self.flight_start.data[row] = r.flight_start if r.flight_start is not None else 0
        self.flight_end.data[row] = r.flight_end if r.flight_end is not None else NO_END
        self.timezone.data[row] = self._zone(r.timezone)
        self.cap_per_day.data[row] = r.cap_per_day or 0
        self.cap_per_week.data[row] = r.cap_per_week or 0
        mask = daypart_mask(r.dayparts)
        if mask is None:
            self.dayparts.pop(row, None)
        else:
            self.dayparts[row] = mask
        return True

    def set_budget(self, campaign_id: int, state: str, participation_probability: float,
                   slice_held: bool = False, bid_multiplier: float = 1.0) -> None:
        """The budget service's word on a campaign: OPEN / METERED / STOPPED, its p, whether we hold a slice,
        and (CPA campaigns) the multiplier its bids run at."""
        row = self.ids.get(campaign_id)
        if row is None:
            return
        self.bid_multiplier.data[row] = bid_multiplier
        self.budget_state.data[row] = BUDGET_STATES.index(state)
        self.participation.data[row] = participation_probability
        self.slice_held.data[row] = slice_held

    def campaign_ids(self) -> np.ndarray:
        return self.campaign_id.data[:self.size]

    def row_of(self, campaign_id: int) -> int | None:
        return self.ids.get(campaign_id)

    def rows_of(self, campaign_ids: np.ndarray) -> np.ndarray:
        """Rows for an array of campaign ids (-1 for unknown ones)."""
        return self.ids.get_many(campaign_ids)

    @classmethod
    def from_columns(cls, *, campaign_id: np.ndarray, advertiser_id: np.ndarray, cap_per_day: np.ndarray,
                     cap_per_week: np.ndarray, participation: np.ndarray) -> "CampaignTable":
        """Bulk build (benchmarks): every campaign active, open, all day, in UTC."""
        n = len(campaign_id)
        table = cls(capacity=max(1024, n))
        table.size = n
        table.campaign_id.data[:n] = campaign_id
        table.advertiser_id.data[:n] = advertiser_id
        table.version.data[:n] = 1
        table.cap_per_day.data[:n] = cap_per_day
        table.cap_per_week.data[:n] = cap_per_week
        table.participation.data[:n] = participation
        table.ids.bulk(campaign_id.astype(np.int64), np.arange(n, dtype=np.int32))
        return table
