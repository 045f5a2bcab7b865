"""The learning loop's shared rules: which impressions become training examples, with which label and
weight, and how a model trained on down-sampled data is corrected back. Pure: the streaming join
(jobs/training_join), the batch join (pipelines/training_set) and the trainer all call these, so the
two joins cannot disagree on a rule.

Label rule (design, "Impression and click", step 6): an impression that was rendered and clicked is a
positive; rendered and not clicked within LABEL_WINDOW_MS of its render is a negative; never rendered is
dropped (nobody saw it). A click proves a render, even when the impression beacon is lost or late.

Down-sampling: every positive is kept; a negative is kept with probability w (default 10 %) decided by a
hash of its impression id, so the streaming and batch joins keep exactly the same negatives, and carries
sample_weight 1 / w. A model trained on the kept examples without weights predicts p for a population with
w times fewer negatives; q = p / (p + (1 - p) / w) corrects it (He et al., "Practical Lessons from
Predicting Clicks on Ads at Facebook", 2014)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

import numpy as np

DEFAULT_KEEP_RATE = 0.1
LABEL_WINDOW_MS = 3_600_000  # a render not clicked within an hour is a negative


def recalibrate(p, keep_rate: float):
    """q = p / (p + (1 - p) / w): a probability predicted on data whose negatives were kept at rate w,
    mapped back to the full population. Works on floats and numpy arrays."""
    if not 0 < keep_rate <= 1:
        raise ValueError(f"keep rate must be in (0, 1], got {keep_rate}")
    p = np.asarray(p, dtype=np.float64)
    q = p / (p + (1.0 - p) / keep_rate)
    return float(q) if q.ndim == 0 else q


# ------------------------------------------------------------------ the label rule
# Every window is anchored on the served time, which the served record and every beacon of the impression
# carry, so the moment a label becomes final (served + 1 h) is known from any one of them, and the streaming
# join can set its timer without waiting for the render beacon. Renders follow serving within seconds (the
# token expires long before an hour), so "within an hour of serving" and "of rendering" differ by seconds.

def final_at_ms(served_time_ms: int) -> int:
    """When an impression's label is final: an hour after it was served."""
    return served_time_ms + LABEL_WINDOW_MS


@dataclass(frozen=True)
class Outcome:
    """What the beacons of one impression said so far."""

    rendered: bool = False
    first_click_ms: int | None = None  # earliest click within the label window


def observe(outcome: Outcome, event_type: str, event_time_ms: int, served_time_ms: int) -> Outcome:
    """Fold one beacon into the outcome; a click after the window is not a positive (nor a render proof)."""
    if event_type == "IMPRESSION":
        return Outcome(True, outcome.first_click_ms)
    if event_type == "CLICK" and event_time_ms <= final_at_ms(served_time_ms):
        first = event_time_ms if outcome.first_click_ms is None else min(outcome.first_click_ms, event_time_ms)
        return Outcome(True, first)
    return outcome


def label(outcome: Outcome) -> int | None:
    """1 rendered and clicked within the window; 0 rendered and not clicked; None never rendered (dropped)."""
    if outcome.first_click_ms is not None:
        return 1
    return 0 if outcome.rendered else None


