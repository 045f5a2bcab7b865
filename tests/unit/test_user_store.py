"""The user store's read (serving.frequency_store.UserStore.read): one pipelined round trip for the profile, the
frequency record and the custom audiences, failing closed part by part. Against a stand-in Redis that counts
round trips; the real Redis is in tests/integration/test_ad_server.py and test_custom_audiences.py."""
from __future__ import annotations

import asyncio
from typing import Any

from core.frequency import field_name
from serving.frequency_store import UNAVAILABLE, UserContext, UserStore
from streams import redis_keys
from tests.redis_doubles import Pipelined

PROFILE = {b"interests": b"hiking,chess", b"age_band": b"25-34"}
RECORD = {field_name(7, 20_000).encode(): b"2"}


class CountingRedis(Pipelined):
    """Profiles, frequency records and audience sets in dicts; `executed` counts pipelines (round trips) and
    `commands` every command; a key in `failing` raises, `stall_s` delays every pipeline."""

    def __init__(self, failing: tuple[str, ...] = (), stall_s: float = 0.0) -> None:
        self.hashes = {redis_keys.user_profile("u-1"): PROFILE, redis_keys.frequency_record("u-1"): RECORD}
        self.sets = {redis_keys.audience_member("m-1"): {b"aud-3"}, redis_keys.audience_member("m-2"): {b"aud-9"}}
        self.failing, self.stall_s = failing, stall_s
        self.executed, self.commands = 0, 0

    def pipeline(self, transaction: bool = True) -> Any:
        pipe = super().pipeline(transaction)
        execute = pipe.execute

        async def counted(raise_on_error: bool = True) -> list[Any]:
            self.executed += 1
            await asyncio.sleep(self.stall_s)
            return await execute(raise_on_error)
        pipe.execute = counted
        return pipe

    def _check(self, key: str) -> None:
        self.commands += 1
        if key in self.failing:
            raise ConnectionError(f"{key}: lost")

    async def hgetall(self, key: str) -> dict:
        self._check(key)
        return dict(self.hashes.get(key, {}))

    async def smembers(self, key: str) -> set:
        self._check(key)
        return set(self.sets.get(key, set()))


def _read(redis: CountingRedis, *args: Any, timeout_s: float = 5.0, **kwargs: Any) -> UserContext:
    async def read() -> UserContext:
        store = UserStore("127.0.0.1", 1, read_timeout_s=timeout_s)
        store.redis = redis  # type: ignore[assignment]
        return await store.read(*args, **kwargs)
    return asyncio.run(read())


def test_profile_frequency_record_and_audiences_come_back_in_one_round_trip():
    redis = CountingRedis()
    context = _read(redis, "u-1", ["m-1", "m-2"])
    assert (redis.executed, redis.commands) == (1, 4)
    assert context.values("interests") == ["hiking", "chess"] and context.profile_available
    assert context.frequency == {(7, 20_000): 2}
    assert context.custom_audiences == ["aud-3", "aud-9"]


def test_without_consent_only_the_frequency_record_is_read_and_without_ids_nothing():
    redis = CountingRedis()
    context = _read(redis, "u-1", [], profile=False)
    assert (redis.executed, redis.commands) == (1, 1)
    assert context.profile == {} and context.profile_available and context.frequency == {(7, 20_000): 2}
    assert _read(redis, None, []) == UserContext() and redis.executed == 1


def test_a_user_without_a_record_has_none_not_unavailable():
    context = _read(CountingRedis(), "u-2", [])
    assert context.frequency is None and context.profile == {} and context.profile_available


def test_a_failed_frequency_command_makes_only_the_record_unavailable():
    context = _read(CountingRedis(failing=(redis_keys.frequency_record("u-1"),)), "u-1", ["m-1"])
    assert context.frequency is UNAVAILABLE
    assert context.profile_available and context.custom_audiences == ["aud-3"]


def test_a_failed_profile_or_audience_command_makes_the_profile_unavailable_and_keeps_the_record():
    for failing in (redis_keys.user_profile("u-1"), redis_keys.audience_member("m-2")):
        context = _read(CountingRedis(failing=(failing,)), "u-1", ["m-1", "m-2"])
        assert not context.profile_available and context.profile == {} and context.custom_audiences == []
        assert context.frequency == {(7, 20_000): 2}


def test_a_read_past_its_deadline_fails_closed():
    context = _read(CountingRedis(stall_s=0.5), "u-1", ["m-1"], timeout_s=0.01)
    assert context.frequency is UNAVAILABLE and not context.profile_available and context.custom_audiences == []
    anonymous = _read(CountingRedis(stall_s=0.5), None, ["m-1"], timeout_s=0.01)
    assert anonymous.frequency is None and not anonymous.profile_available
