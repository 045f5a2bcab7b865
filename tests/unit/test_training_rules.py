"""The label rule and the down-sampling shared by the streaming and batch training joins (core.training), and the
batch join (pipelines.training_set) against the in-memory reference on a simulated day."""
from __future__ import annotations

import heapq
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import training
from core.training import LABEL_WINDOW_MS, Outcome, example, keeps_negative, label, observe, recalibrate

SERVED_MS = 1_773_200_000_000


def served(request_id: str = "r1", slots=((1, 11, 1),), **overrides) -> dict:
    """A ServedRecord with the fields the join reads; slots: (slot number, ad id, position)."""
    record = {"request_id": request_id, "event_time": SERVED_MS, "placement": "feed", "country": "US",
              "device": "ios", "user_features": {"emb_0": 0.5, "activity": -1.0}, "ad_snapshot_version": 42,
              "scored_by_fallback": False, "exploration": False,
              "winners": [{"impression_id": f"{request_id}:{slot}", "ad_id": ad, "campaign_id": ad // 10,
                           "slot_position": position, "billing_type": "CLICK", "pctr": 0.02}
                          for slot, ad, position in slots]}
    record.update(overrides)
    return record


def beacon(impression_id: str, event_type: str, after_ms: int) -> dict:
    return {"impression_id": impression_id, "event_type": event_type, "event_time": SERVED_MS + after_ms,
            "served_time": SERVED_MS}


def fold(*events: dict) -> Outcome:
    outcome = Outcome()
    for e in events:
        outcome = observe(outcome, e["event_type"], e["event_time"], e["served_time"])
    return outcome


def test_rendered_and_clicked_is_a_positive_at_its_first_click():
    outcome = fold(beacon("r1:1", "IMPRESSION", 800), beacon("r1:1", "CLICK", 9_000), beacon("r1:1", "CLICK", 4_000))
    assert label(outcome) == 1
    assert outcome.first_click_ms == SERVED_MS + 4_000


def test_rendered_and_not_clicked_within_an_hour_is_a_negative():
    assert label(fold(beacon("r1:1", "IMPRESSION", 800))) == 0
    late_click = fold(beacon("r1:1", "IMPRESSION", 800), beacon("r1:1", "CLICK", LABEL_WINDOW_MS + 1))
    assert label(late_click) == 0


def test_never_rendered_is_dropped():
    assert label(Outcome()) is None
    assert training.join([served()], [], keep_rate=1.0) == []


def test_a_click_proves_the_render_when_the_impression_beacon_is_lost():
    assert label(fold(beacon("r1:1", "CLICK", 3_000))) == 1


def test_every_click_is_kept_and_negatives_are_sampled_by_impression_id_with_their_weight():
    ids = [f"req-{i}:1" for i in range(20_000)]
    kept = [i for i in ids if keeps_negative(i, 0.1)]
    assert 0.09 < len(kept) / len(ids) < 0.11
    assert kept == [i for i in ids if keeps_negative(i, 0.1)]  # the same decision every time, in every join
    context = training.impressions_of(served())[0]
    negative_kept = next(i for i in ids if keeps_negative(i, 0.1))
    negative_dropped = next(i for i in ids if not keeps_negative(i, 0.1))
    assert example(dict(context, impression_id=negative_kept), Outcome(rendered=True), 0.1)["sample_weight"] == \
        pytest.approx(10.0)
    assert example(dict(context, impression_id=negative_dropped), Outcome(rendered=True), 0.1) is None
    positive = example(dict(context, impression_id=negative_dropped), Outcome(True, SERVED_MS + 5), 0.1)
    assert positive["label"] == 1 and positive["sample_weight"] == 1.0


