"""The simulated day's figures (sim.pacing_report): the hourly curve error's three readings."""
from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np
import pytest

from sim.pacing_report import figures


def _day(expected: np.ndarray, billed: np.ndarray, launch_s: int = 0):
    campaign = NS(name="large-x", budget_micros=int(expected.sum()), planned_budget_micros=20_000_000_000,
                  launch_s=launch_s)
    return NS(campaign=campaign, p_by_minute=np.full(1440, 0.5), state_by_minute=["OPEN"] * 1439 + ["STOPPED"],
              expected_by_minute=expected, billed_by_minute=billed, served_by_minute=np.ones(1440),
              bill=NS(billed_micros=int(billed.sum()), absorbed_micros=0, billed_above_micros=0), clicks=3,
              stopped_after_lower_s=None)


def _figures(expected: np.ndarray, billed: np.ndarray, targets_by_minute: np.ndarray):
    points = [NS(minute=m, target_micros=int(targets_by_minute[:m].sum())) for m in range(0, 1441, 10)]
    return figures({"days": {1: _day(expected, billed)}, "pacing": {1: NS(points=points)}, "requests": 1,
                    "filled_slots": 1, "wall_s": 1.0, "waited_s": 0.0, "lead_s": 15, "servers": 3})


def test_spend_on_the_curve_at_a_level_below_one_is_on_the_curve_in_money_not_in_expected_cost():
    # Expected cost served exactly as the curve asks, scaled 1/0.8: the clicks bill 80 % of it, and the
    # budget (the sum of the targets) is delivered. In money every hour is on the curve.
    target = np.full(1440, 1_000, dtype=np.int64)
    expected = target * 5 // 4
    billed = target.copy()
    f = _figures(expected, billed, target)
    assert f["curve_error_pct_hourly"] == pytest.approx(0.0, abs=1e-3)
    assert f["curve_error_pct_hourly_expected"] == pytest.approx(25.0, abs=0.01)
    assert f["curve_error_pct_hourly_billed"] == pytest.approx(0.0, abs=1e-3)
    assert f["by_class"]["large"]["curve_error_pct_hourly"] == f["curve_error_pct_hourly"]


def test_the_money_reading_keeps_the_shape_and_drops_the_hours_click_noise():
    rng = np.random.default_rng(1)
    target = np.full(1440, 1_000, dtype=np.int64)
    expected = np.concatenate([np.full(720, 1_100), np.full(720, 900)]).astype(np.int64)  # ahead, then behind
    billed = rng.poisson(expected).astype(np.int64)  # the clicks' noise, level ~1
    f = _figures(expected, billed, target)
    level = billed.sum() / expected.sum()
    hours = expected.reshape(24, 60).sum(1)
    want = 100 * np.abs(level * hours - 60_000).sum() / (24 * 60_000)
    assert f["curve_error_pct_hourly"] == pytest.approx(want, abs=1e-3)
    assert 9.5 < f["curve_error_pct_hourly"] < 10.5  # the shape's 10 % off, whatever the clicks did


def test_a_campaign_launched_mid_day_is_reported_from_its_launch():
    target = np.concatenate([np.zeros(900), np.full(540, 1_000)]).astype(np.int64)
    expected = target * 5 // 4
    day = _day(expected, target.copy(), launch_s=15 * 3600)
    day.p_by_minute = np.concatenate([np.full(900, np.nan), [0.05, 0.2, 0.25], np.full(537, 0.3)])
    points = [NS(minute=m, target_micros=int(target[:m].sum())) for m in range(0, 1441, 10)]
    f = figures({"days": {1: day}, "pacing": {1: NS(points=points)}, "requests": 1, "filled_slots": 1,
                 "wall_s": 1.0, "waited_s": 0.0, "lead_s": 15, "servers": 3})
    launched = f["launched"]
    assert launched["launch_minute"] == 900 and launched["p_first_minutes"][:3] == [0.05, 0.2, 0.25]
    assert launched["hourly_money_micros"] == launched["hourly_target_micros"] == [60_000] * 9
    assert f["per_campaign"][0]["special"] == "launched"


def test_the_days_bill_comes_from_the_aggregators_totals_and_flags_growth_above_the_billing_limit():
    from core.clicks import PROMISE_MS
    from sim.pacing_day import DAY0_MS, SIM_DAY, CampaignDay, job_bill

    campaign = NS(budget_micros=50, campaign_id=7)
    day = CampaignDay(campaign, budgets=[(0, 100), (3_600_000, 50)])  # lowered to 50 at 01:00

    def total(at_s: int, billed: int, absorbed: int = 0) -> dict:
        return {"campaign_id": 7, "event_time": DAY0_MS + at_s * 1000, "budget_day": SIM_DAY,
                "billed_spend_micros": billed, "absorbed_overspend_micros": absorbed, "billed_clicks": 1,
                "billed_impressions": 2}

    after_promise = 3_600 + PROMISE_MS // 1000 + 10  # the cut's full effect: past what was served before it
    bill = job_bill(day, [total(10, 40), total(70, 60), total(3_610, 65, 5), total(after_promise, 75)])
    assert (bill.billed_micros, bill.absorbed_micros, bill.budget_micros) == (75, 0, 50)
    assert bill.billed_above_micros == 10  # 65 -> 75 once only the 50 budget was in force in the span
    assert day.billed_by_minute[0] == 40 and day.billed_by_minute[1] == 20 and day.billed_by_minute[60] == 5
    assert day.billed_by_minute.sum() == 75
