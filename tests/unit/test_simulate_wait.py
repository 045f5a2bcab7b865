"""The simulated day's servers wait for the budget job's states: held while the newest state is more than the
lead behind, released the moment the feed hears a new enough one (sim.pacing_day._wait_for_budget)."""
from __future__ import annotations

import threading

from sim.pacing_day import DAY0_MS, _wait_for_budget


class FakeFeed:
    """The part of BudgetFeed the wait reads: progress_ms and its condition."""

    def __init__(self, progress_ms: int):
        self.progress_ms = progress_ms
        self.advanced = threading.Condition()

    def hear(self, event_time_ms: int) -> None:
        with self.advanced:
            self.progress_ms = event_time_ms
            self.advanced.notify_all()


def test_servers_within_the_lead_of_the_newest_state_are_not_held():
    feed = FakeFeed(DAY0_MS + 100_000)
    assert _wait_for_budget(feed, DAY0_MS + 115_000, 115, 15) >= 0.0
    assert feed.progress_ms == DAY0_MS + 100_000


def test_the_first_lead_seconds_of_the_day_run_before_any_state():
    assert _wait_for_budget(FakeFeed(0), DAY0_MS + 15_000, 15, 15) == 0.0


def test_servers_beyond_the_lead_wait_until_the_feed_hears_a_new_enough_state():
    feed = FakeFeed(DAY0_MS + 100_000)

    def job_answers() -> None:
        feed.hear(DAY0_MS + 105_000)  # still more than 15 s behind second 121: the servers stay held
        feed.hear(DAY0_MS + 110_000)

    answer = threading.Timer(0.05, job_answers)
    answer.start()
    _wait_for_budget(feed, DAY0_MS + 121_000, 121, 15)
    released_at_ms = feed.progress_ms
    answer.join()
    assert released_at_ms == DAY0_MS + 110_000
