"""Frequency caps: the per-user record fc:{user_id} and the capping rule.

The record holds one count per (campaign, day): field "c{campaign_id}:{day}"
where day is the UTC day number (days since 1970-01-01). A cap of N a day
counts today's field; a cap of M a week counts the last 7 days including
today. A missing record caps nothing; an unavailable one (a timed-out read)
is handled by the caller: capped campaigns are excluded. Pure."""
from __future__ import annotations

from typing import Mapping

DAY_MS = 86_400_000
WEEK_DAYS = 7


def day_number(now_ms: int) -> int:
    return now_ms // DAY_MS


def field_name(campaign_id: int, day: int) -> str:
    return f"c{campaign_id}:{day}"


def parse_record(raw: Mapping[str | bytes, str | bytes | int]) -> dict[tuple[int, int], int]:
    """A Redis hash as {(campaign_id, day): count}; malformed fields are ignored (they cap nothing)."""
    out: dict[tuple[int, int], int] = {}
    for key, value in raw.items():
        text = key.decode() if isinstance(key, bytes) else key
        try:
            campaign, day = text[1:].split(":")
            out[(int(campaign), int(day))] = int(value)
        except (ValueError, IndexError):
            continue
    return out


def is_capped(record: Mapping[tuple[int, int], int], campaign_id: int, today: int,
              cap_per_day: int, cap_per_week: int) -> bool:
    """True when the user reached the campaign's daily or weekly cap (0 = no cap)."""
    if cap_per_day and record.get((campaign_id, today), 0) >= cap_per_day:
        return True
    if cap_per_week:
        week = sum(record.get((campaign_id, today - d), 0) for d in range(WEEK_DAYS))
        if week >= cap_per_week:
            return True
    return False


MAX_FIELDS = 300  # fields per user record; the oldest days go first beyond this
RECORD_TTL_MS = WEEK_DAYS * DAY_MS  # from the last write


def field_day(name: str) -> int | None:
    try:
        return int(name.rsplit(":", 1)[1])
    except (ValueError, IndexError):
        return None


def fields_to_drop(names: list[str], today: int, max_fields: int = MAX_FIELDS,
                   keep: frozenset[str] = frozenset()) -> list[str]:
    """Fields a write removes: days older than a week (and malformed names), then the oldest beyond
    max_fields (never one in `keep`, the fields this write just counted). The Redis script in
    serving.frequency_store applies the same rule; a test holds the two together."""
    drop = [n for n in names if (d := field_day(n)) is None or d <= today - WEEK_DAYS]
    kept = sorted((field_day(n), n) for n in names if n not in drop)
    excess = len(kept) - max_fields
    for _, name in kept:
        if excess <= 0:
            break
        if name not in keep:
            drop.append(name)
            excess -= 1
    return drop


class JustServed:
    """A few seconds of "just served" notes per user, in the server's memory.

    Between sending a response and the increment landing in Redis, a second
    request for the same user would read the old count. Each note counts for a
    read unless the read began after the note's increment landed (then Redis
    already holds it), so nothing is missed and nothing is counted twice. Notes
    older than `window_ms` are dropped. Pure: times are parameters."""

    def __init__(self, window_ms: int = 5_000):
        self.window_ms = window_ms
        self._notes: dict[str, list[list]] = {}  # user -> [[campaign, day, noted_ms, landed_ms or None]]

    def note(self, user_id: str, campaign_ids: list[int], day: int, now_ms: int) -> list[list]:
        notes = [[c, day, now_ms, None] for c in campaign_ids]
        self._notes.setdefault(user_id, []).extend(notes)
        return notes

    @staticmethod
    def landed(notes: list[list], now_ms: int) -> None:
        for n in notes:
            n[3] = now_ms

    def merged(self, user_id: str, record: dict[tuple[int, int], int] | None, read_started_ms: int,
               now_ms: int) -> dict[tuple[int, int], int] | None:
        """The Redis record plus the notes it cannot contain yet (None stays None if there are no notes)."""
        notes = self._notes.get(user_id)
        if not notes:
            return record
        live = [n for n in notes if now_ms - n[2] <= self.window_ms]
        if live:
            self._notes[user_id] = live
        else:
            del self._notes[user_id]
            return record
        out = dict(record or {})
        for campaign, day, _, landed in live:
            if landed is None or read_started_ms < landed:
                out[(campaign, day)] = out.get((campaign, day), 0) + 1
        return out

    def sweep(self, now_ms: int) -> None:
        for user in [u for u, ns in self._notes.items() if all(now_ms - n[2] > self.window_ms for n in ns)]:
            del self._notes[user]

    def __len__(self) -> int:
        return len(self._notes)
