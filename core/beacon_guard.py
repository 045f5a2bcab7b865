"""The tracker's replay guard: one copy of each beacon per token lifetime reaches the spool. Pure.

A valid token can be replayed as often as anyone likes until it expires. The click aggregator deduplicates
by (impression id, event type), so replays are never billed twice, but each one would be spooled and sent:
a script replaying one token could fill the tracker's 256 MiB spool and turn every beacon into a 503. The
guard remembers each (impression id, event type) it let through until its token expires; a replay is
answered as the first copy was, counted, and not spooled. It holds at most `max_entries` (about 100 bytes
each); past that it forgets the entries that expire first, which costs at most a duplicate the aggregator
drops. The clock is a parameter."""
from __future__ import annotations

from collections import OrderedDict

DEFAULT_MAX_ENTRIES = 1_000_000
BUCKET_MS = 60_000  # entries are forgotten a minute at a time, by their token's expiry


class BeaconGuard:
    """Remembers beacons by key until their token's expiry."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES):
        self.max_entries = max_entries
        self._seen: set[str] = set()
        self._by_expiry: OrderedDict[int, list[str]] = OrderedDict()  # expiry minute -> keys (kept sorted)

    def __len__(self) -> int:
        return len(self._seen)

    def seen(self, key: str, now_ms: int) -> bool:
        """Whether this beacon was let through before and its token has not expired."""
        self._forget_expired(now_ms)
        return key in self._seen

    def remember(self, key: str, expires_ms: int) -> None:
        """Record a beacon that was kept (call it only once the spool holds it)."""
        if key in self._seen:
            return
        bucket = expires_ms // BUCKET_MS + 1  # forgotten once the whole minute has expired
        if bucket not in self._by_expiry:
            in_order = not self._by_expiry or next(reversed(self._by_expiry)) < bucket
            self._by_expiry[bucket] = []
            if not in_order:  # rare: tokens mostly arrive in the order they expire
                self._by_expiry = OrderedDict(sorted(self._by_expiry.items()))
        self._by_expiry[bucket].append(key)
        self._seen.add(key)
        while len(self._seen) > self.max_entries and self._by_expiry:
            self._drop_first()

    def _forget_expired(self, now_ms: int) -> None:
        while self._by_expiry and next(iter(self._by_expiry)) * BUCKET_MS <= now_ms:
            self._drop_first()

    def _drop_first(self) -> None:
        _, keys = self._by_expiry.popitem(last=False)
        self._seen.difference_update(keys)
