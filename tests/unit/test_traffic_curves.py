"""The traffic_curves pipeline on beam.Create, and the shape rule it shares with the budget job."""
from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from core.pacing import TargetCurve, shape_from_counts
from pipelines.traffic_curves import TrafficShapes

HOUR_MS = 3_600_000
DAY0 = 1_773_100_800_000  # 2026-03-10 00:00 UTC


def served(hour: int, placement: str, winners: list[int], losers: list[int] = (), value: int = 20_000,
           slots: int = 1, bid: int = 2_000_000) -> dict:
    return {"event_time": DAY0 + hour * HOUR_MS + 1000, "placement": placement, "reserve_micros": 1_000,
            "slot_positions": list(range(1, slots + 1)),
            "winners": [{"campaign_id": c, "total_value_micros": value, "bid_type": "CPC", "bid_micros": bid,
                         "quality_micros": 0} for c in winners],
            "sampled_losers": [{"campaign_id": c, "total_value_micros": value // 2, "bid_type": "CPM",
                                "bid_micros": 1_000 * value // 2, "quality_micros": None} for c in losers]}


def test_a_shape_needs_enough_history_and_keeps_every_hour_open():
    assert shape_from_counts({10: 5}) is None
    shape = shape_from_counts({h: (100 if h < 12 else 300) for h in range(24)})
    assert sum(shape) == pytest.approx(1.0, abs=1e-4)
    assert shape[13] == pytest.approx(3 * shape[1], rel=1e-3)
    sparse = shape_from_counts({20: 1000})
    assert min(sparse) > 0  # the 1 % floor
    TargetCurve.from_shape(sparse)  # usable by the job


def test_the_pipeline_shapes_campaigns_placements_and_the_default():
    records = ([served(h, "feed", [7], [8]) for h in range(24) for _ in range(20)]
               + [served(20, "video", [7]) for _ in range(480)])
    expected_seven = shape_from_counts({h: 20 + (480 if h == 20 else 0) for h in range(24)})
    with TestPipeline() as p:
        docs = p | beam.Create(records) | TrafficShapes()
        assert_that(docs | beam.Map(lambda d: (sorted(d["campaigns"]), sorted(d["placements"]),
                                               d["campaigns"]["7"], len(d["default"]))),
                    equal_to([(["7", "8"], ["feed", "video"], expected_seven, 24)]))


def test_the_pipeline_keeps_each_placements_values_to_beat_and_the_value_of_a_bid():
    records = ([served(10, "feed", [7], value=1_000 * (i + 1)) for i in range(100)]
               + [served(11, "video", [7], slots=2) for _ in range(10)])  # a slot left empty: the reserve
    with TestPipeline() as p:
        docs = p | beam.Create(records) | TrafficShapes()
        assert_that(docs | beam.Map(lambda d: d["values_to_beat"]),
                    equal_to([{"feed": [1_000] + [5_000 * k for k in range(1, 20)] + [100_000],
                               "video": [1_000] * 21}]))
        # a $2 CPC bid worth 1-100 k per impression (median 50.5 k: 2.5 % a micro), CPM losers 1/1000 a micro
        assert_that(docs | "PerBid" >> beam.Map(lambda d: d["value_per_bid"]),
                    equal_to([{"feed": {"CPC": 0.025}, "video": {"CPC": 0.01}}]), label="per bid")


def test_a_micro_of_bid_is_worth_the_auctions_value_less_quality():
    from core.pacing import value_per_bid_samples

    record = {"placement": "feed", "winners": [{"bid_type": "CPC", "bid_micros": 2_000_000,
                                                "total_value_micros": 32_000, "quality_micros": 2_000}],
              "sampled_losers": [{"bid_type": "CPM", "bid_micros": 5_000_000, "total_value_micros": 5_000,
                                  "quality_micros": None}, {"bid_type": None, "bid_micros": None}]}
    assert value_per_bid_samples(record) == [("feed|CPC", 0.015), ("feed|CPM", 0.001)]
