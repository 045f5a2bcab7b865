"""The label rule and the down-sampling shared by the streaming and batch training joins (core.training), and the
batch join (pipelines.training_set) against the in-memory reference on a simulated day."""
from __future__ import annotations

import heapq
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyflink.common import Row

from core import training
from core.training import (CONVERSION_WINDOW_MS, LABEL_WINDOW_MS, Outcome, example, keeps_negative, label, observe,
                           recalibrate)
from jobs.training_join import state as join_state

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


def conversion(impression_id: str, after_ms: int) -> dict:
    return {"impression_id": impression_id, "event_time": SERVED_MS + after_ms, "served_time": SERVED_MS}


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
    click, converted = training.join([record], events, keep_rate=0.1)
    context = {
        "impression_id": "r1:2", "request_id": "r1", "served_time": SERVED_MS, "ad_id": 22, "campaign_id": 2,
        "slot_position": 3, "placement": "feed", "country": "US", "device": "ios", "billing_type": "CLICK",
        "user_features": {"emb_0": 0.5, "activity": -1.0}, "ad_snapshot_version": 42, "logged_pctr": 0.02,
        "scored_by_fallback": True, "exploration": True}
    assert click == {**context, "task": "CLICK", "event_time": SERVED_MS + 2_000, "label": 1, "sample_weight": 1.0}
    # a positive also gets its conversion example: none came, so 0 once the window is over
    assert converted == {**context, "task": "CONVERSION", "event_time": SERVED_MS + CONVERSION_WINDOW_MS,
                         "label": 0, "sample_weight": 1.0}


def test_a_click_that_converts_within_the_window_is_a_conversion_positive_at_its_first_conversion():
    events = [beacon("r1:1", "IMPRESSION", 500), beacon("r1:1", "CLICK", 2_000)]
    conversions = [conversion("r1:1", 90_000_000), conversion("r1:1", 5_000_000)]  # reported twice, a day apart
    click, converted = training.join([served()], events, keep_rate=0.1, conversions=conversions)
    assert (click["task"], click["label"]) == ("CLICK", 1)
    assert (converted["task"], converted["label"], converted["event_time"]) == ("CONVERSION", 1, SERVED_MS + 5_000_000)
    late = [conversion("r1:1", CONVERSION_WINDOW_MS + 1)]
    assert training.join([served()], events, 0.1, late)[1]["label"] == 0
    short = training.join([served()], events, 0.1, conversions, conversion_window_ms=4_000_000)
    assert short[1]["label"] == 0 and short[1]["event_time"] == SERVED_MS + 4_000_000


def test_only_clicked_impressions_get_conversion_examples_and_they_are_never_down_sampled():
    record = served(slots=((1, 11, 1), (2, 22, 2)))
    events = [beacon("r1:1", "IMPRESSION", 500), beacon("r1:2", "IMPRESSION", 500), beacon("r1:2", "CLICK", 900)]
    conversions = [conversion("r1:1", 60_000), conversion("r1:2", 60_000)]  # r1:1 was never clicked
    made = training.join([record], events, keep_rate=1e-9, conversions=conversions)
    assert [(e["impression_id"], e["task"], e["label"], e["sample_weight"]) for e in made] == [
        ("r1:2", "CLICK", 1, 1.0), ("r1:2", "CONVERSION", 1, 1.0)]
    with pytest.raises(ValueError, match="conversion window"):
        training.JoinRules(0.1, LABEL_WINDOW_MS - 1)


def test_a_negative_becomes_final_an_hour_after_serving():
    (made,) = training.join([served()], [beacon("r1:1", "IMPRESSION", 500)], keep_rate=1.0)
    assert made["label"] == 0 and made["event_time"] == SERVED_MS + LABEL_WINDOW_MS


def test_a_served_record_logged_twice_gives_one_example():
    events = [beacon("r1:1", "IMPRESSION", 500)]
    assert len(training.join([served(), served()], events, keep_rate=1.0)) == 1
    clicked = events + [beacon("r1:1", "CLICK", 900)]
    assert [e["task"] for e in training.join([served(), served()], clicked, 1.0)] == ["CLICK", "CONVERSION"]


