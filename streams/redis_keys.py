"""Every Redis key of the platform and the field names inside its hashes, built here and nowhere else.

The formats are a contract between processes (the budget job writes `pacing:{campaign}` that `adserve pacing
show` and dashboards read; the advertiser-facing tools write `user:{id}` that every ad server reads), so a
change here is a storage migration: docs/storage.md lists each key's type, fields, TTL, writer and readers.
Pure string building: never talks to Redis. The frequency record's field names ("c{campaign}:{day}") are
core.frequency's, because the capping rule reads them."""
from __future__ import annotations

PACING_PREFIX = "pacing:"
PACING_MINUTE_PREFIX = "m:"  # a pacing hash's per-minute fields, m:0000 .. m:1439
USER_PROFILE_PREFIX = "user:"
FREQUENCY_RECORD_PREFIX = "fc:"
AUDIENCE_MEMBER_PREFIX = "audiences:"


def pacing(campaign_id: int) -> str:
    """The hash of one campaign's budget day of pacing (streams.pacing_store)."""
    return f"{PACING_PREFIX}{int(campaign_id)}"


def pacing_minute_field(minute: int) -> str:
    """The field of a pacing hash that holds one local minute of the day (0-1439), zero-padded so the fields
    sort in time order."""
    return f"{PACING_MINUTE_PREFIX}{int(minute):04d}"


def pacing_minute_of(field: str) -> int | None:
    """The minute a pacing hash field holds, or None for a field that is not a minute's."""
    if not field.startswith(PACING_MINUTE_PREFIX):
        return None
    return int(field[len(PACING_MINUTE_PREFIX):])


def user_profile(user_id: str) -> str:
    """The hash of one user's profile (serving.frequency_store reads it with the frequency record)."""
    return f"{USER_PROFILE_PREFIX}{user_id}"


def frequency_record(user_id: str) -> str:
    """The hash of one user's serve counts per (campaign, UTC day) (core.frequency, serving.frequency_store)."""
    return f"{FREQUENCY_RECORD_PREFIX}{user_id}"


def audience_member(member_key: str) -> str:
    """The set of uploaded audiences ("aud-{id}" targeting values) one salted member key belongs to
    (core.audiences: written by the advertiser API, read by every ad server with the profile)."""
    return f"{AUDIENCE_MEMBER_PREFIX}{member_key}"
