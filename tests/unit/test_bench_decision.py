"""`adserve bench decision` on a small synthetic index: the documented figure names, a retrieval that finds
ads, and the baseline measured only at a size whose Python expressions fit in memory."""
from __future__ import annotations

from unittest.mock import patch

from bench import decision as bench_decision

NAMES = ("build_s", "index_bytes_per_ad", "retrieval_p50_ms", "retrieval_p99_ms", "retrieved_median",
         "decision_p50_ms", "decision_p99_ms", "whole_decision_p50_ms", "whole_decision_p99_ms",
         "decision_candidates_median", "baseline_retrieval_p50_ms", "baseline_retrieval_p99_ms")


def test_the_figures_carry_their_documented_names_and_the_baseline():
    figures = bench_decision.run([20_000], requests=40, baseline_requests=2, log=lambda line: None)
    for name in NAMES:
        assert name in figures
    assert figures["retrieved_median"]["20000"] > 0
    assert figures["retrieval_p99_ms"]["20000"] >= figures["retrieval_p50_ms"]["20000"] > 0
    assert figures["baseline_retrieval_p99_ms"]["20000"] > 0
    assert "baseline at 20,000 ads" in bench_decision.render(figures)


def test_the_baseline_is_skipped_with_a_message_where_it_would_not_fit():
    lines: list[str] = []
    with patch.object(bench_decision, "BASELINE_MAX_ADS", 10_000):
        figures = bench_decision.run([20_000], requests=10, baseline_requests=2, log=lines.append)
    assert figures["baseline_retrieval_p99_ms"] == {}
    assert any("baseline skipped" in line and "10,000" in line for line in lines)
    assert "baseline at" not in bench_decision.render(figures)
