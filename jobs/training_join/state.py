"""The training join's Flink state, declared once, named and typed: the descriptor and the conversion of an
impression's core.training.LabelState to and from its row. Never decides anything."""
from __future__ import annotations

from typing import Any

from pyflink.common import Row, Types
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

from core import training

# An impression's training context (core.training.impressions_of): the TrainingExample fields known when served.
CONTEXT = Types.ROW_NAMED(
    ["impression_id", "request_id", "served_time", "ad_id", "campaign_id", "slot_position", "placement", "country",
     "device", "billing_type", "user_features", "ad_snapshot_version", "logged_pctr", "scored_by_fallback",
     "exploration"],
    [Types.STRING(), Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG(), Types.INT(), Types.STRING(),
     Types.STRING(), Types.STRING(), Types.STRING(), Types.MAP(Types.STRING(), Types.DOUBLE()), Types.LONG(),
     Types.DOUBLE(), Types.BOOLEAN(), Types.BOOLEAN()])
CONTEXT_FIELDS = list(CONTEXT.get_field_names())
LABEL_STATE = Types.ROW_NAMED(
    ["served_ms", "rendered", "first_click_ms", "first_conversion_ms", "context", "done", "conversion_done"],
    [Types.LONG(), Types.BOOLEAN(), Types.LONG(), Types.LONG(), CONTEXT, Types.BOOLEAN(), Types.BOOLEAN()])


# A deletion request on the broadcast side: the user and the request's time (core.privacy).
DELETION = Types.ROW_NAMED(["user_id", "requested_at_ms"], [Types.STRING(), Types.LONG()])


def deletions_state() -> MapStateDescriptor:
    """The broadcast state of the deletion requests in force: user id -> the newest request's time."""
    return MapStateDescriptor("deletions", Types.STRING(), Types.LONG())


def impression_user() -> ValueStateDescriptor:
    """The user the impression was served to (from its served record), cleared with the label state."""
    return ValueStateDescriptor("impression_user", Types.STRING())


def label_state() -> ValueStateDescriptor:
    """The impression's core.training.LabelState (LABEL_STATE); cleared by the join's cleanup timer."""
    return ValueStateDescriptor("label_state", LABEL_STATE)


def context_to_row(context: dict[str, Any]) -> Row:
    return Row(*[context[name] for name in CONTEXT_FIELDS])


def context_from_row(row) -> dict[str, Any]:
    context = dict(zip(CONTEXT_FIELDS, row))
    context["user_features"] = dict(context["user_features"] or {})
    return context


def label_to_row(state: training.LabelState) -> Row:
    outcome = state.outcome
    return Row(state.served_ms, outcome.rendered, outcome.first_click_ms, outcome.first_conversion_ms,
               None if state.context is None else context_to_row(state.context), state.done, state.conversion_done)


def label_from_row(row) -> training.LabelState | None:
    if row is None:
        return None
    served_ms, rendered, first_click_ms, first_conversion_ms, context, done, conversion_done = row
    return training.LabelState(int(served_ms), training.Outcome(bool(rendered), first_click_ms, first_conversion_ms),
                               None if context is None else context_from_row(context), bool(done),
                               bool(conversion_done))
