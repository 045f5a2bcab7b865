"""Replay of logged auctions: the served log v2 holds what a replay needs, the unchanged replay reproduces the
log exactly, and every replay the module calls exact equals the full auction rerun (hypothesis)."""
from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from core import replay
from core.auction import AuctionRules, Candidate, exact_total, run_auction
from schemas import HISTORY_DIR, SCHEMA_DIR, topics
from schemas.codec import AvroCodec, SchemaRegistry
from tests.served_records import auction_record, design_example, served
from tests.unit.test_codec import example_value

SERVED_RECORD = topics.record_type(topics.AD_SERVED)


def cpc(ad, campaign, bid, pctr, quality=0, slots=1, **kw):
    return Candidate(ad, campaign, "cpc", bid, [pctr] * slots, quality_micros=quality, **kw)


# the served log, version 2 --------------------------------------------------------------------------

def test_the_served_record_logs_the_runner_ups_inputs_the_reserve_and_the_slots():
    record = design_example(reserve_micros=100)
    assert (record["reserve_micros"], record["slot_positions"], record["auction_candidates"]) == (100, [1], 2)
    [w] = record["winners"]
    assert (w["bid_type"], w["pctr"], w["pctr_by_slot"], w["candidate_index"]) == ("CPC", 0.015, [0.015], 0)
    assert (w["runner_up_ad_id"], w["runner_up_campaign_id"], w["runner_up_bid_type"]) == (22, 2, "CPC")
    assert (w["runner_up_bid_micros"], w["runner_up_pctr"], w["runner_up_quality_micros"]) == (3_000_000, 0.008, -1_000)
    assert w["runner_up_total_value_micros"] == 23_000 and w["price_micros"] == 1_400_000


def test_the_pctr_logged_per_winner_is_the_one_at_its_slot():
    a = Candidate(1, 1, "cpc", 1_000_000, [0.030, 0.010])
    b = Candidate(2, 2, "cpc", 1_000_000, [0.020, 0.018])
    record = auction_record([a, b], [1, 4])
    assert [(w["slot_position"], w["ad_id"], w["pctr"]) for w in record["winners"]] == [(1, 1, 0.030), (4, 2, 0.018)]
    assert record["winners"][1]["pctr_by_slot"] == [0.020, 0.018]


def test_sampled_losers_carry_their_inputs_and_a_pctr_per_slot():
    ads = [Candidate(i, i, "cpa", 40_000_000, [round(0.01 + i / 1000, 3), 0.005], pcvr=0.05, quality_micros=-i,
                     exclusion_category=i % 2) for i in range(1, 5)]
    record = auction_record(ads, [1, 2])
    assert [w["ad_id"] for w in record["winners"]] == [4, 1]  # slot 2: the same pCTR, the best quality
    assert record["sampled_losers"] == [] and len(record["loser_columns"]["ad_id"]) == 2  # version 4: columns
    [loser] = [l for l in replay.sampled_losers(record) if l["ad_id"] == 3]
    assert (loser["bid_type"], loser["bid_micros"], loser["pcvr"], loser["quality_micros"]) == \
        ("CPA", 40_000_000, 0.05, -3)
    assert (loser["pctr_by_slot"], loser["exclusion_category"], loser["candidate_index"]) == ([0.013, 0.005], 1, 2)


def test_losers_written_as_columns_read_back_as_the_records_a_version_3_writer_wrote():
    ads = [Candidate(i, 100 + i, ("cpm", "cpc", "cpa")[i % 3], 1_000_000 + i, [0.01 + i / 1000, 0.004],
                     pcvr=0.04, quality_micros=-i, exclusion_category=i % 4) for i in range(1, 30)]
    record = auction_record(ads, [1, 3])
    codec = AvroCodec()
    v4 = codec.decode(codec.encode(SERVED_RECORD, record), SERVED_RECORD)
    losers = replay.sampled_losers(v4)
    assert len(losers) == 20 and all(l["pcvr"] is None for l in losers if l["bid_type"] != "CPA")
    # the same losers, one record each, as a version-3 writer wrote them
    registry = SchemaRegistry.from_directory()
    v3 = registry.by_fingerprint[registry.register(json.loads((HISTORY_DIR / "ad_served.v3.avsc").read_text()))]
    as_rows = {**{k: v for k, v in v4.items() if k != "loser_columns"}, "sampled_losers": losers}
    read_v3 = AvroCodec(registry).decode(AvroCodec(registry).encode(v3, as_rows), SERVED_RECORD)
    assert read_v3["loser_columns"] is None and replay.sampled_losers(read_v3) == losers
    assert replay.replay(read_v3) == replay.replay(v4)


def test_a_version_1_record_still_reads_with_the_new_fields_defaults():
    v1 = json.loads((HISTORY_DIR / "ad_served.v1.avsc").read_text())
    registry = SchemaRegistry.from_directory()
    codec = AvroCodec(registry)
    written_by_v1 = codec.encode(registry.by_fingerprint[registry.register(v1)], example_value(v1))
    decoded = codec.decode(written_by_v1, SERVED_RECORD)
    assert decoded["reserve_micros"] is None and decoded["slot_positions"] == []
    assert decoded["winners"][0]["runner_up_ad_id"] is None and decoded["winners"][0]["bid_type"] is None
    assert decoded["sampled_losers"][0]["pctr_by_slot"] == []
    with pytest.raises(replay.NotReplayable, match="version-1"):
        replay.replay(decoded)


