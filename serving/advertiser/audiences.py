"""Custom audiences in the campaign store and in Redis: what the advertiser API's /v1/audiences endpoints write.

The PostgreSQL tables (migrations/005_custom_audiences.sql) are the record: an audience's owner, name and
salted member keys. Redis holds what the ad servers match on: one set per member key,
`audiences:{member_key}`, of the "aud-{id}" targeting values it belongs to (docs/storage.md). An upload commits
to PostgreSQL first, then adds to Redis; both writes are idempotent, so an upload Redis did not take is simply
sent again. The rules (normalising, hashing, what an upload may hold) are core.audiences'; nothing here holds
or writes a clear id or an unsalted hash."""
from __future__ import annotations

from typing import Any


from core.audiences import (MAX_AUDIENCES_PER_ADVERTISER, AudienceSalt, audience_value, check_member_quota)
from core.errors import InvalidField
from serving.advertiser.store import CampaignStore
from streams import redis_keys
from streams.endpoints import redis_at

REDIS_BATCH = 1_000  # SADDs per pipeline round trip


def audience_view(row: dict[str, Any]) -> dict[str, Any]:
    """An audiences row with the value that targets it ("aud-{id}")."""
    return {**row, "targeting_value": audience_value(row["audience_id"])}


class AudienceStore:
    """The audience tables, on the campaign store's connections; every call is scoped to one advertiser (another
    advertiser's audience is simply not found)."""

    def __init__(self, store: CampaignStore):
        self.store = store

    async def create(self, advertiser_id: int, name: str) -> dict[str, Any]:
        async def tx(conn):
            await conn.execute("SELECT 1 FROM advertisers WHERE advertiser_id = %s FOR UPDATE", (advertiser_id,))
            count = (await (await conn.execute("SELECT count(*) AS n FROM audiences WHERE advertiser_id = %s",
                                               (advertiser_id,))).fetchone())["n"]
            if count >= MAX_AUDIENCES_PER_ADVERTISER:
                raise InvalidField("name", f"you have {count} audiences, the most an advertiser may have "
                                           f"(MAX_AUDIENCES_PER_ADVERTISER)")
            row = await (await conn.execute(
                "INSERT INTO audiences (advertiser_id, name) VALUES (%s, %s) ON CONFLICT (advertiser_id, name) "
                "DO NOTHING RETURNING *", (advertiser_id, name))).fetchone()
            if row is None:
                raise InvalidField("name", f"you already have an audience named {name!r}")
            return row
        return audience_view(await self.store._run(tx))

    async def get(self, advertiser_id: int, audience_id: int) -> dict[str, Any] | None:
        async def tx(conn):
            return await (await conn.execute("SELECT * FROM audiences WHERE audience_id = %s AND advertiser_id = %s",
                                             (audience_id, advertiser_id))).fetchone()
        row = await self.store._run(tx)
        return None if row is None else audience_view(row)

    async def list(self, advertiser_id: int) -> list[dict[str, Any]]:
        async def tx(conn):
            return await (await conn.execute("SELECT * FROM audiences WHERE advertiser_id = %s ORDER BY audience_id",
                                             (advertiser_id,))).fetchall()
        return [audience_view(r) for r in await self.store._run(tx)]

    async def missing(self, advertiser_id: int, audience_ids: set[int]) -> list[int]:
        """The ids among `audience_ids` that are not this advertiser's audiences, ascending."""
        if not audience_ids:
            return []

        async def tx(conn):
            rows = await (await conn.execute(
                "SELECT audience_id FROM audiences WHERE advertiser_id = %s AND audience_id = ANY(%s)",
                (advertiser_id, sorted(audience_ids)))).fetchall()
            return {r["audience_id"] for r in rows}
        return sorted(audience_ids - await self.store._run(tx))

    async def add_members(self, advertiser_id: int, audience_id: int,
                          member_keys: list[str]) -> tuple[int, dict[str, Any]] | None:
        """Add salted member keys (hex) to an audience of the advertiser: (how many were new, the audience after),
        or None when it is not the advertiser's. Keys already present are kept once; past the advertiser's member
        quota nothing is added (InvalidField, core.audiences.check_member_quota)."""
        async def add(conn, keys: list[bytes]) -> int:
            held = (await (await conn.execute(
                "SELECT coalesce(sum(member_count), 0)::bigint AS n FROM audiences WHERE advertiser_id = %s",
                (advertiser_id,))).fetchone())["n"]
            check_member_quota(int(held), len(keys))
            return (await conn.execute(
                "INSERT INTO audience_members (audience_id, member_key) SELECT %s, unnest(%s::bytea[]) "
                "ON CONFLICT DO NOTHING", (audience_id, keys))).rowcount
        return await self._change(advertiser_id, audience_id, member_keys, add, +1)

    async def remove_members(self, advertiser_id: int, audience_id: int,
                             member_keys: list[str]) -> tuple[int, dict[str, Any]] | None:
        """Remove salted member keys (hex) from an audience of the advertiser: (how many were members, the
        audience after), or None when it is not the advertiser's. Keys that were not members change nothing."""
        async def remove(conn, keys: list[bytes]) -> int:
            return (await conn.execute(
                "DELETE FROM audience_members WHERE audience_id = %s AND member_key = ANY(%s::bytea[])",
                (audience_id, keys))).rowcount
        return await self._change(advertiser_id, audience_id, member_keys, remove, -1)

    async def _change(self, advertiser_id: int, audience_id: int, member_keys: list[str], write,
                      sign: int) -> tuple[int, dict[str, Any]] | None:
        """One change of an audience's members under its row lock, its count kept in step in the same transaction:
        `write(conn, keys)` returns how many rows it changed."""
        keys = [bytes.fromhex(k) for k in member_keys]

        async def tx(conn):
            audience = await (await conn.execute(
                "SELECT audience_id FROM audiences WHERE audience_id = %s AND advertiser_id = %s FOR UPDATE",
                (audience_id, advertiser_id))).fetchone()
            if audience is None:
                return None
            changed = await write(conn, keys)
            row = await (await conn.execute(
                "UPDATE audiences SET member_count = member_count + %s, updated_at = now() WHERE audience_id = %s "
                "RETURNING *", (sign * changed, audience_id))).fetchone()
            return changed, row
        result = await self.store._run(tx)
        return None if result is None else (result[0], audience_view(result[1]))

    async def member_keys(self, audience_id: int) -> list[str]:
        """Every salted member key (hex) of an audience, to make it matchable whole."""
        async def tx(conn):
            return await (await conn.execute("SELECT member_key FROM audience_members WHERE audience_id = %s",
                                             (audience_id,))).fetchall()
        return [bytes(r["member_key"]).hex() for r in await self.store._run(tx)]

    async def set_live(self, audience_id: int, live: bool) -> dict[str, Any]:
        """Record whether the audience's members are in Redis (after the Redis work was done)."""
        async def tx(conn):
            return await (await conn.execute("UPDATE audiences SET live = %s WHERE audience_id = %s RETURNING *",
                                             (live, audience_id))).fetchone()
        return audience_view(await self.store._run(tx))


