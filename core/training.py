"""The learning loop's shared rules: which impressions become training examples, with which label and
weight, and how a model trained on down-sampled data is corrected back. Pure: the streaming join
(jobs/training_join), the batch join (pipelines/training_set) and the trainer all call these, so the
two joins cannot disagree on a rule.

Label rule (design, "Impression and click", step 6): an impression that was rendered and clicked is a
positive; rendered and not clicked within LABEL_WINDOW_MS of its render is a negative; never rendered is
dropped (nobody saw it). A click proves a render, even when the impression beacon is lost or late.

Conversion rule (design, step 6: "Conversions arrive days later and join on the same id"): an impression
whose click example is a positive also gets a conversion example once CONVERSION_WINDOW_MS have passed since
it was served: label 1 when a conversion of that impression came within the window, else 0. The conversion
model learns P(conversion | click) from them. Conversion examples are never down-sampled.

Down-sampling: every positive is kept; a negative is kept with probability w (default 10 %) decided by a
hash of its impression id, so the streaming and batch joins keep exactly the same negatives, and carries
sample_weight 1 / w. A model trained on the kept examples without weights predicts p for a population with
w times fewer negatives; q = p / (p + (1 - p) / w) corrects it (He et al., "Practical Lessons from
Predicting Clicks on Ads at Facebook", 2014)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

import numpy as np

from core.errors import InvalidArgument

DEFAULT_KEEP_RATE = 0.1
LABEL_WINDOW_MS = 3_600_000  # a render not clicked within an hour is a negative
CONVERSION_WINDOW_MS = 7 * 86_400_000  # a click not converted within 7 days of serving is a conversion negative
CLICK, CONVERSION = "CLICK", "CONVERSION"  # the two tasks a TrainingExample labels


def recalibrate(p, keep_rate: float):
    """q = p / (p + (1 - p) / w): a probability predicted on data whose negatives were kept at rate w,
    mapped back to the full population. Works on floats and numpy arrays."""
    if not 0 < keep_rate <= 1:
        raise InvalidArgument(f"keep rate must be in (0, 1], got {keep_rate}")
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


def conversion_final_at_ms(served_time_ms: int, window_ms: int = CONVERSION_WINDOW_MS) -> int:
    """When a clicked impression's conversion label is final: the conversion window after it was served."""
    return served_time_ms + window_ms


def _earliest(known: int | None, new: int) -> int:
    return new if known is None else min(known, new)


@dataclass(frozen=True)
class Outcome:
    """What the beacons and conversions of one impression said so far."""

    rendered: bool = False
    first_click_ms: int | None = None  # earliest click within the label window
    first_conversion_ms: int | None = None  # earliest conversion within the conversion window


def observe(outcome: Outcome, event_type: str, event_time_ms: int, served_time_ms: int) -> Outcome:
    """Fold one beacon into the outcome; a click after the window is not a positive (nor a render proof)."""
    if event_type == "IMPRESSION":
        return replace(outcome, rendered=True)
    if event_type == "CLICK" and event_time_ms <= final_at_ms(served_time_ms):
        return replace(outcome, rendered=True, first_click_ms=_earliest(outcome.first_click_ms, event_time_ms))
    return outcome


def observe_conversion(outcome: Outcome, event_time_ms: int, served_time_ms: int,
                       window_ms: int = CONVERSION_WINDOW_MS) -> Outcome:
    """Fold one conversion into the outcome; one after the conversion window does not count."""
    if event_time_ms > conversion_final_at_ms(served_time_ms, window_ms):
        return outcome
    return replace(outcome, first_conversion_ms=_earliest(outcome.first_conversion_ms, event_time_ms))


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
    return {**impression, "task": CLICK, "event_time": int(event_time), "label": value,
            "sample_weight": 1.0 if value == 1 else 1.0 / keep_rate}


def conversion_example(impression: dict[str, Any], outcome: Outcome,
                       window_ms: int = CONVERSION_WINDOW_MS) -> dict[str, Any] | None:
    """The conversion example of an impression once its conversion label is final, or None (its click example
    is not a positive). Event time: the conversion, or the end of the window."""
    if label(outcome) != 1:
        return None
    converted = outcome.first_conversion_ms is not None
    event_time = outcome.first_conversion_ms if converted else conversion_final_at_ms(impression["served_time"],
                                                                                       window_ms)
    return {**impression, "task": CONVERSION, "event_time": int(event_time), "label": int(converted),
            "sample_weight": 1.0}


def examples_of_impression(contexts: Sequence[dict[str, Any]], events: Iterable[dict[str, Any]],
                           conversions: Iterable[dict[str, Any]] = (), keep_rate: float = DEFAULT_KEEP_RATE,
                           conversion_window_ms: int = CONVERSION_WINDOW_MS) -> list[dict[str, Any]]:
    """The examples of one impression id from everything known of it: its served contexts (impressions_of; a
    repeat of the served record is the same context, the first counts; none: nothing to join), its beacons and
    its conversions. The click example (if any), then the conversion example (if any)."""
    if not contexts:
        return []
    context = contexts[0]
    outcome = Outcome()
    for event in events:
        outcome = observe(outcome, event["event_type"], int(event["event_time"]), int(event["served_time"]))
    for conversion in conversions:
        outcome = observe_conversion(outcome, int(conversion["event_time"]), int(conversion["served_time"]),
                                     conversion_window_ms)
    made = (example(context, outcome, keep_rate), conversion_example(context, outcome, conversion_window_ms))
    return [e for e in made if e is not None]


