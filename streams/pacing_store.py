"""Redis `pacing:{campaign}`: a campaign's day of pacing for dashboards and `adserve pacing show`.

Storage format (one hash per campaign, kept 3 days after its last write):

    pacing:{campaign_id}
      day               budget day, ISO date in the advertiser's time zone
      budget_micros     today's budget
      state, p          latest budget state (OPEN/METERED/STOPPED) and participation probability
      target_micros     what the curve asks for by now
      committed_micros  billed + expected spend not yet billed
      billed_micros     billed by the click aggregator
      updated_ms        event time of the latest step
      m:{MMMM}          one per local minute (0000-1439): "target,committed,p,state" at its last step

Keys and field names come from streams.redis_keys (docs/storage.md). A new budget day replaces the hash.
Writes are batched into pipelines (one round trip for many campaigns); the budget job is the only writer."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable


from streams import redis_keys
from streams.endpoints import redis_from_url

TTL_S = 3 * 86_400


@dataclass(frozen=True)
class PacingPoint:
    minute: int
    target_micros: int
    committed_micros: int
    participation_probability: float
    state: str


@dataclass(frozen=True)
class PacingDay:
    campaign_id: int
    day: str
    budget_micros: int
    state: str
    participation_probability: float
    target_micros: int
    committed_micros: int
    billed_micros: int
    updated_ms: int
    points: list[PacingPoint]


class PacingStore:
    def __init__(self, url: str):
        self.client = redis_from_url(url, socket_timeout=5)
        self._days: dict[int, str] = {}

    def write(self, points: Iterable[dict[str, Any]]) -> int:
        """Write step outputs (core.budget "pacing" records) in one pipeline; returns how many."""
        pipe = self.client.pipeline(transaction=False)
        n = 0
        for point in points:
            key = redis_keys.pacing(int(point["campaign_id"]))
            if self._days.get(int(point["campaign_id"])) != point["budget_day"]:
                current = self.client.hget(key, "day")
                if current is not None and current.decode() != point["budget_day"]:
                    pipe.delete(key)
                self._days[int(point["campaign_id"])] = point["budget_day"]
            minute = int(point["minute"])
            pipe.hset(key, mapping={
                "day": point["budget_day"], "budget_micros": point["budget_micros"], "state": point["state"],
                "p": f"{point['participation_probability']:.4f}", "target_micros": point["target_micros"],
                "committed_micros": point["committed_micros"], "billed_micros": point["billed_micros"],
                "updated_ms": point["event_time"],
                redis_keys.pacing_minute_field(minute): f"{point['target_micros']},{point['committed_micros']},"
                                   f"{point['participation_probability']:.4f},{point['state']}"})
            pipe.expire(key, TTL_S)
            n += 1
        if n:
            pipe.execute()
        return n

    def read(self, campaign_id: int) -> PacingDay | None:
        raw = self.client.hgetall(redis_keys.pacing(campaign_id))
        if not raw:
            return None
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        points = []
        for name, value in sorted(fields.items()):
            minute = redis_keys.pacing_minute_of(name)
            if minute is not None:
                target, committed, p, state = value.split(",")
                points.append(PacingPoint(minute, int(target), int(committed), float(p), state))
        return PacingDay(campaign_id, fields["day"], int(fields["budget_micros"]), fields["state"],
                         float(fields["p"]), int(fields["target_micros"]), int(fields["committed_micros"]),
                         int(fields["billed_micros"]), int(fields["updated_ms"]), points)

    def close(self) -> None:
        self.client.close()
