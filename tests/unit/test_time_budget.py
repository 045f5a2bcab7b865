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


def test_the_slowest_are_listed_slowest_first_and_a_ledger_sums_the_sessions_of_one_run(tmp_path):
    import json

    from tests.conftest import read_ledger, slowest

    assert slowest({"a": 1.0, "b": 3.0, "c": 2.0}, n=2) == ["    3.0 s  b", "    2.0 s  c"]
    ledger = tmp_path / "ledger.jsonl"
    assert read_ledger(ledger) == {}
    ledger.write_text(json.dumps({"unit::a": 1.5, "unit::b": 2.0}) + "\n" + json.dumps({"integration::c": 40.0})
                      + "\n")
    assert read_ledger(ledger) == {"unit::a": 1.5, "unit::b": 2.0, "integration::c": 40.0}