def _by_impression(records: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        grouped.setdefault(record["impression_id"], []).append(record)
    return grouped


def example_order(example_record: dict[str, Any]) -> tuple[str, str]:
    """The order the joins write examples in: by impression id, the click example before the conversion one."""
    return example_record["impression_id"], example_record.get("task", CLICK)


def join(served_records: Iterable[dict[str, Any]], events: Iterable[dict[str, Any]],
         keep_rate: float = DEFAULT_KEEP_RATE, conversions: Iterable[dict[str, Any]] = (),
         conversion_window_ms: int = CONVERSION_WINDOW_MS) -> list[dict[str, Any]]:
    """The whole join over complete inputs in memory (the reference both joins must equal): examples in
    example_order."""
    contexts: dict[str, list[dict[str, Any]]] = {}
    for served in served_records:
        for impression in impressions_of(served):
            contexts.setdefault(impression["impression_id"], []).append(impression)
    beacons, converted = _by_impression(events), _by_impression(conversions)
    made = [e for impression_id, found in contexts.items()
            for e in examples_of_impression(found, beacons.get(impression_id, ()), converted.get(impression_id, ()),
                                            keep_rate, conversion_window_ms)]
    return sorted(made, key=example_order)


# ------------------------------------------------------------------ the streaming join's per-impression steps

CLEANUP_MS = 600_000  # how long an impression's state outlives its final label (for a late served record)


@dataclass(frozen=True)
class LabelState:
    """What a streaming join holds of one impression between its first record and its cleanup. An impression
    whose click example is a positive is held on until its conversion label is final."""

    served_ms: int
    outcome: Outcome = field(default_factory=Outcome)
    context: dict[str, Any] | None = None  # the served record's training context (impressions_of), once seen
    done: bool = False  # its click label was final and decided (an example emitted or dropped)
    conversion_done: bool = False  # its conversion label was decided (a conversion example emitted)

    @property
    def awaits_conversion(self) -> bool:
        """Its click example was a positive and its conversion label is not decided yet."""
        return self.done and not self.conversion_done and label(self.outcome) == 1


@dataclass(frozen=True)
class JoinRules:
    """The parameters of a join: the negatives' keep rate and the conversion window."""

    keep_rate: float = DEFAULT_KEEP_RATE
    conversion_window_ms: int = CONVERSION_WINDOW_MS

    def __post_init__(self) -> None:
        if not 0 < self.keep_rate <= 1:
            raise InvalidArgument(f"keep rate must be in (0, 1], got {self.keep_rate}")
        if self.conversion_window_ms < LABEL_WINDOW_MS:
            raise InvalidArgument(f"the conversion window ({self.conversion_window_ms} ms) must be at least the click "
                             f"label's window ({LABEL_WINDOW_MS} ms)")


@dataclass(frozen=True)
class LabelStep:
    """What one step asks of the job: keep `state` (None: clear it), emit `examples`, set `timers`, count."""

    state: LabelState | None
    examples: tuple[dict[str, Any], ...] = ()
    timers: tuple[int, ...] = ()
    changed: bool = True  # False: the state is as it was, nothing to write
    late_beacon: bool = False  # a beacon after the impression's click label was decided: ignored
    late_conversion: bool = False  # a conversion after the impression's conversion label (or no click): ignored
    unjoined: bool = False  # cleaned up without ever seeing the served record


def _timers(served_ms: int) -> tuple[int, ...]:
    return final_at_ms(served_ms), final_at_ms(served_ms) + CLEANUP_MS


def _conversion_timers(served_ms: int, rules: JoinRules) -> tuple[int, ...]:
    final = conversion_final_at_ms(served_ms, rules.conversion_window_ms)
    return final, final + CLEANUP_MS


def _decide(state: LabelState, rules: JoinRules, at_ms: int) -> LabelStep:
    """The click label at its final moment and, for a positive, the conversion label too when at_ms (a timer or
    the watermark) has passed its final moment already; a positive otherwise waits with its conversion timers."""
    assert state.context is not None
    made = example(state.context, state.outcome, rules.keep_rate)
    state = replace(state, done=True)
    if not state.awaits_conversion:
        return LabelStep(state, tuple(e for e in (made,) if e is not None))
    if at_ms >= conversion_final_at_ms(state.served_ms, rules.conversion_window_ms):
        return LabelStep(replace(state, conversion_done=True),
                         (made, conversion_example(state.context, state.outcome, rules.conversion_window_ms)),
                         _conversion_timers(state.served_ms, rules)[1:])  # its cleanup
    return LabelStep(state, (made,), _conversion_timers(state.served_ms, rules))


def on_served(state: LabelState | None, context: dict[str, Any], watermark_ms: int | None,
              rules: JoinRules = JoinRules()) -> LabelStep:
    """A served record's context for this impression. The first one counts (the served log is at-least-once);
    one that arrives after the label was final (a late served record) decides the label at once."""
    timers = _timers(int(context["served_time"])) if state is None else ()
    state = state or LabelState(int(context["served_time"]))
    if state.context is not None:
        return LabelStep(state, changed=False)
    state = replace(state, context=context)
    if watermark_ms is not None and watermark_ms >= final_at_ms(state.served_ms):  # (not done: no context yet)
        step = _decide(state, rules, watermark_ms)
        return replace(step, timers=timers + step.timers)
    return LabelStep(state, timers=timers)


def on_beacon(state: LabelState | None, served_ms: int, event_type: str, event_ms: int) -> LabelStep:
    """An impression or click beacon; one after the click label was decided is counted and ignored."""
    timers = _timers(served_ms) if state is None else ()
    state = state or LabelState(served_ms)
    if state.done:
        return LabelStep(state, changed=False, late_beacon=True)
    return LabelStep(replace(state, outcome=observe(state.outcome, event_type, event_ms, served_ms)), timers=timers)


def on_conversion(state: LabelState | None, served_ms: int, event_ms: int, rules: JoinRules = JoinRules()) -> LabelStep:
    """A conversion of this impression; one after its conversion label was decided, or after its click label was
    decided as anything but a positive, is counted and ignored."""
    timers = _timers(served_ms) if state is None else ()
    state = state or LabelState(served_ms)
    if state.conversion_done or (state.done and not state.awaits_conversion):
        return LabelStep(state, changed=False, late_conversion=True)
    outcome = observe_conversion(state.outcome, event_ms, served_ms, rules.conversion_window_ms)
    return LabelStep(replace(state, outcome=outcome), timers=timers)


def on_timer(state: LabelState | None, timestamp_ms: int, rules: JoinRules = JoinRules()) -> LabelStep:
    """An event-time timer: at final_at_ms the click label is decided (if the served record came); CLEANUP_MS
    later the state goes (counted unjoined if the served record never came) unless it awaits a conversion; a
    positive's conversion label is decided at conversion_final_at_ms and its state goes CLEANUP_MS later."""
    if state is None:
        return LabelStep(None, changed=False)
    if timestamp_ms >= conversion_final_at_ms(state.served_ms, rules.conversion_window_ms) + CLEANUP_MS:
        return LabelStep(None, unjoined=state.context is None)
    if state.awaits_conversion:
        if timestamp_ms >= conversion_final_at_ms(state.served_ms, rules.conversion_window_ms):
            assert state.context is not None
            return LabelStep(replace(state, conversion_done=True),
                             (conversion_example(state.context, state.outcome, rules.conversion_window_ms),))
        return LabelStep(state, changed=False)
    if timestamp_ms >= final_at_ms(state.served_ms) + CLEANUP_MS and not state.conversion_done:
        return LabelStep(None, unjoined=state.context is None)
    if state.context is not None and not state.done and timestamp_ms >= final_at_ms(state.served_ms):
        return _decide(state, rules, timestamp_ms)
    return LabelStep(state, changed=False)


@dataclass(frozen=True)
class JoinRecord:
    """One input of the streaming join, keyed by its impression id: a served slot (`context` from
    impressions_of), an impression or click beacon (`event_type`), or a conversion."""

    impression_id: str
    kind: str  # served | event | conversion
    served_ms: int
    event_ms: int
    event_type: str | None = None
    context: dict[str, Any] | None = None
    user_id: str | None = None  # a served slot's user (core.privacy: the join drops a deleted user's examples)


def join_records(kind: str, record: dict[str, Any]) -> list[JoinRecord]:
    """A decoded served record (kind `served`: one JoinRecord per filled slot), beacon (`event`) or conversion
    (`conversion`) as the join's inputs."""
    if kind == "served":
        return [JoinRecord(slot["impression_id"], "served", int(slot["served_time"]), int(slot["served_time"]),
                           context=slot, user_id=record.get("user_id")) for slot in impressions_of(record)]
    return [JoinRecord(record["impression_id"], kind, int(record["served_time"]), int(record["event_time"]),
                       record.get("event_type"))]


def apply(state: LabelState | None, record: JoinRecord, watermark_ms: int | None,
          rules: JoinRules = JoinRules()) -> LabelStep:
    """One join input into its impression's state: on_served, on_conversion or on_beacon by its kind."""
    if record.kind == "served":
        assert record.context is not None
        return on_served(state, record.context, watermark_ms, rules)
    if record.kind == "conversion":
        return on_conversion(state, record.served_ms, record.event_ms, rules)
    assert record.event_type is not None
    return on_beacon(state, record.served_ms, record.event_type, record.event_ms)
