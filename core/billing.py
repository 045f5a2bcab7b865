"""Billing up to a budget. Pure.

Every billable event (an impression for impression billing, a click for
click billing) is charged at the price signed into its token, but never past
the campaign's budget for the day: the part above it is absorbed overspend,
recorded and reported, never billed. Shared by the click aggregator, the
nightly recount and the simulator."""
from __future__ import annotations

from dataclasses import dataclass

SIZE_CLASSES = ("small", "medium", "large")  # how absorbed overspend is reported: by the day's budget
SMALL_BELOW_MICROS = 200_000_000  # $200 a day
LARGE_FROM_MICROS = 10_000_000_000  # $10,000 a day


def size_class(budget_micros: int) -> str:
    """The budget-size class a campaign's day is reported under: small < $200, medium < $10,000, large."""
    return "small" if budget_micros < SMALL_BELOW_MICROS else "medium" if budget_micros < LARGE_FROM_MICROS \
        else "large"


@dataclass
class DayBill:
    budget_micros: int
    billed_micros: int = 0
    absorbed_micros: int = 0
    billed_events: int = 0
    billed_above_micros: int = 0  # billed beyond the budget in force at that event: the invariant, always 0


    def charge(self, price_micros: int) -> tuple[int, int]:
        """Bill one event; returns (billed, absorbed) micros. Billed never takes the day past the budget."""
        billed = max(0, min(price_micros, self.budget_micros - self.billed_micros))
        absorbed = price_micros - billed
        self.billed_micros += billed
        self.absorbed_micros += absorbed
        self.billed_events += 1 if billed else 0
        self.billed_above_micros += max(0, self.billed_micros - max(self.budget_micros, self.billed_micros - billed))
        return billed, absorbed


@dataclass(frozen=True)
class AbsorbedDay:
    """One campaign's budget day as the daily billing report holds it (report_billed_daily)."""

    campaign_id: int
    name: str
    advertiser_id: int
    budget_micros: int  # the campaign's daily budget now (the report keeps the day's money, not its budget)
    billed_micros: int
    absorbed_micros: int


def absorbed_report(day: str, rows: list[AbsorbedDay], top: int = 20) -> dict:
    """What the operator reads of one day's absorbed overspend: the totals, the share of billed spend, the same by
    budget-size class (the design reports absorbed dollars daily by budget size), and the campaigns that absorbed
    the most (ties by campaign id). Pure."""
    def totals(group: list[AbsorbedDay]) -> dict:
        billed = sum(r.billed_micros for r in group)
        absorbed = sum(r.absorbed_micros for r in group)
        return {"campaigns": len(group), "billed_micros": billed, "absorbed_micros": absorbed,
                "absorbed_share": absorbed / billed if billed else 0.0,
                "campaigns_absorbing": sum(1 for r in group if r.absorbed_micros > 0)}
    ranked = sorted((r for r in rows if r.absorbed_micros > 0), key=lambda r: (-r.absorbed_micros, r.campaign_id))
    return {
        "day": day, **totals(rows),
        "by_size_class": {c: totals([r for r in rows if size_class(r.budget_micros) == c]) for c in SIZE_CLASSES},
        "top": [{"campaign_id": r.campaign_id, "name": r.name, "advertiser_id": r.advertiser_id,
                 "size_class": size_class(r.budget_micros), "budget_micros": r.budget_micros,
                 "billed_micros": r.billed_micros, "absorbed_micros": r.absorbed_micros,
                 "absorbed_share": r.absorbed_micros / r.billed_micros if r.billed_micros else None}
                for r in ranked[:top]],
    }
