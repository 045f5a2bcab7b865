"""The user context in Redis: profiles (`user:{id}`) and frequency records (`fc:{id}`), keys built by
streams.redis_keys (formats in docs/storage.md).

Profile hash fields (all optional): age_band, gender, locations (comma
separated, e.g. "US/CA/San Francisco"), interests (comma separated),
audiences (comma separated hashed ids), hidden_advertisers (comma separated
ids), features (JSON object of model features, name -> number), embedding
(comma separated floats).

Frequency record: one field per (campaign, UTC day), see core.frequency. A
write increments the served campaigns' fields, drops days older than a week,
keeps at most MAX_FIELDS fields (oldest evicted) and sets a 7-day TTL, all in
one server-side script so concurrent writers cannot interleave.

One read per request, one round trip: the profile hash, the frequency record and, given the request's salted
member keys (core.audiences, only with consent), the sets `audiences:{member_key}` go out as one pipeline; the
memberships come back in `UserContext.custom_audiences`.

Reads take a deadline (5 ms by default): a read that misses it returns
UNAVAILABLE (filters.FREQUENCY_RECORD_UNAVAILABLE) for the frequency record, and the caller excludes capped
campaigns (core.frequency, serving.decision.filters)."""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from redis.exceptions import RedisError

from core.frequency import MAX_FIELDS, RECORD_TTL_MS, WEEK_DAYS, field_name, parse_record
from serving.decision.filters import FREQUENCY_RECORD_UNAVAILABLE
from streams import redis_keys
from streams.endpoints import redis_at

# KEYS[1] = fc:{user}; ARGV = today, ttl_ms, max_fields, field...
# Same rule as core.frequency.fields_to_drop (a test checks them against each other).
_RECORD_SCRIPT = """
local key = KEYS[1]
local today = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local max_fields = tonumber(ARGV[3])
local keep = {}
for i = 4, #ARGV do
  redis.call('HINCRBY', key, ARGV[i], 1)
  keep[ARGV[i]] = true
end
local names = redis.call('HKEYS', key)
local kept = {}
for _, name in ipairs(names) do
  local day = tonumber(string.match(name, ':(%-?%d+)$'))
  if day == nil or day <= today - WEEK_DAYS then
    redis.call('HDEL', key, name)
  else
    table.insert(kept, {day, name})
  end
end
local excess = #kept - max_fields
if excess > 0 then
  table.sort(kept, function(a, b) if a[1] == b[1] then return a[2] < b[2] end return a[1] < b[1] end)
  for _, item in ipairs(kept) do
    if excess <= 0 then break end
    if not keep[item[2]] then
      redis.call('HDEL', key, item[2])
      excess = excess - 1
    end
  end
end
redis.call('PEXPIRE', key, ttl)
return redis.call('HLEN', key)
""".replace("WEEK_DAYS", str(WEEK_DAYS))


UNAVAILABLE = FREQUENCY_RECORD_UNAVAILABLE


@dataclass
class UserContext:
    """What a request knows about its user after the reads."""

    profile: dict[str, str] = field(default_factory=dict)
    frequency: Any = None  # None: no record
    profile_available: bool = True
    custom_audiences: list[str] = field(default_factory=list)  # "aud-{id}" values the member keys belong to

    def values(self, name: str) -> list[str]:
        raw = self.profile.get(name, "")
        return [v.strip() for v in raw.split(",") if v.strip()]

    def hidden_advertisers(self) -> frozenset[int]:
        return frozenset(int(v) for v in self.values("hidden_advertisers") if v.isdigit())

    def embedding(self, dim: int) -> np.ndarray | None:
        """The profile's embedding, or None if absent, malformed or of another dimension."""
        try:
            vector = np.array([float(v) for v in self.values("embedding")], dtype=np.float32)
        except ValueError:
            return None
        return vector if len(vector) == dim else None

    def features(self) -> dict[str, float]:
        try:
            data = json.loads(self.profile.get("features", "{}"))
            return {str(k): float(v) for k, v in data.items()}
        except (ValueError, TypeError, AttributeError):
            return {}


def _text(raw: dict[Any, Any]) -> dict[str, str]:
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw.items()}


class UserStore:
    """Async access to profiles and frequency records in one Redis."""

    def __init__(self, host: str, port: int, *, read_timeout_s: float = 0.005, max_fields: int = MAX_FIELDS):
        # The process's Redis endpoint (password, TLS, Sentinel, Cluster) when host:port is its address
        self.redis = redis_at(host, port, asyncio=True, socket_timeout=1.0, socket_connect_timeout=1.0,
                              max_connections=64)
        self.read_timeout_s = read_timeout_s
        self.max_fields = max_fields
        self._record = self.redis.register_script(_RECORD_SCRIPT)

    async def read(self, user_id: str | None, member_keys: list[str] | None = None, *,
                   profile: bool = True) -> UserContext:
        """Profile, frequency record and the custom audiences of `member_keys` in one pipelined round trip,
        within the read deadline. profile=False (a request without personalisation consent) reads the
        frequency record only: no profile signal is even fetched.

        Fail closed: a read that misses the deadline or fails as a whole leaves the profile unavailable and
        the frequency record UNAVAILABLE (capped campaigns are then excluded); a failed command of the
        pipeline spoils only its own part (the profile and the audiences count as one part)."""
        member_keys = member_keys or []
        if not user_id and not member_keys:
            return UserContext()
        read_profile = bool(user_id) and profile
        pipe = self.redis.pipeline(transaction=False)
        if read_profile:
            pipe.hgetall(redis_keys.user_profile(user_id))
        if user_id:
            pipe.hgetall(redis_keys.frequency_record(user_id))
        for key in member_keys:
            pipe.smembers(redis_keys.audience_member(key))
        context = UserContext()
        try:
            async with asyncio.timeout(self.read_timeout_s):
                results = await pipe.execute(raise_on_error=False)
        except Exception:  # noqa: BLE001 - the deadline, a lost connection, any failure: fail closed
            context.profile_available = False
            context.frequency = UNAVAILABLE if user_id else None
            return context
        profile_raw = results.pop(0) if read_profile else {}
        frequency_raw = results.pop(0) if user_id else None
        if isinstance(profile_raw, Exception) or any(isinstance(members, Exception) for members in results):
            context.profile_available = False
        else:
            context.profile = _text(profile_raw)
            context.custom_audiences = sorted({(v.decode() if isinstance(v, bytes) else v)
                                               for members in results for v in members})
        if isinstance(frequency_raw, Exception):
            context.frequency = UNAVAILABLE
        elif frequency_raw:
            context.frequency = parse_record(frequency_raw)
        return context

    async def record_served(self, user_id: str, campaign_ids: list[int], today: int) -> int:
        """Count one serve per campaign today; returns the record's field count."""
        fields = [field_name(c, today) for c in campaign_ids]
        return int(await self._record(keys=[redis_keys.frequency_record(user_id)],
                                      args=[today, RECORD_TTL_MS, self.max_fields, *fields]))

    async def put_profile(self, user_id: str, profile: dict[str, str]) -> None:
        await self.redis.hset(redis_keys.user_profile(user_id), mapping=profile)

    async def delete_user(self, user_id: str) -> int:
        """Remove the profile and the frequency record; returns how many keys existed."""
        return int(await self.redis.delete(redis_keys.user_profile(user_id), redis_keys.frequency_record(user_id)))

    async def close(self) -> None:
        await self.redis.aclose()


__all__ = ["UserStore", "UserContext", "UNAVAILABLE", "RedisError"]
