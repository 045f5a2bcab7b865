"""The typed settings `archiver` runs with: the Kafka plumbing, what to archive, where, and when an hour is
complete. Plain data: each setting a flag sets as it is is declared once here (jobs.common.settings.option);
main.py parses them, topology.py wires the job from them."""
from __future__ import annotations

from dataclasses import dataclass

from jobs.common.settings import KafkaJobSettings, option


@dataclass(frozen=True)
class ArchiverSettings:
    """Everything the job takes: the Kafka plumbing, what to archive, where, and when an hour is complete."""

    kafka: KafkaJobSettings
    archive_uri: str
    topics: tuple[str, ...]
    avro_jar: str
    out_of_orderness_ms: int = option(2000)
    idle_timeout_ms: int = option(2000, "a partition quiet this long stops holding the hour's commit back")
    commit_delay_s: int = option(60, "an hour's _SUCCESS file waits this long past the hour's end in event time")