class AudienceMembers:
    """Where the ad servers look memberships up: Redis sets keyed by the salted member key. Holds the salt, so
    the API keys each uploaded hash (`member_keys`) before anything is stored."""

    def __init__(self, redis_host: str, redis_port: int, salt: AudienceSalt):
        self.redis = redis_at(redis_host, redis_port, asyncio=True, socket_timeout=5.0, socket_connect_timeout=2.0)
        self.salt = salt

    def member_keys(self, uploaded_hashes: list[str]) -> list[str]:
        return list(dict.fromkeys(self.salt.member_key(h) for h in uploaded_hashes))

    async def add(self, audience_id: int, member_keys: list[str]) -> None:
        """Each key's set gains the audience's targeting value; REDIS_BATCH commands per round trip. Raises
        redis' errors (the caller answers 503: the upload is sent again)."""
        await self._each(audience_id, member_keys, "sadd")

    async def remove(self, audience_id: int, member_keys: list[str]) -> None:
        """Each key's set loses the audience's targeting value (a set left empty is deleted by Redis)."""
        await self._each(audience_id, member_keys, "srem")

    async def _each(self, audience_id: int, member_keys: list[str], command: str) -> None:
        value = audience_value(audience_id)
        for start in range(0, len(member_keys), REDIS_BATCH):
            pipe = self.redis.pipeline(transaction=False)
            for key in member_keys[start:start + REDIS_BATCH]:
                getattr(pipe, command)(redis_keys.audience_member(key), value)
            await pipe.execute()

    async def close(self) -> None:
        await self.redis.aclose()
