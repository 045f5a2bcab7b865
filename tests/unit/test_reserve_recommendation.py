"""Recommending a reserve (core.replay): of the candidates whose fill stays above the floor, the highest revenue
per thousand requests wins, ties go to the lower reserve, no reserve always qualifies; the default grid steps in
half-octaves around the median winner's bid value; on served records with a known answer, the replay finds it."""
from __future__ import annotations

import pytest

from core.auction import Candidate
from core.errors import InvalidArgument
from core.replay import (BidProfile, ReserveFigures, candidate_grid, choose_reserve, gain_pct, half_octave,
                         overall_gain_pct, recommend_reserves, reserve_key, winner_bid_values_micros)
from tests.served_records import T0, auction_record


def figures(reserve: int, revenue: int, filled: int, requests: int = 10, offered: int = 10) -> ReserveFigures:
    return ReserveFigures(reserve, requests, offered, filled, revenue)


def test_the_highest_revenue_whose_fill_stays_above_the_floor_is_recommended():
    choice = choose_reserve([figures(0, 100, 10), figures(50, 150, 9), figures(80, 200, 7)], min_fill_ratio=0.8)
    assert choice.recommended.reserve_micros == 50  # 80 earns more but fills 70 % < 0.8 x 100 %
    assert choice.revenue_per_mille_gain_pct == 50.0 and choice.min_fill_rate == 0.8
    assert [c.reserve_micros for c in choice.candidates] == [0, 50, 80]


def test_a_fill_exactly_at_the_floor_qualifies():
    choice = choose_reserve([figures(0, 100, 10), figures(80, 200, 8)], min_fill_ratio=0.8)
    assert choice.recommended.reserve_micros == 80


def test_equal_revenues_go_to_the_lower_reserve():
    choice = choose_reserve([figures(90, 150, 10), figures(0, 100, 10), figures(40, 150, 10)])
    assert choice.recommended.reserve_micros == 40


def test_no_reserve_is_recommended_when_every_reserve_earns_less_or_empties_too_many_slots():
    choice = choose_reserve([figures(0, 100, 10), figures(30, 90, 10), figures(60, 500, 2)])
    assert (choice.recommended.reserve_micros, choice.revenue_per_mille_gain_pct) == (0, 0.0)


def test_a_min_fill_of_zero_lets_the_best_revenue_win_whatever_its_fill():
    choice = choose_reserve([figures(0, 100, 10), figures(60, 500, 2)], min_fill_ratio=0.0)
    assert (choice.recommended.reserve_micros, choice.revenue_per_mille_gain_pct) == (60, 400.0)


@pytest.mark.parametrize("candidates, ratio, words", [
    ([figures(10, 100, 10)], 0.8, "reserve 0"),
    ([figures(0, 100, 10), figures(10, 100, 10, requests=9)], 0.8, "same requests"),
    ([figures(0, 100, 10), figures(0, 90, 10)], 0.8, "once"),
    ([figures(0, 100, 10)], 1.5, "between 0 and 1"),
])
def test_candidates_that_are_not_one_keys_replays_are_refused(candidates, ratio, words):
    with pytest.raises(InvalidArgument, match=words):
        choose_reserve(candidates, ratio)


def test_the_gain_is_none_when_no_reserve_earns_nothing_and_a_reserve_does():
    assert gain_pct(500, 0) is None and gain_pct(0, 0) == 0.0 and gain_pct(90, 120) == -25.0


def test_figures_add_per_reserve_and_give_rpm_and_fill():
    total = figures(5, 1_000, 3, requests=3, offered=4) + figures(5, 2, 1, requests=3, offered=2)
    assert (total.revenue_per_mille_micros, total.fill_rate) == (167_000, round(4 / 6, 6))
    with pytest.raises(InvalidArgument):
        figures(5, 1, 1) + figures(6, 1, 1)


def test_half_octaves_bound_the_value_exactly():
    for value in [1, 2, 3, 7, 1_000, 16_384, 23_170, 23_171, 10**9]:
        k = half_octave(value)
        assert 2 ** k <= value * value < 2 ** (k + 1)
    assert half_octave(0) is None