def test_recalibration_maps_a_down_sampled_rate_back_to_the_population():
    true_rate, keep = 0.02, 0.1
    sampled_rate = true_rate / (true_rate + (1 - true_rate) * keep)  # what a model sees on the kept examples
    assert recalibrate(sampled_rate, keep) == pytest.approx(true_rate)
    assert np.allclose(recalibrate(np.array([sampled_rate, 0.0, 1.0]), keep), [true_rate, 0.0, 1.0])
    assert recalibrate(0.3, 1.0) == pytest.approx(0.3)


def test_the_beam_backfill_equals_the_reference_join_on_a_simulated_day(tmp_path: Path):
    import fastavro

    from sim.learning_day import make_world, simulate_day, write_day
    from pipelines import training_set

    day = simulate_day(make_world(seed=3, campaigns=20, users=500), requests=400, seed=5)
    served_log = list(day.served) + day.served[:10]  # a served record logged twice changes nothing
    day.served = served_log
    meta = write_day(day, tmp_path / "day", keep_rate=0.3)
    summary = training_set.run(["--served", str(tmp_path / "day" / "served.avro"), "--events",
                                str(tmp_path / "day" / "events.avro"), "--conversions",
                                str(tmp_path / "day" / "conversions.avro"), "--keep-rate", "0.3",
                                "--output", str(tmp_path / "out")], save_main_session=False)
    batch = []
    for path in sorted((tmp_path / "out").glob("examples-*.avro")):
        with open(path, "rb") as f:
            batch.extend(fastavro.reader(f))
    reference = training.join(served_log, day.events, keep_rate=0.3, conversions=day.conversions)
    assert sorted(batch, key=training.example_order) == reference
    clicks = [e for e in reference if e["task"] == "CLICK"]
    conversions = [e for e in reference if e["task"] == "CONVERSION"]
    assert summary["examples"] == meta["examples"] == len(clicks) > 0
    assert 0 < summary["positives"] < summary["examples"]
    assert summary["conversion_examples"] == meta["conversion_examples"] == summary["positives"] == len(conversions)
    assert 0 < summary["conversions_labelled"] < summary["conversion_examples"]


# ------------------------------------------------------------------ the streaming join's steps


class StreamingLabels:
    """Drives core.training's on_served / on_beacon / on_conversion / on_timer as jobs/training_join does: state
    per impression id (through its Flink state row, jobs/training_join/state), event-time timers that fire as the watermark passes them."""

    def __init__(self, keep_rate: float = 0.5, conversion_window_ms: int = CONVERSION_WINDOW_MS):
        self.rules, self.watermark = training.JoinRules(keep_rate, conversion_window_ms), None
        self.state: dict[str, Row] = {}
        self.timers: list[tuple[int, str]] = []
        self.examples: list[dict] = []
        self.late = self.unjoined = self.late_conversions = 0

    def _apply(self, key: str, step: training.LabelStep) -> None:
        if step.changed:
            if step.state is None:
                self.state.pop(key, None)
            else:
                self.state[key] = join_state.label_to_row(step.state)
        for timestamp in step.timers:
            heapq.heappush(self.timers, (timestamp, key))
        self.late += step.late_beacon
        self.late_conversions += step.late_conversion
        self.unjoined += step.unjoined
        self.examples.extend(step.examples)

    def _state(self, key: str):
        return join_state.label_from_row(self.state.get(key))

    def served(self, record: dict) -> None:
        for context in training.impressions_of(record):
            key = context["impression_id"]
            self._apply(key, training.on_served(self._state(key), context, self.watermark, self.rules))

    def beacon(self, event: dict) -> None:
        key = event["impression_id"]
        self._apply(key, training.on_beacon(self._state(key), event["served_time"], event["event_type"],
                                            event["event_time"]))

    def conversion(self, record: dict) -> None:
        key = record["impression_id"]
        self._apply(key, training.on_conversion(self._state(key), record["served_time"], record["event_time"],
                                                self.rules))

    def advance(self, watermark: int) -> None:
        self.watermark = watermark
        while self.timers and self.timers[0][0] <= watermark:
            timestamp, key = heapq.heappop(self.timers)
            self._apply(key, training.on_timer(self._state(key), timestamp, self.rules))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_streaming_steps_equal_the_reference_join_whatever_the_arrival_order(seed):
    # Records arrive out of order, but never later than the watermark's bound: then the order cannot matter.
    rng = np.random.default_rng(seed)
    bound_ms = 5_000
    window_ms = int(rng.choice([LABEL_WINDOW_MS, 3 * LABEL_WINDOW_MS, CONVERSION_WINDOW_MS]))
    served_records, events, conversions = [], [], []
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
            for _ in range(int(rng.integers(0, 3))):  # conversions: within the window, or after it
                conversions.append({"impression_id": winner["impression_id"], "served_time": at,
                                    "event_time": at + int(rng.integers(0, 2 * window_ms))})
    arrivals = [(r["event_time"] + rng.uniform(0, bound_ms), 0, i) for i, r in enumerate(served_records)]
    arrivals += [(e["event_time"] + rng.uniform(0, bound_ms), 1, i) for i, e in enumerate(events)]
    arrivals += [(c["event_time"] + rng.uniform(0, bound_ms), 2, i) for i, c in enumerate(conversions)]
    job, newest = StreamingLabels(conversion_window_ms=window_ms), 0
    for _, kind, i in sorted(arrivals):
        record = (served_records, events, conversions)[kind][i]
        (job.served, job.beacon, job.conversion)[kind](record)
        if kind < 2:  # conversions never drive the clock (the job gives them a watermark a day ahead)
            newest = max(newest, record["event_time"])
            job.advance(newest - bound_ms - 1)  # as Flink's bounded-out-of-orderness watermark
    job.advance(2**62)
    expected = training.join(served_records, events, 0.5, conversions, window_ms)
    assert sorted(job.examples, key=training.example_order) == expected
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
    assert [e["task"] for e in job.examples] == ["CLICK", "CONVERSION"]
    assert job.late == 1 and job.state == {} and job.unjoined == 0


