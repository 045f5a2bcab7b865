"""The project's own error types, each with a message a user can act on."""
from __future__ import annotations


class AdserveError(Exception):
    """Base of every error the project raises on purpose."""


class BadRequest(AdserveError):
    """An HTTP request body that does not follow its API (the server answers 400); names the field."""

    def __init__(self, field_name: str, problem: str):
        self.field = field_name
        super().__init__(f"{field_name}: {problem}")


class InvalidField(AdserveError):
    """A value a user or an operator may not set (the advertiser API answers 400); names the field."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


class SchemaMismatch(AdserveError):
    """A record does not fit its schema, or a writer schema is unknown to the reader."""


class CorruptRecord(AdserveError):
    """Bytes read from Kafka (or a file) that cannot be decoded.

    Names where the record came from so it can be found and replayed."""

    def __init__(self, reason: str, *, topic: str | None = None, partition: int | None = None,
                 offset: int | None = None):
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset
        where = f"topic {topic or '?'} partition {partition if partition is not None else '?'} " \
                f"offset {offset if offset is not None else '?'}"
        super().__init__(f"corrupt record at {where}: {reason}")


class ShardCountChanged(AdserveError):
    """A job restored from state written with another number of key shards than it now runs with: the keyed
    state of some keys would not be found (e.g. a campaign's bill starting again from zero)."""

    def __init__(self, job: str, stored: int, configured: int):
        self.stored = stored
        self.configured = configured
        super().__init__(f"{job}: its state was written with {stored} shards, and it now runs with {configured}; "
                         f"restore it with --shards {stored} (a different count needs a fresh start of its state)")


class InvalidSettings(AdserveError, ValueError):
    """A flag, environment variable or configuration value a process cannot run with; names the setting and
    how to give it a valid value. A ValueError too, so argument parsers and callers that catch it keep working."""


class InvalidArgument(AdserveError, ValueError):
    """A value outside the domain a rule is defined on (a share above 1, a negative weight, an empty key list);
    the message names the value and its valid range."""


class CapacityExceeded(AdserveError, ValueError):
    """A structure asked to hold more than its layout can address (string lengths, term arenas, signature
    bits); the message names the limit and what to do about it."""


class MissingKey(AdserveError, KeyError):
    """A mapping over stored state has no entry for the key. A KeyError too, as the mapping protocol asks, so
    `get`, `in` and `setdefault` keep working."""


class TopicMissing(AdserveError, RuntimeError):
    """A Kafka topic a process reads does not exist: the platform's topics are created by `adserve up`."""


class RunFailed(AdserveError, RuntimeError):
    """A job or service that a simulation or benchmark drives stopped, failed or stopped answering; the
    message names it and where to look (its state, its log, the Flink UI)."""
