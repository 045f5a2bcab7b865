"""The features job's writes of users' model features into Redis `user:{id}` (field `features`, a JSON object
of name -> number; key built by streams.redis_keys, format in docs/storage.md).

A write sets the absolute values of the names the job owns (core.user_activity) and removes its own names that
are no longer there, leaving every other name in the object, and every other field of the profile, as the
profile system wrote it; so a write repeated after a restart changes nothing. A profile the profile system
keeps (no expiry) never gets one; a key that only the job made expires `ttl_ms` after its last write, so the
features of a user who stops coming do not stay forever. Writes go in pipelines, one round trip a batch."""
from __future__ import annotations

import json
from typing import Mapping

import redis

from core import user_activity
from streams import redis_keys
from streams.endpoints import redis_from_url

DEFAULT_TTL_MS = 7 * 86_400_000

# KEYS[1] = user:{id}; ARGV[1] = the job's features (JSON object), ARGV[2] = ttl_ms,
# ARGV[3] = the job's own names (JSON array), ARGV[4] = the job's own name prefixes (JSON array).
_WRITE_SCRIPT = """
local key = KEYS[1]
local ours = cjson.decode(ARGV[1])
local ttl = redis.call('PTTL', key)
if ttl == -2 and next(ours) == nil then
  return 0
end
local features = {}
local raw = redis.call('HGET', key, 'features')
if raw then
  local ok, decoded = pcall(cjson.decode, raw)
  if ok and type(decoded) == 'table' then features = decoded end
end
local names, prefixes = cjson.decode(ARGV[3]), cjson.decode(ARGV[4])
local owned = {}
for _, name in ipairs(names) do owned[name] = true end
for name, _ in pairs(features) do
  local mine = owned[name]
  for _, prefix in ipairs(prefixes) do
    if string.sub(name, 1, string.len(prefix)) == prefix then mine = true end
  end
  if mine then features[name] = nil end
end
for name, value in pairs(ours) do features[name] = value end
if next(features) == nil then
  redis.call('HSET', key, 'features', '{}')
else
  redis.call('HSET', key, 'features', cjson.encode(features))
end
if ttl ~= -1 then
  redis.call('PEXPIRE', key, tonumber(ARGV[2]))
end
return 1
"""


class UserFeatureStore:
    """Batched writes of the job's user features into one Redis."""

    def __init__(self, redis_url: str, ttl_ms: int = DEFAULT_TTL_MS) -> None:
        self.client = redis_from_url(redis_url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self.script = self.client.register_script(_WRITE_SCRIPT)
        self.ttl_ms = int(ttl_ms)
        self._names = json.dumps(list(user_activity.OWNED_NAMES))
        self._prefixes = json.dumps(list(user_activity.OWNED_PREFIXES))

    def write(self, features_by_user: Mapping[str, Mapping[str, float]]) -> int:
        """Set each user's features (empty: remove the job's names); returns the users written."""
        if not features_by_user:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for user_id, features in features_by_user.items():
            self.script(keys=[redis_keys.user_profile(user_id)],
                        args=[json.dumps(dict(features)) if features else "{}", self.ttl_ms, self._names,
                              self._prefixes], client=pipe)
        pipe.execute()
        return len(features_by_user)

    def read(self, user_id: str) -> dict[str, float]:
        """A user's features object as stored (for tools and tests)."""
        raw = self.client.hget(redis_keys.user_profile(user_id), "features")
        return {} if raw is None else json.loads(raw)

    def close(self) -> None:
        self.client.close()
