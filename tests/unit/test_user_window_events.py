"""One consented user's window in the features job (core.user_window_events) on plain state: impressions and
clicks by category, beacons without a consented slot, the writes at each tick, and a deletion request."""
from __future__ import annotations

from core.feature_events import TimerAt
from core.feature_inputs import SERVED, UserInput
from core.feature_windows import CLICK, IMPRESSION, KeyWindow, WindowRules
from core.user_window_events import Deletion, Forgotten, InputIn, Tick, UserState, Write, apply

T0 = 1_800_000_000_000
TICK = 300_000
RULES = WindowRules(bucket_ms=TICK, window_ms=3_600_000)


def _user() -> UserState:
    return UserState(KeyWindow({}, {}, {}, RULES))


def _served(impression_id: str, at_ms: int, category: int) -> InputIn:
    return InputIn(UserInput(SERVED, "u1", impression_id, at_ms, category), T0)


def _beacon(impression_id: str, at_ms: int, kind: str, watermark_ms: int = T0) -> InputIn:
    return InputIn(UserInput(kind, "u1", impression_id, at_ms), watermark_ms)


def _writes(outputs) -> list[dict]:
    return [o.features for o in outputs if isinstance(o, Write)]


def test_a_users_impressions_and_clicks_by_category_are_written_at_the_tick():
    user = _user()
    assert apply(user, _served("r1:1", T0 + 1_000, 4), RULES)[1] == [TimerAt(T0 + TICK)]
    apply(user, _beacon("r1:1", T0 + 2_000, IMPRESSION), RULES)
    apply(user, _beacon("r1:1", T0 + 3_000, CLICK), RULES)
    assert _writes(apply(user, Tick(T0 + TICK, T0 + TICK), RULES)[1]) == [
        {"impressions_window": 1.0, "clicks_window": 1.0, "clicks_cat_4": 1.0}]
    assert user.wrote


def test_a_beacon_whose_impression_was_not_served_with_consent_never_counts():
    user = _user()
    apply(user, _beacon("r2:1", T0 + 3_000, CLICK), RULES)
    assert _writes(apply(user, Tick(T0 + TICK, T0 + TICK), RULES)[1]) == []
    assert not user.window.waiting


def test_an_expired_beacon_is_ignored():
    user = _user()
    assert apply(user, _beacon("r1:1", T0 + 2_000, CLICK, watermark_ms=T0 + 3_600_000), RULES)[1] == []


def test_emptied_features_are_written_once():
    user = _user()
    apply(user, _served("r1:1", T0 + 1_000, 4), RULES)
    apply(user, _beacon("r1:1", T0 + 2_000, IMPRESSION), RULES)
    writes = [_writes(apply(user, Tick(T0 + n * TICK, T0 + n * TICK), RULES)[1]) for n in range(1, 15)]
    assert writes[11] == [{"impressions_window": 1.0, "clicks_window": 0.0}] and writes[12] == [{}]
    assert writes[13] == [] and not user.wrote


def test_a_deletion_request_forgets_the_users_window():
    user = _user()
    apply(user, _served("r1:1", T0 + 1_000, 4), RULES)
    apply(user, _beacon("r1:1", T0 + 2_000, IMPRESSION), RULES)
    apply(user, _beacon("r1:2", T0 + 2_000, CLICK), RULES)
    assert apply(user, Deletion(), RULES)[1] == [Forgotten()]
    assert not user.window.buckets and not user.window.slots and not user.window.waiting and not user.wrote
    assert _writes(apply(user, Tick(T0 + TICK, T0 + TICK), RULES)[1]) == []