def test_an_example_carries_the_served_context_exactly_as_logged():
    record = served(slots=((1, 11, 1), (2, 22, 3)), scored_by_fallback=True, exploration=True)
    events = [beacon("r1:2", "IMPRESSION", 500), beacon("r1:2", "CLICK", 2_000)]
    (made,) = training.join([record], events, keep_rate=0.1)
    assert made == {
        "impression_id": "r1:2", "request_id": "r1", "served_time": SERVED_MS, "event_time": SERVED_MS + 2_000,
        "label": 1, "sample_weight": 1.0, "ad_id": 22, "campaign_id": 2, "slot_position": 3, "placement": "feed",
        "country": "US", "device": "ios", "billing_type": "CLICK", "user_features": {"emb_0": 0.5, "activity": -1.0},
        "ad_snapshot_version": 42, "logged_pctr": 0.02, "scored_by_fallback": True, "exploration": True}


def test_a_negative_becomes_final_an_hour_after_serving():
    (made,) = training.join([served()], [beacon("r1:1", "IMPRESSION", 500)], keep_rate=1.0)
    assert made["label"] == 0 and made["event_time"] == SERVED_MS + LABEL_WINDOW_MS


def test_a_served_record_logged_twice_gives_one_example():
    events = [beacon("r1:1", "IMPRESSION", 500)]
    assert len(training.join([served(), served()], events, keep_rate=1.0)) == 1


def test_recalibration_maps_a_down_sampled_rate_back_to_the_population():
    true_rate, keep = 0.02, 0.1
    sampled_rate = true_rate / (true_rate + (1 - true_rate) * keep)  # what a model sees on the kept examples
    assert recalibrate(sampled_rate, keep) == pytest.approx(true_rate)
    assert np.allclose(recalibrate(np.array([sampled_rate, 0.0, 1.0]), keep), [true_rate, 0.0, 1.0])
    assert recalibrate(0.3, 1.0) == pytest.approx(0.3)


def test_the_beam_backfill_equals_the_reference_join_on_a_simulated_day(tmp_path: Path):
    import fastavro

    from adserve.learning_day import make_world, simulate_day, write_day
    from pipelines import training_set

    day = simulate_day(make_world(seed=3, campaigns=20, users=500), requests=400, seed=5)
    served_log = list(day.served) + day.served[:10]  # a served record logged twice changes nothing
    day.served = served_log
    meta = write_day(day, tmp_path / "day", keep_rate=0.3)
    summary = training_set.run(["--served", str(tmp_path / "day" / "served.avro"), "--events",
                                str(tmp_path / "day" / "events.avro"), "--keep-rate", "0.3",
                                "--output", str(tmp_path / "out")], save_main_session=False)
    batch = []
    for path in sorted((tmp_path / "out").glob("examples-*.avro")):
        with open(path, "rb") as f:
            batch.extend(fastavro.reader(f))
    reference = training.join(served_log, day.events, keep_rate=0.3)
    assert sorted(batch, key=lambda e: e["impression_id"]) == reference
    assert summary["examples"] == meta["examples"] == len(reference) > 0
    assert 0 < summary["positives"] < summary["examples"]


# ------------------------------------------------------------------ the streaming join's steps


