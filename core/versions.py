"""The one rule for versioned records: a version replaces what is held only when it is newer. Change streams
repeat after a restart and side inputs may come out of order, so every consumer keeps the newest version and
ignores an older or repeated one. Pure."""
from __future__ import annotations


def is_newer(version: int, held_version: int | None) -> bool:
    """Whether `version` replaces the held one (None: nothing held yet)."""
    return held_version is None or version > held_version
