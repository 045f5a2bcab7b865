"""Token buckets on a scripted clock: a burst, then the steady rate; Retry-After in whole seconds, at least 1;
callers independent; the table bounded."""
from __future__ import annotations

import pytest

from core.errors import InvalidSettings
from core.rate_limit import Decision, RateLimit, RateLimiter, retry_after_s


def test_a_caller_spends_its_burst_at_once_then_waits_for_the_rate():
    limiter = RateLimiter(RateLimit(rate_per_s=20.0, burst=40))
    assert [limiter.take("k", 100.0).allowed for _ in range(41)] == [True] * 40 + [False]
    assert [limiter.take("k", 100.25).allowed for _ in range(6)] == [True] * 5 + [False]  # 1/4 s: 5 tokens


def test_refused_requests_spend_nothing_and_the_bucket_refills_to_its_burst_only():
    limiter = RateLimiter(RateLimit(rate_per_s=1.0, burst=3))
    assert [limiter.take("k", 0.0).allowed for _ in range(5)] == [True, True, True, False, False]
    assert limiter.take("k", 1.0).allowed  # the two refusals did not dig a hole
    assert [limiter.take("k", 1_000.0).allowed for _ in range(4)] == [True, True, True, False]


def test_retry_after_is_the_whole_seconds_until_a_token_rounded_up_and_at_least_one():
    assert retry_after_s(RateLimit(20.0, 40), 0.0) == 1  # 50 ms away: still 1 s
    assert retry_after_s(RateLimit(0.25, 1), 0.0) == 4
    assert retry_after_s(RateLimit(0.25, 1), 0.5) == 2
    assert retry_after_s(RateLimit(0.3, 1), 0.0) == 4  # 3.33 s rounds up
    limiter = RateLimiter(RateLimit(rate_per_s=0.5, burst=1))
    assert limiter.take("k", 10.0) == Decision(True)
    assert limiter.take("k", 10.5) == Decision(False, 2)  # a quarter of a token back: 1.5 s more, said as 2


def test_callers_have_their_own_buckets():
    limiter = RateLimiter(RateLimit(rate_per_s=1.0, burst=1))
    assert limiter.take("a", 0.0).allowed and not limiter.take("a", 0.0).allowed
    assert limiter.take("b", 0.0).allowed


def test_peek_spends_nothing_and_give_back_returns_a_token():
    limiter = RateLimiter(RateLimit(rate_per_s=1.0, burst=2))
    assert limiter.peek("new", 0.0).allowed and len(limiter) == 0
    limiter.take("k", 0.0)
    limiter.take("k", 0.0)
    assert limiter.peek("k", 0.0) == Decision(False, 1)
    limiter.give_back("k", 0.0)
    assert limiter.peek("k", 0.0).allowed and limiter.take("k", 0.0).allowed
    limiter.give_back("k", 5.0)
    assert [limiter.take("k", 5.0).allowed for _ in range(3)] == [True, True, False]  # never above the burst


def test_a_clock_that_steps_back_adds_no_tokens():
    limiter = RateLimiter(RateLimit(rate_per_s=1.0, burst=1))
    assert limiter.take("k", 100.0).allowed
    assert not limiter.take("k", 50.0).allowed
    assert not limiter.take("k", 100.5).allowed
    assert limiter.take("k", 101.0).allowed


def test_the_table_stays_bounded_forgetting_full_buckets_first():
    limiter = RateLimiter(RateLimit(rate_per_s=1.0, burst=1), max_callers=10)
    limiter.take("draining", 0.0)
    for n in range(100):
        limiter.take(f"caller-{n}", 0.5)
        assert len(limiter) <= 10
    assert "caller-99" in limiter._buckets
    limiter = RateLimiter(RateLimit(rate_per_s=1.0, burst=1), max_callers=10)
    limiter.take("draining", 0.0)
    for n in range(9):
        limiter.take(f"full-{n}", -100.0)  # long since refilled by now
    limiter.take("newcomer", 0.0)
    assert set(limiter._buckets) == {"draining", "newcomer"}  # the full ones went, the draining one stayed


@pytest.mark.parametrize("rate, burst", [(0.0, 1), (-1.0, 1), (float("inf"), 1), (float("nan"), 1), (1.0, 0)])
def test_a_rate_or_burst_out_of_range_is_refused(rate, burst):
    with pytest.raises(InvalidSettings):
        RateLimit(rate, burst)


def test_failed_keys_dry_their_address_but_a_key_that_worked_is_still_looked_up():
    from core.rate_limit import FailedKeyLimiter

    guard = FailedKeyLimiter(RateLimit(rate_per_s=1.0, burst=2), remember=2)
    guard.succeeded("good")
    assert [guard.failed("10.0.0.1", f"bad{n}", 0.0).allowed for n in range(3)] == [True, True, False]
    assert not guard.before_lookup("10.0.0.1", "other", 0.0).allowed  # refused before any lookup
    assert guard.before_lookup("10.0.0.1", "good", 0.0).allowed
    assert guard.before_lookup("10.0.0.2", "other", 0.0).allowed  # another address has its own bucket
    guard.failed("10.0.0.1", "good", 0.0)  # revoked since: forgotten
    assert not guard.before_lookup("10.0.0.1", "good", 0.0).allowed
    for n in range(3):
        guard.succeeded(f"k{n}")
    assert guard.before_lookup("10.0.0.1", "k2", 0.0).allowed and not guard.before_lookup("10.0.0.1", "k0", 0.0).allowed