def test_a_positive_waits_for_its_conversion_label_and_a_conversion_after_it_is_counted():
    job = StreamingLabels()
    job.conversion(conversion("r1:1", 30_000))  # the conversion may arrive before anything else of its impression
    job.served(served())
    job.beacon(beacon("r1:1", "CLICK", 1_000))
    job.advance(training.final_at_ms(SERVED_MS) + training.CLEANUP_MS)  # the click label is final, the state stays
    assert [(e["task"], e["label"]) for e in job.examples] == [("CLICK", 1)] and list(job.state) == ["r1:1"]
    job.advance(training.conversion_final_at_ms(SERVED_MS))
    assert [(e["task"], e["label"]) for e in job.examples] == [("CLICK", 1), ("CONVERSION", 1)]
    job.conversion(conversion("r1:1", 60_000))  # after the decision: counted, ignored
    job.advance(2**62)
    assert len(job.examples) == 2 and job.late_conversions == 1 and job.state == {}


def test_a_served_record_after_the_conversion_window_gives_both_examples_and_its_state_goes():
    job = StreamingLabels()
    job.advance(training.conversion_final_at_ms(SERVED_MS) + LABEL_WINDOW_MS)  # the clock is days past r1:1
    job.beacon(beacon("r1:1", "CLICK", 1_000))  # its click and its served record come now, between two ticks
    job.served(served())
    assert [(e["task"], e["label"]) for e in job.examples] == [("CLICK", 1), ("CONVERSION", 0)]
    job.advance(training.conversion_final_at_ms(SERVED_MS) + LABEL_WINDOW_MS + 1)  # the next tick fires its timers
    assert job.state == {} and len(job.examples) == 2


def test_a_conversion_of_an_impression_that_was_not_clicked_is_counted_and_gives_no_example():
    job = StreamingLabels(keep_rate=1.0)
    job.served(served())
    job.beacon(beacon("r1:1", "IMPRESSION", 500))
    job.advance(training.final_at_ms(SERVED_MS))
    job.conversion(conversion("r1:1", LABEL_WINDOW_MS + 5))
    job.advance(2**62)
    assert [(e["task"], e["label"]) for e in job.examples] == [("CLICK", 0)]
    assert job.late_conversions == 1 and job.state == {}


def test_beacons_whose_served_record_never_came_are_counted_and_cleaned_up():
    job = StreamingLabels()
    job.beacon(beacon("r9:1", "IMPRESSION", 500))
    job.advance(training.final_at_ms(SERVED_MS) + training.CLEANUP_MS)
    assert job.examples == [] and job.unjoined == 1 and job.state == {}