@pytest.mark.parametrize("path", sorted(HISTORY_DIR.glob("*.avsc")), ids=lambda p: p.name)
def test_every_kept_version_and_the_current_one_read_each_other(path):
    older = json.loads(path.read_text())
    current = json.loads((SCHEMA_DIR / (path.name.rsplit(".", 2)[0] + ".avsc")).read_text())
    registry = SchemaRegistry()
    old_fp, new_fp = registry.register(older), registry.register(current)
    codec = AvroCodec(registry)
    old_schema, new_schema = registry.by_fingerprint[old_fp], registry.by_fingerprint[new_fp]
    assert codec.decode(codec.encode(old_schema, example_value(older)), new_schema)
    assert codec.decode(codec.encode(new_schema, example_value(current)), old_schema)


# replay -------------------------------------------------------------------------------------------------

def test_replaying_the_designs_example_unchanged_gives_a_dollar_forty_again():
    outcome = replay.replay(design_example())
    assert [(w.ad_id, w.slot, w.price_micros, w.expected_cost_micros) for w in outcome.winners] == \
        [(11, 1, 1_400_000, 21_000)]
    assert replay.replay_is_exact(design_example(), 100)


def test_a_higher_reserve_sets_the_price_when_the_runner_up_falls_under_it():
    outcome = replay.replay(design_example(), reserve_micros=30_000)
    # A pays the reserve, 30,000 / 0.015: its quality (+2,000) ranks it but cannot take its price under the
    # reserve, and its bid value (exactly 30,000) lets it in
    assert [w.price_micros for w in outcome.winners] == [2_000_000]


def test_a_reserve_above_the_winner_empties_the_slot():
    assert replay.replay(design_example(), reserve_micros=32_001).winners == ()


def test_a_quality_weight_scales_the_quality_term_in_totals_and_prices():
    # weight 2: A = 30,000 + 4,000 = 34,000, B = 24,000 - 2,000 = 22,000; A pays (22,000 - 4,000) / 0.015
    [w] = replay.replay(design_example(), quality_weight=2.0).winners
    assert (w.ad_id, w.price_micros) == (11, 1_200_000)


def test_the_reserve_policy_takes_country_then_placement_then_default_then_the_logged_reserve():
    policy = replay.ReservePolicy(default_micros=10, by_placement={"feed": 30_000},
                                  by_placement_country={("feed", "US"): 40_000})
    assert policy.reserve_for("feed", "us", 5) == 40_000
    assert policy.reserve_for("feed", "DE", 5) == 30_000
    assert policy.reserve_for("article", "US", 5) == 10
    assert replay.ReservePolicy().reserve_for("article", "US", 5) == 5


def test_an_exploration_request_is_left_out_of_the_comparison():
    ads = [cpc(1, 1, 1_000_000, 0.0200), cpc(2, 2, 1_000_000, 0.0199)]
    record = auction_record(ads, exploration_share=1.0)
    assert record["exploration"]
    assert replay.compare_request(record).status == "exploration"
    assert not replay.replay_is_exact(record, record["reserve_micros"])


def test_a_runner_up_that_is_also_a_later_winner_is_one_candidate():
    ads = [cpc(1, 1, 3_000_000, 0.02, slots=2), cpc(2, 2, 2_000_000, 0.02, slots=2),
           cpc(3, 3, 1_000_000, 0.02, slots=2)]
    record = auction_record(ads, [1, 2])
    assert record["winners"][0]["runner_up_ad_id"] == record["winners"][1]["ad_id"] == 2
    assert [c.ad_id for c in replay.logged_candidates(record)] == [1, 2, 3]


# properties ---------------------------------------------------------------------------------------------

candidate_strategy = st.builds(
    lambda ad, campaign, bid_type, bid, pctrs, pcvr, quality, category: Candidate(
        ad, campaign, bid_type, bid, pctrs, pcvr=pcvr, quality_micros=quality, exclusion_category=category),
    ad=st.integers(0, 10**6), campaign=st.integers(0, 12), bid_type=st.sampled_from(["cpm", "cpc", "cpa"]),
    bid=st.integers(1, 50_000_000),
    pctrs=st.lists(st.floats(0.0005, 0.2).map(lambda x: round(x, 5)), min_size=3, max_size=3),
    pcvr=st.floats(0.001, 0.3).map(lambda x: round(x, 4)), quality=st.integers(-5_000, 5_000),
    category=st.sampled_from([0, 0, 0, 1, 2]))
