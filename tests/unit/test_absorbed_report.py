"""`adserve billing absorbed`: one day's absorbed overspend, totalled, split by budget size and ranked (pure)."""
from __future__ import annotations

from adserve.billing_cli import render
from core.billing import AbsorbedDay, absorbed_report


def _day(cid: int, budget: int, billed: int, absorbed: int) -> AbsorbedDay:
    return AbsorbedDay(cid, f"c{cid}", 7, budget, billed, absorbed)


def test_the_day_is_totalled_split_by_budget_size_and_ranked_by_money_absorbed():
    rows = [_day(1, 50_000_000, 50_000_000, 400_000),          # small, $0.40 above $50
            _day(2, 5_000_000_000, 5_000_000_000, 5_000_000),   # medium, $5 above $5,000 (0.1 %)
            _day(3, 15_000_000_000, 14_000_000_000, 0),         # large, under budget
            _day(4, 5_000_000_000, 0, 2_000_000)]               # medium, everything above a budget cut to 0
    report = absorbed_report("2026-12-04", rows, top=2)
    assert (report["billed_micros"], report["absorbed_micros"], report["campaigns_absorbing"]) == (
        19_050_000_000, 7_400_000, 3)
    assert report["by_size_class"]["small"]["absorbed_share"] == 400_000 / 50_000_000
    assert report["by_size_class"]["medium"] == {"campaigns": 2, "billed_micros": 5_000_000_000,
                                                 "absorbed_micros": 7_000_000, "absorbed_share": 0.0014,
                                                 "campaigns_absorbing": 2}
    assert report["by_size_class"]["large"]["absorbed_micros"] == 0
    assert [(r["campaign_id"], r["absorbed_share"]) for r in report["top"]] == [(2, 0.001), (4, None)]
    text = render(report)
    assert "absorbed overspend on 2026-12-04: $7.40 of $19,050.00 billed (0.039%), 3 of 4 campaigns" in text
    assert "absorbed      $2.00 (all of billed)" in text


def test_a_day_without_rows_reports_zeros():
    report = absorbed_report("2026-12-05", [])
    assert (report["campaigns"], report["absorbed_share"], report["top"]) == (0, 0.0, [])
