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


def served(hour: int, placement: str, winners: list[int], losers: list[int] = ()) -> dict:
    return {"event_time": DAY0 + hour * HOUR_MS + 1000, "placement": placement,
            "winners": [{"campaign_id": c} for c in winners], "sampled_losers": [{"campaign_id": c} for c in losers]}


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