# many ads with equal totals: ties of total value must break in the replay as they did live
tied_candidate_strategy = st.builds(
    lambda ad, campaign, bid_type, bid, pctr, quality, category: Candidate(
        ad, campaign, bid_type, bid, [pctr] * 3, pcvr=0.1, quality_micros=quality, exclusion_category=category),
    ad=st.integers(0, 10**6), campaign=st.integers(0, 12), bid_type=st.sampled_from(["cpc", "cpa"]),
    bid=st.sampled_from([1_000_000, 2_000_000]), pctr=st.sampled_from([0.01, 0.02]),
    quality=st.sampled_from([0, 1_000]), category=st.sampled_from([0, 0, 1]))
# totals near the reserves, so reserves empty slots and set prices
crowded_candidate_strategy = st.builds(
    lambda ad, campaign, bid, pctrs, quality: Candidate(ad, campaign, "cpc", bid, pctrs, quality_micros=quality),
    ad=st.integers(0, 10**6), campaign=st.integers(0, 40), bid=st.integers(100_000, 2_000_000),
    pctrs=st.lists(st.floats(0.002, 0.02).map(lambda x: round(x, 4)), min_size=3, max_size=3),
    quality=st.integers(-1_000, 1_000))
# some auctions have more losers than the log samples, so the replay sees only part of them
auctions = st.fixed_dictionaries({
    "candidates": st.one_of(
        st.lists(candidate_strategy, min_size=0, max_size=12, unique_by=lambda c: c.ad_id),
        st.lists(candidate_strategy, min_size=25, max_size=40, unique_by=lambda c: c.ad_id),
        st.lists(crowded_candidate_strategy, min_size=25, max_size=40, unique_by=lambda c: c.ad_id),
        st.lists(tied_candidate_strategy, min_size=2, max_size=40, unique_by=lambda c: c.ad_id)),
    "reserve": st.integers(0, 45_000), "slots": st.integers(1, 3), "seed": st.integers(0, 1000),
    # or a reserve just under the k-th best total: it leaves slots empty and sets prices
    "reserve_under_rank": st.one_of(st.none(), st.integers(0, 3))})


def _one_quality(auction):
    """The auction with every candidate at the first one's quality term: the live rule while the quality term is
    the placement's default for every ad."""
    quality = auction["candidates"][0].quality_micros if auction["candidates"] else 0
    return {**auction, "candidates": [replace(c, quality_micros=quality) for c in auction["candidates"]]}


shared_quality_auctions = auctions.map(_one_quality)


def _reserve(auction) -> int:
    rank, candidates = auction["reserve_under_rank"], auction["candidates"]
    if rank is None or not candidates:
        return auction["reserve"]
    totals = sorted((exact_total(c, 0) for c in candidates), reverse=True)
    return math.floor(totals[min(rank, len(totals) - 1)])


def _logged(auction):
    positions = sorted(random.Random(auction["seed"]).sample(range(1, 12), auction["slots"]))
    reserve = _reserve(auction)
    result = run_auction(auction["candidates"], positions, rules=AuctionRules(reserve),
                         rng=random.Random(auction["seed"]), exploration_share=0)
    return result, served(result, positions=positions, reserve_micros=reserve)


@settings(max_examples=200, deadline=None)
@given(auction=auctions)
def test_an_unchanged_replay_reproduces_the_logged_winners_and_prices_exactly(auction):
    result, record = _logged(auction)
    replayed = replay.replay(record)
    assert [(w.slot, w.ad_id, w.price_micros) for w in replayed.winners] == \
        [(w.slot, w.candidate.ad_id, w.price_micros) for w in result.winners]
    assert replayed == replay.logged_outcome(record)
    comparison = replay.compare_request(record)
    assert (comparison.changed_winners, comparison.changed_prices, comparison.exact) == (0, 0, True)
    assert comparison.replayed_revenue_micros == comparison.logged_revenue_micros


@settings(max_examples=200, deadline=None)
@given(auction=st.one_of(auctions, shared_quality_auctions), new_reserve=st.integers(0, 40_000),
       quality_weight=st.sampled_from([1.0, 1.0, 1.0, 0.5, 2.0]))
def test_a_replay_called_exact_is_what_the_full_auction_does(auction, new_reserve, quality_weight):
    _, record = _logged(auction)
    assume(replay.replay_is_exact(record, new_reserve, quality_weight))
    event("complete log" if replay.log_is_complete(record) else "sampled log")
    full = run_auction(auction["candidates"], record["slot_positions"],
                       rules=AuctionRules(new_reserve, quality_weight=quality_weight), exploration_share=0)
    replayed = replay.replay(record, new_reserve, quality_weight)
    assert [(w.slot, w.ad_id, w.price_micros, w.expected_cost_micros) for w in replayed.winners] == \
        [(w.slot, w.candidate.ad_id, w.price_micros, w.expected_cost_micros()) for w in full.winners]


@settings(max_examples=200, deadline=None)
@given(auction=shared_quality_auctions, raise_by=st.integers(0, 20_000))
def test_a_higher_reserve_is_exact_when_the_ads_share_one_quality_term_and_never_raises_fill(auction, raise_by):
    _, record = _logged(auction)
    higher = record["reserve_micros"] + raise_by
    assert replay.replay_is_exact(record, higher)
    assert replay.replay(record, higher).filled_slots <= len(record["winners"])