def keeps_negative(impression_id: str, keep_rate: float) -> bool:
    """Whether a negative is kept: a hash of the impression id below the keep rate, the same in every join."""
    if keep_rate >= 1:
        return True
    digest = hashlib.blake2b(impression_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < keep_rate * 2**64


def impressions_of(served: dict[str, Any]) -> list[dict[str, Any]]:
    """One training context per filled slot of a ServedRecord: every TrainingExample field but the label,
    its weight and the event time."""
    return [{
        "impression_id": w["impression_id"], "request_id": served["request_id"],
        "served_time": int(served["event_time"]), "ad_id": int(w["ad_id"]), "campaign_id": int(w["campaign_id"]),
        "slot_position": int(w["slot_position"]), "placement": served["placement"], "country": served.get("country"),
        "device": served.get("device"), "billing_type": w["billing_type"],
        "user_features": dict(served.get("user_features") or {}),
        "ad_snapshot_version": int(served["ad_snapshot_version"]), "logged_pctr": float(w["pctr"]),
        "scored_by_fallback": bool(served.get("scored_by_fallback", False)),
        "exploration": bool(served.get("exploration", False)),
    } for w in served.get("winners", [])]


def example(impression: dict[str, Any], outcome: Outcome, keep_rate: float = DEFAULT_KEEP_RATE) -> dict[str, Any] | None:
    """The TrainingExample of an impression once its label is final, or None (never rendered, or a
    negative the down-sampling drops)."""
    value = label(outcome)
    if value is None:
        return None
    if value == 0 and not keeps_negative(impression["impression_id"], keep_rate):
        return None
    event_time = outcome.first_click_ms if value == 1 else final_at_ms(impression["served_time"])
    return {**impression, "event_time": int(event_time), "label": value,
            "sample_weight": 1.0 if value == 1 else 1.0 / keep_rate}


def example_of_impression(contexts: Sequence[dict[str, Any]], events: Iterable[dict[str, Any]],
                          keep_rate: float = DEFAULT_KEEP_RATE) -> dict[str, Any] | None:
    """The example of one impression id from everything known of it: its served contexts (impressions_of; a
    repeat of the served record is the same context, the first counts; none: nothing to join) and its beacons."""
    if not contexts:
        return None
    context = contexts[0]
    outcome = Outcome()
    for event in events:
        outcome = observe(outcome, event["event_type"], int(event["event_time"]), int(event["served_time"]))
    return example(context, outcome, keep_rate)


def join(served_records: Iterable[dict[str, Any]], events: Iterable[dict[str, Any]],
         keep_rate: float = DEFAULT_KEEP_RATE) -> list[dict[str, Any]]:
    """The whole join over complete inputs in memory (the reference both joins must equal): examples in
    impression-id order."""
    contexts: dict[str, list[dict[str, Any]]] = {}
    for served in served_records:
        for impression in impressions_of(served):
            contexts.setdefault(impression["impression_id"], []).append(impression)
    beacons: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        beacons.setdefault(event["impression_id"], []).append(event)
    made = (example_of_impression(found, beacons.get(impression_id, ()), keep_rate)
            for impression_id, found in contexts.items())
    return sorted((e for e in made if e is not None), key=lambda e: e["impression_id"])


# ------------------------------------------------------------------ the streaming join's per-impression steps

CLEANUP_MS = 600_000  # how long an impression's state outlives its final label (for a late served record)


@dataclass(frozen=True)
class LabelState:
    """What a streaming join holds of one impression between its first record and its cleanup."""

    served_ms: int
    outcome: Outcome = field(default_factory=Outcome)
    context: dict[str, Any] | None = None  # the served record's training context (impressions_of), once seen
    done: bool = False  # its label was final and decided (an example emitted or dropped)

    def text(self) -> str:
        return json.dumps({"served_ms": self.served_ms, "rendered": self.outcome.rendered,
                           "click_ms": self.outcome.first_click_ms, "context": self.context, "done": self.done})

    @classmethod
    def parse(cls, text: str | None) -> "LabelState | None":
        if text is None:
            return None
        raw = json.loads(text)
        return cls(raw["served_ms"], Outcome(raw["rendered"], raw["click_ms"]), raw["context"], raw["done"])


@dataclass(frozen=True)
class LabelStep:
    """What one step asks of the job: keep `state` (None: clear it), emit `example`, set `timers`, count."""

    state: LabelState | None
    example: dict[str, Any] | None = None
    timers: tuple[int, ...] = ()
    changed: bool = True  # False: the state is as it was, nothing to write
    late_beacon: bool = False  # a beacon after the impression's label was decided: ignored
    unjoined: bool = False  # cleaned up without ever seeing the served record


def _timers(served_ms: int) -> tuple[int, ...]:
    return final_at_ms(served_ms), final_at_ms(served_ms) + CLEANUP_MS


def _decide(state: LabelState, keep_rate: float) -> LabelStep:
    assert state.context is not None
    return LabelStep(replace(state, done=True), example(state.context, state.outcome, keep_rate))


def on_served(state: LabelState | None, context: dict[str, Any], watermark_ms: int | None,
              keep_rate: float = DEFAULT_KEEP_RATE) -> LabelStep:
    """A served record's context for this impression. The first one counts (the served log is at-least-once);
    one that arrives after the label was final (a late served record) decides the label at once."""
    timers = _timers(int(context["served_time"])) if state is None else ()
    state = state or LabelState(int(context["served_time"]))
    if state.context is not None:
        return LabelStep(state, changed=False)
    state = replace(state, context=context)
    if watermark_ms is not None and watermark_ms >= final_at_ms(state.served_ms):  # (not done: no context yet)
        return replace(_decide(state, keep_rate), timers=timers)
    return LabelStep(state, timers=timers)


def on_beacon(state: LabelState | None, served_ms: int, event_type: str, event_ms: int) -> LabelStep:
    """An impression or click beacon; one after the label was decided is counted and ignored."""
    timers = _timers(served_ms) if state is None else ()
    state = state or LabelState(served_ms)
    if state.done:
        return LabelStep(state, changed=False, late_beacon=True)
    return LabelStep(replace(state, outcome=observe(state.outcome, event_type, event_ms, served_ms)), timers=timers)


def on_timer(state: LabelState | None, timestamp_ms: int, keep_rate: float = DEFAULT_KEEP_RATE) -> LabelStep:
    """An event-time timer: at final_at_ms the label is decided (if the served record came); CLEANUP_MS later
    the state goes (counted unjoined if the served record never came)."""
    if state is None:
        return LabelStep(None, changed=False)
    if timestamp_ms >= final_at_ms(state.served_ms) + CLEANUP_MS:
        return LabelStep(None, unjoined=state.context is None)
    if state.context is not None and not state.done and timestamp_ms >= final_at_ms(state.served_ms):
        return _decide(state, keep_rate)
    return LabelStep(state, changed=False)