def test_the_default_grid_steps_in_half_octaves_from_a_sixteenth_to_twice_the_median_winners_bid_value():
    profile = BidProfile({half_octave(20_000): 3, half_octave(100): 1}, frozenset({100}))  # median: 20,000
    assert profile.grid() == [0, 100, 1_000, 1_400, 2_000, 2_900, 4_100, 5_800, 8_200, 12_000, 16_000, 23_000,
                              33_000]
    assert BidProfile().grid() == [0]
    assert (profile + profile).half_octaves == {half_octave(20_000): 6, half_octave(100): 2}


def test_operator_candidates_always_include_no_reserve():
    assert candidate_grid([20_000, 10_000, 20_000]) == [0, 10_000, 20_000]


def _cpm_request(i: int, top_bid_micros: int, **where) -> dict:
    """One slot, two CPM bids: the runner-up $2 CPM (2,000 micros an impression), the winner `top_bid_micros`."""
    return auction_record([Candidate(10 * i + 1, 1, "cpm", top_bid_micros, [0.01]),
                           Candidate(10 * i + 2, 2, "cpm", 2_000_000, [0.01])],
                          request_id=f"req-{i}", now_ms=T0 + i, **where)


def _feed_log() -> list[dict]:
    """Half the requests have a $10 CPM winner, half a $3 CPM one; with no reserve every winner pays $2 CPM."""
    return [_cpm_request(i, 10_000_000 if i % 2 else 3_000_000) for i in range(10)]


def test_replayed_served_records_recommend_the_reserve_the_bids_call_for():
    records = _feed_log()
    assert reserve_key(records[0]) == ("feed", "US") and winner_bid_values_micros(records[1]) == [10_000]
    (key, choice), = recommend_reserves(records, [3_000, 5_000, 10_000, 20_000]).items()
    by_reserve = {c.reserve_micros: (c.revenue_per_mille_micros, c.fill_rate) for c in choice.candidates}
    assert by_reserve == {0: (2_000_000, 1.0), 3_000: (3_000_000, 1.0), 5_000: (2_500_000, 0.5),
                          10_000: (5_000_000, 0.5), 20_000: (0, 0.0)}
    assert (key, choice.recommended.reserve_micros, choice.revenue_per_mille_gain_pct) == (("feed", "US"), 3_000,
                                                                                           50.0)
    looser = recommend_reserves(records, [3_000, 5_000, 10_000, 20_000], min_fill_ratio=0.5)[key]
    assert (looser.recommended.reserve_micros, looser.revenue_per_mille_gain_pct) == (10_000, 150.0)


def test_the_default_grid_finds_a_reserve_that_beats_none_and_keeps_the_fill():
    choice = recommend_reserves(_feed_log())[("feed", "US")]
    assert choice.recommended.fill_rate == 1.0 and choice.recommended.reserve_micros in range(2_001, 3_001)
    assert choice.revenue_per_mille_gain_pct > 0


def test_each_placement_and_country_gets_its_own_and_the_overall_gain_weighs_them_by_revenue():
    records = _feed_log() + [_cpm_request(100 + i, 2_500_000, placement="article", location=None)
                             for i in range(10)]
    choices = recommend_reserves(records, [2_500, 3_000])
    assert set(choices) == {("feed", "US"), ("article", "*")}
    assert choices[("article", "*")].recommended.reserve_micros == 2_500
    assert overall_gain_pct(choices) == gain_pct(30_000 + 25_000, 20_000 + 20_000)
    assert overall_gain_pct(choices, [("article", "*")]) == gain_pct(20_000 + 25_000, 40_000)


def test_exploration_requests_are_left_out_of_a_recommendation():
    explored = auction_record([Candidate(1, 1, "cpm", 9_000_000, [0.01]), Candidate(2, 2, "cpm", 8_900_000, [0.01])],
                              request_id="explored", exploration_share=1.0)
    choices = recommend_reserves(_feed_log() + [explored], [3_000])
    assert choices[("feed", "US")].no_reserve.requests == 10
