"""Replay of logged auctions, in one place for its callers: the served log's auction inputs, the auction rerun
on them under another reserve or quality weight, the explanation of one charged price, and the reserve
recommended for a (placement, country) from its requests replayed under candidate reserves. Pure: records in,
numbers out. Each concern is a module of its own, whose public names this module offers:

  core.replay_fields            writing and reading the served log's replay fields (the logged candidates)
  core.rerun                    the auction rerun, whether it is exact, one request logged against replayed
  core.reserve_recommendation   the recommended reserve (`recommend_reserves`, whose rule is `choose_reserve`)
  core.price_explanation        why one impression cost what it did (`explain_winner`)

Pricing is never written twice: the rerun calls core.auction.run_auction, and the explanation
core.auction.exact_total and price_micros."""
from __future__ import annotations

from core.price_explanation import PRICE_UNIT, ImpressionNotFound, explain_winner
from core.replay_fields import (LoggedBid, NotReplayable, Record, auction_candidate, log_is_complete,
                                logged_candidates, loser_columns, loser_record, replay_gap, request_replay_fields,
                                runner_up_bid, sampled_losers, slot_of, winner_bid, winner_bid_type,
                                winner_replay_fields)
from core.rerun import (AuctionOutcome, RequestComparison, ReservePolicy, SlotOutcome, compare, compare_request,
                        logged_outcome, replay, replay_is_exact)
from core.reserve_recommendation import (DEFAULT_MIN_FILL_RATIO, RESERVE_GRID_HALF_OCTAVES_ABOVE,
                                         RESERVE_GRID_HALF_OCTAVES_BELOW, BidProfile, ReserveChoice,
                                         ReserveFigures, candidate_grid, choose_reserve, gain_pct, half_octave,
                                         is_replayed, overall_gain_pct, per_thousand, recommend_reserves,
                                         reserve_figures, reserve_key, sum_figures, sum_profiles,
                                         winner_bid_values_micros)

__all__ = ["AuctionOutcome", "BidProfile", "DEFAULT_MIN_FILL_RATIO", "ImpressionNotFound", "LoggedBid",
           "NotReplayable", "PRICE_UNIT", "RESERVE_GRID_HALF_OCTAVES_ABOVE", "RESERVE_GRID_HALF_OCTAVES_BELOW",
           "Record", "RequestComparison", "ReserveChoice", "ReserveFigures", "ReservePolicy", "SlotOutcome",
           "auction_candidate", "candidate_grid", "choose_reserve", "compare", "compare_request", "explain_winner",
           "gain_pct", "half_octave", "is_replayed", "log_is_complete", "logged_candidates", "logged_outcome",
           "loser_columns", "loser_record", "overall_gain_pct", "per_thousand", "recommend_reserves", "replay",
           "replay_gap", "replay_is_exact", "request_replay_fields", "reserve_figures", "reserve_key",
           "runner_up_bid", "sampled_losers", "slot_of", "sum_figures", "sum_profiles", "winner_bid",
           "winner_bid_type", "winner_bid_values_micros", "winner_replay_fields"]
