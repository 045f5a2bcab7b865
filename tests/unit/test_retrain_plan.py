"""What a run of `adserve model retrain` does (learning.retrain): judge a canary, train from scratch, refit the
calibration, or wait; and which examples it reads."""
from __future__ import annotations

from learning.retrain import (FULL, JUDGE, UPDATE, WAIT, RetrainPolicy, RetrainState, in_window, next_action,
                              trainable, with_snapshots)

HOUR = 3_600_000
POLICY = RetrainPolicy(every_s=3600, full_every_s=86_400, min_examples=3, min_clicks=1)


def example(served_ms: int, label: int = 0, snapshot: int = 300_000, task: str = "CLICK") -> dict:
    return {"served_time": served_ms, "label": label, "ad_snapshot_version": snapshot, "task": task}


def test_a_pending_canary_is_judged_before_anything_is_trained():
    state = RetrainState(last_full_ms=0)
    assert next_action(state, has_current=False, has_canary=True, newest_event_ms=10 * HOUR, policy=POLICY) == JUDGE


def test_the_first_model_and_the_daily_model_are_full_trainings_and_the_hours_between_are_updates():
    assert next_action(RetrainState(), has_current=False, has_canary=False, newest_event_ms=HOUR,
                       policy=POLICY) == FULL
    state = RetrainState(last_full_ms=HOUR, last_trained_ms=HOUR)
    assert next_action(state, has_current=True, has_canary=False, newest_event_ms=HOUR + HOUR // 2,
                       policy=POLICY) == WAIT
    assert next_action(state, has_current=True, has_canary=False, newest_event_ms=2 * HOUR, policy=POLICY) == UPDATE
    state.last_trained_ms = 24 * HOUR
    assert next_action(state, has_current=True, has_canary=False, newest_event_ms=25 * HOUR, policy=POLICY) == FULL
    assert next_action(RetrainState(), has_current=False, has_canary=False, newest_event_ms=0, policy=POLICY) == WAIT


def test_the_window_counts_back_from_the_newest_example_in_event_time():
    records = [example(t * HOUR) for t in range(30)]
    kept = in_window(records, 29 * HOUR, 3600 * 5)
    assert [r["served_time"] // HOUR for r in kept] == [24, 25, 26, 27, 28, 29]


def test_examples_whose_snapshot_is_gone_are_left_out_and_counted():
    records = [example(1, snapshot=v) for v in (0, 300_000, 600_000, 600_000)]
    kept, dropped = with_snapshots(records, {600_000})
    assert len(kept) == 2 and dropped == 2


def test_too_few_examples_or_clicks_are_not_trained_on():
    assert "click examples" in trainable([example(1), example(2)], POLICY)
    assert "clicks" in trainable([example(1), example(2), example(3)], POLICY)
    assert trainable([example(1), example(2), example(3, label=1)], POLICY) is None
    conversions_only = [example(i, label=1, task="CONVERSION") for i in range(5)]
    assert "click examples" in trainable(conversions_only, POLICY)
