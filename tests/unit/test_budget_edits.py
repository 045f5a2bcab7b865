"""A campaign's budget changes are limited per hour (core.campaigns.check_budget_edit): the rule alone. The
store and the API's 429 are tested against PostgreSQL in tests/integration/test_campaign_changes.py."""
from __future__ import annotations

import pytest

from core.campaigns import BUDGET_EDIT_WINDOW_S, BUDGET_EDITS_PER_HOUR, TooManyBudgetEdits, check_budget_edit


def test_budget_changes_up_to_the_hourly_limit_are_allowed():
    check_budget_edit([])
    check_budget_edit([float(n) for n in range(BUDGET_EDITS_PER_HOUR - 1)])


def test_one_more_budget_change_within_the_hour_is_refused_until_the_oldest_leaves_the_window():
    ages = [100.0 * n for n in range(BUDGET_EDITS_PER_HOUR)]  # the oldest 2,900 s ago
    with pytest.raises(TooManyBudgetEdits) as refused:
        check_budget_edit(ages)
    assert refused.value.field == "daily_budget_micros"
    assert refused.value.retry_after_s == BUDGET_EDIT_WINDOW_S - 2_900 + 1
    assert "BUDGET_EDITS_PER_HOUR" in str(refused.value)


def test_changes_older_than_the_window_do_not_count():
    check_budget_edit([BUDGET_EDIT_WINDOW_S + float(n) for n in range(3 * BUDGET_EDITS_PER_HOUR)])
