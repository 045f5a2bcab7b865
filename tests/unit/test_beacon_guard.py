"""The tracker's replay guard (core.beacon_guard): a beacon is kept once per token lifetime."""
from __future__ import annotations

from core.beacon_guard import BUCKET_MS, BeaconGuard


def test_a_replay_is_seen_until_its_token_expires_then_forgotten():
    guard = BeaconGuard()
    assert not guard.seen("r1:1|CLICK", 0)
    guard.remember("r1:1|CLICK", expires_ms=3_600_000)
    assert guard.seen("r1:1|CLICK", 1_000) and guard.seen("r1:1|CLICK", 3_600_000)
    assert not guard.seen("r1:1|IMPRESSION", 1_000)  # another event of the impression is its own beacon
    assert not guard.seen("r1:1|CLICK", 3_600_000 + BUCKET_MS) and len(guard) == 0


def test_out_of_order_expiries_are_forgotten_in_expiry_order():
    guard = BeaconGuard()
    guard.remember("late", expires_ms=10 * BUCKET_MS)
    guard.remember("early", expires_ms=2 * BUCKET_MS)
    assert not guard.seen("early", 3 * BUCKET_MS) and guard.seen("late", 3 * BUCKET_MS)


def test_the_guard_is_bounded_and_forgets_what_expires_first():
    guard = BeaconGuard(max_entries=3)
    for n in range(5):
        guard.remember(f"k{n}", expires_ms=(n + 1) * BUCKET_MS)
    assert len(guard) <= 3 and guard.seen("k4", 0) and not guard.seen("k0", 0)
