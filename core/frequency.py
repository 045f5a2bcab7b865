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
