"""Token buckets: how many requests a caller may make, refilled at a steady rate up to a burst.

A bucket holds up to `burst` tokens and gains `rate_per_s` tokens a second; a request takes one, and a
request that finds less than one is refused with the whole seconds until one is there (at least 1, the
value of an HTTP Retry-After). `RateLimiter` keeps one bucket per caller (an API key's digest, a client
address) and stays bounded: a full bucket is the same as a missing one, so full buckets are forgotten
whenever the table reaches `max_callers`, and if that frees too little the least recently used go too,
down to nine tenths of the bound (so the scan runs once per tenth of the bound in new callers, not per
request).

Pure: the clock is a parameter (seconds, any monotonic origin); nothing here reads the time or does I/O.

    limiter = RateLimiter(RateLimit(rate_per_s=20, burst=40))
    decision = limiter.take("key-digest", now_s)   # Decision(allowed=False, retry_after_s=1) once drained"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from core.errors import InvalidSettings

DEFAULT_MAX_CALLERS = 100_000  # buckets held at once (~100 bytes each): bounded memory under address churn


@dataclass(frozen=True)
class RateLimit:
    """A steady rate and the burst a caller may spend at once."""

    rate_per_s: float
    burst: int

    def __post_init__(self) -> None:
        if not (self.rate_per_s > 0 and math.isfinite(self.rate_per_s)):
            raise InvalidSettings(f"rate_per_s must be a positive number, got {self.rate_per_s!r}")
        if self.burst < 1:
            raise InvalidSettings(f"burst must be at least 1, got {self.burst!r}")


@dataclass(frozen=True)
class Decision:
    """Whether a request may go ahead; when not, the whole seconds to wait (Retry-After, at least 1)."""

    allowed: bool
    retry_after_s: int = 0


@dataclass
class TokenBucket:
    """One caller's tokens at `updated_s`."""

    tokens: float
    updated_s: float

    def refill(self, limit: RateLimit, now_s: float) -> None:
        """Tokens gained since the last update, never above the burst (a clock that steps back adds none)."""
        elapsed_s = max(0.0, now_s - self.updated_s)
        self.tokens = min(float(limit.burst), self.tokens + elapsed_s * limit.rate_per_s)
        self.updated_s = max(self.updated_s, now_s)

    def take(self, limit: RateLimit, now_s: float) -> Decision:
        self.refill(limit, now_s)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return Decision(True)
        return Decision(False, retry_after_s(limit, self.tokens))

    def full(self, limit: RateLimit, now_s: float) -> bool:
        self.refill(limit, now_s)
        return self.tokens >= limit.burst


def retry_after_s(limit: RateLimit, tokens: float) -> int:
    """Whole seconds until a bucket holding `tokens` (< 1) holds one: rounded up, at least 1."""
    return max(1, math.ceil((1.0 - tokens) / limit.rate_per_s))


class RateLimiter:
    """One token bucket per caller, all with the same limit; at most `max_callers` buckets held."""

    def __init__(self, limit: RateLimit, max_callers: int = DEFAULT_MAX_CALLERS):
        if max_callers < 1:
            raise InvalidSettings(f"max_callers must be at least 1, got {max_callers!r}")
        self.limit = limit
        self.max_callers = max_callers
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, caller: str, now_s: float) -> Decision:
        """Spend one of the caller's tokens, or say how long until one is there."""
        return self._bucket(caller, now_s).take(self.limit, now_s)

    def peek(self, caller: str, now_s: float) -> Decision:
        """Whether `take` would allow a request now, without spending anything."""
        bucket = self._buckets.get(caller)
        if bucket is None:
            return Decision(True)
        bucket.refill(self.limit, now_s)
        return Decision(True) if bucket.tokens >= 1.0 else Decision(False, retry_after_s(self.limit, bucket.tokens))

    def give_back(self, caller: str, now_s: float) -> None:
        """Return a token taken for a request that turned out not to count (never above the burst)."""
        bucket = self._buckets.get(caller)
        if bucket is not None:
            bucket.refill(self.limit, now_s)
            bucket.tokens = min(float(self.limit.burst), bucket.tokens + 1.0)

    def _bucket(self, caller: str, now_s: float) -> TokenBucket:
        bucket = self._buckets.get(caller)
        if bucket is not None:
            self._buckets.move_to_end(caller)
            return bucket
        if len(self._buckets) >= self.max_callers:
            self._forget(now_s)
        bucket = self._buckets[caller] = TokenBucket(float(self.limit.burst), now_s)
        return bucket

    def _forget(self, now_s: float) -> None:
        """Drop every full bucket (indistinguishable from a new one), then the least recently used until the
        table is at most nine tenths of the bound."""
        for caller in [c for c, b in self._buckets.items() if b.full(self.limit, now_s)]:
            del self._buckets[caller]
        keep = self.max_callers - max(1, self.max_callers // 10)
        while len(self._buckets) > keep:
            self._buckets.popitem(last=False)


class FailedKeyLimiter:
    """Guessing keys, slowed per client address, without locking out the keys that work.

    Each client address has a bucket that only failed keys spend (`failed`); an address whose bucket is dry is
    refused before its key is even looked up (`before_lookup`), except for a key that authenticated lately
    (`succeeded` remembers the last `remember` of them by digest): behind one ingress address, someone else's
    guesses never lock an advertiser out, and the lookup still decides, so a revoked key is refused at once."""

    def __init__(self, limit: RateLimit, remember: int = 10_000):
        self.addresses = RateLimiter(limit)
        self.remember = remember
        self._recent: OrderedDict[str, None] = OrderedDict()  # key digests, least recently successful first

    def before_lookup(self, address: str, key_digest: str, now_s: float) -> Decision:
        """Whether to look the key up at all."""
        return Decision(True) if key_digest in self._recent else self.addresses.peek(address, now_s)

    def failed(self, address: str, key_digest: str, now_s: float) -> Decision:
        """A key that did not authenticate: it spends the address's bucket (refused once that is dry)."""
        self._recent.pop(key_digest, None)
        return self.addresses.take(address, now_s)

    def succeeded(self, key_digest: str) -> None:
        self._recent[key_digest] = None
        self._recent.move_to_end(key_digest)
        if len(self._recent) > self.remember:
            self._recent.popitem(last=False)