class StreamingLabels:
    """Drives core.training's on_served / on_beacon / on_timer as jobs/training_join does: state per impression
    id (through its text form), event-time timers that fire as the watermark passes them."""

    def __init__(self, keep_rate: float = 0.5):
        self.keep_rate, self.watermark = keep_rate, None
        self.state: dict[str, str] = {}
        self.timers: list[tuple[int, str]] = []
        self.examples: list[dict] = []
        self.late = self.unjoined = 0

    def _apply(self, key: str, step: training.LabelStep) -> None:
        if step.changed:
            if step.state is None:
                self.state.pop(key, None)
            else:
                self.state[key] = step.state.text()
        for timestamp in step.timers:
            heapq.heappush(self.timers, (timestamp, key))
        self.late += step.late_beacon
        self.unjoined += step.unjoined
        if step.example is not None:
            self.examples.append(step.example)

    def _state(self, key: str):
        return training.LabelState.parse(self.state.get(key))

    def served(self, record: dict) -> None:
        for context in training.impressions_of(record):
            key = context["impression_id"]
            self._apply(key, training.on_served(self._state(key), context, self.watermark, self.keep_rate))

    def beacon(self, event: dict) -> None:
        key = event["impression_id"]
        self._apply(key, training.on_beacon(self._state(key), event["served_time"], event["event_type"],
                                            event["event_time"]))

    def advance(self, watermark: int) -> None:
        self.watermark = watermark
        while self.timers and self.timers[0][0] <= watermark:
            timestamp, key = heapq.heappop(self.timers)
            self._apply(key, training.on_timer(self._state(key), timestamp, self.keep_rate))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_streaming_steps_equal_the_reference_join_whatever_the_arrival_order(seed):
    # Records arrive out of order, but never later than the watermark's bound: then the order cannot matter.
    rng = np.random.default_rng(seed)
    bound_ms = 5_000
    served_records, events = [], []
    for r in range(int(rng.integers(1, 8))):
        at = SERVED_MS + int(rng.integers(0, 3 * LABEL_WINDOW_MS))
        record = served(f"r{r}", slots=[(s, 10 + s, s) for s in range(1, int(rng.integers(1, 3)) + 1)], event_time=at)
        served_records += [record] * int(rng.integers(1, 3))  # the served log may repeat a record
        for winner in record["winners"]:
            for _ in range(int(rng.integers(0, 4))):
                kind = "IMPRESSION" if rng.random() < 0.5 else "CLICK"
                window = 60_000 if kind == "IMPRESSION" else 2 * LABEL_WINDOW_MS
                after = int(rng.integers(0, window))
                events.append({"impression_id": winner["impression_id"], "event_type": kind,
                               "event_time": at + after, "served_time": at})
    arrivals = [(r["event_time"] + rng.uniform(0, bound_ms), 0, i) for i, r in enumerate(served_records)]
    arrivals += [(e["event_time"] + rng.uniform(0, bound_ms), 1, i) for i, e in enumerate(events)]
    job, newest = StreamingLabels(), 0
    for _, kind, i in sorted(arrivals):
        record = served_records[i] if kind == 0 else events[i]
        job.served(record) if kind == 0 else job.beacon(record)
        newest = max(newest, record["event_time"])
        job.advance(newest - bound_ms - 1)  # as Flink's bounded-out-of-orderness watermark
    job.advance(2**62)
    expected = training.join(served_records, events, keep_rate=0.5)
    assert sorted(job.examples, key=lambda e: e["impression_id"]) == expected
    assert job.state == {}  # every impression cleaned up
    # only clicks after the label window can come after the decision (counted as late, never labelled)
    assert job.late <= sum(1 for e in events if e["event_time"] > training.final_at_ms(e["served_time"]))


def test_a_served_record_after_its_label_was_final_still_gets_its_example():
    job = StreamingLabels()
    job.beacon(beacon("r1:1", "CLICK", 1_000))
    job.advance(training.final_at_ms(SERVED_MS) + 1)  # the label's timer fires with no served record yet
    assert job.examples == []
    job.served(served())
    assert [(e["impression_id"], e["label"]) for e in job.examples] == [("r1:1", 1)]
    job.served(served())  # and its repeat changes nothing
    job.beacon(beacon("r1:1", "CLICK", 2_000))  # nor does a beacon after the decision, which is counted
    job.advance(2**62)
    assert len(job.examples) == 1 and job.late == 1 and job.state == {} and job.unjoined == 0


def test_beacons_whose_served_record_never_came_are_counted_and_cleaned_up():
    job = StreamingLabels()
    job.beacon(beacon("r9:1", "IMPRESSION", 500))
    job.advance(training.final_at_ms(SERVED_MS) + training.CLEANUP_MS)
    assert job.examples == [] and job.unjoined == 1 and job.state == {}
