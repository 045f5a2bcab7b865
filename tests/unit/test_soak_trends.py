"""The soak's trend analysis (bench.soak, pure) on scripted samples: a flat run holds, slow growth of memory,
descriptors, producer queues or p99 is caught, one noisy minute does not tilt a trend, the warm-up minute is
left out, and a run with nothing to fit holds nothing."""
from __future__ import annotations

import dataclasses

import pytest

from bench.soak import Minute, Sample, TrendLimits, render, theil_sen_slope, trends, warmup_s

LIMITS = TrendLimits()


def _samples(minutes: int = 20, rss_mb=lambda t: 300.0, fds=lambda t: 40, queue=lambda t: 12) -> list[Sample]:
    return [Sample(float(t), rss_mb(t), fds(t), queue(t)) for t in range(0, minutes * 60, 10)]


def _minutes(minutes: int = 20, p99=lambda m: 20.0) -> list[Minute]:
    return [Minute(m, 200.0, 8.0, p99(m), 0.0, 12_000) for m in range(minutes)]


def test_the_slope_is_the_median_of_pairwise_slopes():
    assert theil_sen_slope([0, 1, 2, 3], [0, 2, 4, 6]) == 2.0
    assert theil_sen_slope([0, 1, 2, 3, 4], [1, 1, 1, 100, 1]) == 0.0  # one outlier does not tilt it
    assert theil_sen_slope([5], [1]) is None and theil_sen_slope([2, 2], [1, 3]) is None


def test_a_flat_run_holds_every_trend():
    found = trends(_samples(), _minutes(), LIMITS, warmup_s(20))
    assert found["held"] == {"memory_flat": True, "p99_steady": True, "no_fd_growth": True, "no_queue_growth": True}
    assert found["all_held"] and found["slopes"]["rss_mb_per_min"] == 0.0


def test_memory_growing_two_mb_a_minute_is_not_flat():
    found = trends(_samples(rss_mb=lambda t: 300.0 + 2.0 * t / 60), _minutes(), LIMITS, warmup_s(20))
    assert found["slopes"]["rss_mb_per_min"] == pytest.approx(2.0)
    assert not found["held"]["memory_flat"] and not found["all_held"]


def test_a_descriptor_leaked_a_minute_is_caught():
    found = trends(_samples(fds=lambda t: 40 + t // 60), _minutes(), LIMITS, warmup_s(20))
    assert found["slopes"]["fds_per_min"] == pytest.approx(1.0) and not found["held"]["no_fd_growth"]


def test_a_producer_queue_that_keeps_growing_is_caught_and_a_busy_but_bounded_one_is_not():
    growing = trends(_samples(queue=lambda t: 10 + t), _minutes(), LIMITS, warmup_s(20))
    assert not growing["held"]["no_queue_growth"]
    bounded = trends(_samples(queue=lambda t: (t * 7919) % 500), _minutes(), LIMITS, warmup_s(20))
    assert bounded["held"]["no_queue_growth"]


def test_p99_drifting_up_is_caught_but_one_slow_minute_is_not():
    drifting = trends(_samples(), _minutes(p99=lambda m: 20.0 + 0.5 * m), LIMITS, warmup_s(20))
    assert not drifting["held"]["p99_steady"]  # 0.5 ms a minute on a ~25 ms median: over 1 %
    one_slow = trends(_samples(), _minutes(p99=lambda m: 95.0 if m == 12 else 20.0), LIMITS, warmup_s(20))
    assert one_slow["held"]["p99_steady"]


def test_the_warm_up_is_left_out_a_minute_of_a_long_run_a_fifth_of_a_short_one():
    warming = _samples(rss_mb=lambda t: 200.0 + t if t < 60 else 260.0)  # the first minute fills caches
    assert trends(warming, _minutes(), LIMITS, warmup_s(20))["held"]["memory_flat"]
    assert (warmup_s(20), warmup_s(2)) == (60.0, 24.0)
    opening = _samples(minutes=2, fds=lambda t: 27 if t < 20 else 48)  # connections open as the load starts
    assert trends(opening, _minutes(minutes=2), LIMITS, warmup_s(2))["all_held"]


def test_a_run_with_nothing_to_fit_holds_nothing():
    found = trends([], [], LIMITS, 0.0)
    assert found["slopes"] == {"rss_mb_per_min": None, "fds_per_min": None, "producer_queue_per_min": None,
                               "p99_ms_per_min": None}
    assert not any(found["held"].values()) and not found["all_held"]


def test_the_figures_render():
    found = trends(_samples(minutes=2), _minutes(minutes=2), LIMITS, 0.0)
    figures = {"machine": {"cpu": "cpu", "cores": 2, "memory_gib": 8.0, "python": "3.11"}, "ads": 1000, "rate": 50.0,
               "minutes": 2, "idle_rss_mb": 250.0, "idle_fds": 30, "limits": dataclasses.asdict(LIMITS),
               "per_minute": [{**dataclasses.asdict(m), "rss_mb": 300.0, "fds": 40, "producer_queue": 12}
                              for m in _minutes(minutes=2)], **found}
    text = render(figures)
    assert "minute  2: 200.0 req/s" in text and "memory 0.0 MB (held" in text
