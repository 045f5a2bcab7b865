"""User deletion: which records a deletion request erases, and by when.

A request (`privacy.deletions`, one per user id, the newest kept by compaction) erases everything the platform
recorded about the user up to the moment it was made: a record carrying the user id with an event time at or
before the request, and every record of an impression served to the user at or before it (beacons,
conversions, feedback and training examples join the user only through the impression id). Activity after
the request is new data. Every store and every output applies the same rule, from here: the Redis applier,
the training join, the training-set backfill and the archive's erasure pipeline.

Deadline: a request is erased everywhere within ERASURE_DEADLINE_MS of being made. Pure: no I/O, no clock
(the caller passes the time)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from core.errors import InvalidField

ERASURE_DEADLINE_MS = 86_400_000  # a request is erased from every store and output within a day
MAX_REASON_CHARS = 500


@dataclass(frozen=True)
class DeletionRequest:
    """One user's request to be forgotten (the UserDeletion contract)."""

    user_id: str
    requested_at_ms: int
    request_id: str
    reason: str | None = None

    def as_record(self) -> dict[str, Any]:
        """The UserDeletion record of the request."""
        return {"user_id": self.user_id, "event_time": self.requested_at_ms, "request_id": self.request_id,
                "reason": self.reason}


def deletion_request(user_id: str, requested_at_ms: int, request_id: str,
                     reason: str | None = None) -> DeletionRequest:
    """A checked request; InvalidField names what is wrong (an empty id, a time before 1970, a long reason)."""
    user_id = (user_id or "").strip()
    if not user_id:
        raise InvalidField("user_id", "a deletion request needs the user's id")
    if requested_at_ms < 0:
        raise InvalidField("requested_at", f"must be epoch milliseconds, got {requested_at_ms}")
    if not request_id:
        raise InvalidField("request_id", "a deletion request needs an id")
    if reason is not None and len(reason) > MAX_REASON_CHARS:
        raise InvalidField("reason", f"at most {MAX_REASON_CHARS} characters")
    return DeletionRequest(user_id, int(requested_at_ms), request_id, reason or None)


def request_of(record: Mapping[str, Any]) -> DeletionRequest:
    """A decoded UserDeletion record as a request."""
    return DeletionRequest(str(record["user_id"]), int(record["event_time"]), str(record["request_id"]),
                           record.get("reason"))


def erasure_due_ms(request: DeletionRequest) -> int:
    """When the request must be erased everywhere."""
    return request.requested_at_ms + ERASURE_DEADLINE_MS


def overdue(requests: Iterable[DeletionRequest], erased_request_ids: Iterable[str],
            now_ms: int) -> list[DeletionRequest]:
    """The requests past their deadline that no erasure run has covered yet, oldest first."""
    erased = set(erased_request_ids)
    late = [r for r in requests if r.request_id not in erased and now_ms > erasure_due_ms(r)]
    return sorted(late, key=lambda r: r.requested_at_ms)


def newest_request_ms(held_ms: int | None, requested_at_ms: int) -> int:
    """The time of a user's request in force once another comes: the newer of the two (a newer request covers
    more, and requests may arrive out of order)."""
    return int(requested_at_ms) if held_ms is None else max(int(held_ms), int(requested_at_ms))


@dataclass(frozen=True)
class Deletions:
    """The requests in force: user id -> the newest request's time (a newer request covers more)."""

    requested_at_ms: Mapping[str, int]

    @classmethod
    def of(cls, requests: Iterable[DeletionRequest]) -> "Deletions":
        newest: dict[str, int] = {}
        for request in requests:
            newest[request.user_id] = newest_request_ms(newest.get(request.user_id), request.requested_at_ms)
        return cls(newest)

    def __len__(self) -> int:
        return len(self.requested_at_ms)

    def erases_user(self, user_id: str | None, event_time_ms: int) -> bool:
        """A record of this user at this time is erased: the user asked to be deleted at or after it."""
        if not user_id:
            return False
        requested = self.requested_at_ms.get(user_id)
        return requested is not None and int(event_time_ms) <= requested


def served_impressions(served: Mapping[str, Any]) -> list[str]:
    """The impression ids of a ServedRecord (one per filled slot)."""
    return [str(w["impression_id"]) for w in served.get("winners") or ()]


def erased_impressions(served: Mapping[str, Any], deletions: Deletions) -> list[str]:
    """The impressions of a ServedRecord that the deletions erase (all of them or none: one user, one time)."""
    if deletions.erases_user(served.get("user_id"), int(served["event_time"])):
        return served_impressions(served)
    return []


def erases_record(record: Mapping[str, Any], deletions: Deletions, erased: frozenset[str] | set[str]) -> bool:
    """Whether a record of the served log, a beacon, a conversion, a feedback or a training example is erased:
    it carries a deleted user's id from before the request, or it belongs to an erased impression."""
    if deletions.erases_user(record.get("user_id"), int(record.get("event_time") or 0)):
        return True
    impression_id = record.get("impression_id")
    if impression_id is not None:
        return str(impression_id) in erased
    return any(i in erased for i in served_impressions(record))
