"""Counting ad events per campaign and event-time minute: the rule behind the
smoke job `event_counts` and the Beam pipeline `event_counts`.

Pure: the Flink function and the Beam transform both call these, so the rule
exists once. Times are int epoch milliseconds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

DEFAULT_WINDOW_MS = 60_000


@dataclass(frozen=True)
class Counts:
    """Running totals of one campaign window."""

    impressions: int = 0
    clicks: int = 0
    billable_micros: int = 0

    def add(self, event: Mapping[str, Any]) -> "Counts":
        """Counts with one more event: a billable event adds its signed price."""
        is_click = event["event_type"] == "CLICK"
        billable = event["event_type"] == event["billing_type"]
        return Counts(
            impressions=self.impressions + (0 if is_click else 1),
            clicks=self.clicks + (1 if is_click else 0),
            billable_micros=self.billable_micros + (int(event["price_micros"]) if billable else 0),
        )

    def merge(self, other: "Counts") -> "Counts":
        return Counts(self.impressions + other.impressions, self.clicks + other.clicks,
                      self.billable_micros + other.billable_micros)

    def as_tuple(self) -> tuple[int, int, int]:
        return self.impressions, self.clicks, self.billable_micros


def window_start(event_time_ms: int, window_ms: int = DEFAULT_WINDOW_MS) -> int:
    """Start of the tumbling event-time window holding this instant."""
    return event_time_ms - event_time_ms % window_ms


def is_late(event_time_ms: int, watermark_ms: int, window_ms: int = DEFAULT_WINDOW_MS) -> bool:
    """True when the event's window was already emitted (the watermark passed its last instant)."""
    return window_start(event_time_ms, window_ms) + window_ms - 1 <= watermark_ms


def window_timer(start_ms: int, window_ms: int = DEFAULT_WINDOW_MS) -> int:
    """The event-time timer that closes the window starting at start_ms: its last instant."""
    return start_ms + window_ms - 1


def window_of_timer(timer_ms: int, window_ms: int = DEFAULT_WINDOW_MS) -> int:
    """The start of the window a window_timer closes."""
    return timer_ms + 1 - window_ms


def late_reason(event_time_ms: int, watermark_ms: int) -> str:
    """The dead-letter reason of a late event: it names both times, so an operator can see how late it was."""
    return f"event time {event_time_ms} is behind the watermark {watermark_ms}: its window was already emitted"


def count_event(held: Counts | None, event: Mapping[str, Any], watermark_ms: int,
                window_ms: int = DEFAULT_WINDOW_MS) -> tuple[Counts | None, int | None]:
    """One event into its campaign window: (the window's new counts, the timer to set when the window opens),
    or (None, None) for a late event (its window was already emitted; the caller dead-letters it)."""
    if is_late(int(event["event_time"]), watermark_ms, window_ms):
        return None, None
    counts = (held or Counts()).add(event)
    timer = window_timer(window_start(int(event["event_time"]), window_ms), window_ms) if held is None else None
    return counts, timer


def event_count_record(campaign_id: int, start_ms: int, counts: Counts,
                       window_ms: int = DEFAULT_WINDOW_MS) -> dict[str, Any]:
    """The EventCount record (schemas/event_count.avsc) of one closed window."""
    return {
        "campaign_id": campaign_id,
        "window_start": start_ms,
        "event_time": start_ms + window_ms,
        "impressions": counts.impressions,
        "clicks": counts.clicks,
        "billable_micros": counts.billable_micros,
    }
