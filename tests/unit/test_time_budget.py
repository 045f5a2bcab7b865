"""The suite's time budget report (tests/conftest.py over tests/budget.toml)."""
from __future__ import annotations

from tests.conftest import budget, over_budget


def test_the_budget_file_gives_the_suite_half_an_hour_and_a_test_150_s():
    assert budget() == {"suite_s": 1800.0, "test_s": 150.0}


def test_a_run_inside_its_budget_says_nothing_and_one_over_it_names_the_overrun_and_the_slowest():
    limits = {"suite_s": 100.0, "test_s": 10.0}
    assert over_budget({"a": 5.0, "b": 9.9}, 90.0, limits) == []
    over = over_budget({"a": 5.0, "b": 9.0}, 130.0, limits)
    assert over[0].startswith("the suite took 130 s, 30 s over its budget of 100 s")
    assert [line.split()[-1] for line in over[1:]] == ["b", "a"]  # the slowest listed, slowest first
    slow = over_budget({"a": 5.0, "b": 12.0}, 50.0, limits)
    assert slow == ["   12.0 s  b  (over the 10 s a test may take)"]
